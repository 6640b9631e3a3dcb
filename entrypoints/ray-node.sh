#!/bin/bash -p
# ray-node.sh head|worker — start this node's part of a Ray cluster for the vlgrpo recipes, in the
# foreground (compose, Kubernetes, Slurm), with its accelerators declared the way Ray and verl expect.
#
#   head    ray start --head, GCS on VLGRPO_RAY_PORT (default 6379)
#   worker  ray start --address=VLGRPO_RAY_HEAD (required), after the head accepts TCP connections
#
# What it does (field case B15):
#   - counts the node's accelerators: Ascend /dev/davinci[0-9]* (or `npu-smi info -l`), NVIDIA
#     `nvidia-smi -L` (`python3 -m vlgrpo devices`, through lib/node.sh); declares them as --resources='{"NPU": N}' on Ascend (never --num-gpus there) and
#     --num-gpus=N on NVIDIA;
#   - requires the socket interfaces: HCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME on Ascend,
#     NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME on NVIDIA; exports TP_SOCKET_IFNAME (vLLM/torch RPC) and
#     VLLM_HOST_IP; on Ascend exports RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES=1 so Ray 2.48.0 does
#     not hide the NPUs from processes that hold no NPU (the `ray job submit` driver, verl's TaskRunner);
#   - refuses to start while another process holds the cards (npu-smi process table, -8005/-8020 = cards
#     held by another container; nvidia-smi compute apps), after waiting VLGRPO_RAY_CARDS_WAIT seconds;
#   - runs `ray start --block` as its child and, on SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 or
#     SIGPIPE, stops that child by PID with SIGTERM (ray start --block then stops the Ray processes it started;
#     under Slurm, which signals every process of the step, ray start is not sent a second SIGTERM: see
#     ray_node_on_signal) and exits 128+signal. Never `ray stop` (kills every Ray process on the machine) and
#     never pkill. The same signals during the checks and waits before it stop the running check (its process
#     group) and exit 128+signal at once (lib/launch.sh _vg_on_signal).
#
# Settings come only from the allowlisted VLGRPO_* variables below (no arguments besides head|worker and
# --help); the recipes' own settings are accepted and ignored; any other VLGRPO_* variable, a malformed
# value or a missing requirement exits 2.
#
# Test-only: VLGRPO_TEST_DEVICE_COUNT=N declares N accelerators on a machine that has none (CI). It is
# refused when this node has real accelerators, so it cannot change what a real node declares.
set -Eeuo pipefail

RAY_NODE_DIR=$(dirname -- "$(realpath -- "${BASH_SOURCE[0]}")")
# First: clears TMOUT, BASH_COMPAT and FUNCNEST (they change how this script runs); vg_check_environment
# refuses inherited variables that make a child bash or Python run code they name (BASH_FUNC_*,
# BASH_ENV, SHELLOPTS, PYTHONWARNINGS with a module, LD_PRELOAD, Ray hooks, ...).
# shellcheck source=entrypoints/lib/environment.sh
source "$RAY_NODE_DIR/lib/environment.sh"
# The entrypoints' own mechanics: settings allowlist and validation (vg_setting, vg_read_settings,
# vg_check_unknown_vars, vg_flush_problems) and the node's device counting (vg_count_devices, VG_DEV_DIR).
# shellcheck source=entrypoints/lib/settings.sh
source "$RAY_NODE_DIR/lib/settings.sh"
VG_LIB_DIR=$RAY_NODE_DIR/lib
# shellcheck source=entrypoints/lib/registry.sh
source "$VG_LIB_DIR/registry.sh"
# shellcheck source=entrypoints/lib/node.sh
source "$RAY_NODE_DIR/lib/node.sh"
# shellcheck source=entrypoints/lib/ray.sh
source "$RAY_NODE_DIR/lib/ray.sh"
# The recipes' signal handling for the checks and waits (vg_signals_on, vg_run_child, _vg_on_signal).
# shellcheck source=entrypoints/lib/launch.sh
source "$RAY_NODE_DIR/lib/launch.sh"

VG_PROG=ray-node.sh

# ---- settings: the rows of python/src/vlgrpo/environment.tsv owned by "node" (lib/registry.sh), in that order.
# The recipes' settings (fully-async-grpo.sh, veomni-grpo.sh of the same image) are accepted and ignored here, as
# the recipes accept and ignore this script's: one environment may configure both a container's Ray node and its
# recipe (vg_check_unknown_vars). Any other VLGRPO_* variable is refused.
ray_node_declare() {
  vg_registry_load node
}

ray_node_usage() {
  local name
  printf 'usage: ray-node.sh head|worker   (or --help)\n\n'
  printf 'Starts Ray on this node in the foreground with its accelerators declared. Settings come only from\n'
  printf 'these environment variables (an empty value counts as unset); exit 2 on invalid configuration.\n\n'
  printf '| Variable | Allowed | Default | Meaning |\n|---|---|---|---|\n'
  for name in "${VG_NAMES[@]}"; do
    # shellcheck disable=SC2016 # Markdown backticks
    printf '| `VLGRPO_%s` | %s | %s | %s |\n' "$name" "$(vg_allowed_text "$name")" "$(vg_default_text "$name")" \
      "${VG_MEANING[$name]}"
  done
  printf '\nRequired: GLOO_SOCKET_IFNAME, and HCCL_SOCKET_IFNAME (Ascend) or NCCL_SOCKET_IFNAME (NVIDIA).\n'
}

# Wait up to $2 seconds for TCP host:port ($1) to accept a connection. Uses bash's /dev/tcp in a
# background subshell that is killed after 2 s per attempt (no eval, no bash -c).
ray_node_wait_tcp() {
  local hostport=$1 limit=$2 host port start pid i
  host=${hostport%:*}
  port=${hostport##*:}
  start=$SECONDS
  while :; do
    (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null &
    pid=$!
    VG_CHILD_PID=$pid # a signal meanwhile stops the probe too (_vg_on_signal)
    for ((i = 0; i < 20; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    elif wait "$pid"; then
      VG_CHILD_PID=""
      return 0
    fi
    VG_CHILD_PID=""
    if ((SECONDS - start >= limit)); then
      return 1
    fi
    printf 'ray-node: waiting for the head %s (%ds of %ds)\n' "$hostport" "$((SECONDS - start))" "$limit"
    ray_node_nap
  done
}

# ray_node_nap — the 2 s pause of the waits, as a child of the checks (vg_run_child): a signal meanwhile ends
# ray-node.sh at once instead of after the pause, and leaves no sleep behind.
ray_node_nap() {
  # shellcheck disable=SC2034 # read by vg_run_child through a nameref
  local -a nap=(sleep 2)
  vg_run_child nap || true
}

# Refuse (after waiting) while another process holds this node's cards.
ray_node_check_cards_free() {
  local platform=$1 limit=${VG_VAL[RAY_CARDS_WAIT]-} start=$SECONDS holders rc tool
  [[ $platform == npu ]] && tool=npu-smi || tool=nvidia-smi
  if ! command -v "$tool" >/dev/null 2>&1; then
    if [[ -n ${VG_VAL[TEST_DEVICE_COUNT]-} ]]; then
      printf 'ray-node: %s not found; card-holder check skipped (VLGRPO_TEST_DEVICE_COUNT test mode)\n' "$tool"
      return 0
    fi
    ray_node_err "$tool not found: cannot check whether another process holds the cards; mount it into the container (Ascend: /usr/local/bin/npu-smi and /usr/local/dcmi; NVIDIA: the nvidia container runtime)"
    return 2
  fi
  while :; do
    rc=0
    if [[ $platform == npu ]]; then
      holders=$(ray_node_npu_holders) || rc=$?
    else
      holders=$(ray_node_gpu_holders) || rc=$?
    fi
    if ((rc == 4)); then
      holders="npu-smi reports -8005/-8020: the cards are in use by another container"
    elif ((rc != 0)); then
      ray_node_err "$tool failed (exit $rc): cannot tell whether the cards are free; run \`$tool info\` on the host and fix the driver mounts"
      return 2
    fi
    if [[ -z $holders ]]; then
      return 0
    fi
    if ((SECONDS - start >= limit)); then
      ray_node_err "the cards are held by other processes (after waiting ${limit}s, VLGRPO_RAY_CARDS_WAIT):"
      printf '  %s\n' "$holders" >&2
      ray_node_err "stop that run (or its container) first; this script never kills processes it did not start"
      return 2
    fi
    printf 'ray-node: cards busy, waiting (%ds of %ds): %s\n' "$((SECONDS - start))" "$limit" "${holders%%$'\n'*}"
    ray_node_nap
  done
}

# Build RAY_ARGV for role $1 with $2 devices on platform $3.
# shellcheck disable=SC2178,SC2128 # count is a local string here (lib/launch.sh has an array of that name)
ray_node_build_argv() {
  local role=$1 count=$2 platform=$3
  RAY_ARGV=(ray start --block --disable-usage-stats)
  if [[ $role == head ]]; then
    RAY_ARGV+=(--head "--port=${VG_VAL[RAY_PORT]-}")
    if [[ ${VG_VAL[RAY_DASHBOARD]-} == True ]]; then
      RAY_ARGV+=(--include-dashboard=true "--dashboard-host=${VG_VAL[RAY_DASHBOARD_HOST]-}")
    else
      RAY_ARGV+=(--include-dashboard=false)
    fi
    RAY_ARGV+=("--dashboard-port=${VG_VAL[RAY_DASHBOARD_PORT]-}" "--ray-client-server-port=${VG_VAL[RAY_CLIENT_PORT]-}")
    [[ -n ${VG_VAL[RAY_TEMP_DIR]-} ]] && RAY_ARGV+=("--temp-dir=${VG_VAL[RAY_TEMP_DIR]-}")
  else
    RAY_ARGV+=("--address=${VG_VAL[RAY_HEAD]-}")
  fi
  [[ -n ${VG_VAL[RAY_NODE_IP]-} ]] && RAY_ARGV+=("--node-ip-address=${VG_VAL[RAY_NODE_IP]-}")
  RAY_ARGV+=("--dashboard-agent-listen-port=${VG_VAL[RAY_AGENT_PORT]-}")
  [[ -n ${VG_VAL[RAY_NUM_CPUS]-} ]] && RAY_ARGV+=("--num-cpus=${VG_VAL[RAY_NUM_CPUS]-}")
  [[ -n ${VG_VAL[RAY_MEMORY_MB]-} ]] && RAY_ARGV+=("--memory=$((VG_VAL[RAY_MEMORY_MB] * 1048576))")
  [[ -n ${VG_VAL[RAY_OBJECT_STORE_MB]-} ]] && RAY_ARGV+=("--object-store-memory=$((VG_VAL[RAY_OBJECT_STORE_MB] * 1048576))")
  if [[ $platform == npu ]]; then
    RAY_ARGV+=("--resources={\"NPU\": $count}")
  else
    RAY_ARGV+=("--num-gpus=$count")
  fi
}

RAY_CHILD=""
RAY_STOPPING=0
RAY_SIGNAL_NUM=0 # the first signal that stopped ray start (exit 128+it)
RAY_FORWARD_AT="" # SECONDS at which a held-back SIGTERM goes to ray start (under Slurm, below)

ray_node_forward() {
  RAY_FORWARD_AT=""
  if [[ -n $RAY_CHILD ]] && kill -0 "$RAY_CHILD" 2>/dev/null; then
    printf 'ray-node: stopping ray start (pid %s)\n' "$RAY_CHILD"
    kill -TERM "$RAY_CHILD" 2>/dev/null || true
  fi
}

# Under Slurm (SLURM_STEP_ID set) a signal to the step reaches every process of it, ray start included, and
# Ray 2.48.0's SIGTERM handler deadlocks on a second SIGTERM (ray/_private/node.py: kill_all_processes holds a
# non-reentrant lock): there ray start is sent one only if it still runs 10 s later (it was not signalled).
ray_node_on_signal() {
  RAY_STOPPING=1
  if ((RAY_SIGNAL_NUM == 0)); then RAY_SIGNAL_NUM=${1:-15}; fi
  if [[ -z ${SLURM_STEP_ID:-} ]]; then
    ray_node_forward
  elif [[ -z $RAY_FORWARD_AT ]]; then
    printf 'ray-node: stopping (Slurm signalled ray start, pid %s, itself)\n' "$RAY_CHILD"
    RAY_FORWARD_AT=$((SECONDS + 10))
  fi
}

# Run RAY_ARGV as a child and wait; on one of VG_STOP_SIGNALS stop it by PID (SIGTERM; SIGKILL after the grace
# period) and return 128+signal.
ray_node_run() {
  local s
  for s in "${VG_STOP_SIGNALS[@]}"; do
    # shellcheck disable=SC2064 # the number is fixed in lib/launch.sh
    trap "ray_node_on_signal ${s#*:}" "${s%:*}"
  done
  vg_child_prefix
  "${VG_CHILD_PREFIX[@]}" "${RAY_ARGV[@]}" &
  RAY_CHILD=$!
  printf 'ray-node: ray start running as pid %s\n' "$RAY_CHILD"
  local rc=0 deadline=""
  while kill -0 "$RAY_CHILD" 2>/dev/null; do
    if ((RAY_STOPPING)) && [[ -z $deadline ]]; then
      deadline=$((SECONDS + VG_VAL[RAY_STOP_GRACE]))
    fi
    if [[ -n $RAY_FORWARD_AT ]] && ((SECONDS >= RAY_FORWARD_AT)); then ray_node_forward; fi
    if [[ -n $deadline ]] && ((SECONDS >= deadline)); then
      ray_node_err "ray start (pid $RAY_CHILD) still running ${VG_VAL[RAY_STOP_GRACE]-}s after SIGTERM; sending SIGKILL"
      kill -KILL "$RAY_CHILD" 2>/dev/null || true
    fi
    # wait returns early (status > 128) when a trapped signal arrives; loop until the child is gone
    if [[ -n $deadline ]]; then
      sleep 0.2
    else
      wait "$RAY_CHILD" 2>/dev/null && rc=0 || rc=$?
    fi
  done
  wait "$RAY_CHILD" 2>/dev/null && rc=0 || rc=$?
  trap - INT TERM HUP QUIT USR1 USR2 PIPE
  if ((RAY_STOPPING)); then
    printf 'ray-node: stopped (ray start exit %s)\n' "$rc" || true
    return $((128 + RAY_SIGNAL_NUM))
  fi
  ray_node_err "ray start exited with status $rc"
  return "$rc"
}

# ray_node_platform_and_count ROLE: sets RN_PLATFORM and RN_COUNT (records problems).
RN_PLATFORM=""
RN_COUNT=0
ray_node_platform_and_count() {
  local override=${VG_VAL[TEST_DEVICE_COUNT]-} real from
  RN_PLATFORM=${VG_VAL[PLATFORM]-}
  if [[ -z $RN_PLATFORM && -n $override ]]; then
    vg_problem VLGRPO_PLATFORM "must be set (npu or gpu) when VLGRPO_TEST_DEVICE_COUNT is used" "set VLGRPO_PLATFORM=npu or gpu"
    return 0
  fi
  # the one device counter (lib/node.sh vg_count_devices); a node declares all of its own devices, so
  # the node's count is used, not the visibility-limited one
  vg_count_devices "$RN_PLATFORM" || return 0
  RN_PLATFORM=${VG_DEV[platform]}
  if [[ -z $RN_PLATFORM ]]; then
    vg_problem VLGRPO_PLATFORM "no Ascend NPU (/dev/davinci*, npu-smi) or NVIDIA GPU (nvidia-smi) on this node" \
      "map the devices into the container (see docs/cluster.md) or set VLGRPO_PLATFORM"
    return 0
  fi
  real=${VG_DEV[node_devices]} from=${VG_DEV[node_source]}
  if [[ -n $override ]]; then
    if ((real > 0)); then
      vg_problem VLGRPO_TEST_DEVICE_COUNT "test-only override refused: this node has $real real $RN_PLATFORM device(s) ($from)" \
        "unset it; a real node declares what it has"
      return 0
    fi
    RN_COUNT=$override
    printf 'ray-node: TEST MODE: declaring %s %s device(s) from VLGRPO_TEST_DEVICE_COUNT\n' "$RN_COUNT" "$RN_PLATFORM"
    return 0
  fi
  RN_COUNT=$real
  if ((RN_COUNT == 0)); then
    if [[ $RN_PLATFORM == npu ]]; then
      vg_problem VLGRPO_PLATFORM "npu, but no Ascend NPU found ($from)" \
        "map /dev/davinciN, /dev/davinci_manager, /dev/devmm_svm, /dev/hisi_hdc, /usr/local/Ascend/driver and npu-smi into the container"
    else
      vg_problem VLGRPO_PLATFORM "gpu, but no NVIDIA GPU found ($from)" "run the container with the NVIDIA runtime (--gpus all)"
    fi
  fi
}

# ray_node_interfaces: the socket interfaces NCCL/HCCL/Gloo use; required, checked against the node.
ray_node_interfaces() {
  local -a need=(GLOO_SOCKET_IFNAME)
  local var
  if [[ $RN_PLATFORM == npu ]]; then need+=(HCCL_SOCKET_IFNAME); else need+=(NCCL_SOCKET_IFNAME); fi
  for var in "${need[@]}"; do
    if [[ -z ${!var:-} ]]; then
      vg_problem "$var" "required on $RN_PLATFORM nodes (Gloo and ${need[1]%%_*} pick a wrong interface otherwise)" \
        "set it to the interface of the cluster network, e.g. $var=eth0 (list them with \`ip -br addr\`)"
    elif [[ $var == GLOO_SOCKET_IFNAME ]]; then
      ray_node_check_ifname "$var" "${!var}" 1
    else
      ray_node_check_ifname "$var" "${!var}" 0
    fi
  done
  # optional; exported (and printed) as given, so checked like the others
  if [[ -n ${TP_SOCKET_IFNAME:-} ]]; then ray_node_check_ifname TP_SOCKET_IFNAME "$TP_SOCKET_IFNAME" 1; fi
}

# ray_node_exports: what verl, vLLM and HCCL/NCCL read, exported for `ray start` and every Ray worker.
RN_EXPORTS=()
ray_node_exports() {
  local e addr
  RN_EXPORTS=("GLOO_SOCKET_IFNAME=$GLOO_SOCKET_IFNAME" "TP_SOCKET_IFNAME=${TP_SOCKET_IFNAME:-$GLOO_SOCKET_IFNAME}" RAY_USAGE_STATS_ENABLED=0)
  if [[ $RN_PLATFORM == npu ]]; then
    RN_EXPORTS+=("HCCL_SOCKET_IFNAME=$HCCL_SOCKET_IFNAME" RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES=1)
  else
    RN_EXPORTS+=("NCCL_SOCKET_IFNAME=$NCCL_SOCKET_IFNAME")
  fi
  if [[ -z ${VG_VAL[RAY_NODE_IP]-} && $GLOO_SOCKET_IFNAME != [=^]* ]] && command -v ip >/dev/null 2>&1; then
    addr=$(ip -4 -o addr show dev "$GLOO_SOCKET_IFNAME" 2>/dev/null | awk '{split($4, a, "/"); print a[1]; exit}')
    if [[ $addr =~ ^[0-9]{1,3}(\.[0-9]{1,3}){3}$ ]]; then
      VG_VAL[RAY_NODE_IP]=$addr
      printf 'ray-node: node IP %s (from GLOO_SOCKET_IFNAME=%s)\n' "$addr" "$GLOO_SOCKET_IFNAME"
    fi
  fi
  if [[ -n ${VG_VAL[RAY_NODE_IP]-} ]]; then RN_EXPORTS+=("VLLM_HOST_IP=${VG_VAL[RAY_NODE_IP]-}"); fi
  for e in "${RN_EXPORTS[@]}"; do
    export "${e?}"
    printf 'ray-node: environment %s\n' "$e"
  done
}

ray_node_main() {
  if (($# != 1)); then
    ray_node_err "expected exactly one argument, head or worker (settings come from VLGRPO_* variables; --help lists them)"
    return 2
  fi
  local role=$1
  ray_node_declare
  case $role in
    head | worker) ;;
    -h | --help)
      # a terminal gets plain text wrapped to its width; a pipe the Markdown (docs/settings.md)
      if [[ -t 1 ]]; then ray_node_usage | vg_help_text; else ray_node_usage; fi
      return 0
      ;;
    *)
      ray_node_err "unknown argument $(vg_show "$role") (expected head or worker; settings come from VLGRPO_* variables, see --help)"
      return 2
      ;;
  esac
  vg_signals_on
  vg_read_settings
  vg_check_unknown_vars
  vg_build_child_environment
  if [[ $role == worker && -z ${VG_VAL[RAY_HEAD]-} && -z ${VG_RAW[RAY_HEAD]-} ]]; then
    vg_problem VLGRPO_RAY_HEAD "required for a worker" "set it to the head's HOST:PORT, e.g. VLGRPO_RAY_HEAD=10.0.0.1:6379"
  fi
  if [[ $role == head && -n ${VG_RAW[RAY_HEAD]-} ]]; then
    vg_problem VLGRPO_RAY_HEAD "only for workers" "unset it on the head (the head's port is VLGRPO_RAY_PORT)"
  fi
  if [[ $role == worker && -n ${VG_RAW[RAY_TEMP_DIR]-} ]]; then
    vg_problem VLGRPO_RAY_TEMP_DIR "only for the head (Ray workers use the head's temp folder)" "unset it on workers"
  fi
  # verl's loggers run in a Ray actor that may land on this node: the W&B key (WANDB_API_KEY_FILE) and the tracker
  # settings become the variables they read (vlgrpo.trackers: lib/launch.sh vg_trackers), for ray start and every
  # Ray process it starts
  vg_trackers
  vg_launch_stop
  vg_flush_problems
  vg_image_env
  ray_node_platform_and_count
  vg_flush_problems
  ray_node_interfaces
  vg_flush_problems

  ray_node_exports
  ray_node_build_argv "$role" "$RN_COUNT" "$RN_PLATFORM"
  if [[ ${VG_VAL[DRY_RUN]-} == True ]]; then
    vg_env_plan 'ray-node: ' 'ray start and the Ray processes it starts'
    vg_wandb_plan 'ray-node: '
    printf 'ray-node: dry run: configuration valid, nothing started; command (%d arguments, one per line):\n' "${#RAY_ARGV[@]}"
    printf '%s\n' "${RAY_ARGV[@]}"
    return 0
  fi

  ray_node_check_cards_free "$RN_PLATFORM" || return 2
  if [[ $role == worker ]]; then
    if ! ray_node_wait_tcp "${VG_VAL[RAY_HEAD]-}" "${VG_VAL[RAY_HEAD_WAIT]-}"; then
      ray_node_err "VLGRPO_RAY_HEAD=${VG_VAL[RAY_HEAD]-}: head not reachable after ${VG_VAL[RAY_HEAD_WAIT]-}s (VLGRPO_RAY_HEAD_WAIT); start the head first or fix the address"
      return 2
    fi
  fi
  printf 'ray-node: %s on %s with %s device(s):' "$role" "$RN_PLATFORM" "$RN_COUNT"
  printf ' %s' "${RAY_ARGV[@]}"
  printf '\n'
  ray_node_run
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  if (($# == 0)); then
    ray_node_main
  elif (($# == 1)); then
    ray_node_main "$1"
  else
    ray_node_err "expected exactly one argument, head or worker (settings come from VLGRPO_* variables; --help lists them)"
    exit 2
  fi
fi
