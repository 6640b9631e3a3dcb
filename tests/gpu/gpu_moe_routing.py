"""Train- and eval-mode routing of transformers' Qwen3VLMoeTextSparseMoeBlock on CUDA; one JSON result.

Started by tests/gpu/test_gpu_moe_routing.py in a subprocess, with or without the vlgrpo sitecustomize on
PYTHONPATH (the patch loader runs as in an image). The block is the real class of the imported
transformers (4.57.6 in the suite) with the scaled-down config of gpu_tinyqwen.py (hidden 512, 16 experts,
top-8, MoE intermediate 256).

Cases (each records its numbers or the exception):
  bf16        parameters and input in bf16; the block in train() and in eval() mode on the same weights
              and input; outputs and gradients (gate and expert weights, input) compared with an
              independent float64 reference written here (softmax over all experts, top-k chosen from
              the block's own router logits, renormalised, SwiGLU experts, weighted sum), and with
              each other.
  autocast    fp32 parameters under ``torch.autocast(DEV, torch.bfloat16)``: the router logits
              come out bf16 while the hidden states stay fp32 -- the mixed-precision case of field
              case B03 (transformers 4.57.x raises "scatter(): Expected self.dtype to be equal to
              src.dtype"); with the patch the block runs and matches the reference.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
import torch.nn.functional as F

import gpu_tinyqwen as tinyqwen

DEV = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: only to smoke-test this script


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def reference(x, gate_w, gate_up, down, top_k, chosen):
    """float64 sparse-MoE forward: x (T, H); gate_w (E, H); gate_up (E, H, 2I); down (E, I, H).

    ``chosen`` (T, k) are the expert ids (taken from the block's own logits so that near-ties in bf16
    cannot pick different experts). Returns (T, H) float64 and the (T, E) float64 router logits.
    """
    logits = x @ gate_w.T
    probs = torch.softmax(logits, dim=-1)
    w = probs.gather(1, chosen)
    w = w / w.sum(dim=-1, keepdim=True)
    out = torch.zeros_like(x)
    for j in range(top_k):
        e = chosen[:, j]
        gu = torch.bmm(x[:, None, :], gate_up[e])[:, 0]  # (T, 2I)
        g, u = gu.chunk(2, dim=-1)
        h = torch.bmm((u * F.silu(g))[:, None, :], down[e])[:, 0]  # (T, H)
        out = out + w[:, j : j + 1] * h
    return out, logits


def make_block(dtype, seed=0):
    from transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe import Qwen3VLMoeTextSparseMoeBlock

    cfg = tinyqwen.scaled_config().text_config
    torch.manual_seed(seed)
    blk = Qwen3VLMoeTextSparseMoeBlock(cfg)
    with torch.no_grad():
        blk.gate.weight.normal_(0.0, cfg.hidden_size**-0.5)
        blk.experts.gate_up_proj.normal_(0.0, cfg.hidden_size**-0.5)
        blk.experts.down_proj.normal_(0.0, cfg.moe_intermediate_size**-0.5)
    return blk.to(DEV, dtype), cfg


def run_mode(blk, x, mode: str, autocast: bool):
    blk.train(mode == "train")
    blk.zero_grad(set_to_none=True)
    xi = x.detach().clone().requires_grad_(True)
    with torch.autocast(DEV, dtype=torch.bfloat16, enabled=autocast):
        out, logits = blk(xi)
    gy = torch.ones_like(out, dtype=torch.float32).normal_(generator=torch.Generator(DEV).manual_seed(7))
    (out.float() * gy).sum().backward()
    grads = {
        "x": xi.grad.detach().clone(),
        "gate": blk.gate.weight.grad.detach().clone(),
        "gate_up": blk.experts.gate_up_proj.grad.detach().clone(),
        "down": blk.experts.down_proj.grad.detach().clone(),
    }
    return out.detach(), logits.detach(), grads, gy


def case(dtype, autocast: bool) -> dict:
    blk, cfg = make_block(dtype)
    gen = torch.Generator(DEV).manual_seed(1)
    x = torch.randn(2, 64, cfg.hidden_size, device=DEV, generator=gen).to(dtype)
    res: dict = {
        "param_dtype": str(dtype),
        "autocast_bf16": autocast,
        "tokens": 128,
        "num_experts": cfg.num_experts,
        "top_k": cfg.num_experts_per_tok,
        "forward_fn": f"{type(blk).forward.__module__}.{type(blk).forward.__qualname__}",
        "forward_patch": getattr(type(blk).forward, "__vlgrpo_patch__", None),
    }
    outs = {}
    for mode in ("eval", "train"):
        try:
            outs[mode] = run_mode(blk, x, mode, autocast)
        except Exception as exc:
            res[f"{mode}_error"] = {
                "type": type(exc).__name__,
                "message": str(exc)[:500],
                "frames": [f.name for f in traceback.extract_tb(exc.__traceback__)][-4:],
            }
    if len(outs) < 2:
        return res
    out_e, logits_e, g_e, gy = outs["eval"]
    out_t, logits_t, g_t, _ = outs["train"]
    res["out_dtype"] = str(out_t.dtype)
    res["logits_dtype"] = str(logits_t.dtype)
    # float64 reference on the same (upcast) weights and input
    x64 = x.detach().double().reshape(-1, cfg.hidden_size).requires_grad_(True)
    W = {
        k: v.detach().double().requires_grad_(True)
        for k, v in {
            "gate": blk.gate.weight,
            "gate_up": blk.experts.gate_up_proj,
            "down": blk.experts.down_proj,
        }.items()
    }
    chosen = torch.topk(logits_t.double(), cfg.num_experts_per_tok, dim=-1).indices
    ref_out, ref_logits = reference(x64, W["gate"], W["gate_up"], W["down"], cfg.num_experts_per_tok, chosen)
    (ref_out * gy.double().reshape(ref_out.shape)).sum().backward()
    ref_out = ref_out.detach().reshape(out_t.shape)
    res["same_topk_train_eval"] = bool(
        torch.equal(
            torch.topk(logits_e.float(), cfg.num_experts_per_tok).indices.sort(-1).values,
            torch.topk(logits_t.float(), cfg.num_experts_per_tok).indices.sort(-1).values,
        )
    )
    res["rel"] = {
        "logits_vs_ref": rel(logits_t, ref_logits.detach()),
        "train_vs_ref": rel(out_t, ref_out),
        "eval_vs_ref": rel(out_e, ref_out),
        "train_vs_eval": rel(out_t, out_e),
        "grad_x_train_vs_ref": rel(g_t["x"].reshape(-1, cfg.hidden_size), x64.grad),
        "grad_x_eval_vs_ref": rel(g_e["x"].reshape(-1, cfg.hidden_size), x64.grad),
    }
    for k in ("gate", "gate_up", "down"):
        res["rel"][f"grad_{k}_train_vs_ref"] = rel(g_t[k], W[k].grad)
        res["rel"][f"grad_{k}_eval_vs_ref"] = rel(g_e[k], W[k].grad)
        res["rel"][f"grad_{k}_train_vs_eval"] = rel(g_t[k], g_e[k])
    return res


def main(argv=None) -> int:
    out_path = Path((argv or sys.argv[1:])[0])
    import transformers

    report = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "gpu": torch.cuda.get_device_name(0) if DEV == "cuda" else "cpu",
        "vlgrpo_loaded": any(m == "vlgrpo" or m.startswith("vlgrpo.") for m in sys.modules),
        "cases": {"bf16": case(torch.bfloat16, False), "autocast": case(torch.float32, True)},
    }
    out_path.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
