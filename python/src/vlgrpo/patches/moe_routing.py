"""Replacement forwards for the Qwen3-VL-MoE sparse MoE block (patches ``qwen3_vl_moe.router_dtype`` and
``npu.qwen3_vl_moe.train_routing``), and their self-checks.

Both replacements compute the routing the way the model defines it (transformers 4.57.6,
``transformers/models/qwen3_vl_moe/modeling_qwen3_vl_moe.py``, ``Qwen3VLMoeTextSparseMoeBlock``):

- ``router_logits = gate(x)``, shape (tokens, num_experts), dtype of the gate output;
- softmax over experts in float32, top-``k`` (``num_experts_per_tok``), renormalised to sum 1 per token;
- a dense (tokens, num_experts) routing matrix, zero except the chosen experts, **in the router-logits dtype**
  (the cast to the hidden-state dtype is the B03 bug), built in train *and* eval mode (the eval-only build is
  the B04 bug of verl 0.7.x's NPU block);
- ``experts(hidden_states (batch, seq, hidden), routing_weights (tokens, num_experts), router_indices (tokens, k))``.

The records, detectors and self-checks: :mod:`vlgrpo.patches.fixes.qwen3_vl_moe_router_dtype` and
:mod:`vlgrpo.patches.fixes.npu_qwen3_vl_moe_train_routing`. Imported only when a target module is imported (it imports
torch).
"""

from __future__ import annotations

import torch


def dense_routing(self, flat_hidden: torch.Tensor):
    """Return ``(router_logits, routing_weights, router_indices, top_weights)`` for ``flat_hidden`` (tokens,
    hidden): the dense (tokens, num_experts) matrix in the router-logits dtype and the renormalised top-k weights
    (tokens, top_k) in float32."""
    router_logits = self.gate(flat_hidden)
    probs = torch.softmax(router_logits, dim=-1, dtype=torch.float32)
    top_weights, router_indices = torch.topk(probs, self.top_k, dim=-1)
    top_weights = top_weights / top_weights.sum(dim=-1, keepdim=True)
    routing_weights = torch.zeros_like(router_logits).scatter_(1, router_indices, top_weights.to(router_logits.dtype))
    return router_logits, routing_weights, router_indices, top_weights


def sparse_moe_block_forward(self, hidden_states: torch.Tensor):
    """Drop-in ``Qwen3VLMoeTextSparseMoeBlock.forward`` (transformers 4.57.x) without the scatter dtype error.

    Args:
        hidden_states: (batch, seq, hidden) in any float dtype.

    Returns:
        ``(routed_out, router_logits)`` like the original: routed_out (batch, seq, hidden) as the experts return
        it, router_logits (batch*seq, num_experts). Bitwise equal to the original whenever the router-logits
        and hidden-state dtypes agree.
    """
    batch_size = hidden_states.shape[0]
    flat = hidden_states.reshape(-1, self.hidden_size)
    router_logits, routing_weights, router_indices, _ = dense_routing(self, flat)
    routed_out = self.experts(flat.reshape(batch_size, -1, self.hidden_size), routing_weights, router_indices)
    return routed_out, router_logits


def sparse_moe_block_forward_topk(self, hidden_states: torch.Tensor):
    """Drop-in for VeOmni 0.1.9a5's ``Qwen3VLMoeTextSparseMoeBlock_forward``
    (``veomni/models/transformers/qwen3_vl_moe/modeling_qwen3_vl_moe.py``, bound over transformers' block by
    ``apply_veomni_qwen3vlmoe_patch``), which repeats the B03 cast and also hands its experts the compact top-k
    weights for the fused MoE kernels. Same as :func:`sparse_moe_block_forward`, plus that 4th argument: the
    top-k weights (tokens, top_k) in the hidden-state dtype, exactly as VeOmni passes them.

    Returns:
        ``(routed_out, router_logits)``.
    """
    batch_size = hidden_states.shape[0]
    flat = hidden_states.reshape(-1, self.hidden_size)
    router_logits, routing_weights, router_indices, top_weights = dense_routing(self, flat)
    routed_out = self.experts(
        flat.reshape(batch_size, -1, self.hidden_size), routing_weights, router_indices, top_weights.to(flat.dtype)
    )
    return routed_out, router_logits


def _experts_call_arity(func) -> int:
    """Number of positional arguments the function passes to ``self.experts(...)`` (0 if it never calls it)."""
    import ast

    from vlgrpo.patches.source import function_node

    for node in ast.walk(function_node(func)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "experts"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "self"
        ):
            return len(node.args) + len(node.keywords)
    return 0


def make_sparse_moe_block_forward(original):
    """Pick the replacement matching the faulty forward that is bound: VeOmni's (4 arguments to the experts) or
    transformers' (3)."""
    return sparse_moe_block_forward_topk if _experts_call_arity(original) >= 4 else sparse_moe_block_forward


make_sparse_moe_block_forward.__vlgrpo_code__ = (
    sparse_moe_block_forward.__code__,
    sparse_moe_block_forward_topk.__code__,
)


def npu_sparse_moe_block_forward(self, hidden_states: torch.Tensor):
    """Drop-in ``NPUQwen3VLMoeTextSparseMoeBlock.forward`` (verl 0.7.x ``npu_patch.py``), dense in both modes.

    Args:
        hidden_states: (batch, seq, hidden).

    Returns:
        routed_out (batch, seq, hidden), like verl's NPU block (which returns no router logits). The experts
        always receive the dense (tokens, num_experts) routing matrix (verl fix: PR #6131).
    """
    batch_size = hidden_states.shape[0]
    flat = hidden_states.reshape(-1, self.hidden_size)
    _, routing_weights, router_indices, _ = dense_routing(self, flat)
    return self.experts(flat.reshape(batch_size, -1, self.hidden_size), routing_weights, router_indices)


# --- shared by the fixes' self-checks (python -m vlgrpo patches status --verify) ---------------------------------


def reference_moe(
    hidden: torch.Tensor, gate_weight: torch.Tensor, gate_up_proj: torch.Tensor, down_proj: torch.Tensor, top_k: int
) -> torch.Tensor:
    """Plain per-token float64 reference of the Qwen3-VL-MoE routed MLP.

    Args:
        hidden: (tokens, hidden); gate_weight: (num_experts, hidden); gate_up_proj: (num_experts, hidden,
            2*inter) with the gate half first; down_proj: (num_experts, inter, hidden).

    Returns:
        (tokens, hidden) float64.
    """
    x = hidden.double()
    logits = x @ gate_weight.double().T
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        p = torch.softmax(logits[t], dim=-1)
        w, e = torch.topk(p, top_k)
        w = w / w.sum()
        for weight, expert in zip(w.tolist(), e.tolist()):
            gu = x[t] @ gate_up_proj[expert].double()
            g, u = gu[: gu.shape[0] // 2], gu[gu.shape[0] // 2 :]
            out[t] += weight * ((torch.nn.functional.silu(g) * u) @ down_proj[expert].double())
    return out


def tiny_block(seed: int = 0):
    """A stand-in sparse MoE block for the self-checks: transformers' ``Qwen3VLMoeTextExperts`` (hidden 16,
    moe_intermediate 8, 8 experts, top-2) behind a bias-free ``nn.Linear`` gate, weights drawn from ``seed``."""
    from transformers.models.qwen3_vl_moe import modeling_qwen3_vl_moe as m
    from transformers.models.qwen3_vl_moe.configuration_qwen3_vl_moe import Qwen3VLMoeTextConfig

    cfg = Qwen3VLMoeTextConfig(
        hidden_size=16, moe_intermediate_size=8, num_experts=8, num_experts_per_tok=2, hidden_act="silu"
    )
    torch.manual_seed(seed)
    block = torch.nn.Module()
    block.hidden_size, block.num_experts, block.top_k = 16, 8, 2
    block.gate = torch.nn.Linear(16, 8, bias=False)
    block.experts = m.Qwen3VLMoeTextExperts(cfg)
    with torch.no_grad():
        block.experts.gate_up_proj.normal_(0, 0.3)
        block.experts.down_proj.normal_(0, 0.3)
    return block
