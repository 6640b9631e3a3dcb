#!/bin/bash -p
# Fully-async GRPO of Qwen3-VL-30B-A3B on Geometry3K with verl's FSDP2 trainer (hardened entrypoint).
#
# No argument passthrough: settings come only from the VLGRPO_* variables of the registry
# (python/src/vlgrpo/environment.tsv, rows owned by "fa"); the recipe is data
# (python/src/vlgrpo/recipes/fully-async-grpo.argv); the launch is python/src/vlgrpo/launch/entry.py, started by
# lib/shim.sh. `fully-async-grpo.sh --help` prints the table.
set -Eeuo pipefail
# shellcheck source=entrypoints/lib/shim.sh
source "$(dirname -- "$(realpath -- "${BASH_SOURCE[0]}")")/lib/shim.sh"
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then vg_shim fully-async-grpo "$@"; fi
