#!/bin/bash -p
# ray-node.sh head|worker — start this node's part of a Ray cluster for the vlgrpo recipes, in the foreground
# (compose, Kubernetes, Slurm), with its accelerators declared the way Ray and verl expect (field case B15).
#
# No argument but head, worker or --help: settings come only from the VLGRPO_* variables of the registry
# (python/src/vlgrpo/environment.tsv, rows owned by "node"; the recipes' settings are accepted and ignored); the
# launch is python/src/vlgrpo/launch/raynode.py, started by lib/shim.sh. `ray-node.sh --help` prints the table.
set -Eeuo pipefail
[[ ! -L ${BASH_SOURCE[0]} ]] || { printf '%s: run the entrypoint by its own path, not a link\n' "${BASH_SOURCE[0]}" >&2; exit 2; }
vg_src=${BASH_SOURCE[0]} && [[ $vg_src == */* ]] || vg_src=./$vg_src # no realpath, dirname: no program from PATH
# shellcheck source=entrypoints/lib/shim.sh
source "${vg_src%/*}/lib/shim.sh"
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then vg_shim ray-node "$@"; fi
