#!/bin/bash -p
# `python3 -m vlgrpo doctor` behind the launch's environment filter (the compose doctor services).
#
# The doctor runs in the recipes' environment (compose's env_file), so it gets the recipes' filter
# (lib/environment.sh, from the registry python/src/vlgrpo/environment.tsv): bash -p ignores BASH_ENV, ENV,
# SHELLOPTS and exported functions; a refused variable (LD_PRELOAD, a BASH_ENV other than the image's CANN
# file, ...) or a typed one that fails its check stops it with exit 2; everything the registry does not pass is
# dropped (pass-on-request rows such as PYTHONPATH too: the doctor takes no VLGRPO_PASS_ENV), and the image's
# CANN file is sourced as for the recipes. The VLGRPO_* settings the doctor reads (owner "doctor" in the registry: the
# model, data and checkpoint paths) and the patch switches reach it unvalidated (it checks them itself); the
# recipes' other settings are accepted and dropped. RAY_ADDRESS is refused: the doctor's Ray check would join that
# cluster and run its actors there (run `python3 -m vlgrpo doctor` by hand on a cluster node for that).
# Arguments go to the doctor (`doctor.sh --json`, `--platform npu`; `doctor.sh --help` is the doctor's).
set -Eeuo pipefail

# shellcheck source=entrypoints/lib/common.sh
source "$(dirname -- "$(realpath -- "${BASH_SOURCE[0]}")")/lib/common.sh"

VG_PROG=doctor.sh
vg_registry_load doctor

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  # shellcheck disable=SC2064 # the fixed trap text of lib/environment.sh
  trap "$VG_ERR_TRAP" ERR
  vg_check_unknown_vars
  vg_build_child_environment
  vg_launch_stop
  vg_flush_problems
  vg_image_env
  vg_child_prefix
  exec "${VG_CHILD_PREFIX[@]}" python3 -P -s -m vlgrpo doctor "$@"
fi
