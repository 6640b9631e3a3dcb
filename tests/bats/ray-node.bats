#!/usr/bin/env bats
# entrypoints/ray-node.sh: what `ray start` receives (exact argv), what is refused (exit 2, nothing
# started), who-holds-the-cards checks, and signal handling. Field case B15. The shared recording stubs
# (tests/bats/stubs/recorder) stand in for ray, npu-smi and nvidia-smi; a few tests put a scripted
# npu-smi/nvidia-smi/ray of their own first on PATH. Real Ray runs in tests/python/ray.

setup() {
  load helpers/common
  common_setup python3 ray npu-smi
  # ray-node.sh takes only its own settings: drop the recipe settings common_setup exports
  unset VLGRPO_MODEL_PATH VLGRPO_TRAIN_FILE VLGRPO_VAL_FILE VLGRPO_CHECKPOINT_DIR VLGRPO_PLATFORM
  unset HCCL_SOCKET_IFNAME NCCL_SOCKET_IFNAME GLOO_SOCKET_IFNAME TP_SOCKET_IFNAME VLLM_HOST_IP
  unset RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES
  RN=$REPO_ROOT/entrypoints/ray-node.sh
  FIX=$REPO_ROOT/tests/bats/fixtures/ray-node
  export HCCL_SOCKET_IFNAME=lo GLOO_SOCKET_IFNAME=lo VLGRPO_RAY_CARDS_WAIT=0 VLGRPO_RAY_NODE_IP=10.1.2.3
  # the scripted stubs below read these; ray-node.sh passes them to its children only when named
  pass_env T_DIR,NPU_SMI_INFO,NPU_SMI_INFO_LATER,NPU_SMI_RC,STUB_RAY_IGNORE_TERM
  CANARY=$T/canary
}

# stderr_has TEXT — the separated stderr of the last `run` contains TEXT (Debian's bats-assert 2.1 has
# no assert_stderr).
stderr_has() {
  [[ $stderr == *"$1"* ]] || fail "stderr lacks: $1"$'\n'"stderr was: $stderr"
}

# assert_ray_not_started — the ray stub never ran.
assert_ray_not_started() {
  local c
  c=$(calls)
  [[ $c != *.ray* ]] || fail "expected no ray call, got: $c"
}

# node ROLE — run ray-node.sh through the hook harness with the /dev hook at $T/dev (the shim never passes the
# hook; a real run scans /dev).
node() {
  run --separate-stderr "$HARNESS" "$RN" "$1"
}

davinci() {
  local i
  for ((i = 0; i < $1; i++)); do : >"$T/dev/davinci$i"; done
  : >"$T/dev/davinci_manager" # control devices are not NPUs
}

# scripted npu-smi: `info -l` lists STUB_NPU_COUNT NPUs, `info` prints the fixture $NPU_SMI_INFO and
# exits $NPU_SMI_RC; each `info` call is counted in $T/npu-smi-info.calls.
scripted_npu_smi() {
  rm -f "$T/bin/npu-smi" # a symlink to the shared recorder: never write through it
  cat >"$T/bin/npu-smi" <<'EOF'
#!/usr/bin/env bash
if [[ ${1-} == info && ${2-} == -l ]]; then
  printf '        Total Count                    : %s\n' "${STUB_NPU_COUNT:-8}"
  for ((i = 0; i < ${STUB_NPU_COUNT:-8}; i++)); do printf '        NPU ID                         : %s\n        Chip Count                     : 1\n' "$i"; done
  exit 0
fi
if [[ ${1-} == info && -z ${2-} ]]; then
  echo x >>"$T_DIR/npu-smi-info.calls"
  n=$(wc -l <"$T_DIR/npu-smi-info.calls")
  if [[ -n ${NPU_SMI_INFO_LATER-} ]] && ((n > 1)); then cat "$NPU_SMI_INFO_LATER"; else cat "$NPU_SMI_INFO"; fi
  exit "${NPU_SMI_RC:-0}"
fi
exit 0
EOF
  chmod +x "$T/bin/npu-smi"
  export T_DIR=$T
}

expected_worker_argv() {
  cat <<EOF
ray
start
--block
--disable-usage-stats
--address=10.1.2.1:6379
--node-ip-address=10.1.2.3
--dashboard-agent-listen-port=52365
--resources={"NPU": $1}
EOF
}

# ---- what ray start receives -------------------------------------------------------------------------

@test "B15: an Ascend worker declares its davinci NPUs as the NPU resource and never --num-gpus" {
  davinci 16
  export VLGRPO_RAY_HEAD=10.1.2.1:6379 VLGRPO_DRY_RUN=1
  node worker
  assert_success
  diff <(sed -n '/one per line/,$p' <<<"$output" | tail -n +2) <(expected_worker_argv 16)
  refute_output --partial "--num-gpus"
  assert_ray_not_started
}

@test "an Ascend head: exact argv, NOSET and socket variables exported, dashboard on loopback" {
  davinci 8
  export VLGRPO_DRY_RUN=1 VLGRPO_RAY_NUM_CPUS=64 VLGRPO_RAY_MEMORY_MB=1024 VLGRPO_RAY_OBJECT_STORE_MB=512
  node head
  assert_success
  diff <(sed -n '/one per line/,$p' <<<"$output" | tail -n +2) - <<'EOF'
ray
start
--block
--disable-usage-stats
--head
--port=6379
--include-dashboard=true
--dashboard-host=127.0.0.1
--dashboard-port=8265
--ray-client-server-port=10001
--node-ip-address=10.1.2.3
--dashboard-agent-listen-port=52365
--num-cpus=64
--memory=1073741824
--object-store-memory=536870912
--resources={"NPU": 8}
EOF
  assert_line "ray-node: environment RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES=1"
  assert_line "ray-node: environment HCCL_SOCKET_IFNAME=lo"
  assert_line "ray-node: environment GLOO_SOCKET_IFNAME=lo"
  assert_line "ray-node: environment TP_SOCKET_IFNAME=lo"
  assert_line "ray-node: environment VLLM_HOST_IP=10.1.2.3"
}

@test "an Atlas A3 node without /dev mapping is counted from npu-smi info -l chips (2 per NPU)" {
  export STUB_NPU_COUNT=8 STUB_NPU_CHIPS=2 VLGRPO_RAY_HEAD=10.1.2.1:6379 VLGRPO_DRY_RUN=1
  node worker
  assert_success
  assert_line '--resources={"NPU": 16}'
}

@test "an NVIDIA node declares --num-gpus from nvidia-smi, needs NCCL_SOCKET_IFNAME, no NOSET" {
  rm -f "$T/bin/npu-smi"
  ln -sf "$REPO_ROOT/tests/bats/stubs/recorder" "$T/bin/nvidia-smi"
  unset HCCL_SOCKET_IFNAME
  export STUB_GPU_COUNT=8 VLGRPO_RAY_HEAD=10.1.2.1:6379 VLGRPO_DRY_RUN=1
  node worker
  assert_failure 2
  stderr_has "NCCL_SOCKET_IFNAME: required on gpu nodes"
  export NCCL_SOCKET_IFNAME=lo
  node worker
  assert_success
  assert_line "--num-gpus=8"
  refute_output --partial '"NPU"'
  refute_output --partial "NOSET"
  assert_line "ray-node: environment NCCL_SOCKET_IFNAME=lo"
}

@test "a real start runs ray start --block with exactly the dry run's argv" {
  davinci 8
  export VLGRPO_RAY_HEAD=10.1.2.1:6379 VLGRPO_RAY_HEAD_WAIT=0
  scripted_npu_smi
  export NPU_SMI_INFO=$FIX/npu-smi-info-idle.txt
  # the head must accept TCP: a listener on a free loopback port
  local port
  port=$("$REPO_ROOT/.venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$REPO_ROOT/.venv/bin/python" -c 'import socket,sys,time; s=socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(); time.sleep(20)' "$port" &
  local listener=$!
  sleep 0.5
  export VLGRPO_RAY_HEAD=127.0.0.1:$port
  node worker
  kill "$listener"
  assert_success
  run call_argv 0
  assert_output "$(expected_worker_argv 8 | tail -n +2 | sed "s/10.1.2.1:6379/127.0.0.1:$port/")"
}

# ---- refused: exit 2, nothing started -----------------------------------------------------------------

@test "B15: a worker without the head address is refused" {
  davinci 8
  node worker
  assert_failure 2
  stderr_has "VLGRPO_RAY_HEAD: required for a worker"
  assert_ray_not_started
}

@test "B15: missing HCCL_SOCKET_IFNAME or GLOO_SOCKET_IFNAME on Ascend is refused, each named" {
  davinci 8
  unset HCCL_SOCKET_IFNAME GLOO_SOCKET_IFNAME
  node head
  assert_failure 2
  stderr_has "GLOO_SOCKET_IFNAME: required on npu nodes"
  stderr_has "HCCL_SOCKET_IFNAME: required on npu nodes"
  assert_ray_not_started
}

@test "an interface this node does not have is refused with the ones it has" {
  davinci 8
  export HCCL_SOCKET_IFNAME=nosuchif0
  node head
  assert_failure 2
  stderr_has "HCCL_SOCKET_IFNAME: no network interface nosuchif0 on this node (it has:"
  stderr_has " lo"
}

@test "NCCL-style prefix and exclusion lists are accepted for HCCL_SOCKET_IFNAME" {
  davinci 8
  export VLGRPO_DRY_RUN=1 HCCL_SOCKET_IFNAME=l
  node head
  assert_success
  export HCCL_SOCKET_IFNAME=^docker0,virbr0
  node head
  assert_success
}

@test "positional arguments other than head|worker|--help are refused" {
  davinci 8
  run --separate-stderr "$RN" head --num-gpus=8
  assert_failure 2
  run --separate-stderr "$RN"
  assert_failure 2
  run --separate-stderr "$RN" --address=10.0.0.1:6379
  assert_failure 2
  stderr_has "unknown argument"
  run --separate-stderr "$RN" --help
  assert_success
  assert_output --partial '| `VLGRPO_RAY_HEAD` |'
  assert_output --partial '| `VLGRPO_RAY_NODE_IP` | IPv4 address |'
  assert_output --partial '| `VLGRPO_RAY_DASHBOARD_HOST` | IPv4 address |'
  assert_ray_not_started
}

@test "an unknown VLGRPO_ variable is refused with the nearest setting" {
  davinci 8
  export VLGRPO_RAY_HAED=10.1.2.1:6379
  node worker
  assert_failure 2
  stderr_has "VLGRPO_RAY_HAED: not a setting of ray-node.sh"
  stderr_has "did you mean VLGRPO_RAY_HEAD?"
}

@test "the recipes' settings are accepted and ignored (one env for node and recipe); unknown ones are not" {
  davinci 8
  export VLGRPO_DRY_RUN=1 VLGRPO_MODEL_PATH='$(touch canary)' VLGRPO_STALENESS_THRESHOLD=0.5 VLGRPO_EP_SIZE=2
  node head
  assert_success
  refute_output --partial 'canary'   # never used, never printed
  export VLGRPO_MODEL_PATHS=/models
  node head
  assert_failure 2
  stderr_has "VLGRPO_MODEL_PATHS: not a setting of ray-node.sh"
}

@test "hostile values never reach ray start and run nothing" {
  davinci 8
  local v var
  local -a values=(
    "\$(touch $CANARY):6379" "\`touch $CANARY\`:1" "10.0.0.1:6379;touch $CANARY" "10.0.0.1:6379 --num-gpus=8"
    $'10.0.0.1:6379\n--num-gpus=8' "10.0.0.1:99999" "--num-gpus=8" "10.0.0.1" "\${HOME}:1" "'10.0.0.1:6379'"
  )
  for v in "${values[@]}"; do
    VLGRPO_RAY_HEAD=$v node worker
    [[ $status -eq 2 ]] || fail "VLGRPO_RAY_HEAD=$(printf %q "$v") exit $status"
    [[ $stderr == *VLGRPO_RAY_HEAD* ]] || fail "VLGRPO_RAY_HEAD not named for $(printf %q "$v")"
  done
  export VLGRPO_RAY_HEAD=10.1.2.1:6379
  for var in VLGRPO_RAY_NODE_IP VLGRPO_RAY_PORT VLGRPO_RAY_NUM_CPUS VLGRPO_RAY_DASHBOARD_HOST VLGRPO_RAY_MEMORY_MB; do
    for v in "1.2.3.4 --num-gpus=8" "\$(touch $CANARY)" "1;touch $CANARY" "999.1.1.1" "-1" $'1\n2' "１２"; do
      run --separate-stderr env "$var=$v" "$HARNESS" "$RN" worker
      [[ $status -eq 2 ]] || fail "$var=$(printf %q "$v") exit $status: $output"
      [[ $stderr == *"$var"* ]] || fail "$var not named for $(printf %q "$v")"
    done
  done
  for v in "eth0;touch $CANARY" "\$(touch $CANARY)" "eth0 eth1" "averyveryverylonginterfacename"; do
    HCCL_SOCKET_IFNAME=$v node worker
    [[ $status -eq 2 ]] || fail "HCCL_SOCKET_IFNAME=$(printf %q "$v") exit $status"
  done
  assert_file_not_exists "$CANARY"
  assert_ray_not_started
}

@test "the test-only device count is refused on a node with real NPUs, and needs an explicit platform" {
  davinci 8
  export VLGRPO_TEST_DEVICE_COUNT=16 VLGRPO_PLATFORM=npu VLGRPO_DRY_RUN=1
  node head
  assert_failure 2
  stderr_has "VLGRPO_TEST_DEVICE_COUNT: test-only override refused: this node has 8 real npu device(s)"
  rm -f "$T"/dev/davinci* "$T/bin/npu-smi"
  unset VLGRPO_PLATFORM
  node head
  assert_failure 2
  stderr_has "VLGRPO_PLATFORM: must be set (npu or gpu) when VLGRPO_TEST_DEVICE_COUNT is used"
  export VLGRPO_PLATFORM=npu
  node head
  assert_success
  assert_line '--resources={"NPU": 16}'
  assert_output --partial "TEST MODE"
}

@test "no accelerator at all is refused with the mounts to add" {
  rm -f "$T/bin/npu-smi"
  export VLGRPO_PLATFORM=npu
  node head
  assert_failure 2
  stderr_has "no Ascend NPU found"
  stderr_has "/dev/davinci_manager"
}

# ---- cards held by another process (B15 relaunch, B16 -8005/-8020) -----------------------------------

@test "B15: cards held by another process are refused, naming the NPU and pid; ray is not started" {
  davinci 8
  scripted_npu_smi
  export NPU_SMI_INFO=$FIX/npu-smi-info-busy.txt VLGRPO_RAY_HEAD=10.1.2.1:6379
  node worker
  assert_failure 2
  stderr_has "the cards are held by other processes"
  stderr_has "NPU 0 chip 0: pid 424242 python3"
  assert_ray_not_started
}

@test "B15: a relaunch waits while the previous run releases the cards, then starts" {
  davinci 8
  scripted_npu_smi
  export NPU_SMI_INFO=$FIX/npu-smi-info-busy.txt NPU_SMI_INFO_LATER=$FIX/npu-smi-info-idle.txt
  export VLGRPO_RAY_CARDS_WAIT=10
  node head
  assert_success
  assert_output --partial "cards busy, waiting"
  run call_argv 0
  assert_line --index 0 start
}

@test "B16: npu-smi -8005/-8020 is reported as cards in use by another container" {
  davinci 8
  scripted_npu_smi
  export NPU_SMI_INFO=$FIX/npu-smi-8005.txt NPU_SMI_RC=1
  node head
  assert_failure 2
  stderr_has "in use by another container"
  assert_ray_not_started
}

@test "NVIDIA compute processes on the GPUs are refused" {
  rm -f "$T/bin/npu-smi"
  unset HCCL_SOCKET_IFNAME
  export NCCL_SOCKET_IFNAME=lo
  rm -f "$T/bin/nvidia-smi"
  cat >"$T/bin/nvidia-smi" <<'EOF'
#!/usr/bin/env bash
case ${1-} in
  -L) printf 'GPU 0: NVIDIA H200 (UUID: GPU-aaaa)\nGPU 1: NVIDIA H200 (UUID: GPU-bbbb)\n' ;;
  --query-compute-apps=gpu_uuid,pid,process_name) printf 'GPU-aaaa, 31337, python3\n' ;;
esac
EOF
  chmod +x "$T/bin/nvidia-smi"
  node head
  assert_failure 2
  stderr_has "GPU GPU-aaaa: pid 31337 python3"
  assert_ray_not_started
}

@test "a worker whose head does not answer gives up after VLGRPO_RAY_HEAD_WAIT" {
  davinci 8
  scripted_npu_smi
  export NPU_SMI_INFO=$FIX/npu-smi-info-idle.txt VLGRPO_RAY_HEAD=127.0.0.1:9 VLGRPO_RAY_HEAD_WAIT=0
  node worker
  assert_failure 2
  stderr_has "head not reachable after 0s"
  assert_ray_not_started
}

# ---- signals ----------------------------------------------------------------------------------------

# a ray stand-in that stays in the foreground; on SIGTERM it writes a marker and exits 1 (what
# `ray start --block` does after stopping its processes), unless told to ignore TERM
long_running_ray() {
  rm -f "$T/bin/ray" # a symlink to the shared recorder: never write through it
  cat >"$T/bin/ray" <<'EOF'
#!/usr/bin/env bash
echo $$ >"$T_DIR/ray.pid"
if [[ -n ${STUB_RAY_IGNORE_TERM-} ]]; then trap '' TERM; else trap 'echo term >"$T_DIR/ray.got-term"; exit 1' TERM; fi
while :; do sleep 0.1; done
EOF
  chmod +x "$T/bin/ray"
  export T_DIR=$T
}

@test "SIGTERM reaches ray start by PID and ray-node.sh exits 143 once it stopped" {
  davinci 8
  scripted_npu_smi
  long_running_ray
  export NPU_SMI_INFO=$FIX/npu-smi-info-idle.txt
  "$HARNESS" "$RN" head >"$T/out" 2>&1 &
  local pid=$! i
  for ((i = 0; i < 50; i++)); do [[ -s $T/ray.pid ]] && break; sleep 0.1; done
  assert_file_exists "$T/ray.pid"
  kill -TERM "$pid"
  local rc=0
  wait "$pid" || rc=$?
  assert_equal "$rc" 143
  assert_file_exists "$T/ray.got-term"
  run kill -0 "$(cat "$T/ray.pid")"
  assert_failure
  run cat "$T/out"
  assert_output --partial "ray-node: stopped (ray start exit 1)"
}

@test "ray start that ignores SIGTERM is killed after VLGRPO_RAY_STOP_GRACE" {
  davinci 8
  scripted_npu_smi
  long_running_ray
  export NPU_SMI_INFO=$FIX/npu-smi-info-idle.txt STUB_RAY_IGNORE_TERM=1 VLGRPO_RAY_STOP_GRACE=1
  "$HARNESS" "$RN" head >"$T/out" 2>&1 &
  local pid=$! i start=$SECONDS
  for ((i = 0; i < 50; i++)); do [[ -s $T/ray.pid ]] && break; sleep 0.1; done
  kill -TERM "$pid"
  local rc=0
  wait "$pid" || rc=$?
  assert_equal "$rc" 143
  ((SECONDS - start < 10))
  run kill -0 "$(cat "$T/ray.pid")"
  assert_failure
  run cat "$T/out"
  assert_output --partial "sending SIGKILL"
}


# signal_node SIGNAL ROLE — start `ray-node.sh ROLE` (the hook harness) as PID 1 of a container starts (own process group, every
# disposition at its default), send SIGNAL to its pid alone once $T/ready exists; sets rc and elapsed (ms)
signal_node() {
  local sig=$1 role=$2 pid i t0
  set -m
  env --default-signal "$HARNESS" "$RN" "$role" >"$T/out" 2>&1 &
  pid=$!
  set +m
  for ((i = 0; i < 100; i++)); do [[ -e $T/ready ]] && break; sleep 0.1; done
  assert_file_exists "$T/ready"
  t0=${EPOCHREALTIME/./}
  kill -s "$sig" "$pid"
  for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
  elapsed=$(((${EPOCHREALTIME/./} - t0) / 1000))
  kill -0 "$pid" 2>/dev/null && { kill -KILL -- "-$pid"; fail "ray-node.sh still running 5 s after SIG$sig"; }
  rc=0
  wait "$pid" || rc=$?
}

@test "SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 and SIGPIPE while ray start runs: it is stopped by PID, exit 128+signal" {
  davinci 8
  scripted_npu_smi
  long_running_ray
  export NPU_SMI_INFO=$FIX/npu-smi-info-idle.txt
  local sig num
  for sig in HUP:1 QUIT:3 USR1:10 USR2:12 PIPE:13; do
    rm -f "$T/ray.pid" "$T/ray.got-term" "$T/ready"
    ( for ((i = 0; i < 100; i++)); do [[ -s $T/ray.pid ]] && break; sleep 0.1; done; : >"$T/ready" ) &
    signal_node "${sig%:*}" head
    num=${sig#*:}
    assert_equal "$rc" "$((128 + num))"
    ((elapsed < 2000)) || fail "SIG${sig%:*}: ended ${elapsed} ms after the signal"
    assert_file_exists "$T/ray.got-term" # ray start got its one SIGTERM
    run kill -0 "$(cat "$T/ray.pid")"
    assert_failure
  done
}

@test "a signal while a worker waits for the head: exit 128+signal within 2 s, no probe or sleep left" {
  davinci 8
  scripted_npu_smi
  export NPU_SMI_INFO=$FIX/npu-smi-info-idle.txt VLGRPO_RAY_HEAD=127.0.0.1:9 VLGRPO_RAY_HEAD_WAIT=60
  local sig
  for sig in TERM:15 HUP:1 USR1:10; do
    rm -f "$T/ready" "$T/out"
    ( for ((i = 0; i < 100; i++)); do grep -qs 'waiting for the head' "$T/out" && break; sleep 0.1; done; : >"$T/ready" ) &
    signal_node "${sig%:*}" worker
    assert_equal "$rc" "$((128 + ${sig#*:}))"
    ((elapsed < 2000)) || fail "SIG${sig%:*}: ended ${elapsed} ms after the signal"
    grep -q "stopped by SIG${sig%:*}" "$T/out" || fail "$(cat "$T/out")"
    sleep 0.2
    # nothing of this test's node is left: no sleep of the wait, no TCP probe
    run pgrep -f -s 0 -x 'sleep 2'
    assert_failure
  done
}

@test "review S3: the head's VLGRPO_RAY_TEMP_DIR goes through the path rule; one another user could make or swap is refused" {
  davinci 8
  mkdir -p "$T/open" "$T/mine"
  chmod 777 "$T/open"
  chmod 700 "$T/mine"
  export VLGRPO_DRY_RUN=1
  local d
  for d in "$T/open" "$T/open/ray" "/tmp/vlgrpo-bats-ray-$$-not-there"; do
    VLGRPO_RAY_TEMP_DIR=$d node head
    assert_failure 2
    [[ $stderr == *"error: VLGRPO_RAY_TEMP_DIR: "* ]] || fail "$d: $stderr"
  done
  for d in "$T/mine" "$T/mine/ray"; do
    VLGRPO_RAY_TEMP_DIR=$d node head
    assert_success
    assert_line -- "--temp-dir=$d"
  done
}
