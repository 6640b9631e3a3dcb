"""Qwen3-VL-MoE sparse MoE block: router dtype fix (B03) and dense routing in both modes (B04), against the real
transformers 4.57.6 classes and an independent float64 reference MoE written here.

The patched forwards are bound with pytest's monkeypatch (restored after each test), so this pytest process's
transformers classes stay unpatched for other suites.
"""

from __future__ import annotations

import json
import re

import pytest
import torch
from patch_helpers import MODEL_CONFIG, SCENARIOS, VEOMNI, VERL_071, run_py
from reference_moe import reference_moe
from transformers.models.qwen3_vl_moe import modeling_qwen3_vl_moe as m
from transformers.models.qwen3_vl_moe.configuration_qwen3_vl_moe import Qwen3VLMoeConfig, Qwen3VLMoeTextConfig

import vlgrpo.patches as P
from vlgrpo.patches import moe_routing, source, state
from vlgrpo.patches.fixes import npu_qwen3_vl_moe_train_routing as npu_routing
from vlgrpo.patches.fixes import qwen3_vl_moe_router_dtype as router_dtype

ORIGINAL_FORWARD = getattr(
    m.Qwen3VLMoeTextSparseMoeBlock.forward, "__wrapped__", m.Qwen3VLMoeTextSparseMoeBlock.forward
)
SCATTER_ERROR = re.escape("scatter(): Expected self.dtype to be equal to src.dtype")


def make_block(seed=0, hidden=16, inter=8, experts=8, top_k=2):
    cfg = Qwen3VLMoeTextConfig(
        hidden_size=hidden,
        moe_intermediate_size=inter,
        num_experts=experts,
        num_experts_per_tok=top_k,
        hidden_act="silu",
    )
    torch.manual_seed(seed)
    block = m.Qwen3VLMoeTextSparseMoeBlock(cfg)
    with torch.no_grad():
        block.experts.gate_up_proj.normal_(0, 0.3)
        block.experts.down_proj.normal_(0, 0.3)
    return block


def bind(block, func):
    return func.__get__(block, type(block))


def test_b03_original_raises_patched_matches_reference():
    # B03 minimal input: 4 tokens, 8 experts, top-2, router logits bf16 (autocast), hidden states fp32
    block = make_block()
    x = torch.randn(1, 4, 16)
    ref = reference_moe(x[0], block.gate.weight, block.experts.gate_up_proj, block.experts.down_proj, 2)
    for training in (True, False):
        block.train(training)
        with torch.autocast("cpu", dtype=torch.bfloat16), pytest.raises(RuntimeError, match=SCATTER_ERROR):
            bind(block, ORIGINAL_FORWARD)(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out, logits = bind(block, moe_routing.sparse_moe_block_forward)(x)
            _, dense, idx, _ = moe_routing.dense_routing(block, x.reshape(4, 16))
        assert logits.dtype == torch.bfloat16 and logits.shape == (4, 8)
        assert dense.shape == (4, 8) and dense.dtype == torch.bfloat16
        assert torch.equal((dense != 0).sum(-1), torch.full((4,), 2))
        assert torch.allclose(dense.float().sum(-1), torch.ones(4), atol=1e-2)
        assert torch.equal(dense.nonzero()[:, 1].reshape(4, 2).sort(-1).values, idx.sort(-1).values)
        assert (out[0].double() - ref).abs().max() < 0.03 * ref.abs().max()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("training", [True, False])
def test_identical_to_original_when_dtypes_agree(dtype, training):
    block = make_block(seed=3).to(dtype).train(training)
    x = torch.randn(2, 3, 16, dtype=dtype)
    out_o, logits_o = bind(block, ORIGINAL_FORWARD)(x)
    out_p, logits_p = bind(block, moe_routing.sparse_moe_block_forward)(x)
    assert torch.equal(out_o, out_p) and torch.equal(logits_o, logits_p)


@pytest.mark.parametrize("forward", ["sparse_moe_block_forward", "npu_sparse_moe_block_forward"])
def test_train_equals_eval_equals_reference_outputs_and_gradients(forward):
    block = make_block(seed=7)
    x0 = torch.randn(1, 6, 16)
    params = [block.gate.weight, block.experts.gate_up_proj, block.experts.down_proj]
    xr = x0[0].clone().requires_grad_(True)
    pr = [p.detach().clone().requires_grad_(True) for p in params]
    ref = reference_moe(xr, *pr, top_k=2)
    ref.pow(2).sum().backward()
    for training in (True, False):
        block.train(training).zero_grad()
        x = x0.clone().requires_grad_(True)
        out = bind(block, getattr(moe_routing, forward))(x)
        out = out[0] if isinstance(out, tuple) else out
        assert (out[0].double() - ref).abs().max() < 1e-5, f"training={training}"
        out.double().pow(2).sum().backward()
        assert (x.grad[0].double() - xr.grad).abs().max() < 1e-4
        for p, q in zip(params, pr):
            assert (p.grad.double() - q.grad).abs().max() < 1e-4, f"grad of {tuple(p.shape)} training={training}"


def tiny_vl_moe_config():
    """The real Qwen3-VL-30B-A3B config, scaled down (same structure, token ids, rope layout, 48x48 pos grid)."""
    raw = json.loads(MODEL_CONFIG.read_text())
    raw["text_config"].update(
        hidden_size=32,
        head_dim=16,
        num_attention_heads=2,
        num_key_value_heads=1,
        num_hidden_layers=2,
        intermediate_size=64,
        moe_intermediate_size=16,
        num_experts=8,
        num_experts_per_tok=2,
    )
    raw["text_config"]["rope_scaling"]["mrope_section"] = [4, 2, 2]
    raw["text_config"].pop("dtype")  # checkpoint storage dtype (bf16); these tests build fp32 weights
    raw["vision_config"].update(
        depth=2, hidden_size=32, num_heads=2, intermediate_size=64, out_hidden_size=32, deepstack_visual_indexes=[0, 1]
    )
    return Qwen3VLMoeConfig(**raw)


def image_batch(cfg, grid=(1, 4, 4)):
    t, h, w = grid
    n_img = t * h * w // cfg.vision_config.spatial_merge_size**2
    ids = [1, 2, cfg.vision_start_token_id] + [cfg.image_token_id] * n_img + [cfg.vision_end_token_id, 5, 6, 7]
    input_ids = torch.tensor([ids])
    patch = cfg.vision_config.in_channels * cfg.vision_config.temporal_patch_size * cfg.vision_config.patch_size**2
    pixel_values = torch.randn(t * h * w, patch)
    return dict(
        input_ids=input_ids,
        attention_mask=torch.ones_like(input_ids),
        pixel_values=pixel_values,
        image_grid_thw=torch.tensor([list(grid)]),
        labels=input_ids.clone(),
    )


def test_tiny_qwen3_vl_moe_model_trains_under_mixed_precision(monkeypatch):
    cfg = tiny_vl_moe_config()
    torch.manual_seed(0)
    model = m.Qwen3VLMoeForConditionalGeneration(cfg).train()
    batch = image_batch(cfg)
    with torch.no_grad():
        ref_fp32 = model(**batch).loss  # original forward, all fp32: the patched one must give the same loss
    # Mixed precision as in B03: under bf16 autocast the fp32 residual stream reaches the MoE block while the
    # router (a Linear) returns bf16 logits.
    with torch.autocast("cpu", dtype=torch.bfloat16), pytest.raises(RuntimeError, match=SCATTER_ERROR):
        model(**batch)
    replacement = moe_routing.make_sparse_moe_block_forward(ORIGINAL_FORWARD)
    assert replacement is moe_routing.sparse_moe_block_forward  # transformers' forward calls experts with 3 args
    monkeypatch.setitem(state.STATE, "unpatched_ids", state.STATE["unpatched_ids"])  # as it was, afterwards
    target = "transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe.Qwen3VLMoeTextSparseMoeBlock.forward"
    try:
        assert P.apply("qwen3_vl_moe.router_dtype")[target] == "applied"  # through the engine, as the hook does
        assert m.Qwen3VLMoeTextSparseMoeBlock.forward.__code__ is replacement.__code__
        _train_under_autocast(model, batch, ref_fp32)
    finally:
        P.unpatch("qwen3_vl_moe.router_dtype")
    assert m.Qwen3VLMoeTextSparseMoeBlock.forward is ORIGINAL_FORWARD


def _train_under_autocast(model, batch, ref_fp32):
    losses = {}
    for training in (True, False):
        model.train(training).zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(**batch)
        out.loss.backward()
        losses[training] = out.loss.item()
        gate = model.model.language_model.layers[0].mlp.gate.weight.grad
        assert gate is not None and torch.isfinite(gate).all() and gate.abs().sum() > 0
    assert abs(losses[True] - losses[False]) < 0.02 * abs(losses[False])
    assert abs(losses[True] - ref_fp32.item()) < 0.05 * abs(ref_fp32.item())
    with torch.no_grad():
        assert torch.equal(model.train(True)(**batch).loss, ref_fp32)  # dtypes agree (no autocast): identical


# --- detectors on the real code of several releases --------------------------------------------------------------


def _source_fn(path, qualname):
    return source.find_function(path.read_text(), qualname)


def test_router_detector_on_real_code():
    assert router_dtype.is_faulty(ORIGINAL_FORWARD)[0] is True
    assert router_dtype.is_faulty(moe_routing.sparse_moe_block_forward)[0] is False
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock

    faulty, reason = router_dtype.is_faulty(Qwen3MoeSparseMoeBlock.forward)  # no dense scatter: 5.x-style
    assert faulty is False and "no scatter" in reason
    import verl

    npu_080 = _source_fn(
        __import__("pathlib").Path(verl.__file__).parent / "models/transformers/npu_patch.py",
        "NPUQwen3VLMoeTextSparseMoeBlock.forward",
    )
    assert router_dtype.is_faulty(npu_080)[0] is False  # casts to router_logits.dtype


def test_train_routing_detector_on_real_code(verl_071):
    import verl

    npu_071 = _source_fn(VERL_071 / "verl/models/transformers/npu_patch.py", "NPUQwen3VLMoeTextSparseMoeBlock.forward")
    npu_080 = _source_fn(
        __import__("pathlib").Path(verl.__file__).parent / "models/transformers/npu_patch.py",
        "NPUQwen3VLMoeTextSparseMoeBlock.forward",
    )
    faulty, reason = npu_routing.is_faulty(npu_071)
    assert faulty is True and "not self.training" in reason
    assert npu_routing.is_faulty(npu_080)[0] is False
    assert npu_routing.is_faulty(ORIGINAL_FORWARD)[0] is False
    assert npu_routing.is_faulty(moe_routing.npu_sparse_moe_block_forward)[0] is False


# --- VeOmni 0.1.9a5 binds its own copy of the faulty forward (the VeOmni recipe never goes through verl) ---------


def _veomni_scenario(shim_dir, env=None):
    if not (VEOMNI / "veomni").is_dir():
        pytest.fail(f"VeOmni 0.1.9a5 is not installed in {VEOMNI}; run `make veomni-0.1.9a5` (make test-python does)")
    out = run_py(SCENARIOS / "veomni_block.py", path=[shim_dir, VEOMNI], env=env).json
    assert "crash" not in out, out.get("crash")
    return out


def test_veomni_block_forward_fixed_after_its_patch(shim_dir):
    out = _veomni_scenario(shim_dir)
    assert out["forward"] == [out["forward"][0], "sparse_moe_block_forward_topk"]
    assert out["wrapped_file"].endswith("veomni/models/transformers/qwen3_vl_moe/modeling_qwen3_vl_moe.py")
    assert out["status"][0] == "applied" and "Qwen3VLMoeTextSparseMoeBlock_forward" in out["status"][1]
    assert out["experts_class"].startswith("veomni.")
    for mode in ("train", "eval"):
        res = out[mode]
        assert "error" not in res, res
        assert res["err"] < 0.03 * res["ref_max"]  # bf16 autocast vs float64 reference
        # VeOmni's experts still get their 4th argument: compact top-k weights, renormalised, hidden dtype
        assert res["n_args"] == 4 and res["topk"][:2] == [[4, 2], "torch.float32"] and res["topk"][2] < 1e-6
    assert out["fp32_identical"] == [True, True]


def test_veomni_block_forward_unpatched_raises(shim_dir):
    out = _veomni_scenario(shim_dir, env={"VLGRPO_PATCHES": "off"})
    assert out["forward"][1] == "Qwen3VLMoeTextSparseMoeBlock_forward"
    for mode in ("train", "eval"):
        assert out[mode]["error"] == "RuntimeError: scatter(): Expected self.dtype to be equal to src.dtype"
