#!/usr/bin/env bats
# The node checks of the recipe entrypoints beyond the device count (tests/bats/node.bats): values derived
# from other settings (one out of range names the settings it came from, never a variable the user did not
# set; one whose input has no value is not derived at all, the input's own problem is reported), the node as a
# `ray job submit` driver sees it (B14: Ray hid the NPUs; refused naming Ray and the fix; real Ray jobs in
# tests/python/ray).

setup() {
  load helpers/common
  common_setup
  export VLGRPO_DRY_RUN=1 VLGRPO_LOGGER=console
}

davinci() {
  local i
  for ((i = 0; i < $1; i++)); do : >"$T/dev/davinci$i"; done
}

# as Ray's job supervisor starts a driver (ray/dashboard/modules/job/job_supervisor.py): RAY_ADDRESS and the job config
as_job_driver() {
  export RAY_ADDRESS=10.0.0.1:6379 VLGRPO_RAY_ADDRESS=10.0.0.1:6379 RAY_JOB_CONFIG_JSON_ENV_VAR='{"runtime_env": {"env_vars": {}}, "metadata": {}}'
}

@test "FSDP size derived as 1 x 8 / SP 16 = 0 names its three inputs, not VLGRPO_FSDP_SIZE as a bad value" {
  davinci 8
  VLGRPO_TRAINER_NNODES=1 VLGRPO_SP_SIZE=16 entry vo
  assert_failure 2
  [[ $stderr == *"error: VLGRPO_FSDP_SIZE: not set, so derived as nodes x devices per node / SP size = 0 from VLGRPO_TRAINER_NNODES=1, VLGRPO_TRAINER_DEVICES_PER_NODE=8 (this node's device count), VLGRPO_SP_SIZE=16, which is not in -1 or 1..32768"* ]] || fail "$stderr"
  [[ $stderr != *"0 is not an integer"* ]] || fail "$stderr"
}

@test "PPO token budget derived as (1 + 1) / 4 = 0 names the prompt and response lengths" {
  davinci 8
  VLGRPO_MAX_PROMPT_LENGTH=1 VLGRPO_MAX_RESPONSE_LENGTH=1 VLGRPO_MAX_MODEL_LEN=2 entry fa
  assert_failure 2
  [[ $stderr == *"VLGRPO_PPO_MAX_TOKEN_LEN_PER_DEVICE: not set, so derived as (prompt + response) / 4 = 0 from VLGRPO_MAX_PROMPT_LENGTH=1, VLGRPO_MAX_RESPONSE_LENGTH=1"* ]] || fail "$stderr"
}

@test "cluster mode from a node without devices: only the unset per-node counts are reported, nothing derived from them" {
  rm -f "$T/bin/npu-smi"
  VLGRPO_PLATFORM=npu VLGRPO_RAY_ADDRESS=10.0.0.1:6379 entry fa
  assert_failure 2
  [[ $stderr == *"VLGRPO_TRAINER_DEVICES_PER_NODE: unset, and this node has no accelerator to count"* ]] || fail "$stderr"
  [[ $stderr != *VLGRPO_FSDP_SIZE* ]] || fail "$stderr"
  VLGRPO_PLATFORM=npu VLGRPO_RAY_ADDRESS=10.0.0.1:6379 entry vo
  assert_failure 2
  [[ $stderr != *VLGRPO_FSDP_SIZE* && $stderr != *VLGRPO_EXPERIMENT_NAME* ]] || fail "$stderr"
  assert_no_python
}

@test "B14: a submitted job's driver whose NPUs Ray hid is refused naming Ray 2.48.0 and the fix (per-node counts given or not)" {
  davinci 4
  as_job_driver
  ASCEND_RT_VISIBLE_DEVICES= VLGRPO_TRAINER_NNODES=1 VLGRPO_TRAINER_DEVICES_PER_NODE=4 entry vo
  assert_failure 2
  [[ $stderr == *"error: ASCEND_RT_VISIBLE_DEVICES: ASCEND_RT_VISIBLE_DEVICES is set but empty in this process, so it sees 0 of the node's 4 NPU; this process is a \`ray job submit\` driver"*"ray issue #59063"* ]] || fail "$stderr"
  [[ $stderr == *"fix: start every node with entrypoints/ray-node.sh (it exports RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES=1)"* ]] || fail "$stderr"
  # without an NPU count of its own (no /dev/davinci, no npu-smi) the driver is refused the same way
  rm -f "$T"/dev/davinci* "$T/bin/npu-smi"
  ASCEND_RT_VISIBLE_DEVICES= entry vo
  assert_failure 2
  [[ $stderr == *"ASCEND_RT_VISIBLE_DEVICES is set but empty in this process"* ]] || fail "$stderr"
  [[ $stderr != *VLGRPO_FSDP_SIZE* ]] || fail "$stderr"
  assert_no_python
}

@test "B14: a job driver given one NPU (--entrypoint-resources) is refused; the NOSET switch or a non-job driver passes" {
  davinci 4
  as_job_driver
  ASCEND_RT_VISIBLE_DEVICES=2 VLGRPO_TRAINER_NNODES=1 VLGRPO_TRAINER_DEVICES_PER_NODE=4 entry vo
  assert_failure 2
  [[ $stderr == *"ASCEND_RT_VISIBLE_DEVICES is '2' in this process, so it sees 1 of the node's 4 NPU; this process is a \`ray job submit\` driver that Ray gave these NPU ids"*"fix: submit the job without --entrypoint-resources"* ]] || fail "$stderr"
  # the job's runtime_env carries the NOSET switch: Ray left the variable alone, it is the user's own list
  RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES=1 ASCEND_RT_VISIBLE_DEVICES= VLGRPO_TRAINER_NNODES=1 VLGRPO_TRAINER_DEVICES_PER_NODE=4 entry vo
  [[ $stderr != *"ray job submit"* ]] || fail "$stderr"
  # not a job driver: a user's own list on a single node still limits the count, as before
  unset RAY_JOB_CONFIG_JSON_ENV_VAR RAY_ADDRESS VLGRPO_RAY_ADDRESS
  ASCEND_RT_VISIBLE_DEVICES=0,1 VLGRPO_TRAINER_NNODES=1 VLGRPO_ROLLOUT_TP=2 entry vo
  assert_success
  assert_line --partial '# platform: npu; devices per node on this node: 2 (ASCEND_RT_VISIBLE_DEVICES)'
}
