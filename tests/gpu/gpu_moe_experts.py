"""The grouped experts (patch ``qwen3_vl_moe.grouped_experts``) on CUDA at the real sizes; one JSON result.

Started by tests/gpu/test_gpu_moe_experts.py with the vlgrpo sitecustomize on PYTHONPATH (the patch loader runs as
in an image). Sizes: hidden 2048, 128 experts, moe_intermediate 768, top-8 (the real text config); bf16 unless
stated. The reference for values is a float64 per-expert loop of the same routing written here; the comparison
for gradients is transformers 4.57.6's own forward (the bound replacement's ``__wrapped__``).

Cases:
  patch       which forward is bound, and what the first-use check decided for cuda bf16 and fp32
  accuracy    4,096 tokens: max |out - fp64| of the replacement and of 4.57.6, train and eval mode
  grads_fp32  1,024 tokens, fp32: gradients (hidden states, routing weights at the chosen entries, gate_up_proj,
              down_proj) of the replacement against 4.57.6's loop, relative L2
  sync        after a warm-up, train fwd+bwd and eval fwd under ``torch.cuda.set_sync_debug_mode("error")``: any
              device-to-host synchronisation raises
  block       the real Qwen3VLMoeTextSparseMoeBlock (router-dtype fix bound too) with fp32 parameters under bf16
              autocast, train and eval, against the same block with 4.57.6's experts
  compile     torch.compile (default mode) of a function calling the experts forward, 512 tokens, train mode:
              values and gradients against eager
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F

# VLGRPO_GPU_SMOKE=1: small sizes on the CPU, only to check this script where no GPU is (no "sync" case there)
SMOKE = os.environ.get("VLGRPO_GPU_SMOKE") == "1"
H, E, INTER, K = (64, 16, 32, 4) if SMOKE else (2048, 128, 768, 8)
T_ACC, T_GRAD, T_COMPILE = (256, 128, 64) if SMOKE else (4096, 1024, 512)
DEV = "cpu" if SMOKE else "cuda"


def rel(a, b):
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def experts(dtype, seed=0):
    from transformers.models.qwen3_vl_moe import modeling_qwen3_vl_moe as m
    from transformers.models.qwen3_vl_moe.configuration_qwen3_vl_moe import Qwen3VLMoeTextConfig

    cfg = Qwen3VLMoeTextConfig(
        hidden_size=H, moe_intermediate_size=INTER, num_experts=E, num_experts_per_tok=K, hidden_act="silu"
    )
    torch.manual_seed(seed)
    with torch.device(DEV):
        mod = m.Qwen3VLMoeTextExperts(cfg)
        with torch.no_grad():
            mod.gate_up_proj.normal_(0, 0.02)
            mod.down_proj.normal_(0, 0.02)
    return mod.to(dtype)


def routing(tokens, dtype, seed=1):
    gen = torch.Generator(DEV).manual_seed(seed)
    x = torch.randn(1, tokens, H, device=DEV, generator=gen).to(dtype)
    probs = torch.softmax(torch.randn(tokens, E, device=DEV, generator=gen), dim=-1)
    w, idx = torch.topk(probs, K, dim=-1)
    dense = torch.zeros(tokens, E, device=DEV).scatter_(1, idx, w / w.sum(-1, keepdim=True)).to(dtype)
    return x, dense, idx


def fp64_reference(x, dense, idx, mod):
    x64, out = x.reshape(-1, H).double(), None
    out = torch.zeros_like(x64)
    for e in range(E):
        tok = (idx == e).any(-1).nonzero().squeeze(-1)
        if tok.numel():
            gate, up = (x64[tok] @ mod.gate_up_proj[e].double()).chunk(2, dim=-1)
            out.index_add_(0, tok, ((F.silu(gate) * up) @ mod.down_proj[e].double()) * dense[tok, e, None].double())
    return out


def train_grads(fn, mod, x, dense, idx, gy):
    mod.train().zero_grad(set_to_none=True)
    xi, di = x.clone().requires_grad_(True), dense.clone().requires_grad_(True)
    out = fn(mod, xi, di, idx)
    (out.float() * gy).sum().backward()
    return out.detach(), {
        "hidden_states": xi.grad,
        "routing_weights": di.grad.gather(1, idx),
        "gate_up_proj": mod.gate_up_proj.grad.clone(),
        "down_proj": mod.down_proj.grad.clone(),
    }


def main(argv=None) -> int:
    out_path = Path((argv or sys.argv[1:])[0])
    import transformers
    from transformers.models.qwen3_vl_moe import modeling_qwen3_vl_moe as m

    rep: dict = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "gpu": "cpu (smoke)" if SMOKE else torch.cuda.get_device_name(0),
        "capability": None if SMOKE else list(torch.cuda.get_device_capability(0)),
    }
    bound = m.Qwen3VLMoeTextExperts.forward
    ours = lambda mod, *a: bound(mod, *a)  # the bound replacement, called like the module does
    original = getattr(bound, "__wrapped__", bound)
    rep["patch"] = {
        "forward": f"{bound.__module__}.{bound.__qualname__}",
        "vlgrpo_patch": getattr(bound, "__vlgrpo_patch__", None),
    }
    try:
        from vlgrpo.patches import moe_experts as me

        for dtype in (torch.bfloat16, torch.float32):
            rep["patch"][str(dtype)] = list(me.method_for(DEV, dtype))
    except Exception:
        rep["patch"]["error"] = traceback.format_exc()[-2000:]

    def case(name, fn):
        try:
            rep[name] = fn()
        except Exception:
            rep[name] = {"error": traceback.format_exc()[-3000:]}

    def accuracy():
        mod = experts(torch.bfloat16)
        x, dense, idx = routing(T_ACC, torch.bfloat16)
        ref = fp64_reference(x, dense, idx, mod)
        res = {}
        for mode in ("train", "eval"):
            mod.train(mode == "train")
            with torch.no_grad():
                a, b = ours(mod, x, dense, idx), original(mod, x, dense, idx)
            res[mode] = {
                "ours": float((a.reshape(-1, H).double() - ref).abs().max()),
                "transformers": float((b.reshape(-1, H).double() - ref).abs().max()),
                "ours_vs_transformers_rel": rel(a, b),
                "dtype": [str(a.dtype), str(b.dtype)],
                "shape": [list(a.shape), list(b.shape)],
            }
        return res

    def grads_fp32():
        mod = experts(torch.float32)
        x, dense, idx = routing(T_GRAD, torch.float32)
        gy = torch.randn(x.shape, device=DEV, generator=torch.Generator(DEV).manual_seed(3))
        a, ga = train_grads(ours, mod, x, dense, idx, gy)
        b, gb = train_grads(original, mod, x, dense, idx, gy)
        return {"out": rel(a, b), **{k: rel(ga[k], gb[k]) for k in ga}}

    def sync():
        mod = experts(torch.bfloat16)
        x, dense, idx = routing(T_ACC, torch.bfloat16)
        gy = torch.randn(x.shape, device=DEV)
        for _ in range(2):  # warm-up: the first-use check may synchronise, once
            train_grads(ours, mod, x, dense, idx, gy)
        torch.cuda.synchronize()
        res = {}
        for mode in ("train", "eval"):
            torch.cuda.set_sync_debug_mode("error")
            try:
                if mode == "train":
                    train_grads(ours, mod, x, dense, idx, gy)
                else:
                    with torch.no_grad():
                        ours(mod.eval(), x, dense, idx)
                res[mode] = "no sync"
            except RuntimeError as exc:
                res[mode] = f"synchronised: {exc}"[:500]
            finally:
                torch.cuda.set_sync_debug_mode("default")
        return res

    def block():
        from transformers.models.qwen3_vl_moe.configuration_qwen3_vl_moe import Qwen3VLMoeTextConfig

        cfg = Qwen3VLMoeTextConfig(
            hidden_size=H, moe_intermediate_size=INTER, num_experts=E, num_experts_per_tok=K, hidden_act="silu"
        )
        torch.manual_seed(0)
        with torch.device(DEV):
            blk = m.Qwen3VLMoeTextSparseMoeBlock(cfg)
            with torch.no_grad():
                blk.gate.weight.normal_(0, 0.02)
                blk.experts.gate_up_proj.normal_(0, 0.02)
                blk.experts.down_proj.normal_(0, 0.02)
        x = torch.randn(2, T_COMPILE, H, device=DEV)
        res = {"block_forward_patch": getattr(type(blk).forward, "__vlgrpo_patch__", None)}
        for mode in (True, False):
            blk.train(mode)
            with torch.autocast(DEV, dtype=torch.bfloat16), torch.no_grad():
                a, _ = blk(x)
                m.Qwen3VLMoeTextExperts.forward = original
                try:
                    b, _ = blk(x)
                finally:
                    m.Qwen3VLMoeTextExperts.forward = bound
            res["train" if mode else "eval"] = {"rel": rel(a, b), "dtype": [str(a.dtype), str(b.dtype)]}
        return res

    def compiled():
        mod = experts(torch.bfloat16).train()
        x, dense, idx = routing(T_COMPILE, torch.bfloat16)
        gy = torch.randn(x.shape, device=DEV)

        def layer(mod, xi, di, idx):
            return ours(mod, xi, di, idx) * 1.5

        torch._dynamo.reset()
        comp = torch.compile(layer)
        a, ga = train_grads(comp, mod, x, dense, idx, gy)
        b, gb = train_grads(layer, mod, x, dense, idx, gy)
        return {"out": rel(a, b), **{k: rel(ga[k], gb[k]) for k in ga}}

    for name, fn in (
        ("accuracy", accuracy),
        ("grads_fp32", grads_fp32),
        ("sync", sync),
        ("block", block),
        ("compile", compiled),
    ):
        if SMOKE and name == "sync":
            continue
        case(name, fn)
        if not SMOKE:
            torch.cuda.empty_cache()
    out_path.write_text(json.dumps(rep, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
