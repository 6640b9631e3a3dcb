#!/usr/bin/env bats
# What the entrypoints exec: the exact argv for the defaults (reviewed against verl v0.8.0's scripts,
# docs/recipes.md), the preflight call with the same argv, cluster mode, exit statuses and secrets.

setup() {
  load helpers/common
  common_setup
}

@test "fully-async defaults: preflight gets the exact argv, then exactly that argv is exec'd" {
  entry fa
  assert_success
  [[ $(calls) == $'0000.npu-smi\n0001.python3\n0002.python3' ]] || fail "calls: $(calls)"
  # call 1: the preflight, with a file holding the final argv one element per line
  run call_argv 1
  assert_output "$(printf '%s\n' -P -s -m vlgrpo preflight --purpose launch --devices-per-node 16 --devices-source node --argv-file "${output##*$'\n'}")"
  diff <(expected_defaults fa) "$STUB_LOG/0001.python3.argv-file"
  # call 2: the exec'd program (python3 records its argv without the program name)
  diff <(expected_defaults fa | tail -n +2) "$STUB_LOG/0002.python3"
  assert_file_contains "$STUB_LOG/0002.python3.env" '^VLLM_USE_V1=1$'
  assert_file_contains "$STUB_LOG/0002.python3.env" '^CUDA_DEVICE_MAX_CONNECTIONS=1$'
  # the argv file is removed before the exec
  assert_file_not_exists "$(tail -n 1 "$STUB_LOG/0001.python3")"
}

@test "veomni defaults: preflight gets the exact argv, then exactly that argv is exec'd" {
  entry vo
  assert_success
  [[ $(calls) == $'0000.npu-smi\n0001.python3\n0002.python3' ]] || fail "calls: $(calls)"
  diff <(expected_defaults vo) "$STUB_LOG/0001.python3.argv-file"
  diff <(expected_defaults vo | tail -n +2) "$STUB_LOG/0002.python3"
}

@test "the reviewed default argv files start with the fixed program and module" {
  run head -n 3 "$REPO_ROOT/tests/bats/fixtures/fa-defaults.argv"
  assert_output $'python3\n-m\nverl.experimental.fully_async_policy.fully_async_main'
  run head -n 3 "$REPO_ROOT/tests/bats/fixtures/vo-defaults.argv"
  assert_output $'python3\n-m\nverl.trainer.main_ppo'
}

@test "dry run (variable and --dry-run flag): plan on stdout, argv one per line, preflight runs, nothing exec'd" {
  VLGRPO_DRY_RUN=1 entry fa
  assert_success
  diff <(expected_defaults fa) <(plan_argv)
  assert_line '# preflight: clean'
  assert_line '# topology: trainer 2 node(s) x 16 + rollout 2 node(s) x 16 = 64 npu devices'
  [[ $(calls) == $'0000.npu-smi\n0001.python3' ]] || fail "calls: $(calls)"
  # a dry run plans: the preflight is told so (too little checkpoint space is a warning there, not an error)
  [[ $(sed -n 6,7p "$STUB_LOG/0001.python3") == $'--purpose\nplan' ]] || fail "preflight: $(cat "$STUB_LOG/0001.python3")"
  rm -rf "${STUB_LOG:?}"/*
  entry vo --dry-run
  assert_success
  diff <(expected_defaults vo) <(plan_argv)
  [[ $(calls) == $'0000.npu-smi\n0001.python3' ]] || fail "calls: $(calls)"
  [[ $(sed -n 6,7p "$STUB_LOG/0001.python3") == $'--purpose\nplan' ]] || fail "preflight: $(cat "$STUB_LOG/0001.python3")"
}

@test "preflight findings (exit 2) stop the launch with exit 2; a broken preflight (exit 1) with exit 1" {
  STUB_PREFLIGHT_RC=2 entry fa
  assert_failure 2
  assert_equal "$(calls | grep -c python3)" 1
  [[ $stderr == *"preflight found problems"* ]]
  rm -rf "${STUB_LOG:?}"/*
  STUB_PREFLIGHT_RC=7 entry vo
  assert_failure 1
  assert_equal "$(calls | grep -c python3)" 1
  [[ $stderr == *"preflight could not run"* ]]
}

@test "VLGRPO_PREFLIGHT=warn: the preflight runs with --waive; waivable findings (exit 3) launch, code-loading ones (2) never" {
  VLGRPO_PREFLIGHT=warn STUB_PREFLIGHT_RC=3 entry fa
  assert_success
  assert_equal "$(calls | grep -c python3)" 2
  [[ $(call_argv 1) == *$'\n--waive' ]] || fail "no --waive: $(call_argv 1)"
  [[ $stderr == *"continuing because VLGRPO_PREFLIGHT=warn"* ]]
  # Why 2: findings the preflight will not waive (auto_map, Python files: exit 2 even with --waive) stop it
  rm -rf "${STUB_LOG:?}"/*
  VLGRPO_PREFLIGHT=warn STUB_PREFLIGHT_RC=2 entry fa
  assert_failure 2
  assert_equal "$(calls | grep -c python3)" 1
  [[ $stderr == *"preflight found problems that VLGRPO_PREFLIGHT=warn cannot waive: code the launch would run"* ]] || fail "$stderr"
  # exit 3 without warn is not a contract the entrypoint knows: a failure
  rm -rf "${STUB_LOG:?}"/*
  STUB_PREFLIGHT_RC=3 entry fa
  assert_failure 1
}

@test "cluster mode: wait then probe with nodes = trainer + rollout nodes, then preflight, then exec with RAY_ADDRESS" {
  VLGRPO_RAY_ADDRESS=10.0.0.1:6379 VLGRPO_RAY_WAIT_TIMEOUT=120 VLGRPO_ROLLOUT_NNODES=1 entry fa
  assert_success
  [[ $(calls) == $'0000.npu-smi\n0001.python3\n0002.python3\n0003.python3\n0004.python3' ]] || fail "calls: $(calls)"
  run call_argv 1
  assert_output "$(printf '%s\n' -P -s -m vlgrpo cluster wait --address 10.0.0.1:6379 --resource NPU --nodes 3 --per-node 16 --timeout 120)"
  run call_argv 2
  assert_output --partial "$(printf '%s\n' -P -s -m vlgrpo cluster probe --address 10.0.0.1:6379 --resource NPU --nodes 3 --per-node 16 --loggers console,wandb --argv-file)"
  run call_argv 3
  assert_line --index 4 preflight
  assert_file_contains "$STUB_LOG/0004.python3.env" '^RAY_ADDRESS=10.0.0.1:6379$'
  # the probe rehearses the worker groups of the argv verl gets (trainer pool, rollout replicas, weight sync):
  # the file it was handed holds exactly the argv the preflight checked and verl was started with
  cmp "$STUB_LOG/0002.python3.argv-file" "$STUB_LOG/0003.python3.argv-file"
  # (the recorder writes the words after the program's name)
  cmp <(tail -n +2 "$STUB_LOG/0002.python3.argv-file") "$STUB_LOG/0004.python3"
  assert_file_contains "$STUB_LOG/0002.python3.argv-file" '^rollout.nnodes=1$'
  # and it is gone: the launch removes its argv files once each reader is done
  [[ -z $(find "${TMPDIR:-/tmp}" -maxdepth 1 -name 'vlgrpo-argv.*' -newer "$STUB_LOG/0001.python3" 2>/dev/null) ]] || fail "argv file left"
}

@test "cluster mode (veomni, GPU): nodes = trainer nodes, resource GPU" {
  add_stub nvidia-smi
  VLGRPO_PLATFORM=gpu VLGRPO_RAY_ADDRESS=head.example:6379 VLGRPO_TRAINER_DEVICES_PER_NODE=8 entry vo
  assert_success
  # nvidia-smi -L (the device count), nvidia-smi (the driver version), then as on Ascend
  [[ $(calls) == $'0000.nvidia-smi\n0001.nvidia-smi\n0002.python3\n0003.python3\n0004.python3\n0005.python3' ]] || fail "calls: $(calls)"
  run call_argv 2
  assert_output "$(printf '%s\n' -P -s -m vlgrpo cluster wait --address head.example:6379 --resource GPU --nodes 2 --per-node 8 --timeout 600)"
}

@test "cluster not ready: wait exit 2 -> exit 2, wait exit 1 -> exit 1, probe exit 2 -> exit 2; nothing launched" {
  VLGRPO_RAY_ADDRESS=10.0.0.1:6379 STUB_CLUSTER_WAIT_RC=2 entry fa
  assert_failure 2
  assert_equal "$(calls | grep -c python3)" 1
  rm -rf "${STUB_LOG:?}"/*
  VLGRPO_RAY_ADDRESS=10.0.0.1:6379 STUB_CLUSTER_WAIT_RC=1 entry fa
  assert_failure 1
  rm -rf "${STUB_LOG:?}"/*
  VLGRPO_RAY_ADDRESS=10.0.0.1:6379 STUB_CLUSTER_PROBE_RC=2 entry vo
  assert_failure 2
  assert_equal "$(calls | grep -c python3)" 2
}

@test "WANDB_API_KEY_FILE: the key reaches verl's environment, never argv, stdout or stderr" {
  local key=0123456789abcdef0123456789abcdef01234567
  printf '%s\n' "$key" >"$T/wandb.key"
  chmod 600 "$T/wandb.key"
  unset WANDB_MODE
  WANDB_API_KEY_FILE=$T/wandb.key entry fa
  assert_success
  assert_file_contains "$STUB_LOG/0002.python3.env" "^WANDB_API_KEY=$key\$"
  ! grep -rq "$key" "$STUB_LOG"/*.python3 "$STUB_LOG"/*.argv-file
  [[ $output != *"$key"* && $stderr != *"$key"* ]]
  # dry run shows that a key is set, not the key
  WANDB_API_KEY_FILE=$T/wandb.key entry fa --dry-run
  assert_line '# environment: WANDB_API_KEY (set, not shown)'
  [[ $output != *"$key"* && $stderr != *"$key"* ]]
}

@test "secrets: wandb without a key is refused for a launch (warning in a dry run); bad key files are refused unseen" {
  unset WANDB_MODE
  entry fa
  assert_failure 2
  [[ $stderr == *"VLGRPO_LOGGER: includes wandb"* ]]
  assert_no_python
  entry fa --dry-run
  assert_success
  assert_line --partial '# warning: VLGRPO_LOGGER has wandb'
  VLGRPO_LOGGER=console entry fa
  assert_success
  printf 'not a key; secret-ish text\n' >"$T/bad.key"
  chmod 600 "$T/bad.key"
  WANDB_API_KEY_FILE=$T/bad.key entry fa
  assert_failure 2
  [[ $stderr == *"WANDB_API_KEY_FILE: the file does not hold one W&B API key (contents not shown)"* ]]
  [[ $stderr != *"secret-ish"* ]]
  WANDB_API_KEY=x WANDB_API_KEY_FILE=$T/bad.key entry fa
  assert_failure 2
  [[ $stderr == *"both WANDB_API_KEY and WANDB_API_KEY_FILE are set"* ]]
}

@test "every problem is reported at once, one line each, naming the variable and the fix" {
  VLGRPO_TRAINER_NNODES=0 VLGRPO_LR=fast VLGRPO_LOGGER=stdout entry fa
  assert_failure 2
  run grep -c ': error: VLGRPO_' <<<"$stderr"
  assert_output 3
  [[ $stderr == *"VLGRPO_TRAINER_NNODES: 0 is not an integer in 1..512; fix: "* ]]
  [[ $stderr == *"VLGRPO_LR: fast is not a number in 1e-12..1; fix: "* ]]
  [[ $stderr == *"VLGRPO_LOGGER: stdout is not a comma list of distinct values from: console, wandb, tensorboard, mlflow, swanlab, file; fix: "* ]]
}

@test "relative paths are made absolute against the working directory" {
  cd "$T"
  VLGRPO_MODEL_PATH=model VLGRPO_TRAIN_FILE=./data/train.parquet VLGRPO_CHECKPOINT_DIR=data/../ckpt entry fa --dry-run
  assert_success
  assert_line "actor_rollout_ref.model.path=$T/model"
  assert_line "data.train_files=$T/data/train.parquet"
  assert_line "trainer.default_local_dir=$T/ckpt"
}

@test "a TMPDIR that does not exist is a configuration error naming it (checked up front), nothing runs" {
  TMPDIR=$T/no-such-dir entry fa
  assert_failure 2
  [[ $stderr == *"error: TMPDIR: is not an existing folder"* ]] || fail "$stderr"
  assert_no_python
}

@test "cluster mode from a node without accelerators: per-node counts must be given, the cluster check verifies them" {
  rm -f "$T/bin/npu-smi"
  VLGRPO_RAY_ADDRESS=10.0.0.1:6379 entry fa
  assert_failure 2
  [[ $stderr == *"VLGRPO_TRAINER_DEVICES_PER_NODE: unset, and this node has no accelerator to count"* ]] || fail "$stderr"
  [[ $stderr == *"VLGRPO_ROLLOUT_DEVICES_PER_NODE: unset"* ]] || fail "$stderr"
  assert_no_python
  VLGRPO_RAY_ADDRESS=10.0.0.1:6379 VLGRPO_TRAINER_DEVICES_PER_NODE=16 VLGRPO_ROLLOUT_DEVICES_PER_NODE=16 entry fa
  assert_success
  run call_argv 0
  assert_output "$(printf '%s\n' -P -s -m vlgrpo cluster wait --address 10.0.0.1:6379 --resource NPU --nodes 4 --per-node 16 --timeout 600)"
  diff <(expected_defaults fa | tail -n +2) "$STUB_LOG/0003.python3"
}

@test "layouts that fit: the preflight is told whether the device count is this node's or the planning override's" {
  # the node's own count (the npu-smi stub: 16): --devices-source node, so a local layout larger than the node is
  # the preflight's error (rules.layout-local); no cluster line in the plan
  VLGRPO_DRY_RUN=1 entry fa
  assert_success
  refute_line --partial '# cluster:'
  run call_argv 1
  assert_line --index 7 --devices-per-node
  assert_line --index 8 16
  assert_line --index 9 --devices-source
  assert_line --index 10 node
  rm -rf "${STUB_LOG:?}"/*
  # the planning override (the demo's way): --devices-source plan, and the plan names the Ray cluster it needs
  VLGRPO_DRY_RUN=1 VLGRPO_PLAN_DEVICES_PER_NODE=16 entry fa
  assert_success
  assert_line '# cluster: this plan needs a Ray cluster of 4 node(s) with 16 npu each (set VLGRPO_RAY_ADDRESS to launch it)'
  run call_argv 1
  assert_line --index 9 --devices-source
  assert_line --index 10 plan
  rm -rf "${STUB_LOG:?}"/*
  # a planned layout that fits one node needs no cluster; the veomni recipe plans its own count
  VLGRPO_DRY_RUN=1 VLGRPO_PLAN_DEVICES_PER_NODE=16 VLGRPO_TRAINER_NNODES=1 VLGRPO_ROLLOUT_NNODES=1 \
    VLGRPO_TRAINER_DEVICES_PER_NODE=8 VLGRPO_ROLLOUT_DEVICES_PER_NODE=8 entry fa
  assert_success
  refute_line --partial '# cluster:'
  rm -rf "${STUB_LOG:?}"/*
  VLGRPO_DRY_RUN=1 VLGRPO_PLAN_DEVICES_PER_NODE=8 entry vo
  assert_success
  assert_line --partial '# cluster: this plan needs a Ray cluster of '
}

@test "VLGRPO_OVERRIDES_FILE: accepted keys take their template element's place or are appended, are in the plan and the preflight's argv; refused ones stop the launch" {
  printf '%s\n' '# a user experiment' 'algorithm.kl_ctrl.kl_coef: 0.001' 'trainer.total_epochs: 3' >"$T/overrides.yaml"
  VLGRPO_OVERRIDES_FILE=$T/overrides.yaml VLGRPO_DRY_RUN=1 entry fa
  assert_success
  diff <(expected_defaults fa | sed 's/^algorithm\.kl_ctrl\.kl_coef=0\.0$/algorithm.kl_ctrl.kl_coef=0.001/'
    echo trainer.total_epochs=3) <(plan_argv)
  assert_line '# override from VLGRPO_OVERRIDES_FILE: algorithm.kl_ctrl.kl_coef=0.001 (in place of the template element algorithm.kl_ctrl.kl_coef=0.0)'
  assert_line '# override from VLGRPO_OVERRIDES_FILE: trainer.total_epochs=3'
  # the preflight gets the same argv, overrides included
  [[ $(calls) == $'0000.npu-smi\n0001.python3' ]] || fail "calls: $(calls)"
  diff <(plan_argv) "$STUB_LOG/0001.python3.argv-file"
  # refused: a code-loading key, a key a setting owns, a typo (did you mean), an interpolation; nothing else runs
  rm -rf "${STUB_LOG:?}"/*
  printf '%s\n' 'custom_reward_function.path: /tmp/reward.py' 'data.max_prompt_length: 2048' 'trainer.total_epoch: 3' \
    'trainer.val_only: ${oc.env:HOME}' >"$T/bad.yaml"
  VLGRPO_OVERRIDES_FILE=$T/bad.yaml VLGRPO_DRY_RUN=1 entry fa
  assert_failure 2
  [[ $stderr == *"VLGRPO_OVERRIDES_FILE ($T/bad.yaml, line 1): custom_reward_function.path: its value reaches code loading"* ]] || fail "$stderr"
  [[ $stderr == *"line 2): data.max_prompt_length: is set by VLGRPO_MAX_PROMPT_LENGTH; fix: set VLGRPO_MAX_PROMPT_LENGTH"* ]] || fail "$stderr"
  [[ $stderr == *"line 3): trainer.total_epoch: "*"(did you mean trainer.total_epochs?)"* ]] || fail "$stderr"
  [[ $stderr == *"line 4): trainer.val_only: the value is computed at run time (resolver oc.env)"* ]] || fail "$stderr"
  [[ $stderr == *"4 problem(s) in VLGRPO_OVERRIDES_FILE; nothing was started"* ]] || fail "$stderr"
  [[ $(calls) == '0000.npu-smi' ]] || fail "calls: $(calls)"
}
