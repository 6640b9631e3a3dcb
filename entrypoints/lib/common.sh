# shellcheck shell=bash
# vlgrpo entrypoint mechanics: loads the library and declares the settings every recipe shares.
# A recipe sources this file (it sources the rest), declares its own settings, then calls
# vg_common_settings so the shared ones follow its own in --help.

VG_LIB_DIR=$(dirname -- "$(realpath -- "${BASH_SOURCE[0]}")")
# first: it clears the shell variables (TMOUT, BASH_COMPAT, FUNCNEST) that change how the rest runs
# shellcheck source=entrypoints/lib/environment.sh
source "$VG_LIB_DIR/environment.sh"
# shellcheck source=entrypoints/lib/settings.sh
source "$VG_LIB_DIR/settings.sh"
# shellcheck source=entrypoints/lib/node.sh
source "$VG_LIB_DIR/node.sh"
# shellcheck source=entrypoints/lib/checks.sh
source "$VG_LIB_DIR/checks.sh"
# shellcheck source=entrypoints/lib/launch.sh
source "$VG_LIB_DIR/launch.sh"
# shellcheck source=entrypoints/lib/data-settings.sh
source "$VG_LIB_DIR/data-settings.sh"

# Settings of entrypoints/ray-node.sh (the Ray head/worker of the same image). A recipe started in a
# container whose environment also configures its Ray node sees them; they are accepted and ignored
# here (ray-node.sh validates them). tests/bats/cli.bats keeps this list equal to ray-node.sh's
# declarations that the recipes do not share.
for vg_sibling in RAY_AGENT_PORT RAY_CARDS_WAIT RAY_CLIENT_PORT RAY_DASHBOARD RAY_DASHBOARD_HOST \
  RAY_DASHBOARD_PORT RAY_HEAD RAY_HEAD_WAIT RAY_MEMORY_MB RAY_NODE_IP RAY_NUM_CPUS RAY_OBJECT_STORE_MB \
  RAY_PORT RAY_STOP_GRACE RAY_TEMP_DIR TEST_DEVICE_COUNT; do
  VG_SIBLING[$vg_sibling]=ray-node.sh
done
unset vg_sibling

# Derived default of the per-node device counts: what this node offers.
vg_default_node_devices() { if ((VG_NODE_DEVICES > 0)); then printf '%s' "$VG_NODE_DEVICES"; fi; }

vg_common_settings() {
  vg_setting DRY_RUN bool "" false \
    "validate everything, run the preflight, print the plan and the exact command (one argument per line), start nothing (same as --dry-run)"
  vg_setting PLATFORM enum "npu gpu" "@:detected (/dev/davinci* or npu-smi: npu; nvidia-smi: gpu)" \
    "accelerator platform; set it to plan on a machine without accelerators"
  vg_setting PLAN_DEVICES_PER_NODE int "1..64" "" \
    "planning override of the node's device count, dry run only (refused for a real launch)"
  vg_setting RAY_ADDRESS addr "" "" \
    "cluster mode: Ray head GCS address; the launch first waits for the nodes and probes device visibility (python3 -m vlgrpo cluster wait/probe), then exports RAY_ADDRESS"
  vg_setting RAY_WAIT_TIMEOUT int "1..86400" 600 \
    "cluster mode: seconds to wait for all nodes to join with their devices"
  vg_setting PREFLIGHT enum "enforce warn" enforce \
    "preflight findings (python3 -m vlgrpo preflight) stop the launch (enforce) or are reported and passed over (warn); the preflight always runs"
  vg_setting PATCHES enum "on off" "" \
    "read by the vlgrpo patch package in every Python process: off disables all runtime patches (default on)"
  vg_setting PATCHES_DISABLED ids "" "" \
    "read by the vlgrpo patch package: patch ids to leave out"
  vg_setting PATCHES_STRICT bool "" "" \
    "read by the vlgrpo patch package: a patch that fails to apply is an error instead of a warning"
}
