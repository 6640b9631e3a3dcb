# shellcheck shell=bash
# vlgrpo entrypoint mechanics: what this node is (platform, accelerators per node, container) and
# whether the checkpoint directory is safe to write a long run into.
#
# Test hooks: the three globals below are plain shell variables assigned when this file is sourced.
# The environment cannot change them (they are not read from it), so a real run always inspects the
# real /dev, /proc/self/mountinfo and container markers. Tests source the entrypoint, reassign them
# and call the main function (tests/bats/helpers/with-hooks.sh).
VG_DEV_DIR=/dev
VG_MOUNTINFO=/proc/self/mountinfo
VG_CONTAINER_MARKERS=(/.dockerenv /run/.containerenv)

VG_PLATFORM=""          # npu | gpu
VG_NODE_DEVICES=0       # accelerators this node offers (or the planning override)
VG_NODE_DEVICES_FROM="" # how VG_NODE_DEVICES was found, for messages and the plan

# _vg_count_davinci — number of /dev/davinci<N> device files (Ascend NPUs; the control devices
# davinci_manager etc. do not match).
_vg_count_davinci() {
  local -a devs=()
  local f
  for f in "$VG_DEV_DIR"/davinci[0-9]*; do
    [[ -e $f && ${f##*/} =~ ^davinci[0-9]+$ ]] && devs+=("$f")
  done
  printf '%s' "${#devs[@]}"
}

# _vg_count_npu_smi — NPUs from `npu-smi info -l`: the sum of "Chip Count" per NPU when present
# (Atlas A3 boards carry 2 chips per NPU id), else "Total Count". Prints 0 on any failure.
_vg_count_npu_smi() {
  local out
  out=$(npu-smi info -l 2>/dev/null) || { printf 0; return 0; }
  awk -F: '
    /Chip Count/  { gsub(/[^0-9]/, "", $2); if ($2 != "") { chips += $2; seen = 1 } }
    /Total Count/ { gsub(/[^0-9]/, "", $2); if ($2 != "") total = $2 }
    END { if (seen) print chips + 0; else print total + 0 }' <<<"$out"
}

# _vg_count_nvidia_smi — GPUs listed by `nvidia-smi -L` (lines "GPU <n>: ..."; MIG lines not counted).
_vg_count_nvidia_smi() {
  local out
  out=$(nvidia-smi -L 2>/dev/null) || { printf 0; return 0; }
  awk '/^GPU [0-9]+:/ { n++ } END { print n + 0 }' <<<"$out"
}

# _vg_visible_limit VAR — how many devices a device-visibility list (CUDA_VISIBLE_DEVICES,
# ASCEND_RT_VISIBLE_DEVICES) leaves visible, or empty when the variable is unset. Read the way the
# runtimes read it: set but empty (or Ray's "NoDevFiles") hides every device (Ray then declares 0 and a
# placement group waits forever); the list ends at the first entry that is not a device index (CUDA:
# or a GPU-/MIG- UUID), so "0,1,-1,3" leaves 2; a repeated entry counts once.
_vg_visible_limit() {
  [[ -n ${!1+set} ]] || return 0
  local v=${!1} p n=0 re='^[0-9]{1,4}$' seen=","
  [[ $1 == CUDA_VISIBLE_DEVICES ]] && re='^([0-9]{1,4}|GPU-[0-9A-Fa-f-]{1,64}|MIG-[0-9A-Za-z/-]{1,96})$'
  local -a parts=()
  if [[ -n $v && $v != NoDevFiles ]]; then IFS=, read -r -a parts <<<"$v"; fi
  for p in "${parts[@]}"; do
    [[ $p =~ $re ]] || break
    [[ $seen == *",$p,"* ]] && continue
    seen+="$p," n=$((n + 1))
  done
  printf '%s' "$n"
}

# vg_detect_node — sets VG_PLATFORM and VG_NODE_DEVICES from VLGRPO_PLATFORM, the node's devices and
# (dry run only) VLGRPO_PLAN_DEVICES_PER_NODE. Records problems instead of failing.
vg_detect_node() {
  local n=0 from="" vis visvar
  VG_PLATFORM=${VG_VAL[PLATFORM]-}
  if [[ -z $VG_PLATFORM ]]; then
    if [[ $(_vg_count_davinci) -gt 0 ]] || command -v npu-smi >/dev/null 2>&1; then
      VG_PLATFORM=npu
    elif command -v nvidia-smi >/dev/null 2>&1; then
      VG_PLATFORM=gpu
    fi
  fi
  if [[ -z $VG_PLATFORM && -n ${VG_VAL[RAY_ADDRESS]-} ]]; then
    vg_problem VLGRPO_PLATFORM "no accelerator on this node to tell the platform from (cluster mode)" \
      "set VLGRPO_PLATFORM=npu or gpu for the cluster's nodes"
    return 0
  elif [[ -z $VG_PLATFORM ]]; then
    vg_problem VLGRPO_PLATFORM "no Ascend NPU (/dev/davinci*, npu-smi) or NVIDIA GPU (nvidia-smi) found on this node" \
      "run on an accelerator node, or plan elsewhere with VLGRPO_DRY_RUN=1 VLGRPO_PLATFORM=npu|gpu VLGRPO_PLAN_DEVICES_PER_NODE=N"
    return 0
  fi
  if [[ $VG_PLATFORM == npu ]]; then
    n=$(_vg_count_davinci) from="$VG_DEV_DIR/davinci[0-9]*"
    if ((n == 0)); then n=$(_vg_count_npu_smi) from="npu-smi info -l"; fi
    visvar=ASCEND_RT_VISIBLE_DEVICES
  else
    n=$(_vg_count_nvidia_smi) from="nvidia-smi -L"
    visvar=CUDA_VISIBLE_DEVICES
  fi
  vis=$(_vg_visible_limit "$visvar")
  if [[ -n $vis ]] && ((vis < n)); then
    n=$vis from="$visvar"
  fi
  if [[ -n ${VG_VAL[PLAN_DEVICES_PER_NODE]-} ]]; then
    if ((${VG_DRY_RUN:-0})); then
      n=${VG_VAL[PLAN_DEVICES_PER_NODE]} from="planning override VLGRPO_PLAN_DEVICES_PER_NODE"
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

# vg_check_per_node VAR VALUE — a per-node device count must not exceed what the node offers; a
# placement group asking for more than a node has waits forever instead of failing.
vg_check_per_node() {
  local var=$1 v=$2
  ((VG_NODE_DEVICES > 0)) || return 0
  if ((v > VG_NODE_DEVICES)); then
    vg_problem "$var" "$v devices per node, but this node has $VG_NODE_DEVICES ($VG_NODE_DEVICES_FROM)" \
      "set $var to at most $VG_NODE_DEVICES (or leave it unset to use the node's count)"
  fi
}

# vg_in_container — true inside Docker/Podman (marker files), and in containers that leave no marker
# (Kubernetes with containerd or CRI-O, the KubeRay example): there the root file system is the
# container's layer, an overlay (or fuse-overlayfs, aufs, or a tmpfs/ramfs that vanishes likewise), per
# VG_MOUNTINFO. See the hook note above.
vg_in_container() {
  local m
  for m in "${VG_CONTAINER_MARKERS[@]}"; do
    [[ -e $m ]] && return 0
  done
  [[ -r $VG_MOUNTINFO ]] || return 1
  awk '$5 == "/" { fs = ""; for (i = 6; i <= NF; i++) if ($i == "-") { fs = $(i + 1); break } }
    END { exit !(fs ~ /^(overlay|fuse-overlayfs|fuse\.fuse-overlayfs|aufs|tmpfs|ramfs)$/) }' "$VG_MOUNTINFO"
}
