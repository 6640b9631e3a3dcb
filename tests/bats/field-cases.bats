#!/usr/bin/env bats
# Field cases of docs/field-cases.md that concern the entrypoints (marked entry: B07, B11,
# B12, B17, B19; and B08, B09). Each test states the case's input and the right behaviour.

setup() {
  load helpers/common
  common_setup
  export VLGRPO_DRY_RUN=1
}

argv_value() { plan_argv | sed -n "s/^$1=//p"; }

@test "B07: image prompts are never truncated: truncation=error with filter_overlong_prompts=True, not settable" {
  local r
  for r in fa vo; do
    entry "$r"
    assert_success
    assert_equal "$(argv_value data.truncation)" error
    assert_equal "$(argv_value data.filter_overlong_prompts)" True
  done
  # the upstream fully-async script's data.truncation='left' cannot come back through any door
  rm -rf "${STUB_LOG:?}"/*
  VLGRPO_TRUNCATION=left direct fa
  assert_failure 2
  direct fa "data.truncation='left'"
  assert_failure 2
  assert_no_python
}

@test "B08: the VeOmni recipe runs vLLM with chunked prefill on, so a budget below max_model_len passes the entry" {
  # the case's input, budget 5120 below context 8192: vLLM 0.13.0 refuses it only with chunked prefill off
  # (config/scheduler.py verify_max_model_len); the recipe passes True (verl 0.8.0 drops False booleans from
  # vLLM's command line, the preflight's vllm.setting-dropped) and the preflight checks the engine arguments
  # against vLLM's own rule (tests/python/preflight/test_vllm_engine.py, test_b08_*)
  VLGRPO_MAX_MODEL_LEN=8192 VLGRPO_MAX_NUM_BATCHED_TOKENS=5120 entry vo
  assert_success
  assert_equal "$(argv_value actor_rollout_ref.rollout.enable_chunked_prefill)" True
  assert_equal "$(argv_value actor_rollout_ref.rollout.max_num_batched_tokens)" 5120
  assert_equal "$(argv_value actor_rollout_ref.rollout.max_model_len)" 8192
}

@test "B09(a): max_model_len 8192 below prompt 2048 + response 8192 is refused before launch" {
  VLGRPO_MAX_MODEL_LEN=8192 entry fa
  assert_failure 2
  [[ $stderr == *"VLGRPO_MAX_MODEL_LEN: 8192 is below max prompt + max response = 2048 + 8192 = 10240"* ]] || fail "$stderr"
  VLGRPO_MAX_MODEL_LEN=10240 entry fa
  assert_success
  assert_equal "$(argv_value actor_rollout_ref.rollout.max_model_len)" 10240
}

@test "B09(b): VeOmni's two max_model_len keys come from one setting and cannot split; 2048 < 1024 + 2048 refused" {
  VLGRPO_MAX_MODEL_LEN=6144 VLGRPO_MAX_NUM_BATCHED_TOKENS=6144 entry vo
  assert_success
  assert_equal "$(argv_value actor_rollout_ref.rollout.max_model_len)" 6144
  assert_equal "$(argv_value +actor_rollout_ref.rollout.engine_kwargs.vllm.max_model_len)" 6144
  VLGRPO_MAX_MODEL_LEN=2048 entry vo
  assert_failure 2
  [[ $stderr == *"VLGRPO_MAX_MODEL_LEN: 2048 is below max prompt + max response = 1024 + 2048 = 3072"* ]] || fail "$stderr"
  # rollout expert parallel must be 1 or TP x DP (verl RolloutConfig)
  VLGRPO_ROLLOUT_EP=2 entry vo
  assert_failure 2
  [[ $stderr == *"VLGRPO_ROLLOUT_EP: 2 must be 1 or rollout TP x DP = 4"* ]] || fail "$stderr"
}

@test "B11: neither recipe's default argv sets a key twice, and no argument can add one" {
  local r
  for r in fa vo; do
    run bash -c "sed -e 's/=.*//' -e 's/^++//' -e 's/^+//' | sort | uniq -d" < <(expected_defaults "$r")
    assert_output ''
  done
  # and user words cannot add a second one: all arguments are refused
  direct vo actor_rollout_ref.rollout.n=16
  assert_failure 2
}

@test "B12: the fully-async invariants verl asserts after Ray placed workers are fixed in the argv" {
  entry fa
  assert_success
  assert_equal "$(argv_value data.train_batch_size)" 0
  assert_equal "$(argv_value data.gen_batch_size)" 1
  assert_equal "$(argv_value actor_rollout_ref.hybrid_engine)" False
  assert_equal "$(argv_value actor_rollout_ref.rollout.calculate_log_probs)" True
  assert_equal "$(argv_value actor_rollout_ref.rollout.mode)" async
  VLGRPO_TRIGGER_PARAMETER_SYNC_STEP=0 entry fa
  assert_failure 2
  [[ $stderr == *"VLGRPO_TRIGGER_PARAMETER_SYNC_STEP: 0 is not an integer in 1..100000"* ]] || fail "$stderr"
  # no variable reaches the fixed ones
  VLGRPO_TRAIN_BATCH_SIZE=64 entry fa
  assert_failure 2
  VLGRPO_HYBRID_ENGINE=True entry fa
  assert_failure 2
}

@test "B12: the shipped 16 + 16 per-node topology on 8-device nodes is refused before Ray" {
  STUB_NPU_COUNT=8 VLGRPO_TRAINER_DEVICES_PER_NODE=16 VLGRPO_ROLLOUT_DEVICES_PER_NODE=16 entry fa
  assert_failure 2
  [[ $stderr == *"VLGRPO_TRAINER_DEVICES_PER_NODE: 16 devices per node, but this node has 8 (npu-smi info -l)"* ]] || fail "$stderr"
  [[ $stderr == *"VLGRPO_ROLLOUT_DEVICES_PER_NODE: 16 devices per node, but this node has 8"* ]] || fail "$stderr"
  # left to the node, the counts follow it: 2 x 8 + 2 x 8
  STUB_NPU_COUNT=8 entry fa
  assert_success
  assert_line '# topology: trainer 2 node(s) x 8 + rollout 2 node(s) x 8 = 32 npu devices'
}

@test "B17: trust_remote_code is False wherever verl reads it and no code-loading key is reachable" {
  local r bad
  for r in fa vo; do
    entry "$r"
    assert_success
    assert_equal "$(argv_value data.trust_remote_code)" False
    assert_equal "$(argv_value actor_rollout_ref.model.trust_remote_code)" False
    assert_equal "$(argv_value critic.model.trust_remote_code)" False
    bad=$(plan_argv | grep -E '_target_|custom_cls|custom_reward_function|reward_manager\.module|reward_loop_module_path|external_lib|agent_loop_config_path|custom_async_server|custom_backend_module|function_tool_path|custom_sampler|trust_remote_code=True' || true)
    [[ -z $bad ]] || fail "$r argv has a code-loading key: $bad"
  done
  # (a) as an argument, (b) a _target_ override, (c) as an invented variable: all refused
  rm -rf "${STUB_LOG:?}"/*
  direct fa data.trust_remote_code=True
  assert_failure 2
  direct fa +reward.reward_manager._target_=os.system
  assert_failure 2
  VLGRPO_TRUST_REMOTE_CODE=true direct vo
  assert_failure 2
  assert_no_python
}

@test "B19: VeOmni fsdp_size follows the topology (nnodes=1 on 8 devices: 8), and fsdp x SP != world is refused" {
  STUB_NPU_COUNT=8 VLGRPO_TRAINER_NNODES=1 entry vo
  assert_success
  assert_equal "$(argv_value actor_rollout_ref.actor.veomni.fsdp_size)" 8
  assert_equal "$(argv_value trainer.n_gpus_per_node)" 8
  STUB_NPU_COUNT=8 VLGRPO_TRAINER_NNODES=1 VLGRPO_FSDP_SIZE=16 entry vo
  assert_failure 2
  [[ $stderr == *"VLGRPO_FSDP_SIZE: fsdp_size 16 x SP size 1 = 16 is not the world size 8 (1 x 8)"* ]] || fail "$stderr"
  # a 16-NPU A3 node is used whole (upstream fixes 8 per node)
  STUB_NPU_COUNT=16 entry vo
  assert_equal "$(argv_value trainer.n_gpus_per_node)" 16
  assert_equal "$(argv_value actor_rollout_ref.actor.veomni.fsdp_size)" 32
  # expert parallel must divide the world
  STUB_NPU_COUNT=8 VLGRPO_TRAINER_NNODES=1 VLGRPO_EP_SIZE=16 entry vo
  assert_failure 2
  [[ $stderr == *"VLGRPO_EP_SIZE: 16 does not divide the world size 8"* ]] || fail "$stderr"
}

@test "B15: no entrypoint kills processes by name or all of them (no pkill, killall, kill -1), only PIDs it started" {
  # the Ascend guide's cleanup (pkill -9 python) would take down other jobs on a shared node; ray-node.sh
  # stops the ray start it launched by PID (behaviour: ray-node.bats and tests/python/ray SIGTERM tests)
  run bash -c "grep -rnE '\\b(pkill|killall)\\b|\\bkill +(-[0-9A-Za-z]+ +)*-1\\b' \"\$1\" | grep -vE '^[^:]+:[0-9]+: *#'" _ "$REPO_ROOT/entrypoints"
  assert_failure 1
  assert_output ''
}
