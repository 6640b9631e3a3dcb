#!/bin/bash -p
# `python3 -m vlgrpo doctor` behind the launch's environment filter (the compose doctor services).
#
# The doctor runs in the recipes' environment (compose's env_file), so it gets the recipes' filter: the launcher
# (python/src/vlgrpo/launch/entry.py DoctorLaunch, started by lib/shim.sh) checks the VLGRPO_* names, builds the
# doctor's environment from the registry (a refused variable or a typed one that fails its check: exit 2; RAY_ADDRESS
# refused; no VLGRPO_PASS_ENV), sources the image's CANN file, checks the words against the doctor's own flags
# (`doctor.sh --json`, `--platform npu`; `doctor.sh --help` is the doctor's), then execs the doctor.
set -Eeuo pipefail
[[ ! -L ${BASH_SOURCE[0]} ]] || { printf '%s: run the entrypoint by its own path, not a link\n' "${BASH_SOURCE[0]}" >&2; exit 2; }
vg_src=${BASH_SOURCE[0]} && [[ $vg_src == */* ]] || vg_src=./$vg_src # no realpath, dirname: no program from PATH
# shellcheck source=entrypoints/lib/shim.sh
source "${vg_src%/*}/lib/shim.sh"
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then vg_shim doctor "$@"; fi
