#!/usr/bin/env bash
# shellcheck disable=SC2034 # the VG_* hooks are read by the sourced entrypoint
# Test harness: runs a recipe entrypoint's main with the test hooks of entrypoints/lib/node.sh set from
# TEST_* variables (the entrypoint itself never reads them from the environment):
#   TEST_DEV_DIR           folder scanned for davinci<N> device files (default: an empty folder)
#   TEST_MOUNTINFO         mountinfo file (default: /proc/self/mountinfo)
#   TEST_CONTAINER_MARKER  a file whose existence means "in a container" (default: none, not a container)
#   TEST_DRIVER_ROOT       root of the tree the driver check reads (default: the folder above TEST_DEV_DIR)
# Usage: run-entry.sh ENTRYPOINT [WORD...]
set -Eeuo pipefail
entry=$1
shift
# shellcheck source=/dev/null
source "$entry"
VG_DEV_DIR=${TEST_DEV_DIR:?TEST_DEV_DIR must be set by the test}
VG_DRIVER_ROOT=${TEST_DRIVER_ROOT:-$VG_DEV_DIR/..}
VG_MOUNTINFO=${TEST_MOUNTINFO:-/proc/self/mountinfo}
VG_CONTAINER_MARKERS=()
if [[ -n ${TEST_CONTAINER_MARKER-} ]]; then VG_CONTAINER_MARKERS=("$TEST_CONTAINER_MARKER"); fi
# shellcheck disable=SC2064 # the fixed trap text of lib/environment.sh
trap "$VG_ERR_TRAP" ERR
for word; do vg_cli "$word"; done
vg_flush_problems
vg_entry
