"""Patch ``npu.qwen3_vl_moe.train_routing``: verl's Ascend MoE block routes densely only in eval mode (field case B04).

verl 0.7.x ``NPUQwen3VLMoeTextSparseMoeBlock.forward`` (``verl/models/transformers/npu_patch.py``) builds the dense
(tokens x num_experts) routing matrix only under ``if not self.training``; in training the NPU experts index a
(tokens x top_k) tensor by expert id: silently wrong routing. The replacement (torch code) is
:func:`vlgrpo.patches.moe_routing.npu_sparse_moe_block_forward`, dense in both modes.
"""

import ast

from vlgrpo.patches.source import function_node, routing_scatters

_QWEN3_VL_MOE = "transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe"
_MONKEY = "verl.models.transformers.monkey_patch"

RECORD = {
    "id": "npu.qwen3_vl_moe.train_routing",
    "title": "Ascend MoE block routes wrongly in training: flat reward, tiny ppo_kl (B04)",
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
        ("verl.models.transformers.npu_patch", "NPUQwen3VLMoeTextSparseMoeBlock.forward"),
        (_QWEN3_VL_MOE, "Qwen3VLMoeTextSparseMoeBlock.forward"),
    ),
    "detector": __name__ + ":is_faulty",
    "replacement": "vlgrpo.patches.moe_routing:npu_sparse_moe_block_forward",
    "verify": __name__ + ":verify",
    "recheck_after": ((_MONKEY, "apply_monkey_patch"),),
}


def _mentions_training(test) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == "training" for n in ast.walk(test))


def is_faulty(obj):
    """NPU train-routing fault (B04): the dense routing scatter sits under an ``if`` on ``self.training``.

    verl 0.7.x ``NPUQwen3VLMoeTextSparseMoeBlock.forward`` (``verl/models/transformers/npu_patch.py``) has
    ``if not self.training: routing_weights = torch.zeros_like(router_logits).scatter_(...)``.
    """
    fn = function_node(obj)
    scatters = {id(c) for c, _, _ in routing_scatters(fn)}
    if not scatters:
        return False, "no dense routing scatter in this forward (not the verl NPU block pattern)"
    for node in ast.walk(fn):
        if isinstance(node, ast.If) and _mentions_training(node.test):
            inside = {id(n) for n in ast.walk(node)} - {id(n) for n in ast.walk(node.test)}
            hit = scatters & inside
            if hit:
                return True, (
                    f"line {node.lineno} of {fn.name}: dense (tokens x num_experts) routing matrix built "
                    f"only under `if {ast.unparse(node.test)}`"
                )
    return False, "dense routing matrix built in both train and eval mode"


def verify() -> None:
    """B04 input (hidden 16, moe_intermediate 8, 8 experts, top-2, 4 tokens, fixed seed): the replacement gives
    the same output in ``train()`` and ``eval()``, equal to a float64 reference (transformers' experts consume the
    dense matrix in both modes). Raises ``AssertionError`` on mismatch."""
    import torch

    from vlgrpo.patches import moe_routing as m

    block = m.tiny_block(seed=1)
    x = torch.randn(1, 4, 16)
    ref = m.reference_moe(x[0], block.gate.weight, block.experts.gate_up_proj, block.experts.down_proj, 2)
    train_out = m.npu_sparse_moe_block_forward(block.train(True), x)
    eval_out = m.npu_sparse_moe_block_forward(block.train(False), x)
    assert torch.allclose(train_out, eval_out, atol=1e-6), "train and eval outputs differ"
    err = (train_out.reshape(4, 16).double() - ref).abs().max().item()
    assert err < 1e-5, f"output off the float64 reference by {err}"
