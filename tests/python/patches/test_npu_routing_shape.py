"""Field case B04, the tensor itself: the routing matrix that the NPU block's forward hands to the experts must be
(tokens x num_experts) in train() and in eval() (verl 0.7.x sent (tokens x top_k) in training, and the NPU experts
then read its columns by expert id). Recorded with a forward pre-hook on the real transformers 4.57.6 experts
module; the expected matrix is computed here from the gate weights (softmax over the experts in float64, top-2,
renormalised), not taken from the code under test."""

from __future__ import annotations

import pytest
import torch
from transformers.models.qwen3_vl_moe import modeling_qwen3_vl_moe as m
from transformers.models.qwen3_vl_moe.configuration_qwen3_vl_moe import Qwen3VLMoeTextConfig

from vlgrpo.patches import moe_routing

TOKENS, HIDDEN, EXPERTS, TOP_K = 4, 16, 8, 2  # the case's minimal input


def _block():
    cfg = Qwen3VLMoeTextConfig(
        hidden_size=HIDDEN, moe_intermediate_size=8, num_experts=EXPERTS, num_experts_per_tok=TOP_K, hidden_act="silu"
    )
    torch.manual_seed(0)
    block = m.Qwen3VLMoeTextSparseMoeBlock(cfg)
    with torch.no_grad():
        block.experts.gate_up_proj.normal_(0, 0.3)
        block.experts.down_proj.normal_(0, 0.3)
    return block


def _expected_dense(block, x):
    probs = torch.softmax(x.double() @ block.gate.weight.double().T, dim=-1)
    top, idx = probs.topk(TOP_K, dim=-1)
    dense = torch.zeros(TOKENS, EXPERTS, dtype=torch.float64)
    return dense.scatter(1, idx, top / top.sum(-1, keepdim=True))


@pytest.mark.parametrize("training", [True, False])
def test_b04_experts_receive_tokens_by_num_experts_in_both_modes(training):
    block = _block().train(training)
    x = torch.randn(1, TOKENS, HIDDEN, generator=torch.Generator().manual_seed(1))
    seen = []
    handle = block.experts.register_forward_pre_hook(lambda mod, args: seen.append(args))
    try:
        moe_routing.npu_sparse_moe_block_forward.__get__(block, type(block))(x)
    finally:
        handle.remove()
    assert len(seen) == 1
    routing = seen[0][1]
    assert routing.shape == (TOKENS, EXPERTS)  # never (tokens x top_k)
    assert torch.equal((routing != 0).sum(-1), torch.full((TOKENS,), TOP_K))
    torch.testing.assert_close(routing.double(), _expected_dense(block, x[0]), rtol=1e-6, atol=1e-6)
