# shellcheck shell=bash
# vlgrpo entrypoint mechanics: loads the library. A recipe sources this file (it sources the rest), then loads
# its settings from the registry (vg_registry_load fa|vo; python/src/vlgrpo/environment.tsv).

VG_LIB_DIR=$(dirname -- "$(realpath -- "${BASH_SOURCE[0]}")")
# first: it clears the shell variables (TMOUT, BASH_COMPAT, FUNCNEST) that change how the rest runs
# shellcheck source=entrypoints/lib/environment.sh
source "$VG_LIB_DIR/environment.sh"
# shellcheck source=entrypoints/lib/settings.sh
source "$VG_LIB_DIR/settings.sh"
# shellcheck source=entrypoints/lib/registry.sh
source "$VG_LIB_DIR/registry.sh"
# shellcheck source=entrypoints/lib/node.sh
source "$VG_LIB_DIR/node.sh"
# shellcheck source=entrypoints/lib/launch.sh
source "$VG_LIB_DIR/launch.sh"
