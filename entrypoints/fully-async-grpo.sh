#!/bin/bash -p
# Fully-async GRPO of Qwen3-VL-30B-A3B on Geometry3K with verl's FSDP2 trainer (hardened entrypoint).
#
# No argument passthrough: settings come only from the VLGRPO_* variables of the registry; the recipe is data
# (python/src/vlgrpo/recipes/fully-async-grpo.argv) and lib/ holds the mechanics. `fully-async-grpo.sh --help` prints the table.
set -Eeuo pipefail

# shellcheck source=entrypoints/lib/common.sh
source "$(dirname -- "$(realpath -- "${BASH_SOURCE[0]}")")/lib/common.sh"

VG_PROG=fully-async-grpo.sh
# the recipe (program, Hydra overrides, --help words): python/src/vlgrpo/recipes/fully-async-grpo.argv; its rules:
# python/src/vlgrpo/launch/recipes.py; its settings: the rows of python/src/vlgrpo/environment.tsv owned by "fa"
vg_recipe_load
vg_registry_load fa

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  # shellcheck disable=SC2064 # the fixed trap text of lib/environment.sh
  trap "$VG_ERR_TRAP" ERR
  for vg_word; do vg_cli "$vg_word"; done
  vg_flush_problems
  vg_entry
fi
