#!/bin/bash -p
# `python3 -m vlgrpo doctor` behind the launch's environment filter (the compose doctor services).
#
# The doctor runs in the recipes' environment (compose's env_file), so it gets the recipes' filter: the launcher
# (python/src/vlgrpo/launch/entry.py DoctorLaunch, started by lib/shim.sh) checks the VLGRPO_* names, builds the
# doctor's environment from the registry (a refused variable or a typed one that fails its check: exit 2; RAY_ADDRESS
# refused; no VLGRPO_PASS_ENV), sources the image's CANN file, checks the words against the doctor's own flags
# (`doctor.sh --json`, `--platform npu`; `doctor.sh --help` is the doctor's), then execs the doctor.
set -Eeuo pipefail
# shellcheck source=entrypoints/lib/shim.sh
source "$(dirname -- "$(realpath -- "${BASH_SOURCE[0]}")")/lib/shim.sh"
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then vg_shim doctor "$@"; fi
