#!/bin/bash -p
# GRPO of Qwen3-VL-30B-A3B on Geometry3K with verl's VeOmni engine (hardened entrypoint).
#
# No argument passthrough: settings come only from the VLGRPO_* variables of the registry
# (python/src/vlgrpo/environment.tsv, rows owned by "vo"); the recipe is data
# (python/src/vlgrpo/recipes/veomni-grpo.argv); the launch is python/src/vlgrpo/launch/entry.py, started by
# lib/shim.sh. `veomni-grpo.sh --help` prints the table.
set -Eeuo pipefail
[[ ! -L ${BASH_SOURCE[0]} ]] || { printf '%s: run the entrypoint by its own path, not a link\n' "${BASH_SOURCE[0]}" >&2; exit 2; }
vg_src=${BASH_SOURCE[0]} && [[ $vg_src == */* ]] || vg_src=./$vg_src # no realpath, dirname: no program from PATH
# shellcheck source=entrypoints/lib/shim.sh
source "${vg_src%/*}/lib/shim.sh"
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then vg_shim veomni-grpo "$@"; fi
