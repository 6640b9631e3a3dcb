#!/bin/bash -p
# Fully-async GRPO of Qwen3-VL-30B-A3B on Geometry3K with verl's FSDP2 trainer (hardened entrypoint).
#
# Mirrors verl v0.8.0 (commit 7aed6b2) verl/experimental/fully_async_policy/shell/
# geo3k_qwen3vl_30b_a3b_fsdp2_32_32.sh: same module, same overrides in the same order, same values,
# except where docs/recipes.md lists a difference (logger as a list, devices per node from the node,
# truncation=error with filter_overlong_prompts, resume auto, paths for a container, trust_remote_code
# pinned False). No argument passthrough: settings come only from the VLGRPO_* variables declared
# below; lib/ holds the mechanics. `fully-async-grpo.sh --help` prints the table.
set -Eeuo pipefail

# shellcheck source=entrypoints/lib/common.sh
source "$(dirname -- "$(realpath -- "${BASH_SOURCE[0]}")")/lib/common.sh"

VG_PROG=fully-async-grpo.sh
VG_SUMMARY="Fully-async GRPO (verl \`fully_async_main\`, config \`fully_async_ppo_trainer\`, FSDP2 trainer and vLLM rollout on separate nodes) of Qwen3-VL-30B-A3B on Geometry3K."
VG_PROGRAM=(python3 -m verl.experimental.fully_async_policy.fully_async_main)
VG_RECIPE_CHECK=fa_check
VG_FIXED_NOTE="\`data.truncation=error\`, \`data.image_patch_size=16\` (the Qwen3-VL processor's patch size, which verl's overlong filter must use; the preflight checks it against the model folder), \`data.filter_overlong_prompts=True\`, \`data.trust_remote_code=False\`, \`actor_rollout_ref.model.trust_remote_code=False\`, \`critic.model.trust_remote_code=False\`, \`data.train_batch_size=0\`, \`data.gen_batch_size=1\`, \`actor_rollout_ref.hybrid_engine=False\`, \`actor_rollout_ref.rollout.calculate_log_probs=True\`, \`actor_rollout_ref.rollout.mode=async\`, \`engine_kwargs.vllm.limit_mm_per_prompt={image:1,video:0}\` (no video inputs: vLLM 0.13.0 is inside CVE-2026-22778 and CVE-2026-34755); no code-loading key (custom_cls, custom_reward_function, reward manager module, external_lib, agent loop config, custom checkpoint engine, any \`_target_\`) is set or settable."

# ---- settings: the rows of python/src/vlgrpo/environment.tsv owned by "fa" (lib/registry.sh), in that order
vg_registry_load fa

vg_derived max_num_batched_tokens "max_prompt_length + max_response_length"

fa_default_token_len() { printf '%s' $(((VG_VAL[MAX_PROMPT_LENGTH] + VG_VAL[MAX_RESPONSE_LENGTH]) / 4)); }
fa_default_fsdp() { printf '%s' $((VG_VAL[TRAINER_NNODES] * VG_VAL[TRAINER_DEVICES_PER_NODE])); }
fa_default_ep() { printf '%s' "${VG_VAL[ROLLOUT_TP]}"; }

# ---- the command: verl's override list, upstream order -------------------------------------------
VG_TEMPLATE=(
  # data
  "data.train_files={TRAIN_FILE}"
  "data.val_files={VAL_FILE}"
  "data.prompt_key=prompt"
  "data.truncation=error"
  "data.filter_overlong_prompts=True"
  "data.trust_remote_code=False"
  "data.max_prompt_length={MAX_PROMPT_LENGTH}"
  "data.max_response_length={MAX_RESPONSE_LENGTH}"
  "data.image_patch_size=16"
  "data.train_batch_size=0"
  "data.gen_batch_size=1"
  "data.val_batch_size={VAL_BATCH_SIZE}"
  "data.return_raw_chat=True"
  # actor
  "actor_rollout_ref.actor.strategy=fsdp2"
  "actor_rollout_ref.actor.use_kl_loss=False"
  "actor_rollout_ref.actor.kl_loss_coef=0.0"
  "actor_rollout_ref.actor.clip_ratio_low=0.2"
  "actor_rollout_ref.actor.clip_ratio_high=0.28"
  "actor_rollout_ref.actor.clip_ratio_c=10.0"
  "actor_rollout_ref.actor.use_dynamic_bsz=True"
  "actor_rollout_ref.actor.ppo_max_token_len_per_gpu={PPO_MAX_TOKEN_LEN_PER_DEVICE}"
  "actor_rollout_ref.actor.optim.lr={LR}"
  "actor_rollout_ref.actor.optim.lr_warmup_steps={LR_WARMUP_STEPS}"
  "actor_rollout_ref.actor.optim.weight_decay=0.1"
  "actor_rollout_ref.actor.ppo_mini_batch_size={PPO_MINI_BATCH_SIZE}"
  "actor_rollout_ref.actor.fsdp_config.param_offload={ACTOR_OFFLOAD}"
  "actor_rollout_ref.actor.fsdp_config.optimizer_offload={ACTOR_OFFLOAD}"
  "actor_rollout_ref.actor.entropy_coeff=0"
  "actor_rollout_ref.actor.grad_clip=1.0"
  "actor_rollout_ref.actor.loss_agg_mode=token-mean"
  "actor_rollout_ref.actor.ulysses_sequence_parallel_size={SP_SIZE}"
  "actor_rollout_ref.actor.fsdp_config.fsdp_size={FSDP_SIZE}"
  "actor_rollout_ref.actor.use_torch_compile=False"
  "actor_rollout_ref.actor.fsdp_config.use_torch_compile=False"
  "critic.strategy=fsdp2"
  "critic.model.trust_remote_code=False"
  "actor_rollout_ref.nccl_timeout=7200"
  "actor_rollout_ref.model.use_remove_padding=True"
  "actor_rollout_ref.hybrid_engine=False"
  "+actor_rollout_ref.model.override_config.max_position_embeddings=32768"
  "actor_rollout_ref.model.path={MODEL_PATH}"
  "actor_rollout_ref.model.trust_remote_code=False"
  # ref
  "actor_rollout_ref.ref.fsdp_config.param_offload={REF_OFFLOAD}"
  "actor_rollout_ref.ref.ulysses_sequence_parallel_size={SP_SIZE}"
  "actor_rollout_ref.ref.log_prob_use_dynamic_bsz=True"
  "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu={PPO_MAX_TOKEN_LEN_PER_DEVICE}"
  "actor_rollout_ref.ref.use_torch_compile=False"
  "actor_rollout_ref.ref.fsdp_config.use_torch_compile=False"
  # rollout
  "actor_rollout_ref.rollout.n={ROLLOUT_N}"
  "actor_rollout_ref.rollout.free_cache_engine=True"
  "actor_rollout_ref.rollout.calculate_log_probs=True"
  "actor_rollout_ref.rollout.gpu_memory_utilization={GPU_MEMORY_UTILIZATION}"
  "actor_rollout_ref.rollout.tensor_model_parallel_size={ROLLOUT_TP}"
  "actor_rollout_ref.rollout.expert_parallel_size={ROLLOUT_EP}"
  "actor_rollout_ref.rollout.enable_chunked_prefill=True"
  "actor_rollout_ref.rollout.max_num_batched_tokens={max_num_batched_tokens}"
  "actor_rollout_ref.rollout.max_model_len={MAX_MODEL_LEN}"
  "actor_rollout_ref.rollout.enforce_eager=False"
  "+actor_rollout_ref.rollout.enable_sleep_mode=False"
  "+actor_rollout_ref.rollout.engine_kwargs.vllm.limit_mm_per_prompt={image:1,video:0}"
  "actor_rollout_ref.rollout.temperature=1.0"
  "actor_rollout_ref.rollout.top_p=1.0"
  "actor_rollout_ref.rollout.top_k=-1"
  "actor_rollout_ref.rollout.val_kwargs.temperature=1.0"
  "actor_rollout_ref.rollout.val_kwargs.top_p=0.7"
  "actor_rollout_ref.rollout.val_kwargs.top_k=-1"
  "actor_rollout_ref.rollout.val_kwargs.do_sample=True"
  "actor_rollout_ref.rollout.val_kwargs.n=1"
  "actor_rollout_ref.rollout.name=vllm"
  "actor_rollout_ref.rollout.mode=async"
  "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=True"
  "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu={PPO_MAX_TOKEN_LEN_PER_DEVICE}"
  # algorithm
  "algorithm.adv_estimator=grpo"
  "algorithm.use_kl_in_reward=False"
  "algorithm.kl_ctrl.kl_coef=0.0"
  "algorithm.rollout_correction.bypass_mode=False"
  # trainer
  "trainer.logger={LOGGER}"
  "trainer.project_name={PROJECT_NAME}"
  "trainer.experiment_name={EXPERIMENT_NAME}"
  "trainer.val_before_train={VAL_BEFORE_TRAIN}"
  "trainer.test_freq={TEST_FREQ}"
  "trainer.default_local_dir={CHECKPOINT_DIR}"
  "trainer.resume_mode={RESUME_MODE}"
  "trainer.resume_from_path={RESUME_FROM_PATH}"
  "trainer.nnodes={TRAINER_NNODES}"
  "trainer.n_gpus_per_node={TRAINER_DEVICES_PER_NODE}"
  "trainer.save_freq={SAVE_FREQ}"
  "trainer.max_actor_ckpt_to_keep={CHECKPOINTS_TO_KEEP}"
  "trainer.max_critic_ckpt_to_keep={CHECKPOINTS_TO_KEEP}"
  "rollout.nnodes={ROLLOUT_NNODES}"
  "rollout.n_gpus_per_node={ROLLOUT_DEVICES_PER_NODE}"
  "rollout.total_rollout_steps={TOTAL_ROLLOUT_STEPS}"
  # reward (DAPO overlong penalty)
  "reward_model.reward_manager=dapo"
  "+reward_model.reward_kwargs.overlong_buffer_cfg.enable=True"
  "+reward_model.reward_kwargs.overlong_buffer_cfg.len={OVERLONG_BUFFER_LEN}"
  "+reward_model.reward_kwargs.overlong_buffer_cfg.penalty_factor=1.0"
  "+reward_model.reward_kwargs.overlong_buffer_cfg.log=False"
  "+reward_model.reward_kwargs.max_resp_len={MAX_RESPONSE_LENGTH}"
  # async training
  "async_training.staleness_threshold={STALENESS_THRESHOLD}"
  "async_training.trigger_parameter_sync_step={TRIGGER_PARAMETER_SYNC_STEP}"
  "async_training.require_batches={REQUIRE_BATCHES}"
  "async_training.partial_rollout={PARTIAL_ROLLOUT}"
)

# ---- cross-checks (before anything starts) ------------------------------------------------------
fa_check() {
  local p=${VG_VAL[MAX_PROMPT_LENGTH]} r=${VG_VAL[MAX_RESPONSE_LENGTH]} mml=${VG_VAL[MAX_MODEL_LEN]}
  local tn=${VG_VAL[TRAINER_NNODES]} td=${VG_VAL[TRAINER_DEVICES_PER_NODE]}
  local rn=${VG_VAL[ROLLOUT_NNODES]} rd=${VG_VAL[ROLLOUT_DEVICES_PER_NODE]}
  local sp=${VG_VAL[SP_SIZE]} fsdp=${VG_VAL[FSDP_SIZE]} tp=${VG_VAL[ROLLOUT_TP]} ep=${VG_VAL[ROLLOUT_EP]}
  local mini=${VG_VAL[PPO_MINI_BATCH_SIZE]} n=${VG_VAL[ROLLOUT_N]} tok=${VG_VAL[PPO_MAX_TOKEN_LEN_PER_DEVICE]}
  local tw=$((tn * td)) rw=$((rn * rd)) seq=$((p + r))

  vg_check_per_node VLGRPO_TRAINER_DEVICES_PER_NODE "$td"
  vg_check_per_node VLGRPO_ROLLOUT_DEVICES_PER_NODE "$rd"
  vg_check_lengths "$p" "$r" "$mml"
  if ((tok * sp < seq)); then
    vg_problem VLGRPO_PPO_MAX_TOKEN_LEN_PER_DEVICE "$tok x SP size $sp = $((tok * sp)) tokens cannot hold one sequence of prompt + response = $seq (verl asserts max_token_len >= sequence length)" \
      "set VLGRPO_PPO_MAX_TOKEN_LEN_PER_DEVICE to at least $(((seq + sp - 1) / sp)), or raise VLGRPO_SP_SIZE"
  fi
  if ((tw % sp != 0)); then
    vg_problem VLGRPO_SP_SIZE "$sp does not divide the trainer's $tw devices ($tn x $td)" "choose a divisor of $tw"
  elif (((mini * n) % (tw / sp) != 0)); then
    vg_problem VLGRPO_PPO_MINI_BATCH_SIZE "mini-batch $mini x $n responses = $((mini * n)) samples do not split evenly over $((tw / sp)) data-parallel ranks (trainer devices / SP)" \
      "choose VLGRPO_PPO_MINI_BATCH_SIZE so that it x VLGRPO_ROLLOUT_N is a multiple of $((tw / sp))"
  fi
  if ((fsdp != -1 && tw % fsdp != 0)); then
    vg_problem VLGRPO_FSDP_SIZE "$fsdp does not divide the trainer's $tw devices ($tn x $td)" "set -1, $tw, or a divisor of $tw"
  fi
  vg_check_rollout_layout "$tp" 1 "$ep" "$rn" "$rd"
  if ((VG_VAL[OVERLONG_BUFFER_LEN] >= r)); then
    vg_problem VLGRPO_OVERLONG_BUFFER_LEN "${VG_VAL[OVERLONG_BUFFER_LEN]} is not below the max response length $r (every response would be penalised)" \
      "set it below $r (upstream: half of it)"
  fi
  vg_check_resume

  VG_VAL[max_num_batched_tokens]=$seq
  VG_TOPOLOGY="trainer $tn node(s) x $td + rollout $rn node(s) x $rd = $((tw + rw)) $VG_PLATFORM devices"
  VG_CLUSTER_NODES=$((tn + rn))
  VG_CLUSTER_PER_NODE=$((td > rd ? td : rd))
  VG_CLUSTER_DEVICES=$((tw + rw))
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  # shellcheck disable=SC2064 # the fixed trap text of lib/environment.sh
  trap "$VG_ERR_TRAP" ERR
  for vg_word; do vg_cli "$vg_word"; done
  vg_flush_problems
  vg_entry
fi
