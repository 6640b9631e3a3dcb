#!/usr/bin/env bats
# The environment of every child of a launch is built from the registry (python/src/vlgrpo/environment.tsv),
# not inherited: the recording stubs keep each child's whole environment (NNNN.<stub>.environ), so these tests
# look at what the preflight, the cluster tool, verl and `ray start` really got: inherited variables, refused names, what each child needs and nothing more.

setup() {
  load helpers/common
  common_setup
  REG=$REPO_ROOT/python/src/vlgrpo/environment.tsv
}

# allowed_by_registry NAME — NAME is a pass or set row of the registry (exact or '*' pattern), read from the
# file with awk (the specification, not the entrypoint's code), or named in VLGRPO_PASS_ENV.
allowed_by_registry() {
  local n=$1 p
  [[ ,$VLGRPO_PASS_ENV, == *,"$n",* ]] && return 0
  while IFS= read -r p; do
    # shellcheck disable=SC2053 # registry patterns are globs
    [[ $n == $p ]] && return 0
  done < <(awk -F'\t' '!/^#/ && ($3 == "pass" || $3 == "set" || ($3 == "setting" && $2 ~ /patches/)) {print $1}' "$REG")
  return 1
}

# assert_child_env N — every variable the N-th call got is allowed by the registry, and none carries "canary".
# (Names that are not shell identifiers are removed with env -u from the launch's children -- the preflight,
# the cluster tool, verl, ray start -- but not from the short commands of the checks: npu-smi, nvidia-smi.)
assert_child_env() {
  local n bad=()
  while IFS= read -r n; do allowed_by_registry "$n" || bad+=("$n"); done < <(call_env_names "$1")
  ((${#bad[@]} == 0)) || fail "call $1 ($(calls | sed -n "$(($1 + 1))p")) got variables the registry does not pass: ${bad[*]}"
  ! call_environ "$1" | grep -q canary || fail "a canary value reached call $1: $(call_environ "$1" | grep canary)"
}

@test "a launch's children get only what the registry passes and sets, not the inherited environment" {
  local i
  export MY_SECRET=canary-secret NV_LIBCUBLAS_VERSION=canary1 KUBERNETES_SERVICE_HOST=canary2 SLURM_JOB_ID=canary3
  run --separate-stderr env 'BAD-NAME=canary4' 'x.y=canary5' "$HARNESS" "$FA"
  assert_success
  [[ $(calls) == *python3*python3* ]] || fail "no preflight and launch: $(calls)"
  for ((i = 0; i < $(calls | wc -l); i++)); do
    [[ $(calls | sed -n "$((i + 1))p") == *python3 ]] && assert_child_env "$i"
  done
  ! call_environ 0 | grep -q '^MY_SECRET=' || fail "npu-smi got MY_SECRET"
  # what the entrypoint sets, in the preflight's environment and in verl's (the last call)
  for i in 1 2; do
    call_environ "$i" | grep -qx PYTHONSAFEPATH=1 || fail "call $i: no PYTHONSAFEPATH=1"
    call_environ "$i" | grep -qx PYTHONNOUSERSITE=1 || fail "call $i: no PYTHONNOUSERSITE=1"
    call_environ "$i" | grep -qx RAY_ADDRESS=local || fail "call $i: no RAY_ADDRESS=local"
    call_environ "$i" | grep -qx VLLM_USE_V1=1 || fail "call $i: no VLLM_USE_V1=1"
    call_environ "$i" | grep -qx "PATH=$PATH" || fail "call $i: PATH changed"
  done
  # the preflight runs isolated (-P -s) and every child runs in one private folder, not the checkpoint folder
  # (harden.bats has the details)
  assert_equal "$(call_argv 1 | head -n 5 | tr '\n' ' ')" "-P -s -m vlgrpo preflight "
  assert_equal "$(cat "$STUB_LOG/0002.python3.cwd")" "$(cat "$STUB_LOG/0001.python3.cwd")"
  [[ $(cat "$STUB_LOG/0002.python3.cwd") != "$T/ckpt" ]] || fail "the children run in the checkpoint folder"
}

@test "the dry-run plan lists the names every child gets and the names dropped; values are never shown" {
  export MY_SECRET=canary-secret-value
  run --separate-stderr env 'BAD-NAME=canary-odd' "$HARNESS" "$VO" --dry-run
  assert_success
  local line got
  line=$(grep '^# child environment (every child: preflight, cluster tool, verl; ' <<<"$output") || fail "no child line: $output"
  # the plan's names are the preflight's real environment (the stubs' own STUB_* names aside; `_` is set by bash
  # for every command it runs and not listed)
  got=$(call_env_names 1 | grep -vx _ | tr '\n' ' ')
  assert_equal "$(tr ' ' '\n' <<<"${line#*values not shown):}" | grep -v '^$' | grep -v '^STUB_' | LC_ALL=C sort | tr '\n' ' ')" "$got"
  assert_line --regexp '^# dropped from the environment \([0-9]+ names, values not shown):.* MY_SECRET( |$)'
  assert_line --regexp '^# dropped from the environment .* BAD-NAME( |$)'
  assert_line '# set by the entrypoint: PYTHONSAFEPATH=1 PYTHONNOUSERSITE=1 RAY_ADDRESS=local'
  [[ $output$stderr != *canary* ]] || fail "a value was shown"
}

@test "VLGRPO_PASS_ENV passes a pass-on-request or unlisted variable; it cannot pass a refused, drop or set one" {
  pass_env NCCL_NET_PLUGIN,MY_TOOL_HOME,NOT_SET_HERE
  NCCL_NET_PLUGIN=libnccl-net-ofi.so MY_TOOL_HOME=/opt/tool entry fa --dry-run
  assert_success
  call_environ 1 | grep -qx NCCL_NET_PLUGIN=libnccl-net-ofi.so || fail "NCCL_NET_PLUGIN not passed"
  call_environ 1 | grep -qx MY_TOOL_HOME=/opt/tool || fail "MY_TOOL_HOME not passed"
  assert_line '# passed because VLGRPO_PASS_ENV names them: MY_TOOL_HOME NCCL_NET_PLUGIN STUB_GPU_COUNT STUB_LOG STUB_NPU_COUNT STUB_PYTHON'
  assert_line --partial '# named in VLGRPO_PASS_ENV but not set: '
  # without the request both are dropped (and listed)
  rm -rf "${STUB_LOG:?}"/*
  pass_env ""
  NCCL_NET_PLUGIN=libnccl-net-ofi.so MY_TOOL_HOME=/opt/tool entry fa --dry-run
  assert_success
  ! call_environ 1 | grep -q '^NCCL_NET_PLUGIN=\|^MY_TOOL_HOME=' || fail "passed without a request"
  assert_line --regexp '^# dropped .* NCCL_NET_PLUGIN'
  local n
  rm -rf "${STUB_LOG:?}"/*
  for n in LD_PRELOAD MASTER_ADDR PYTHONSAFEPATH VLGRPO_LR __RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR; do
    pass_env "$n"
    entry fa --dry-run
    [[ $status -eq 2 && $stderr == *"error: VLGRPO_PASS_ENV: names $n"* ]] || fail "$n: $status $stderr"
    assert_no_python
  done
  for n in 'A-B' 'X,X' ',Y' 'a b'; do
    VLGRPO_PASS_ENV=$n entry vo --dry-run
    [[ $status -eq 2 && $stderr == *"error: VLGRPO_PASS_ENV: "* ]] || fail "$n: $stderr"
  done
}

@test "Why 1: Ray's worker setup hook from the environment is refused by both recipes and ray-node.sh" {
  local e
  for e in "$FA" "$VO"; do
    run --separate-stderr env __RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR=antigravity.geohash "BROWSER=touch $CANARY %s" "$HARNESS" "$e" --dry-run
    assert_failure 2
    [[ $stderr == *"error: __RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR: Ray 2.48.0 _private/workers/default_worker.py imports and calls the object it names in every worker (value not shown)"* ]] || fail "$stderr"
    [[ $stderr != *antigravity* ]] || fail "value shown"
    assert_no_python
  done
  unset VLGRPO_MODEL_PATH VLGRPO_TRAIN_FILE VLGRPO_VAL_FILE VLGRPO_CHECKPOINT_DIR
  export HCCL_SOCKET_IFNAME=lo GLOO_SOCKET_IFNAME=lo VLGRPO_RAY_CARDS_WAIT=0 VLGRPO_DRY_RUN=1
  run --separate-stderr env __RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR=antigravity.geohash \
    "$HARNESS" "$REPO_ROOT/entrypoints/ray-node.sh" head
  assert_failure 2
  [[ $stderr == *"error: __RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR: "* ]] || fail "$stderr"
  [[ $(calls) != *ray* ]] || fail "ray ran"
  assert_file_not_exists "$CANARY"
}

@test "Why 3: a Ray job config is parsed as JSON and refused by an allowlist of keys (escapes, mpi, nsight, sys.path)" {
  local j
  for j in '{"runtime_env": {"p\u0069p": ["evil"]}}' '{"runtime_env": {"working\u005fdir": "https://x/y.zip"}}' \
    '{"runtime_env": {"\u0070y_executable": "python3 -c evil"}}' '{"runtime_env": {"mpi": {"args": ["-n", "2"]}}}' \
    '{"runtime_env": {"nsight": "default"}}' '{"runtime_env": {"worker_process_setup_hook": "os.getcwd"}}' \
    '{"py_driver_sys_path": ["/tmp/x"]}' '{"code_search_path": ["/tmp/x"]}' \
    '{"runtime_env": {"env_vars": {"LD_PRELOAD": "libx.so"}}}' \
    '{"runtime_env": {"env_vars": {"__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR": "os.getcwd"}}}' \
    '{"runtime_env": {"env_vars": {"PYTHONPATH": "/tmp"}}}' '{"runtime_env": ["pip"]}' '{"runtime_env": ' '[1]'; do
    RAY_JOB_CONFIG_JSON_ENV_VAR=$j entry fa --dry-run
    [[ $status -eq 2 ]] || fail "$j: exit $status"
    [[ $stderr == *"error: RAY_JOB_CONFIG_JSON_ENV_VAR: "*"(value not shown)"* ]] || fail "$j: $stderr"
    assert_no_python
  done
  # what `ray job submit` of the KubeRay example sets passes, and reaches the children (after the check)
  j='{"runtime_env": {"env_vars": {"VLGRPO_TRAINER_NNODES": "1", "NCCL_DEBUG": "WARN"}, "config": {"setup_timeout_seconds": 600}}, "metadata": {"job_submission_id": "raysubmit_1"}}'
  RAY_JOB_CONFIG_JSON_ENV_VAR=$j entry fa --dry-run
  assert_success
  call_environ 1 | grep -qxF "RAY_JOB_CONFIG_JSON_ENV_VAR=$j" || fail "not passed"
  # a name VLGRPO_PASS_ENV lets through is fine in env_vars too
  pass_env MY_TOOL_HOME
  RAY_JOB_CONFIG_JSON_ENV_VAR='{"runtime_env": {"env_vars": {"MY_TOOL_HOME": "/opt"}}}' entry vo --dry-run
  assert_success
}

@test "Why 4: launched from a folder holding vlgrpo/ or verl/, the launch still runs the image's code" {
  mkdir -p "$T/cwd/vlgrpo" "$T/cwd/verl"
  printf 'open(%q, "w").write("ran")\n' "$CANARY" >"$T/cwd/vlgrpo/__main__.py"
  : >"$T/cwd/vlgrpo/__init__.py"
  printf 'open(%q, "w").write("ran")\n' "$CANARY" >"$T/cwd/verl/__init__.py"
  # python3 is the real interpreter here (the preflight really runs)
  printf '#!/bin/sh\nexec %q "$@"\n' "$REPO_ROOT/.venv/bin/python" >"$T/bin/python3"
  cd "$T/cwd"
  entry fa --dry-run
  # the real preflight ran (it reports on the stand-in model folder) and no code of the working directory did
  [[ $stderr == *"result: "* ]] || fail "the real preflight did not run: $stderr"
  assert_file_not_exists "$CANARY"
}

@test "Why 5: verl gets RAY_ADDRESS=local without a cluster address and the checked address with one" {
  entry fa
  assert_success
  call_environ 2 | grep -qx RAY_ADDRESS=local || fail "verl: $(call_environ 2 | grep RAY_)"
  rm -rf "${STUB_LOG:?}"/*
  VLGRPO_RAY_ADDRESS=10.0.0.1:6379 entry vo
  assert_success
  local i
  for ((i = 0; i < 4; i++)); do
    call_environ "$i" | grep -qx RAY_ADDRESS=10.0.0.1:6379 || fail "call $i: $(call_environ "$i" | grep RAY_)"
  done
}

@test "Why 7: each variable of the issue's list is dropped or refused; WANDB_BASE_URL and proxies pass only on request" {
  local v
  : >"$T/precious"
  mkdir -p "$T/ub/lib/python3.11/site-packages"
  for v in PYTHONUSERBASE PYTHONHOME VLLM_PLUGINS VLLM_ALLOW_INSECURE_SERIALIZATION GCONV_PATH OMP_TOOL_LIBRARIES \
    VLLM_LOGGING_CONFIG_PATH; do
    run --separate-stderr env "$v=$T/ub" "$HARNESS" "$FA" --dry-run
    [[ $status -eq 2 && $stderr == *"error: $v: "*"(value not shown)"* ]] || fail "$v: $status $stderr"
    assert_no_python
  done
  VERL_FILE_LOGGER_ROOT=$T/canary-logs TORCHINDUCTOR_CACHE_DIR=$T/canary-ind \
    TRITON_CACHE_DIR=$T/canary-tri WANDB_BASE_URL=https://canary.example HTTPS_PROXY=http://canary:3128 entry fa
  assert_success
  for v in 0 1 2; do assert_child_env "$v"; done
  pass_env WANDB_BASE_URL,HTTPS_PROXY
  WANDB_BASE_URL=https://wandb.example HTTPS_PROXY=http://proxy:3128 entry fa
  assert_success
  call_environ 5 | grep -qx WANDB_BASE_URL=https://wandb.example || fail "not passed on request"
}

@test "ray-node.sh: ray start gets the built environment; the dry run lists its names and the dropped ones" {
  unset VLGRPO_MODEL_PATH VLGRPO_TRAIN_FILE VLGRPO_VAL_FILE VLGRPO_CHECKPOINT_DIR
  export HCCL_SOCKET_IFNAME=lo GLOO_SOCKET_IFNAME=lo VLGRPO_RAY_CARDS_WAIT=0
  export MY_SECRET=canary-secret TP_SOCKET_IFNAME=lo
  run --separate-stderr env VLGRPO_DRY_RUN=1 "$HARNESS" "$REPO_ROOT/entrypoints/ray-node.sh" head
  assert_success
  assert_line --regexp '^ray-node: child environment \(ray start and the Ray processes it starts; [0-9]+ names, values not shown\):.* PYTHONSAFEPATH '
  assert_line --regexp '^ray-node: dropped from the environment .* MY_SECRET( |$)'
  [[ $output != *canary* ]] || fail "value shown"
  # a real start (the ray stub exits at once): ray start's environment
  run --separate-stderr "$HARNESS" "$REPO_ROOT/entrypoints/ray-node.sh" head
  local i
  i=$(($(calls | wc -l) - 1))
  [[ $(calls | tail -n 1) == *.ray ]] || fail "ray did not start: $(calls) $stderr"
  assert_child_env "$i"
  call_environ "$i" | grep -qx RAY_USAGE_STATS_ENABLED=0 || fail "no RAY_USAGE_STATS_ENABLED=0"
  call_environ "$i" | grep -qx TP_SOCKET_IFNAME=lo || fail "no TP_SOCKET_IFNAME"
  call_environ "$i" | grep -qx RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES=1 || fail "no NOSET on Ascend"
}

@test "PYTHONBREAKPOINT: Ray's own debugger values (a ray job's driver has one) are dropped; any other is refused" {
  # Ray 2.48.0 sets these in its job drivers and workers (ray/_private/worker.py), so the entrypoint started by
  # `ray job submit` or a RayJob inherits one; it must not reach the children and must not stop the launch
  local v
  for v in ray.util.rpdb._driver_set_trace ray.util.rpdb.set_trace; do
    PYTHONBREAKPOINT=$v entry fa
    assert_success
    call_environ 1 | grep -q '^PYTHONBREAKPOINT=' && fail "$v reached a child"
  done
  rm -rf "${STUB_LOG:?}"/*
  run --separate-stderr env PYTHONBREAKPOINT=antigravity.geohash "$HARNESS" "$FA" --dry-run
  [[ $status -eq 2 && $stderr == *"error: PYTHONBREAKPOINT: "*"(value not shown)"* ]] || fail "$status $stderr"
  assert_no_python
}
