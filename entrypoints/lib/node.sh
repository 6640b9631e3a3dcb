# shellcheck shell=bash disable=SC2034 # (VG_NODE_DEVICES and VG_NODE_DEVICES_FROM are read by lib/launch.sh)
# vlgrpo entrypoint mechanics: what this node is (platform, accelerators per node). Whether this is a container and
# the checkpoint folder's storage are the launcher's (python/src/vlgrpo/mounts.py, vlgrpo.launch.recipes), which
# get VG_MOUNTINFO and VG_CONTAINER_MARKERS from here.
#
# Test hooks: the globals below are plain shell variables assigned when this file is sourced.
# The environment cannot change them (they are not read from it), so a real run always inspects the
# real /dev, /proc/self/mountinfo and container markers. Tests source the entrypoint, reassign them
# and call the main function (tests/bats/helpers/run-entry.sh).
VG_DEV_DIR=/dev
VG_DRIVER_ROOT=/ # where the host driver and the image's CUDA/CANN are read (python -m vlgrpo devices --driver)
VG_MOUNTINFO=/proc/self/mountinfo
VG_CONTAINER_MARKERS=(/.dockerenv /run/.containerenv)

VG_PLATFORM=""          # npu | gpu
VG_NODE_DEVICES=0       # accelerators this node offers (or the planning override)
VG_NODE_DEVICES_FROM="" # how VG_NODE_DEVICES was found, for messages and the plan
VG_NODE_DEVICES_KIND=node # plan when VG_NODE_DEVICES is the planning override (the preflight's --devices-source)

declare -gA VG_DEV=() # the device counter's answer (vg_count_devices)
VG_DEV_FILE=""        # while the counter runs in the background: the file its answer goes to

# vg_count_devices PLATFORM [--driver] — the node's accelerators, from the one device counter
# (`python3 -m vlgrpo devices`, python/src/vlgrpo/devices.py: /dev/davinci<N>, else `npu-smi info -l`;
# `nvidia-smi -L`; ASCEND_RT_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES as the runtimes read them). Sets
# VG_DEV[platform] (npu, gpu or empty), VG_DEV[devices] (what this process may use), VG_DEV[source],
# VG_DEV[node_devices] and VG_DEV[node_source] (the node's own count), VG_DEV[cause], VG_DEV[fix] and
# VG_DEV[ray_hidden] (why devices are hidden from this process, if they are), VG_DEV[driver_*] (the host
# driver against the image's CUDA/CANN, python/src/vlgrpo/driver.py). The davinci scan reads VG_DEV_DIR, the
# driver check VG_DRIVER_ROOT (test hooks, see above). Returns 1, with a problem recorded, when the counter
# cannot run.
vg_count_devices() {
  local out line key rc=0
  local -a args=(-P -s -m vlgrpo devices --format shell --dev-dir "$VG_DEV_DIR")
  if [[ -n ${1-} ]]; then args+=(--platform "$1"); fi
  if [[ ${2-} == --driver ]]; then args+=(--driver --root "$VG_DRIVER_ROOT"); fi
  VG_DEV=()
  # isolated (-P -s) and in the environment built for the children (lib/environment.sh), like every child
  vg_child_prefix
  if ((${VG_SIGNALS:-0})); then
    # a recipe: in the background like the preflight (vg_run_child), so that SIGINT/SIGTERM/SIGHUP end the launch
    # at once even while npu-smi or nvidia-smi hangs; its answer goes through a file (TMPDIR was checked)
    # shellcheck disable=SC2034 # read by vg_run_child through a nameref
    local -a cmd=("${VG_CHILD_PREFIX[@]}" python3 "${args[@]}")
    if ! VG_DEV_FILE=$(mktemp "${TMPDIR:-/tmp}/vlgrpo-devices.XXXXXX" 2>/dev/null); then
      vg_problem TMPDIR "the device counter's answer file cannot be made in $(vg_show "${TMPDIR:-/tmp}")" \
        "point TMPDIR at an existing folder this user can write (or unset it for /tmp)"
      return 1
    fi
    vg_run_child cmd >"$VG_DEV_FILE" || rc=$?
    out=$(<"$VG_DEV_FILE")
    rm -f -- "$VG_DEV_FILE"
    VG_DEV_FILE=""
  else
    # ray-node.sh: no traps during its checks, so a signal ends it (and this foreground child) at once
    out=$("${VG_CHILD_PREFIX[@]}" python3 "${args[@]}") || rc=$?
  fi
  while IFS= read -r line; do
    key=${line%%=*}
    if [[ $key =~ ^[a-z_]{1,32}$ ]]; then VG_DEV[$key]=${line#*=}; fi
  done <<<"$out"
  if ((rc != 0)) || ! [[ ${VG_DEV[devices]-} =~ ^[0-9]{1,6}$ && ${VG_DEV[node_devices]-} =~ ^[0-9]{1,6}$ ]]; then
    vg_problem VLGRPO_PLATFORM "the device counter (python3 -m vlgrpo devices) failed (exit $rc)" \
      "run it by hand to see why; python3 must have the vlgrpo package (the images install it)"
    return 1
  fi
  # field cases C06, C12: a repeated, unordered or out-of-range visibility list (devices.py list_problem)
  if [[ -n ${VG_DEV[list_problem]-} ]]; then vg_problem "${VG_DEV[visibility_var]}" "${VG_DEV[list_problem]}" "${VG_DEV[list_fix]}"; fi
}

# vg_detect_node — sets VG_PLATFORM and VG_NODE_DEVICES from VLGRPO_PLATFORM, the node's devices and
# (dry run only) VLGRPO_PLAN_DEVICES_PER_NODE. Records problems instead of failing.
vg_detect_node() {
  local n from
  VG_PLATFORM=${VG_VAL[PLATFORM]-}
  vg_count_devices "$VG_PLATFORM" --driver || return 0
  VG_PLATFORM=${VG_DEV[platform]}
  if [[ -z $VG_PLATFORM && -n ${VG_VAL[RAY_ADDRESS]-} ]]; then
    vg_problem VLGRPO_PLATFORM "no accelerator on this node to tell the platform from (cluster mode)" \
      "set VLGRPO_PLATFORM=npu or gpu for the cluster's nodes"
    return 0
  elif [[ -z $VG_PLATFORM ]]; then
    vg_problem VLGRPO_PLATFORM "no Ascend NPU (/dev/davinci*, npu-smi) or NVIDIA GPU (nvidia-smi) found on this node" \
      "run on an accelerator node, or plan elsewhere with VLGRPO_DRY_RUN=1 VLGRPO_PLATFORM=npu|gpu VLGRPO_PLAN_DEVICES_PER_NODE=N"
    return 0
  fi
  if [[ ${VG_DEV[ray_hidden]-0} == 1 ]]; then
    # field case B14: Ray hid this node's devices from this `ray job submit` driver (or gave it some of them)
    vg_problem "${VG_DEV[visibility_var]}" "${VG_DEV[cause]}" "${VG_DEV[fix]}"
    return 0
  fi
  if [[ -n ${VG_DEV[driver_problem]-} ]]; then
    # the host driver is older than the image's CUDA/CANN needs: the run would fail at its first device call
    if ((${VG_DRY_RUN:-0})) && [[ -n ${VG_VAL[PLAN_DEVICES_PER_NODE]-} ]]; then
      VG_NOTES+=("warning: host driver: ${VG_DEV[driver_problem]} (planning dry run: not refused here; a launch on this machine would be)")
    else
      vg_problem "host driver" "${VG_DEV[driver_problem]}" "${VG_DEV[driver_fix]}"
    fi
  fi
  n=${VG_DEV[devices]} from=${VG_DEV[source]}
  if [[ -n ${VG_VAL[PLAN_DEVICES_PER_NODE]-} ]]; then
    if ((${VG_DRY_RUN:-0})); then
      # shellcheck disable=SC2034 # VG_NODE_DEVICES_KIND is read by lib/launch.sh
      n=${VG_VAL[PLAN_DEVICES_PER_NODE]} from="planning override VLGRPO_PLAN_DEVICES_PER_NODE" VG_NODE_DEVICES_KIND=plan
    else
      vg_problem VLGRPO_PLAN_DEVICES_PER_NODE "a planning override, refused for a real launch (it would hide the node's real device count)" \
        "unset it, or add VLGRPO_DRY_RUN=1 to plan without starting"
    fi
  fi
  VG_NODE_DEVICES=$n VG_NODE_DEVICES_FROM=$from
  if ((n == 0)) && [[ -n ${VG_VAL[RAY_ADDRESS]-} ]]; then
    # Cluster mode from a node without accelerators (a CPU head or login node): the per-node counts
    # must be given and `vlgrpo cluster wait/probe` checks them against the cluster's nodes.
    VG_NODE_DEVICES_FROM="none here; cluster mode: the cluster's nodes are checked by vlgrpo cluster wait/probe"
    return 0
  fi
  if ((n == 0)) && [[ -z ${VG_VAL[PLAN_DEVICES_PER_NODE]-} ]]; then
    vg_problem VLGRPO_PLATFORM "platform $VG_PLATFORM but no device found ($from)" \
      "check the device mounts of the container, or plan with VLGRPO_DRY_RUN=1 VLGRPO_PLAN_DEVICES_PER_NODE=N"
  fi
}
