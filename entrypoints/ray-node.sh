#!/usr/bin/env bash
# ray-node.sh head|worker — start this node's part of a Ray cluster for the vlgrpo recipes, in the
# foreground (compose, Kubernetes, Slurm), with its accelerators declared the way Ray and verl expect.
#
#   head    ray start --head, GCS on VLGRPO_RAY_PORT (default 6379)
#   worker  ray start --address=VLGRPO_RAY_HEAD (required), after the head accepts TCP connections
#
# What it does (field case B15):
#   - counts the node's accelerators: Ascend /dev/davinci[0-9]* (or `npu-smi info -m`), NVIDIA
#     `nvidia-smi`; declares them as --resources='{"NPU": N}' on Ascend (never --num-gpus there) and
#     --num-gpus=N on NVIDIA;
#   - requires the socket interfaces: HCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME on Ascend,
#     NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME on NVIDIA; exports TP_SOCKET_IFNAME (vLLM/torch RPC) and
#     VLLM_HOST_IP; on Ascend exports RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES=1 so Ray 2.48.0 does
#     not hide the NPUs from processes that hold no NPU (the `ray job submit` driver, verl's TaskRunner);
#   - refuses to start while another process holds the cards (npu-smi process table, -8005/-8020 = cards
#     held by another container; nvidia-smi compute apps), after waiting VLGRPO_RAY_CARDS_WAIT seconds;
#   - runs `ray start --block` as its child and, on SIGTERM/SIGINT, stops that child by PID (ray start
#     --block then stops the Ray processes it started). Never `ray stop` (kills every Ray process on the
#     machine) and never pkill.
#
# Settings come only from the allowlisted VLGRPO_* variables below (no arguments besides head|worker and
# --help); an unknown VLGRPO_* variable, a malformed value or a missing requirement exits 2.
#
# Test-only: VLGRPO_TEST_DEVICE_COUNT=N declares N accelerators on a machine that has none (CI). It is
# refused when this node has real accelerators, so it cannot change what a real node declares.
set -Eeuo pipefail

RAY_NODE_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=entrypoints/lib/ray.sh
source "$RAY_NODE_DIR/lib/ray.sh"

# name|type|default|meaning     (types: enum:a/b, int:min:max, bool, ipv4, hostport, abspath)
RAY_NODE_SETTINGS=(
  "VLGRPO_PLATFORM|enum:auto/npu/gpu|auto|accelerator platform; auto = Ascend if /dev/davinci* or npu-smi, else NVIDIA if nvidia-smi"
  "VLGRPO_RAY_HEAD|hostport||worker: HOST:PORT of the head's GCS (required for worker, refused for head)"
  "VLGRPO_RAY_PORT|int:1024:65535|6379|head: GCS port"
  "VLGRPO_RAY_NODE_IP|ipv4||this node's address on the cluster network (default: the IPv4 of GLOO_SOCKET_IFNAME when \`ip\` is available, else Ray's choice)"
  "VLGRPO_RAY_NUM_CPUS|int:1:4096||CPUs Ray may schedule on this node (default: all)"
  "VLGRPO_RAY_MEMORY|int:104857600:1099511627776||bytes of memory Ray may schedule (default: Ray's estimate)"
  "VLGRPO_RAY_OBJECT_STORE_MEMORY|int:78643200:1099511627776||bytes of the object store (default: Ray's, 30% of memory)"
  "VLGRPO_RAY_TEMP_DIR|abspath||head: Ray's temp/session directory (workers use the head's)"
  "VLGRPO_RAY_DASHBOARD|bool|1|head: run the dashboard (needed by \`ray job submit\`/KubeRay), bound to 127.0.0.1 unless VLGRPO_RAY_DASHBOARD_HOST"
  "VLGRPO_RAY_DASHBOARD_HOST|ipv4|127.0.0.1|head: dashboard bind address (0.0.0.0 exposes job submission = code execution to the network)"
  "VLGRPO_RAY_DASHBOARD_PORT|int:1024:65535|8265|head: dashboard port"
  "VLGRPO_RAY_CLIENT_PORT|int:1024:65535|10001|head: Ray client server port"
  "VLGRPO_RAY_AGENT_PORT|int:1024:65535|52365|dashboard agent HTTP port of this node"
  "VLGRPO_RAY_HEAD_WAIT|int:0:3600|300|worker: seconds to wait for the head to accept connections"
  "VLGRPO_RAY_CARDS_WAIT|int:0:3600|30|seconds to wait for other processes to release the cards before refusing"
  "VLGRPO_RAY_STOP_GRACE|int:1:600|30|seconds between SIGTERM and SIGKILL of ray start on shutdown"
  "VLGRPO_DRY_RUN|bool|0|print the ray start command (one argument per line) and exit 0"
  "VLGRPO_TEST_DEVICE_COUNT|int:0:64||TEST ONLY: declare this many accelerators on a node without any (refused on real hardware)"
)

declare -A RN=()   # validated values by variable name

ray_node_usage() {
  local row name type default meaning
  printf 'usage: ray-node.sh head|worker\n\nSettings (environment):\n'
  for row in "${RAY_NODE_SETTINGS[@]}"; do
    IFS='|' read -r name type default meaning <<<"$row"
    printf '  %-32s %-22s default %-10s %s\n' "$name" "$type" "${default:-(none)}" "$meaning"
  done
  printf '\nRequired: GLOO_SOCKET_IFNAME and HCCL_SOCKET_IFNAME (Ascend) or NCCL_SOCKET_IFNAME (NVIDIA).\n'
}

# Levenshtein distance of two short ASCII strings (for "did you mean").
ray_node_distance() {
  local a=$1 b=$2 i j cost la=${#1} lb=${#2}
  local -a prev=() cur=()
  for ((j = 0; j <= lb; j++)); do prev[j]=$j; done
  for ((i = 1; i <= la; i++)); do
    cur[0]=$i
    for ((j = 1; j <= lb; j++)); do
      [[ ${a:i-1:1} == "${b:j-1:1}" ]] && cost=0 || cost=1
      cur[j]=$((prev[j] + 1))
      ((cur[j - 1] + 1 < cur[j])) && cur[j]=$((cur[j - 1] + 1))
      ((prev[j - 1] + cost < cur[j])) && cur[j]=$((prev[j - 1] + cost))
    done
    prev=("${cur[@]}")
  done
  printf '%d\n' "${prev[lb]}"
}

# Validate one value against its type; print an error and return 2 if it does not fit.
ray_node_validate() {
  local name=$1 type=$2 value=$3
  local fix="see \`ray-node.sh --help\`"
  if ((${#value} > 256)); then
    ray_node_err "$name: value is ${#value} characters long; $fix"
    return 2
  fi
  case $type in
    enum:*)
      local allowed=${type#enum:}
      if [[ "/$allowed/" != *"/$value/"* || -z $value ]]; then
        ray_node_err "$name: must be one of ${allowed//\// | }; $fix"
        return 2
      fi
      ;;
    int:*)
      local bounds=${type#int:} lo hi
      lo=${bounds%%:*}
      hi=${bounds#*:}
      if [[ ! $value =~ ^[0-9]{1,13}$ ]] || ((10#$value < lo || 10#$value > hi)); then
        ray_node_err "$name: must be an integer from $lo to $hi; $fix"
        return 2
      fi
      ;;
    bool)
      if [[ ! $value =~ ^[01]$ ]]; then
        ray_node_err "$name: must be 0 or 1"
        return 2
      fi
      ;;
    ipv4)
      local re='^([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})$'
      if [[ ! $value =~ $re ]] || ((BASH_REMATCH[1] > 255 || BASH_REMATCH[2] > 255 || BASH_REMATCH[3] > 255 || BASH_REMATCH[4] > 255)); then
        ray_node_err "$name: must be an IPv4 address such as 10.0.0.2"
        return 2
      fi
      ;;
    hostport)
      local re='^([A-Za-z0-9]([A-Za-z0-9.-]{0,252}[A-Za-z0-9])?):([0-9]{1,5})$'
      if [[ ! $value =~ $re ]] || ((10#${BASH_REMATCH[3]} < 1 || 10#${BASH_REMATCH[3]} > 65535)); then
        ray_node_err "$name: must be HOST:PORT of the Ray head, e.g. 10.0.0.1:6379"
        return 2
      fi
      ;;
    abspath)
      if [[ ! $value =~ ^/[A-Za-z0-9_./-]*$ || $value == *..* ]]; then
        ray_node_err "$name: must be an absolute path of letters, digits and _ . / - (no ..)"
        return 2
      fi
      ;;
    *)
      ray_node_err "internal: unknown type $type for $name"
      return 1
      ;;
  esac
}

# Read the allowlisted variables into RN; refuse unknown VLGRPO_* variables with the nearest name.
ray_node_read_settings() {
  local row name type default meaning var bad=0
  local -A known=()
  for row in "${RAY_NODE_SETTINGS[@]}"; do
    IFS='|' read -r name type default meaning <<<"$row"
    known[$name]=1
    if [[ -n ${!name+x} && -n ${!name} ]]; then
      ray_node_validate "$name" "$type" "${!name}" || bad=2
      RN[$name]=${!name}
    else
      RN[$name]=$default
    fi
  done
  while IFS= read -r var; do
    [[ -n ${known[$var]:-} ]] && continue
    local best="" best_d=999 d k
    for k in "${!known[@]}"; do
      d=$(ray_node_distance "$var" "$k")
      ((d < best_d)) && best_d=$d best=$k
    done
    ray_node_err "$var: not a ray-node.sh setting; did you mean $best? (ray-node.sh --help lists them)"
    bad=2
  done < <(compgen -e | grep -E '^VLGRPO_' || true)
  return "$bad"
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
    for ((i = 0; i < 20; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    elif wait "$pid"; then
      return 0
    fi
    if ((SECONDS - start >= limit)); then
      return 1
    fi
    printf 'ray-node: waiting for the head %s (%ds of %ds)\n' "$hostport" "$((SECONDS - start))" "$limit"
    sleep 2
  done
}

# Refuse (after waiting) while another process holds this node's cards.
ray_node_check_cards_free() {
  local platform=$1 limit=${RN[VLGRPO_RAY_CARDS_WAIT]} start=$SECONDS holders rc tool
  [[ $platform == npu ]] && tool=npu-smi || tool=nvidia-smi
  if ! command -v "$tool" >/dev/null 2>&1; then
    if [[ -n ${RN[VLGRPO_TEST_DEVICE_COUNT]} ]]; then
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
    sleep 2
  done
}

# Build RAY_ARGV for role $1 with $2 devices on platform $3.
ray_node_build_argv() {
  local role=$1 count=$2 platform=$3
  RAY_ARGV=(ray start --block --disable-usage-stats)
  if [[ $role == head ]]; then
    RAY_ARGV+=(--head "--port=${RN[VLGRPO_RAY_PORT]}")
    if [[ ${RN[VLGRPO_RAY_DASHBOARD]} == 1 ]]; then
      RAY_ARGV+=(--include-dashboard=true "--dashboard-host=${RN[VLGRPO_RAY_DASHBOARD_HOST]}")
    else
      RAY_ARGV+=(--include-dashboard=false)
    fi
    RAY_ARGV+=("--dashboard-port=${RN[VLGRPO_RAY_DASHBOARD_PORT]}" "--ray-client-server-port=${RN[VLGRPO_RAY_CLIENT_PORT]}")
    [[ -n ${RN[VLGRPO_RAY_TEMP_DIR]} ]] && RAY_ARGV+=("--temp-dir=${RN[VLGRPO_RAY_TEMP_DIR]}")
  else
    RAY_ARGV+=("--address=${RN[VLGRPO_RAY_HEAD]}")
  fi
  [[ -n ${RN[VLGRPO_RAY_NODE_IP]} ]] && RAY_ARGV+=("--node-ip-address=${RN[VLGRPO_RAY_NODE_IP]}")
  RAY_ARGV+=("--dashboard-agent-listen-port=${RN[VLGRPO_RAY_AGENT_PORT]}")
  [[ -n ${RN[VLGRPO_RAY_NUM_CPUS]} ]] && RAY_ARGV+=("--num-cpus=${RN[VLGRPO_RAY_NUM_CPUS]}")
  [[ -n ${RN[VLGRPO_RAY_MEMORY]} ]] && RAY_ARGV+=("--memory=${RN[VLGRPO_RAY_MEMORY]}")
  [[ -n ${RN[VLGRPO_RAY_OBJECT_STORE_MEMORY]} ]] && RAY_ARGV+=("--object-store-memory=${RN[VLGRPO_RAY_OBJECT_STORE_MEMORY]}")
  if [[ $platform == npu ]]; then
    RAY_ARGV+=("--resources={\"NPU\": $count}")
  else
    RAY_ARGV+=("--num-gpus=$count")
  fi
}

RAY_CHILD=""
RAY_STOPPING=0

ray_node_on_signal() {
  RAY_STOPPING=1
  if [[ -n $RAY_CHILD ]] && kill -0 "$RAY_CHILD" 2>/dev/null; then
    printf 'ray-node: stopping ray start (pid %s)\n' "$RAY_CHILD"
    kill -TERM "$RAY_CHILD" 2>/dev/null || true
  fi
}

# Run RAY_ARGV as a child and wait; on SIGTERM/SIGINT stop it by PID (SIGKILL after the grace period).
ray_node_run() {
  trap ray_node_on_signal TERM INT
  "${RAY_ARGV[@]}" &
  RAY_CHILD=$!
  printf 'ray-node: ray start running as pid %s\n' "$RAY_CHILD"
  local rc=0 deadline=""
  while kill -0 "$RAY_CHILD" 2>/dev/null; do
    if ((RAY_STOPPING)) && [[ -z $deadline ]]; then
      deadline=$((SECONDS + RN[VLGRPO_RAY_STOP_GRACE]))
    fi
    if [[ -n $deadline ]] && ((SECONDS >= deadline)); then
      ray_node_err "ray start (pid $RAY_CHILD) still running ${RN[VLGRPO_RAY_STOP_GRACE]}s after SIGTERM; sending SIGKILL"
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
  trap - TERM INT
  if ((RAY_STOPPING)); then
    printf 'ray-node: stopped (ray start exit %s)\n' "$rc"
    return 0
  fi
  ray_node_err "ray start exited with status $rc"
  return "$rc"
}

ray_node_main() {
  if (($# != 1)); then
    ray_node_usage >&2
    ray_node_err "expected exactly one argument, head or worker (settings come from VLGRPO_* variables)"
    return 2
  fi
  local role=$1
  case $role in
    head | worker) ;;
    -h | --help)
      ray_node_usage
      return 0
      ;;
    *)
      ray_node_err "unknown argument (expected head or worker; settings come from VLGRPO_* variables, see --help)"
      return 2
      ;;
  esac
  ray_node_read_settings || return 2

  if [[ $role == worker && -z ${RN[VLGRPO_RAY_HEAD]} ]]; then
    ray_node_err "VLGRPO_RAY_HEAD: required for a worker; set it to the head's HOST:PORT, e.g. VLGRPO_RAY_HEAD=10.0.0.1:6379"
    return 2
  fi
  if [[ $role == head && -n ${RN[VLGRPO_RAY_HEAD]} ]]; then
    ray_node_err "VLGRPO_RAY_HEAD: only for workers; unset it on the head (the head's port is VLGRPO_RAY_PORT)"
    return 2
  fi
  if [[ $role == worker && -n ${RN[VLGRPO_RAY_TEMP_DIR]} ]]; then
    ray_node_err "VLGRPO_RAY_TEMP_DIR: only for the head (Ray workers use the head's temp dir); unset it"
    return 2
  fi

  # platform and device count
  local platform=${RN[VLGRPO_PLATFORM]} real override=${RN[VLGRPO_TEST_DEVICE_COUNT]} count
  if [[ $platform == auto ]]; then
    if [[ -n $override ]]; then
      ray_node_err "VLGRPO_PLATFORM: must be npu or gpu when VLGRPO_TEST_DEVICE_COUNT is set"
      return 2
    fi
    platform=$(ray_node_detect_platform)
    if [[ -z $platform ]]; then
      ray_node_err "VLGRPO_PLATFORM=auto: no /dev/davinci*, npu-smi or nvidia-smi on this node; map the devices into the container or set VLGRPO_PLATFORM"
      return 2
    fi
  fi
  if [[ $platform == npu ]]; then
    real=$(ray_node_count_npus)
  else
    real=$(ray_node_count_gpus)
  fi
  if [[ -n $override ]]; then
    if ((real > 0)); then
      ray_node_err "VLGRPO_TEST_DEVICE_COUNT: test-only override refused: this node has $real real $platform device(s); unset it"
      return 2
    fi
    count=$override
    printf 'ray-node: TEST MODE: declaring %s %s device(s) from VLGRPO_TEST_DEVICE_COUNT\n' "$count" "$platform"
  else
    count=$real
    if ((count == 0)); then
      if [[ $platform == npu ]]; then
        ray_node_err "no Ascend NPU found (/dev/davinci[0-9]* absent, npu-smi info -m lists none); map /dev/davinciN, /dev/davinci_manager, /dev/devmm_svm, /dev/hisi_hdc and /usr/local/Ascend/driver into the container"
      else
        ray_node_err "no NVIDIA GPU found (nvidia-smi lists none); run the container with --gpus all / the NVIDIA runtime"
      fi
      return 2
    fi
  fi

  # socket interfaces (required) and what verl/vLLM read
  local -a need=(GLOO_SOCKET_IFNAME)
  if [[ $platform == npu ]]; then need+=(HCCL_SOCKET_IFNAME); else need+=(NCCL_SOCKET_IFNAME); fi
  local var bad=0
  for var in "${need[@]}"; do
    if [[ -z ${!var:-} ]]; then
      ray_node_err "$var: required on $platform nodes; set it to the interface of the cluster network (e.g. $var=eth0; list them with \`ip -br addr\`)"
      bad=2
      continue
    fi
    if [[ $var == GLOO_SOCKET_IFNAME ]]; then
      ray_node_check_ifname "$var" "${!var}" 1 || bad=2
    else
      ray_node_check_ifname "$var" "${!var}" 0 || bad=2
    fi
  done
  ((bad == 0)) || return 2
  export GLOO_SOCKET_IFNAME
  if [[ $platform == npu ]]; then
    export HCCL_SOCKET_IFNAME
    export RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES=1
  else
    export NCCL_SOCKET_IFNAME
  fi
  export TP_SOCKET_IFNAME=${TP_SOCKET_IFNAME:-$GLOO_SOCKET_IFNAME}
  export RAY_USAGE_STATS_ENABLED=0

  if [[ -z ${RN[VLGRPO_RAY_NODE_IP]} ]] && command -v ip >/dev/null 2>&1; then
    local addr
    addr=$(ip -4 -o addr show dev "$GLOO_SOCKET_IFNAME" 2>/dev/null | awk '{split($4, a, "/"); print a[1]; exit}')
    if [[ -n $addr ]]; then
      RN[VLGRPO_RAY_NODE_IP]=$addr
      printf 'ray-node: node IP %s (from GLOO_SOCKET_IFNAME=%s)\n' "$addr" "$GLOO_SOCKET_IFNAME"
    fi
  fi
  [[ -n ${RN[VLGRPO_RAY_NODE_IP]} ]] && export VLLM_HOST_IP=${RN[VLGRPO_RAY_NODE_IP]}

  ray_node_build_argv "$role" "$count" "$platform"
  if [[ ${RN[VLGRPO_DRY_RUN]} == 1 ]]; then
    printf '%s\n' "${RAY_ARGV[@]}"
    return 0
  fi

  ray_node_check_cards_free "$platform" || return 2
  if [[ $role == worker ]]; then
    if ! ray_node_wait_tcp "${RN[VLGRPO_RAY_HEAD]}" "${RN[VLGRPO_RAY_HEAD_WAIT]}"; then
      ray_node_err "VLGRPO_RAY_HEAD=${RN[VLGRPO_RAY_HEAD]}: head not reachable after ${RN[VLGRPO_RAY_HEAD_WAIT]}s (VLGRPO_RAY_HEAD_WAIT); start the head first or fix the address"
      return 2
    fi
  fi
  printf 'ray-node: %s on %s with %s device(s):' "$role" "$platform" "$count"
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
    ray_node_usage >&2
    ray_node_err "expected exactly one argument, head or worker"
    exit 2
  fi
fi
