"""The patch registry: one declared record per runtime patch.

This module is imported at interpreter start (through ``sitecustomize`` → :mod:`vlgrpo.patches.bootstrap`),
so it holds plain data only: no torch, no transformers, no verl, no ``dataclasses``/``inspect``/``logging``.
Everything a record names (detector, replacement, verify) is a ``"module:attribute"`` string that
:mod:`vlgrpo.patches.engine` imports only when a target module has been imported.

Record fields
-------------
id            stable patch id (used by ``VLGRPO_PATCHES_DISABLED`` and ``python -m vlgrpo patches status``)
summary       one line: what goes wrong without the patch
upstream      upstream references (issues/PRs) for the fault and for the fix it mirrors
applies_when  one line: the code condition under which the patch is applied (never a version number)
targets       ``(module, attribute path[, detector])``. The path is resolved at check time, so
              ``"Qwen3VLMoeTextSparseMoeBlock.forward"`` means "the forward of whatever class that module
              attribute names *now*" (verl's NPU layer rebinds the class name; see field case B04). A third
              element overrides the record's detector for that target.
detector      ``"module:function"``; ``function(obj) -> (faulty: bool, reason: str)`` inspects the installed
              code itself (its source, parsed with :mod:`ast`).
replacement   ``"module:function"``; installed in place of a faulty target (a per-target copy carrying
              ``__wrapped__`` = the original and ``__vlgrpo_patch__`` = the id). With ``"wraps": True`` it is
              a factory ``replacement(original) -> function`` (to call the original, or to pick the variant
              matching the installed code); its ``__vlgrpo_code__`` lists the code objects it can return.
verify        ``"module:function"``; ``function() -> None`` runs the fixed code on tiny CPU inputs against an
              independent reference and raises ``AssertionError`` on mismatch.
recheck_after ``(module, function)`` pairs of upstream functions that may rebind the targets (verl's monkey
              patch); they are wrapped so that every record is re-checked right after they return.
"""

_P = "vlgrpo.patches."

_QWEN3_VL = "transformers.models.qwen3_vl.modeling_qwen3_vl"
_QWEN3_VL_MOE = "transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe"
_VERL_QWEN3_VL = "verl.models.transformers.qwen3_vl"
_VERL_QWEN3_5 = "verl.models.transformers.qwen3_5"
_VERL_NPU = "verl.models.transformers.npu_patch"
_VERL_MONKEY = "verl.models.transformers.monkey_patch"
_VEOMNI_QWEN3_VL_MOE = "veomni.models.transformers.qwen3_vl_moe.modeling_qwen3_vl_moe"

PATCHES = (
    {
        "id": "qwen3_vl.vision_pos_embed",
        "summary": (
            "Qwen3-VL vision tower `fast_pos_embed_interpolate` builds its index/weight tensors on "
            "`pos_embed.weight.device` (the CPU under FSDP2 cpu_offload -> device-mismatch error) and iterates "
            "device tensors element by element; replaced by a version that computes on `grid_thw.device`."
        ),
        "upstream": (
            "verl-project/verl#5571 (fix: verl PR #6131, moved by PR #6332); "
            "huggingface/transformers#45859 (same family, text M-RoPE)"
        ),
        "applies_when": (
            "the bound `fast_pos_embed_interpolate` takes its device from `pos_embed.weight` "
            "(transformers 4.57.x-5.5.x); verl's module-level copies are replaced too so its monkey patch "
            "cannot undo the fix"
        ),
        "targets": (
            (_QWEN3_VL, "Qwen3VLVisionModel.fast_pos_embed_interpolate"),
            (_QWEN3_VL_MOE, "Qwen3VLMoeVisionModel.fast_pos_embed_interpolate"),
            (_VERL_QWEN3_VL, "fast_pos_embed_interpolate", _P + "pos_embed_targets:verl_copy_is_faulty"),
            (_VERL_QWEN3_5, "fast_pos_embed_interpolate", _P + "pos_embed_targets:verl_copy_is_faulty"),
        ),
        "detector": _P + "qwen3_vl_pos_embed:is_faulty",
        "replacement": _P + "qwen3_vl_pos_embed:fast_pos_embed_interpolate",
        "verify": _P + "qwen3_vl_pos_embed:verify",
        "recheck_after": ((_VERL_MONKEY, "apply_monkey_patch"),),
    },
    {
        "id": "qwen3_vl.text_rotary_device",
        "summary": (
            "Qwen3-VL text M-RoPE `forward` multiplies the `inv_freq` buffer with `position_ids` without moving it "
            "to their device: a device-mismatch error when the buffer stays on the CPU under FSDP2 CPU offload; "
            "replaced by a forward that moves `inv_freq` to `position_ids.device` (bitwise equal otherwise)."
        ),
        "upstream": "huggingface/transformers#45859 (fix: transformers PR #45861); field case B01 note",
        "applies_when": (
            "the bound text rotary `forward` reads `self.inv_freq` and never moves it to the computation device "
            "(transformers 4.57.x)"
        ),
        "targets": (
            (_QWEN3_VL, "Qwen3VLTextRotaryEmbedding.forward"),
            (_QWEN3_VL_MOE, "Qwen3VLMoeTextRotaryEmbedding.forward"),
        ),
        "detector": _P + "detect:rotary_inv_freq_off_device",
        "replacement": _P + "text_rotary:text_rotary_forward",
        "verify": _P + "text_rotary:verify",
        "recheck_after": ((_VERL_MONKEY, "apply_monkey_patch"),),
    },
    {
        "id": "qwen3_vl_moe.router_dtype",
        "summary": (
            "Qwen3-VL-MoE sparse MoE block casts the top-k routing weights to the hidden-state dtype and scatters "
            "them into a tensor of the router-logits dtype: 'scatter(): Expected self.dtype to be equal to "
            "src.dtype' under mixed precision; replaced by a forward that casts to the router-logits dtype."
        ),
        "upstream": "verl-project/verl#4401 (fix: verl PR #4402, gated there at transformers<=4.57.3); "
        "huggingface/transformers#41418; the same cast in VeOmni 0.1.9a5's block forward",
        "applies_when": (
            "the bound `Qwen3VLMoeTextSparseMoeBlock.forward` casts routing weights to another tensor's dtype "
            "before scattering them into `zeros_like(router_logits)` (every transformers 4.57.x, and VeOmni "
            "0.1.9a5's copy, re-checked after `apply_veomni_qwen3vlmoe_patch`; not transformers 5.x)"
        ),
        "targets": ((_QWEN3_VL_MOE, "Qwen3VLMoeTextSparseMoeBlock.forward"),),
        "detector": _P + "detect:scatter_dtype_mismatch",
        "replacement": _P + "moe_routing:make_sparse_moe_block_forward",
        "wraps": True,
        "verify": _P + "moe_routing:verify_router_dtype",
        # VeOmni 0.1.9a5 binds its own copy of the faulty forward over transformers' when it builds the model
        "recheck_after": (
            (_VERL_MONKEY, "apply_monkey_patch"),
            (_VEOMNI_QWEN3_VL_MOE, "apply_veomni_qwen3vlmoe_patch"),
        ),
    },
    {
        "id": "npu.qwen3_vl_moe.train_routing",
        "summary": (
            "verl's Ascend `NPUQwen3VLMoeTextSparseMoeBlock.forward` builds the dense (tokens x num_experts) "
            "routing matrix only in eval mode; in training the NPU experts index a (tokens x top_k) tensor by "
            "expert id (silently wrong routing, flat reward, tiny ppo_kl); replaced by a forward that is dense "
            "in both modes."
        ),
        "upstream": "verl-project/verl PR #6131 ('Bug1'; history: PR #4406, PR #4888)",
        "applies_when": (
            "the final bound forward of the Qwen3-VL-MoE sparse MoE block (verl's NPU class, whatever name "
            "transformers' module binds) builds the dense routing scatter under a `self.training` test "
            "(verl 0.7.x)"
        ),
        "targets": (
            (_VERL_NPU, "NPUQwen3VLMoeTextSparseMoeBlock.forward"),
            (_QWEN3_VL_MOE, "Qwen3VLMoeTextSparseMoeBlock.forward"),
        ),
        "detector": _P + "detect:routing_scatter_guarded_by_training",
        "replacement": _P + "moe_routing:npu_sparse_moe_block_forward",
        "verify": _P + "moe_routing:verify_train_routing",
        "recheck_after": ((_VERL_MONKEY, "apply_monkey_patch"),),
    },
)

PATCHES = PATCHES + (
    {
        "id": "rollout.vision_placeholder_ban",
        "summary": (
            "verl's vLLM rollout lets the policy sample `<|image_pad|>`/`<|video_pad|>` (151655/151656); the next "
            "consumer then crashes hours into training (get_rope_index StopIteration, vLLM masked-scatter AICPU "
            "crash on Ascend); a logit bias now bans the model's image/video placeholder ids in every request."
        ),
        "upstream": "verl-project/verl#5817 (fix for vLLM: verl PR #7038; related PR #6656)",
        "applies_when": (
            "verl's vLLM server module never ties image_token_id/video_token_id to a sampling ban "
            "(verl v0.8.0); vLLM rollouts only"
        ),
        "targets": (("verl.workers.rollout.vllm_rollout.vllm_async_server", "vLLMHttpServer.generate"),),
        "detector": _P + "rollout_ban:missing_ban",
        "replacement": _P + "rollout_ban:make_generate",
        "wraps": True,
        "verify": _P + "rollout_ban:verify",
        "recheck_after": (),
    },
    {
        "id": "rollout.vision_placeholder_mask",
        "summary": (
            "a `<|image_pad|>`/`<|video_pad|>` the policy still generated (no ban: sglang/trtllm, ban switched off) "
            "crashes verl's agent-loop postprocess or the actor forward (get_rope_index on a missing video grid / an "
            "extra image span, 'Image features and image tokens do not match'); the sample's generated placeholder "
            "ids are now replaced by the pad id and its response_mask zeroed (masked, one warning), not a job crash."
        ),
        "upstream": "verl-project/verl#5817 (no upstream guard; the vLLM-only ban of verl PR #7038 is the other half)",
        "applies_when": (
            "verl's `AgentLoopWorker._agent_loop_postprocess` (and the methods it calls) never checks the response "
            "ids against image_token_id/video_token_id (verl v0.8.0; both recipes' agent-loop workers)"
        ),
        "targets": (("verl.experimental.agent_loop.agent_loop", "AgentLoopWorker._agent_loop_postprocess"),),
        "detector": _P + "rollout_mask:missing_mask",
        "replacement": _P + "rollout_mask:make_agent_loop_postprocess",
        "wraps": True,
        "verify": _P + "rollout_mask:verify",
        "recheck_after": (),
    },
)

IDS = tuple(p["id"] for p in PATCHES)


def target_modules() -> dict:
    """Map each module name that a patch (or a recheck trigger) targets to the ids interested in it."""
    out: dict = {}
    for p in PATCHES:
        for mod, *_ in p["targets"] + p["recheck_after"]:
            out.setdefault(mod, [])
            if p["id"] not in out[mod]:
                out[mod].append(p["id"])
    return out


def get(patch_id: str) -> dict:
    """Return the record of ``patch_id``; ``KeyError`` naming the known ids otherwise."""
    for p in PATCHES:
        if p["id"] == patch_id:
            return p
    raise KeyError(f"unknown patch id {patch_id!r}; known: {', '.join(IDS)}")
