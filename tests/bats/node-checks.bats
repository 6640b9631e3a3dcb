#!/usr/bin/env bats
# The node checks of the recipe entrypoints beyond the device count (tests/bats/node.bats): values derived
# from other settings (one out of range names the settings it came from, never a variable the user did not
# set; one whose input has no value is not derived at all, the input's own problem is reported), the node as a
# `ray job submit` driver sees it (B14: Ray hid the NPUs; refused naming Ray and the fix; real Ray jobs in
# tests/python/ray), and the host driver against the image's CUDA/CANN (python/src/vlgrpo/driver.py; public
# tool-output samples in tests/python/doctor/fixtures, read through the TEST_DRIVER_ROOT hook).

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

FIXD=$BATS_TEST_DIRNAME/../python/doctor/fixtures

# scripted nvidia-smi: `-L` prints $SMI_LIST, anything else $SMI (the default table with the driver version);
# the image's CUDA release in the driver-check tree ($T, the TEST_DRIVER_ROOT default)
scripted_nvidia_smi() {
  rm -f "$T/bin/npu-smi"
  printf '#!/bin/bash\nif [[ ${1-} == -L ]]; then cat "$SMI_LIST"; else cat "$SMI"; fi\n' >"$T/bin/nvidia-smi"
  chmod +x "$T/bin/nvidia-smi"
  mkdir -p "$T/usr/local/cuda"
  printf '{"cuda": {"name": "CUDA SDK", "version": "12.9.1"}}\n' >"$T/usr/local/cuda/version.json"
  export VLGRPO_PLATFORM=gpu VLGRPO_TRAINER_DEVICES_PER_NODE=1 VLGRPO_ROLLOUT_TP=1
  pass_env SMI,SMI_LIST  # the stub's fixtures reach the children, whose environment is built
}

# the cuda-compat-12-9 libcuda in the image, and the linker cache of an image whose Dockerfile ran
# `ldconfig /usr/local/cuda-12.9/compat/` (vLLM's does)
compat_libcuda() {
  mkdir -p "$T/usr/local/cuda-12.9/compat"
  : >"$T/usr/local/cuda-12.9/compat/libcuda.so.575.57.08"
  printf '#!/bin/sh\nprintf "\\tlibcuda.so.1 (libc6,x86-64) => /usr/local/cuda-12.9/compat/libcuda.so.1\\n"\n' >"$T/bin/ldconfig"
  chmod +x "$T/bin/ldconfig"
}

@test "host driver: an NVIDIA driver older than CUDA 12's floor is refused naming both versions and the fix" {
  scripted_nvidia_smi
  SMI=$FIXD/nvidia-smi-510.47.03.txt SMI_LIST=$FIXD/nvidia-smi-L-a100-pcie.txt entry vo
  assert_failure 2
  [[ $stderr == *"error: host driver: host driver 510.47.03 is older than 525.60.13, the oldest that runs CUDA 12.x"*"CUDA 12.9.1"*"fix: upgrade the host's NVIDIA driver"* ]] || fail "$stderr"
  assert_no_python
}

@test "host driver: forward compatibility carries an older driver on a data-center GPU, not on a GeForce" {
  scripted_nvidia_smi
  compat_libcuda
  SMI=$FIXD/nvidia-smi-550.54.14-a100.txt SMI_LIST=$FIXD/nvidia-smi-L-a100-pcie.txt entry vo
  assert_success
  SMI=$FIXD/nvidia-smi-550.54.14-a100.txt SMI_LIST=$FIXD/nvidia-smi-L-geforce.txt VLGRPO_TRAINER_DEVICES_PER_NODE=2 entry vo
  assert_failure 2
  [[ $stderr == *"host driver 550.54.14 is older than 575.57.08, which CUDA 12.9.1 in this image needs"*"NVIDIA GeForce RTX 5090"*"error 804"*"fix: upgrade the host's NVIDIA driver to 575.57.08 or newer"* ]] || fail "$stderr"
}

@test "host driver: an Ascend driver older than the HDK that CANN 8.5.0 is released with is refused; 26.0.rc1 passes" {
  davinci 16
  mkdir -p "$T/usr/local/Ascend/driver" "$T/usr/local/Ascend/ascend-toolkit/latest/opp"
  cp "$FIXD/cann-8.5.0-opp-version.info" "$T/usr/local/Ascend/ascend-toolkit/latest/opp/version.info"
  cp "$FIXD/ascend-driver-version-25.3.rc1.info" "$T/usr/local/Ascend/driver/version.info"
  entry fa
  assert_failure 2
  [[ $stderr == *"error: host driver: host driver 25.3.rc1 is older than Ascend HDK 25.5.0, which CANN 8.5.0 in this image is released with"*"fix: upgrade the host's Ascend driver and firmware to HDK 25.5.0 or newer"* ]] || fail "$stderr"
  cp "$FIXD/ascend-driver-version-26.0.rc1.info" "$T/usr/local/Ascend/driver/version.info"
  entry fa
  assert_success
  # a planning dry run for another machine only warns about this one's driver
  cp "$FIXD/ascend-driver-version-25.3.rc1.info" "$T/usr/local/Ascend/driver/version.info"
  VLGRPO_PLAN_DEVICES_PER_NODE=16 entry fa
  assert_success
  assert_line --partial "# warning: host driver: host driver 25.3.rc1 is older than Ascend HDK 25.5.0"
}
