#!/bin/bash -p
# GRPO of Qwen3-VL-30B-A3B on Geometry3K with verl's VeOmni engine (hardened entrypoint).
#
# No argument passthrough: settings come only from the VLGRPO_* variables of the registry
# (python/src/vlgrpo/environment.tsv, rows owned by "vo"); the recipe is data
# (python/src/vlgrpo/recipes/veomni-grpo.argv); the launch is python/src/vlgrpo/launch/entry.py, started by
# lib/shim.sh. `veomni-grpo.sh --help` prints the table.
set -Eeuo pipefail
# shellcheck source=entrypoints/lib/shim.sh
source "$(dirname -- "$(realpath -- "${BASH_SOURCE[0]}")")/lib/shim.sh"
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then vg_shim veomni-grpo "$@"; fi
