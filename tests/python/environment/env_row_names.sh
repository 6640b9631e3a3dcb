#!/bin/bash -p
# Prints "NAME<TAB>ROW" for each NAME on stdin (one per line): the registry row the entrypoints' own vg_env_row
# (entrypoints/lib/registry.sh) applies to it for entrypoint $1 (fa, vo or node; "-" when none).
set -Eeuo pipefail
here=$(dirname -- "$(realpath -- "${BASH_SOURCE[0]}")")/../../../entrypoints
# shellcheck source=entrypoints/ray-node.sh
source "$here/ray-node.sh"
vg_registry_load "$1"
while IFS= read -r name; do
  vg_env_row "$name"
  printf '%s\t%s\n' "$name" "${REPLY:--}"
done
