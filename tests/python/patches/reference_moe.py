"""Independent float64 reference of the Qwen3-VL-MoE routed MLP (used by the tests and the NPU scenarios)."""

import torch


def reference_moe(x, gate_w, gate_up, down, top_k):
    """Per-token float64 MoE: softmax over experts, top-k renormalised, SiLU-gated expert MLPs. Differentiable.

    x (T, H); gate_w (E, H); gate_up (E, H, 2I) gate half first; down (E, I, H). Returns (T, H) float64.
    """
    x, gate_w, gate_up, down = (t.double() for t in (x, gate_w, gate_up, down))
    probs = torch.softmax(x @ gate_w.T, dim=-1)
    rows = []
    for t in range(x.shape[0]):
        w, e = torch.topk(probs[t], top_k)
        w = w / w.sum()
        acc = torch.zeros(x.shape[1], dtype=torch.float64)
        for k in range(top_k):
            h = x[t] @ gate_up[e[k]]
            inter = h.shape[0] // 2
            acc = acc + w[k] * ((torch.nn.functional.silu(h[:inter]) * h[inter:]) @ down[e[k]])
        rows.append(acc)
    return torch.stack(rows)
