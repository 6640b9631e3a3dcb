#!/usr/bin/env bash
# Static checks: shellcheck on every shell script of the project.
set -Eeuo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

mapfile -t shell_files < <(git ls-files -co --exclude-standard -- '*.sh' '*.bash' '.ci/run' | sort -u)
if ((${#shell_files[@]})); then
  shellcheck -x "${shell_files[@]}"
  echo "lint: shellcheck clean (${#shell_files[@]} files)"
fi
