#!/usr/bin/env bats
# The environment beyond VLGRPO_*: variables that make bash or Python run code chosen by whoever sets
# the environment (vlgrpo.launch.childenv), the entrypoints' privileged-mode shebang (`#!/bin/bash -p`),
# RAY_ADDRESS outside cluster mode, and ray-node.sh's interface and address values. Each attack here
# ran before the fix: an exported function replaced a command, SHELLOPTS=xtrace printed the W&B key,
# PYTHONWARNINGS reached the (stub) Python, and ray-node.sh took 010.0.0.1 and an unchecked
# TP_SOCKET_IFNAME.

setup() {
  load helpers/common
  common_setup
  printf 'abcdefghij0123456789KEYKEYKEY\n' >"$T/wandb.key"
}

@test "an exported shell function cannot replace a command of the entrypoint (privileged-mode shebang)" {
  local f
  for f in "$FA" "$VO" "$REPO_ROOT/entrypoints/ray-node.sh"; do
    head -n 1 "$f" | grep -qx '#!/bin/bash -p' || fail "$f: shebang is not #!/bin/bash -p"
    run env "BASH_FUNC_realpath%%=() { touch $CANARY; /usr/bin/realpath \"\$1\" \"\$2\"; }" \
      "BASH_FUNC_dirname%%=() { touch $CANARY; /usr/bin/dirname \"\$1\" \"\$2\"; }" "$f" --help
    assert_success
    assert_file_not_exists "$CANARY"
  done
}

@test "exported functions are refused for a launch (every child bash would import them), nothing runs" {
  # through the hook harness, itself a plain bash: without the check its python3 call would be the function
  run --separate-stderr env "BASH_FUNC_python3%%=() { touch $CANARY; }" "$HARNESS" "$FA" --dry-run
  assert_failure 2
  [[ $stderr == *"error: BASH_FUNC_python3%%: an exported shell function"*"fix: unset it before the launch"* ]] || fail "$stderr"
  assert_no_python
  assert_file_not_exists "$CANARY"
}

@test "SHELLOPTS=xtrace neither traces the entrypoint nor prints the W&B key; it is refused" {
  run --separate-stderr env SHELLOPTS=xtrace WANDB_API_KEY_FILE="$T/wandb.key" "$FA" --dry-run
  assert_failure 2
  [[ $stderr$output != *KEYKEYKEY* ]] || fail "the key was printed"
  [[ $stderr != *"+ set -Eeuo pipefail"* ]] || fail "xtrace came from the environment"
  [[ $stderr == *"error: SHELLOPTS: options of every bash of the launch"* ]] || fail "$stderr"
  assert_no_python
}

@test "SHELLOPTS=noexec does not turn the launch into a silent success" {
  run --separate-stderr env SHELLOPTS=noexec "$VO" --dry-run
  assert_failure 2
  [[ $stderr == *"error: SHELLOPTS: "* ]] || fail "$stderr"
}

@test "BASH_ENV is not run by the entrypoint and refused unless it is the image's CANN file" {
  printf 'touch %q\n' "$CANARY" >"$T/evil.sh"
  BASH_ENV=$T/evil.sh direct fa --help
  assert_success
  assert_file_not_exists "$CANARY"
  BASH_ENV=$T/evil.sh entry fa --dry-run
  assert_failure 2
  [[ $stderr == *"error: BASH_ENV: names a file every bash of the launch would run first"* ]] || fail "$stderr"
  [[ $stderr != *evil.sh* ]] || fail "value shown"
  # the harness is a plain bash, so the file ran there; the entrypoint itself never sourced it again
  assert_no_python
  rm -f "$CANARY"
  BASH_ENV=/opt/vlgrpo/image/cann-env.sh VLGRPO_DRY_RUN=1 entry fa
  assert_success
  assert_equal "$(plan_argv)" "$(expected_defaults fa)"
}

@test "PYTHONWARNINGS with a module (the antigravity + BROWSER gadget) is refused before any Python runs" {
  PYTHONWARNINGS='all:0:antigravity.x:0:0' BROWSER="touch $CANARY %s" entry fa --dry-run
  assert_failure 2
  [[ $stderr == *"error: PYTHONWARNINGS: has a dotted warning category"*"fix: use built-in categories and the actions default, ignore"* ]] || fail "$stderr"
  assert_no_python
  assert_file_not_exists "$CANARY"
  PYTHONWARNINGS=ignore::DeprecationWarning,default::UserWarning entry vo --dry-run
  assert_success
}

@test "each code-loading variable is refused by name, value not shown; an empty value counts as unset" {
  local v n
  for v in ENV BASHOPTS PYTHONSTARTUP PYTHONINSPECT RAY_RUNTIME_ENV_HOOK RAY_START_HOOK \
    RAY_JOB_SUBMIT_HOOK RAY_RUNTIME_ENV_PLUGINS RAY_RUNTIME_ENV_PLUGIN_SCHEMAS; do
    n=$(calls | wc -l)
    run --separate-stderr env "$v=os.system.SECRETVALUE" "$HARNESS" "$FA" --dry-run
    [[ $status -eq 2 ]] || fail "$v: exit $status"
    [[ $(calls | wc -l) -eq $n ]] || fail "$v: something ran: $(calls)"
    [[ $stderr == *"error: $v: "*"(value not shown); fix: "* ]] || fail "$v: $stderr"
    [[ $stderr != *SECRETVALUE* ]] || fail "$v: value shown"
    run --separate-stderr env "$v=" "$HARNESS" "$FA" --dry-run
    [[ $status -eq 0 ]] || fail "$v empty: exit $status: $stderr"
  done
  for v in LD_PRELOAD LD_AUDIT; do
    run --separate-stderr env "$v=libc.so.6" "$HARNESS" "$VO" --dry-run
    assert_failure 2
    [[ $stderr == *"error: $v: "*"(value not shown)"* ]] || fail "$stderr"
  done
}

@test "RAY_ADDRESS without (or unlike) VLGRPO_RAY_ADDRESS is refused: verl would skip the node wait and probe" {
  RAY_ADDRESS=10.0.0.1:6379 entry fa --dry-run
  assert_failure 2
  [[ $stderr == *"error: RAY_ADDRESS: set (value not shown) without VLGRPO_RAY_ADDRESS"* ]] || fail "$stderr"
  [[ $stderr != *10.0.0.1* ]] || fail "value shown"
  assert_no_python
  RAY_ADDRESS=10.0.0.1:6379 VLGRPO_RAY_ADDRESS=10.0.0.2:6379 entry vo --dry-run
  assert_failure 2
  [[ $stderr == *"error: RAY_ADDRESS: differs from VLGRPO_RAY_ADDRESS"* ]] || fail "$stderr"
  # the KubeRay example's form: RAY_ADDRESS copied into VLGRPO_RAY_ADDRESS
  RAY_ADDRESS=10.0.0.1:6379 VLGRPO_RAY_ADDRESS=10.0.0.1:6379 entry fa --dry-run
  assert_success
  [[ $(call_argv 1) == *cluster*wait* ]] || fail "no cluster wait: $(calls)"
}

# rnode ROLE — ray-node.sh through the hook harness with the /dev hook on an empty folder (as ray-node.bats)
rnode() {
  run --separate-stderr "$HARNESS" "$REPO_ROOT/entrypoints/ray-node.sh" "$1"
}

ray_node_env() {
  unset VLGRPO_MODEL_PATH VLGRPO_TRAIN_FILE VLGRPO_VAL_FILE VLGRPO_CHECKPOINT_DIR
  export HCCL_SOCKET_IFNAME=lo GLOO_SOCKET_IFNAME=lo VLGRPO_RAY_CARDS_WAIT=0 VLGRPO_DRY_RUN=1
}

@test "ray-node.sh refuses the same environment, before counting devices" {
  ray_node_env
  rnode head
  assert_success
  # npu-smi is called to count the NPUs (no /dev/davinci here): an exported function would run instead
  run --separate-stderr env "BASH_FUNC_npu-smi%%=() { touch $CANARY; }" "$HARNESS" "$REPO_ROOT/entrypoints/ray-node.sh" head
  assert_failure 2
  [[ $stderr == *"error: BASH_FUNC_npu-smi%%: an exported shell function"* ]] || fail "$stderr"
  assert_file_not_exists "$CANARY"
  PYTHONWARNINGS=all:0:antigravity.x:0:0 rnode worker
  assert_failure 2
  [[ $stderr == *"error: PYTHONWARNINGS: "* ]] || fail "$stderr"
  [[ $(calls) != *ray* ]] || fail "ray ran"
}

@test "ray-node.sh: IPv4 addresses with leading zeros (octal to inet_aton) and a hostile TP_SOCKET_IFNAME are refused" {
  local a
  ray_node_env
  for a in 010.0.0.1 10.0.0.01 1.2.3.256 00.1.2.3; do
    VLGRPO_RAY_NODE_IP=$a rnode head
    [[ $status -eq 2 && $stderr == *"VLGRPO_RAY_NODE_IP: "*"is not an IPv4 address"* ]] || fail "$a: $status $stderr"
  done
  VLGRPO_RAY_NODE_IP=10.0.0.1 VLGRPO_RAY_DASHBOARD_HOST=10.0.0.1 rnode head
  assert_success
  # every interface at once: the unauthenticated job API (running code) on every network this node is on
  VLGRPO_RAY_NODE_IP=10.0.0.1 VLGRPO_RAY_DASHBOARD_HOST=0.0.0.0 rnode head
  assert_failure 2
  [[ $stderr == *"VLGRPO_RAY_DASHBOARD_HOST: "*"binds every interface"*"fix: keep 127.0.0.1"* ]] || fail "$stderr"
  VLGRPO_RAY_DASHBOARD_HOST=127.000.0.1 rnode head
  assert_failure 2
  TP_SOCKET_IFNAME=$'lo\nray-node: environment FORGED=1' rnode head
  assert_failure 2
  [[ $stderr == *"TP_SOCKET_IFNAME: "*"is not a network interface list"* ]] || fail "$stderr"
  [[ $output != *FORGED* ]] || fail "forged line printed"
  TP_SOCKET_IFNAME=lo rnode head
  assert_success
  assert_line 'ray-node: environment TP_SOCKET_IFNAME=lo'
}

@test "a VLGRPO_ name that is not a shell identifier (invisible to bash, passed on to Python) is refused" {
  run --separate-stderr env 'VLGRPO_PATCHES-DISABLED=x' 'VLGRPO_LR =1' "$HARNESS" "$FA" --dry-run
  assert_failure 2
  [[ $stderr == *"error: VLGRPO_PATCHES-DISABLED: not a setting"* ]] || fail "$stderr"
  [[ $stderr == *'error: VLGRPO_LR\ : not a setting'* ]] || fail "$stderr"
  assert_no_python
}

@test "TMOUT, BASH_COMPAT and FUNCNEST from the environment do not change the checks or the argv" {
  # a read timeout used to end the loops over the environment early (or abort with an internal error)
  run --separate-stderr env TMOUT=0.000001 VLGRPO_BOGUS=1 PYTHONWARNINGS=all:0:antigravity.x:0:0 "$HARNESS" "$FA" --dry-run
  assert_failure 2
  [[ $stderr == *"error: VLGRPO_BOGUS: not a setting"* && $stderr == *"error: PYTHONWARNINGS: "* ]] || fail "$stderr"
  assert_no_python
  # compatibility level 31 used to leave the {NAME} placeholders in the argv
  run --separate-stderr env BASH_COMPAT=31 VLGRPO_DRY_RUN=1 "$HARNESS" "$FA"
  assert_success
  assert_equal "$(plan_argv)" "$(expected_defaults fa)"
  # a low function-nesting limit used to abort the checks (exit 1)
  run --separate-stderr env FUNCNEST=2 VLGRPO_DRY_RUN=1 "$HARNESS" "$FA"
  assert_success
  assert_equal "$(plan_argv)" "$(expected_defaults fa)"
}

@test "VERL_FILE_LOGGER_PATH (verl's file logger truncates whatever it names) is refused; VERL_FILE_LOGGER_ROOT is dropped" {
  : >"$T/precious"
  VERL_FILE_LOGGER_PATH=$T/precious VLGRPO_LOGGER=console,file entry fa --dry-run
  assert_failure 2
  [[ $stderr == *"error: VERL_FILE_LOGGER_PATH: verl's file logger opens this path for writing with truncation"* ]] || fail "$stderr"
  assert_no_python
  VERL_FILE_LOGGER_ROOT=$T/logs VLGRPO_LOGGER=console,file entry fa --dry-run
  assert_success
  ! call_environ 1 | grep -q '^VERL_FILE_LOGGER_ROOT=' || fail "VERL_FILE_LOGGER_ROOT reached the preflight"
  assert_line --regexp '^# dropped from the environment .*VERL_FILE_LOGGER_ROOT'
}

@test "a Ray job runtime_env that installs or loads code is refused; the KubeRay example's env_vars pass" {
  local j
  for j in '{"runtime_env": {"pip": ["evil"]}}' '{"runtime_env": {"worker_process_setup_hook": "os.getcwd"}}' \
    '{"runtime_env":{"py_modules":["s3://b/m.zip"]},"metadata":{}}' '{"runtime_env": {"working_dir": "https://x/y.zip"}}'; do
    RAY_JOB_CONFIG_JSON_ENV_VAR=$j entry fa --dry-run
    [[ $status -eq 2 ]] || fail "$j: exit $status"
    [[ $stderr == *"error: RAY_JOB_CONFIG_JSON_ENV_VAR: has a runtime_env with "*"(value not shown)"* ]] || fail "$stderr"
  done
  assert_no_python
  RAY_RUNTIME_ENV='{"pip": ["evil"]}' entry fa --dry-run
  assert_failure 2
  RAY_JOB_CONFIG_JSON_ENV_VAR='{"runtime_env": {"env_vars": {"VLGRPO_EXPERIMENT_NAME": "pip"}}, "metadata": {"job_submission_id": "raysubmit_1"}}' \
    entry fa --dry-run
  assert_success
}

@test "a program variable (BROWSER, EDITOR, GIT_SSH_COMMAND, CC, ...) never reaches a child as a command line" {
  local v
  # dropped rows: set, they are dropped (login shells set them); requested, the launch is refused naming them
  for v in BROWSER EDITOR PAGER LESSOPEN GIT_SSH_COMMAND CONDA_EXE; do
    run --separate-stderr env "$v=sh -c 'touch $CANARY' %s" VLGRPO_PASS_ENV="$STUB_PASS,$v" "$HARNESS" "$FA" --dry-run
    [[ $status -eq 2 ]] || fail "$v requested: exit $status"
    [[ $stderr == *"error: VLGRPO_PASS_ENV: names $v, which is never passed: "* ]] || fail "$v: $stderr"
    run --separate-stderr env "$v=sh -c 'touch $CANARY' %s" "$HARNESS" "$FA" --dry-run
    [[ $status -eq 0 ]] || fail "$v set: exit $status: $stderr"
    ! tr '\0' '\n' < <(cat "$STUB_LOG"/*.environ) | grep -q "^$v=" || fail "$v reached a child"
  done
  # refused rows: set at all, the launch stops naming them, whatever VLGRPO_PASS_ENV says
  for v in PYTORCH_NVCC PYTHON_EXEC TORCH_INDUCTOR_INSTALL_GXX RAYLET_PERFTOOLS_PATH VLLM_LOGGING_CONFIG_PATH NVCC_PREPEND_FLAGS; do
    run --separate-stderr env "$v=touch $CANARY" VLGRPO_PASS_ENV="$STUB_PASS,$v" "$HARNESS" "$VO" --dry-run
    [[ $status -eq 2 ]] || fail "$v: exit $status"
    [[ $stderr == *"error: $v: "*"(value not shown); fix: "* ]] || fail "$v: $stderr"
  done
  # compilers: requested, one word naming a compiler, or its path by the one path rule
  VLGRPO_PASS_ENV=$STUB_PASS,CC,CXX CC="sh -c 'touch $CANARY'" CXX=python3 entry fa --dry-run
  assert_failure 2
  [[ $stderr == *"error: CC: is not one compiler name or absolute path"*"(value not shown)"* ]] || fail "$stderr"
  [[ $stderr == *"error: CXX: does not name a C or C++ compiler"* ]] || fail "$stderr"
  [[ $stderr != *touch* ]] || fail "value shown"
  VLGRPO_PASS_ENV=$STUB_PASS,CC,CXX CC=gcc CXX=x86_64-linux-gnu-g++-12 entry fa --dry-run
  assert_success
  assert_file_not_exists "$CANARY"
}

@test "Hub and tracker endpoints (HF_ENDPOINT, SWANLAB_API_HOST, ...) are http(s) URLs without credentials" {
  local v
  for v in HF_ENDPOINT HF_INFERENCE_ENDPOINT SWANLAB_API_HOST SWANLAB_WEB_HOST; do
    run --separate-stderr env "$v=https://user:SECRETPW@hub.example.com" VLGRPO_PASS_ENV="$STUB_PASS,$v" "$HARNESS" "$FA" --dry-run
    [[ $status -eq 2 ]] || fail "$v: exit $status"
    [[ $stderr == *"error: $v: holds credentials"* ]] || fail "$v: $stderr"
    [[ $stderr != *SECRETPW* ]] || fail "$v: value shown"
    run --separate-stderr env "$v=ftp://hub.example.com" VLGRPO_PASS_ENV="$STUB_PASS,$v" "$HARNESS" "$FA" --dry-run
    [[ $status -eq 2 && $stderr == *"error: $v: is not an http:// or https:// URL"* ]] || fail "$v: $stderr"
    run --separate-stderr env "$v=https://hub.example.com:8443/api" VLGRPO_PASS_ENV="$STUB_PASS,$v" "$HARNESS" "$FA" --dry-run
    [[ $status -eq 0 ]] || fail "$v good: exit $status: $stderr"
  done
}

@test "PYTHONWARNINGS with the action error (any prefix of it, in any filter of the list) is refused" {
  local v
  for v in error error::DeprecationWarning ignore,error::UserWarning e::FutureWarning 'default, err'; do
    run --separate-stderr env PYTHONWARNINGS="$v" "$HARNESS" "$FA" --dry-run
    [[ $status -eq 2 ]] || fail "$v: exit $status"
    [[ $stderr == *"error: PYTHONWARNINGS: has a filter with the action error"*"(value not shown)"* ]] || fail "$v: $stderr"
    assert_no_python
  done
  PYTHONWARNINGS=ignore,-Werror entry fa --dry-run
  assert_failure 2
  [[ $stderr == *"error: PYTHONWARNINGS: has a filter written as a -W command-line option"* ]] || fail "$stderr"
  PYTHONWARNINGS=once::UserWarning,ignore::DeprecationWarning entry fa --dry-run
  assert_success
}
