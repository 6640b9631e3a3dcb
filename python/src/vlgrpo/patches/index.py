"""Start-up index of the patch registry (generated: ``make docs-patches``; do not edit by hand).

The patch ids and, for each module a patch targets (or re-checks after), the ids interested in it, as
:mod:`vlgrpo.patches.registry` declares them. Plain data: :func:`vlgrpo.patches.bootstrap.install` reads it
at interpreter start without importing the fix modules. tests/python/patches/test_fix_modules.py fails
when it differs from the registry.
"""

IDS = (
    "qwen3_vl.vision_pos_embed",
    "qwen3_vl.text_rotary_device",
    "qwen3_vl_moe.router_dtype",
    "qwen3_vl_moe.grouped_experts",
    "npu.qwen3_vl_moe.train_routing",
    "rollout.vision_placeholder_ban",
    "rollout.vision_placeholder_mask",
    "rollout.encoder_cache_reset",
    "rollout.server_loopback",
    "reward.tokenizer_remote_code",
    "rollout.weight_sync_dp_rank",
    "checkpoint_engine.rendezvous_timeout",
    "checkpoint.manifest",
    "fully_async.resume_step_label",
    "fully_async.partial_rollout_budget",
    "fully_async.resume_pending_prompts",
    "fully_async.stall_watchdog",
    "ppo.stall_watchdog",
)

TARGET_MODULES = {
    "transformers.models.qwen3_vl.modeling_qwen3_vl": (
        "qwen3_vl.vision_pos_embed",
        "qwen3_vl.text_rotary_device",
    ),
    "transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe": (
        "qwen3_vl.vision_pos_embed",
        "qwen3_vl.text_rotary_device",
        "qwen3_vl_moe.router_dtype",
        "qwen3_vl_moe.grouped_experts",
        "npu.qwen3_vl_moe.train_routing",
    ),
    "verl.models.transformers.qwen3_vl": (
        "qwen3_vl.vision_pos_embed",
    ),
    "verl.models.transformers.qwen3_5": (
        "qwen3_vl.vision_pos_embed",
    ),
    "verl.models.transformers.monkey_patch": (
        "qwen3_vl.vision_pos_embed",
        "qwen3_vl.text_rotary_device",
        "qwen3_vl_moe.router_dtype",
        "qwen3_vl_moe.grouped_experts",
        "npu.qwen3_vl_moe.train_routing",
    ),
    "veomni.models.transformers.qwen3_vl_moe.modeling_qwen3_vl_moe": (
        "qwen3_vl_moe.router_dtype",
        "qwen3_vl_moe.grouped_experts",
    ),
    "verl.models.transformers.npu_patch": (
        "npu.qwen3_vl_moe.train_routing",
    ),
    "verl.workers.rollout.vllm_rollout.vllm_async_server": (
        "rollout.vision_placeholder_ban",
        "rollout.server_loopback",
    ),
    "verl.experimental.agent_loop.agent_loop": (
        "rollout.vision_placeholder_mask",
    ),
    "vllm.v1.core.sched.scheduler": (
        "rollout.encoder_cache_reset",
    ),
    "verl.experimental.reward_loop.reward_loop": (
        "reward.tokenizer_remote_code",
    ),
    "verl.workers.rollout.vllm_rollout.utils": (
        "rollout.weight_sync_dp_rank",
    ),
    "verl.checkpoint_engine.nccl_checkpoint_engine": (
        "checkpoint_engine.rendezvous_timeout",
    ),
    "verl.checkpoint_engine.hccl_checkpoint_engine": (
        "checkpoint_engine.rendezvous_timeout",
    ),
    "verl.utils.checkpoint.fsdp_checkpoint_manager": (
        "checkpoint.manifest",
    ),
    "verl.experimental.fully_async_policy.fully_async_rollouter": (
        "checkpoint.manifest",
        "fully_async.partial_rollout_budget",
        "fully_async.resume_pending_prompts",
        "fully_async.stall_watchdog",
    ),
    "verl.trainer.ppo.ray_trainer": (
        "checkpoint.manifest",
        "ppo.stall_watchdog",
    ),
    "verl.experimental.fully_async_policy.fully_async_trainer": (
        "fully_async.resume_step_label",
        "fully_async.stall_watchdog",
    ),
    "verl.workers.rollout.llm_server": (
        "fully_async.partial_rollout_budget",
    ),
    "verl.experimental.fully_async_policy.message_queue": (
        "fully_async.stall_watchdog",
    ),
}
