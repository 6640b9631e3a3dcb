#!/bin/bash -p
# Test harness: runs a recipe entrypoint's launch (python3 -I -m vlgrpo.launch entry, as entrypoints/lib/shim.sh
# starts it) with the launcher's test hooks set from TEST_* variables (the shims never pass them):
#   TEST_DEV_DIR           folder scanned for davinci<N> device files (default: an empty folder)
#   TEST_MOUNTINFO         mountinfo file (default: /proc/self/mountinfo)
#   TEST_CONTAINER_MARKER  a file whose existence means "in a container" (default: none, not a container)
#   TEST_DRIVER_ROOT       root of the tree the driver check reads (default: the folder above TEST_DEV_DIR)
#   TEST_LIB_AS_GIVEN      when set, --lib is ENTRYPOINT's folder + /lib as given (relative when ENTRYPOINT is, as
#                          the shim passes it), not resolved
# Usage: run-entry.sh ENTRYPOINT [WORD...]
set -Eeuo pipefail
entry=$1
shift
recipe=${entry##*/}
recipe=${recipe%.sh}
hooks=(--dev-dir "${TEST_DEV_DIR:?TEST_DEV_DIR must be set by the test}" --driver-root "${TEST_DRIVER_ROOT:-$TEST_DEV_DIR/..}"
  --mountinfo "${TEST_MOUNTINFO:-/proc/self/mountinfo}" --container-marker "${TEST_CONTAINER_MARKER-}")
py=$(type -P python3)
mapfile -d '' -t entries </proc/$$/environ
lib=$(dirname -- "$(realpath -- "$entry")")/lib
[[ -z ${TEST_LIB_AS_GIVEN-} ]] || lib=${entry%/*}/lib
exec -c "$py" -I -m vlgrpo.launch entry "$recipe" --lib "$lib" "${hooks[@]}" --environ-fd 3 -- "$@" 3< <(printf '%s\0' "${entries[@]}")
