#!/bin/bash -p
# Reads NUL-separated records TYPE ALLOWED VALUE on stdin and validates each VALUE with the entrypoints' own
# vg_validate (entrypoints/lib/settings.sh) as a setting of that TYPE and ALLOWED; prints one line per record:
# "ok <formatted value>" or "refused". Used by test_registry.py to hold vlgrpo.environment to the same rules.
set -Eeuo pipefail
# shellcheck source=entrypoints/fully-async-grpo.sh
source "$(dirname -- "$(realpath -- "${BASH_SOURCE[0]}")")/../../../entrypoints/fully-async-grpo.sh"
i=0
while IFS= read -r -d '' type && IFS= read -r -d '' allowed && IFS= read -r -d '' value; do
  i=$((i + 1))
  vg_setting "CASE$i" "$type" "$allowed" "" "test case"
  VG_PROBLEMS=()
  vg_validate "CASE$i" "$value"
  if ((${#VG_PROBLEMS[@]})); then echo refused; else printf 'ok %s\n' "${VG_VAL[CASE$i]}"; fi
done
