"""Patch ``qwen3_vl_moe.router_dtype``: the Qwen3-VL-MoE sparse MoE block's routing-weights dtype (field case B03).

transformers 4.57.x ``Qwen3VLMoeTextSparseMoeBlock.forward`` (and VeOmni 0.1.9a5's copy, bound over it by
``apply_veomni_qwen3vlmoe_patch``) casts the top-k routing weights to the hidden-state dtype and scatters them into a
tensor of the router-logits dtype: a dtype error under mixed precision. The replacements (torch code) are in
:mod:`vlgrpo.patches.moe_routing`: :func:`~vlgrpo.patches.moe_routing.make_sparse_moe_block_forward` picks the one
matching the bound forward (transformers' or VeOmni's).
"""

import ast

from vlgrpo.patches.source import function_node, name_of, ordered, routing_scatters

_QWEN3_VL_MOE = "transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe"
_MONKEY = "verl.models.transformers.monkey_patch"

RECORD = {
    "id": "qwen3_vl_moe.router_dtype",
    "title": "MoE router scatter dtype error under mixed precision, every transformers 4.57.x (B03)",
    "summary": (
        "Qwen3-VL-MoE sparse MoE block casts the top-k routing weights to the hidden-state dtype and scatters "
        "them into a tensor of the router-logits dtype: 'scatter(): Expected self.dtype to be equal to "
        "src.dtype' under mixed precision; replaced by a forward that casts to the router-logits dtype."
    ),
    "upstream": (
        "verl-project/verl#4401 (fix: verl PR #4402, gated there at transformers<=4.57.3); "
        "huggingface/transformers#41418; the same cast in VeOmni 0.1.9a5's block forward"
    ),
    "applies_when": (
        "the bound `Qwen3VLMoeTextSparseMoeBlock.forward` casts routing weights to another tensor's dtype "
        "before scattering them into `zeros_like(router_logits)` (every transformers 4.57.x, and VeOmni "
        "0.1.9a5's copy, re-checked after `apply_veomni_qwen3vlmoe_patch`; not transformers 5.x)"
    ),
    "targets": ((_QWEN3_VL_MOE, "Qwen3VLMoeTextSparseMoeBlock.forward"),),
    "detector": __name__ + ":is_faulty",
    "replacement": "vlgrpo.patches.moe_routing:make_sparse_moe_block_forward",
    "wraps": True,
    "verify": __name__ + ":verify",
    # VeOmni 0.1.9a5 binds its own copy of the faulty forward over transformers' when it builds the model
    "recheck_after": (
        (_MONKEY, "apply_monkey_patch"),
        ("veomni.models.transformers.qwen3_vl_moe.modeling_qwen3_vl_moe", "apply_veomni_qwen3vlmoe_patch"),
    ),
}


def _dtype_cast_base(value):
    """``x.to(y.dtype)`` -> ``"y"``; else ``None``."""
    if (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and value.func.attr == "to"
        and value.args
        and isinstance(value.args[0], ast.Attribute)
        and value.args[0].attr == "dtype"
    ):
        return name_of(value.args[0].value)
    return None


def is_faulty(obj):
    """Router-dtype fault (B03): routing weights cast to one tensor's dtype, then scattered into
    ``zeros_like(<another tensor>)``.

    transformers 4.57.x ``Qwen3VLMoeTextSparseMoeBlock.forward`` (``modeling_qwen3_vl_moe.py``) does
    ``routing_weights = routing_weights.to(hidden_states.dtype)`` and then
    ``torch.zeros_like(router_logits).scatter_(1, router_indices, routing_weights)``.
    """
    fn = function_node(obj)
    casts = {}  # variable -> name whose dtype it was last cast to
    scatters = {id(c): (d, s) for c, d, s in routing_scatters(fn)}
    if not scatters:
        return False, "no scatter of routing weights into zeros_like(...) (block rewritten, e.g. transformers 5.x)"
    for node in ordered(fn):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            base = _dtype_cast_base(node.value)
            if base is None:
                casts.pop(node.targets[0].id, None)
            else:
                casts[node.targets[0].id] = base
        elif id(node) in scatters:
            dest, src = scatters[id(node)]
            if src in casts and dest is not None and casts[src] != dest:
                return True, (
                    f"line {node.lineno} of {fn.name}: {src} cast to {casts[src]}.dtype, then scattered "
                    f"into zeros_like({dest}) (dtype error when they differ)"
                )
    return False, "routing weights are cast to the dtype of the tensor they are scattered into"


def verify() -> None:
    """B03 input (4 tokens, 8 experts, top-2, router logits bf16, hidden states fp32 via CPU autocast): the
    replacement runs, its dense routing rows sum to 1 over the chosen experts, and its output matches a float64
    reference. Raises ``AssertionError`` on mismatch."""
    import torch

    from vlgrpo.patches import moe_routing as m

    block = m.tiny_block()
    x = torch.randn(1, 4, 16)
    ref = m.reference_moe(x[0], block.gate.weight, block.experts.gate_up_proj, block.experts.down_proj, 2)
    for training in (True, False):
        block.train(training)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = block.gate(x.reshape(-1, 16))
            assert logits.dtype == torch.bfloat16 and x.dtype == torch.float32, "autocast did not mix dtypes"
            _, dense, idx, _ = m.dense_routing(block, x.reshape(-1, 16))
            out, _ = m.sparse_moe_block_forward(block, x)
        sums = dense.float().sum(-1)
        assert torch.allclose(sums, torch.ones_like(sums), atol=1e-2), f"routing rows sum to {sums.tolist()}"
        assert int((dense != 0).sum()) == 4 * 2, "dense routing matrix must hold exactly top_k entries per token"
        err = (out.reshape(4, 16).double() - ref).abs().max().item()
        assert err < 0.05 * max(1.0, ref.abs().max().item()), f"bf16 output off the reference by {err}"
        block.train(True)
    out, _ = m.sparse_moe_block_forward(block.train(False), x)
    err = (out.reshape(4, 16).double() - ref).abs().max().item()
    assert err < 1e-5, f"fp32 output off the float64 reference by {err}"
