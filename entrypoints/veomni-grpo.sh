#!/bin/bash -p
# GRPO of Qwen3-VL-30B-A3B on Geometry3K with verl's VeOmni engine (hardened entrypoint).
#
# Mirrors verl v0.8.0 (commit 7aed6b2) examples/grpo_trainer/run_qwen3_vl_30b_moe_veomni.sh: same
# module, same overrides in the same order, same values, except where docs/recipes.md lists a
# difference (devices per node from the node instead of a fixed 8, fsdp_size following the topology,
# checkpoint folder set, trust_remote_code pinned False, paths for a container). No argument
# passthrough: settings come only from the VLGRPO_* variables declared below; lib/ holds the
# mechanics. `veomni-grpo.sh --help` prints the table.
set -Eeuo pipefail

# shellcheck source=entrypoints/lib/common.sh
source "$(dirname -- "$(realpath -- "${BASH_SOURCE[0]}")")/lib/common.sh"

VG_PROG=veomni-grpo.sh
VG_SUMMARY="GRPO with the VeOmni engine (verl \`main_ppo\`, config \`ppo_trainer\`, \`model_engine=veomni\`, colocated vLLM rollout) of Qwen3-VL-30B-A3B on Geometry3K."
VG_PROGRAM=(python3 -m verl.trainer.main_ppo)
VG_RECIPE_CHECK=vo_check
VG_FIXED_NOTE="\`model_engine=veomni\`, \`data.truncation=error\`, \`data.image_patch_size=16\` (the Qwen3-VL processor's patch size, which verl's overlong filter must use; the preflight checks it against the model folder), \`data.filter_overlong_prompts=True\`, \`data.trust_remote_code=False\`, \`actor_rollout_ref.model.trust_remote_code=False\`, \`critic.model.trust_remote_code=False\`, \`actor_rollout_ref.rollout.calculate_log_probs=True\`; both vLLM max_model_len keys come from one setting, \`engine_kwargs.vllm.limit_mm_per_prompt={image:1,video:0}\` (no video inputs: vLLM 0.13.0 is inside CVE-2026-22778 and CVE-2026-34755); no code-loading key (custom_cls, custom_reward_function, reward manager module, external_lib, agent loop config, custom checkpoint engine, any \`_target_\`) is set or settable."

# ---- settings: the rows of python/src/vlgrpo/environment.tsv owned by "vo" (lib/registry.sh), in that order
vg_registry_load vo

vo_default_fsdp() { printf '%s' $((VG_VAL[TRAINER_NNODES] * VG_VAL[TRAINER_DEVICES_PER_NODE] / VG_VAL[SP_SIZE])); }
vo_default_experiment() { printf 'grpo-%sgpu' "${VG_VAL[TRAINER_DEVICES_PER_NODE]}"; }

# ---- the command: verl's override list, upstream order -------------------------------------------
VG_TEMPLATE=(
  # algorithm and data
  "algorithm.adv_estimator=grpo"
  "algorithm.use_kl_in_reward=False"
  "algorithm.kl_ctrl.kl_coef=0.001"
  "data.train_files={TRAIN_FILE}"
  "data.val_files={VAL_FILE}"
  "data.train_batch_size={TRAIN_BATCH_SIZE}"
  "data.max_prompt_length={MAX_PROMPT_LENGTH}"
  "data.max_response_length={MAX_RESPONSE_LENGTH}"
  "data.image_patch_size=16"
  "data.filter_overlong_prompts=True"
  "data.shuffle=False"
  "data.truncation=error"
  "data.image_key=images"
  "data.trust_remote_code=False"
  # trainer
  "trainer.resume_mode={RESUME_MODE}"
  "trainer.resume_from_path={RESUME_FROM_PATH}"
  "trainer.default_local_dir={CHECKPOINT_DIR}"
  "trainer.critic_warmup=0"
  "trainer.logger={LOGGER}"
  "trainer.project_name={PROJECT_NAME}"
  "trainer.experiment_name={EXPERIMENT_NAME}"
  "trainer.n_gpus_per_node={TRAINER_DEVICES_PER_NODE}"
  "trainer.nnodes={TRAINER_NNODES}"
  "trainer.save_freq={SAVE_FREQ}"
  "trainer.max_actor_ckpt_to_keep={CHECKPOINTS_TO_KEEP}"
  "trainer.max_critic_ckpt_to_keep={CHECKPOINTS_TO_KEEP}"
  "trainer.test_freq={TEST_FREQ}"
  "trainer.total_epochs={TOTAL_EPOCHS}"
  "trainer.total_training_steps={TOTAL_TRAINING_STEPS}"
  # engine, actor
  "model_engine=veomni"
  "actor_rollout_ref.actor.optim.lr={LR}"
  "actor_rollout_ref.actor.optim.lr_scheduler_type=constant"
  "actor_rollout_ref.model.path={MODEL_PATH}"
  "actor_rollout_ref.model.trust_remote_code=False"
  "critic.model.trust_remote_code=False"
  "actor_rollout_ref.model.use_remove_padding=True"
  "actor_rollout_ref.model.enable_gradient_checkpointing=True"
  "+actor_rollout_ref.model.override_config.max_position_embeddings=32768"
  "actor_rollout_ref.actor.use_kl_loss=True"
  "actor_rollout_ref.actor.kl_loss_coef=0.01"
  "actor_rollout_ref.actor.kl_loss_type=low_var_kl"
  "actor_rollout_ref.actor.entropy_coeff=0"
  "actor_rollout_ref.actor.use_torch_compile=False"
  "actor_rollout_ref.actor.ppo_mini_batch_size={PPO_MINI_BATCH_SIZE}"
  "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1"
  "actor_rollout_ref.actor.veomni.param_offload={ACTOR_OFFLOAD}"
  "actor_rollout_ref.actor.veomni.optimizer_offload={ACTOR_OFFLOAD}"
  "actor_rollout_ref.actor.veomni.enable_full_shard=True"
  "actor_rollout_ref.actor.veomni.fsdp_size={FSDP_SIZE}"
  "actor_rollout_ref.actor.veomni.ulysses_parallel_size={SP_SIZE}"
  "actor_rollout_ref.actor.veomni.expert_parallel_size={EP_SIZE}"
  "actor_rollout_ref.actor.veomni.attn_implementation=veomni_flash_attention_2_with_sp"
  "actor_rollout_ref.actor.veomni.moe_implementation=fused"
  # ref
  "actor_rollout_ref.ref.strategy=veomni"
  "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1"
  "actor_rollout_ref.ref.veomni.param_offload={REF_OFFLOAD}"
  "actor_rollout_ref.ref.veomni.expert_parallel_size=1"
  # rollout
  "actor_rollout_ref.rollout.name=vllm"
  "actor_rollout_ref.rollout.tensor_model_parallel_size={ROLLOUT_TP}"
  "actor_rollout_ref.rollout.data_parallel_size={ROLLOUT_DP}"
  "actor_rollout_ref.rollout.expert_parallel_size={ROLLOUT_EP}"
  "actor_rollout_ref.rollout.gpu_memory_utilization={GPU_MEMORY_UTILIZATION}"
  # True, not upstream's False: verl 0.8.0 passes no False boolean to vLLM (build_cli_args_from_config), so vLLM
  # runs both on for this model whatever the argv says; the preflight refuses a False (vllm.setting-dropped)
  "actor_rollout_ref.rollout.enable_chunked_prefill=True"
  "actor_rollout_ref.rollout.enable_prefix_caching=True"
  "actor_rollout_ref.rollout.enforce_eager=True"
  "actor_rollout_ref.rollout.free_cache_engine=True"
  "actor_rollout_ref.rollout.n={ROLLOUT_N}"
  "actor_rollout_ref.rollout.max_model_len={MAX_MODEL_LEN}"
  "actor_rollout_ref.rollout.max_num_batched_tokens={MAX_NUM_BATCHED_TOKENS}"
  "actor_rollout_ref.rollout.disable_log_stats=False"
  "actor_rollout_ref.rollout.calculate_log_probs=True"
  "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1"
  "+actor_rollout_ref.rollout.engine_kwargs.vllm.max_model_len={MAX_MODEL_LEN}"
  "+actor_rollout_ref.rollout.engine_kwargs.vllm.limit_mm_per_prompt={image:1,video:0}"
)

# ---- cross-checks (before anything starts) ------------------------------------------------------
vo_check() {
  local p=${VG_VAL[MAX_PROMPT_LENGTH]} r=${VG_VAL[MAX_RESPONSE_LENGTH]} mml=${VG_VAL[MAX_MODEL_LEN]}
  local tn=${VG_VAL[TRAINER_NNODES]} td=${VG_VAL[TRAINER_DEVICES_PER_NODE]}
  local sp=${VG_VAL[SP_SIZE]} fsdp=${VG_VAL[FSDP_SIZE]} ep=${VG_VAL[EP_SIZE]}
  local bs=${VG_VAL[TRAIN_BATCH_SIZE]} mini=${VG_VAL[PPO_MINI_BATCH_SIZE]} n=${VG_VAL[ROLLOUT_N]}
  local world=$((tn * td))

  vg_check_per_node VLGRPO_TRAINER_DEVICES_PER_NODE "$td"
  vg_check_lengths "$p" "$r" "$mml"
  # Field case B08: no budget rule here. The recipe passes enable_chunked_prefill=True, and vLLM 0.13.0
  # (config/scheduler.py verify_max_model_len) refuses max_num_batched_tokens < max_model_len only with chunked
  # prefill off; the preflight checks the engine arguments verl builds against vLLM's own rule.
  # Field case B19: fsdp_size x ulysses size must be the world size (upstream hard-wires 16).
  if ((world % sp != 0)); then
    vg_problem VLGRPO_SP_SIZE "$sp does not divide the world size $world ($tn x $td)" "choose a divisor of $world"
  elif ((fsdp != -1 && fsdp * sp != world)); then
    vg_problem VLGRPO_FSDP_SIZE "fsdp_size $fsdp x SP size $sp = $((fsdp * sp)) is not the world size $world ($tn x $td)" \
      "set VLGRPO_FSDP_SIZE=$((world / sp)) or -1, or leave it unset"
  fi
  if ((world % ep != 0)); then
    vg_problem VLGRPO_EP_SIZE "$ep does not divide the world size $world" "choose a divisor of $world"
  fi
  if ((bs < mini)); then
    vg_problem VLGRPO_PPO_MINI_BATCH_SIZE "$mini is larger than the train batch size $bs (verl: train_batch_size must be >= ppo_mini_batch_size)" \
      "set it to at most $bs"
  fi
  if (((bs * n) % world != 0)); then
    vg_problem VLGRPO_TRAIN_BATCH_SIZE "$bs prompts x $n responses = $((bs * n)) samples are not divisible by the world size $world (verl validate_config)" \
      "choose VLGRPO_TRAIN_BATCH_SIZE so that it x VLGRPO_ROLLOUT_N is a multiple of $world"
  fi
  if ((world % sp == 0 && (mini * n) % (world / sp) != 0)); then
    vg_problem VLGRPO_PPO_MINI_BATCH_SIZE "mini-batch $mini x $n responses = $((mini * n)) samples do not split evenly over $((world / sp)) data-parallel ranks" \
      "choose VLGRPO_PPO_MINI_BATCH_SIZE so that it x VLGRPO_ROLLOUT_N is a multiple of $((world / sp))"
  fi
  vg_check_rollout_layout "${VG_VAL[ROLLOUT_TP]}" "${VG_VAL[ROLLOUT_DP]}" "${VG_VAL[ROLLOUT_EP]}" "$tn" "$td"
  vg_check_resume

  VG_TOPOLOGY="$tn node(s) x $td = $world $VG_PLATFORM devices (trainer and rollout colocated)"
  VG_CLUSTER_NODES=$tn
  VG_CLUSTER_PER_NODE=$td
  VG_CLUSTER_DEVICES=$((tn * td))
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  # shellcheck disable=SC2064 # the fixed trap text of lib/environment.sh
  trap "$VG_ERR_TRAP" ERR
  for vg_word; do vg_cli "$vg_word"; done
  vg_flush_problems
  vg_entry
fi
