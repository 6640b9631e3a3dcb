"""VeOmni 0.1.9a5's real Qwen3-VL-MoE patch (``apply_veomni_qwen3vlmoe_patch``) over transformers 4.57.6, then one
sparse MoE block (B03 input) under bf16 autocast; prints one JSON line. Run by test_moe_routing.py in a fresh
interpreter with .cache/veomni-0.1.9a5 on PYTHONPATH. ``psutil`` (a VeOmni runtime need, absent from the CPU test
environment, unused by this path) is replaced by an automatic stand-in."""

import json
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from stub_modules import StubFinder  # same folder as this script

out = {}


try:
    sys.meta_path.append(StubFinder(["psutil"]))
    import torch
    import transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe as hf
    import veomni.models.transformers.qwen3_vl_moe.modeling_qwen3_vl_moe as vm
    from reference_moe import reference_moe
    from transformers.models.qwen3_vl_moe.configuration_qwen3_vl_moe import Qwen3VLMoeTextConfig

    import vlgrpo.patches

    vm.apply_veomni_qwen3vlmoe_patch()
    fwd = hf.Qwen3VLMoeTextSparseMoeBlock.forward
    out["forward"] = [fwd.__code__.co_filename.split("site-packages/")[-1].split(".cache/")[-1], fwd.__code__.co_name]
    out["wrapped_file"] = getattr(getattr(fwd, "__wrapped__", None), "__code__", fwd.__code__).co_filename
    row = {r["id"]: r for r in vlgrpo.patches.status(import_targets=False)}["qwen3_vl_moe.router_dtype"]
    out["status"] = [row["status"], row["reason"]]
    out["experts_class"] = f"{hf.Qwen3VLMoeTextExperts.__module__}.{hf.Qwen3VLMoeTextExperts.__qualname__}"
    cfg = Qwen3VLMoeTextConfig(
        hidden_size=16, moe_intermediate_size=8, num_experts=8, num_experts_per_tok=2, hidden_act="silu"
    )
    torch.manual_seed(0)
    block = hf.Qwen3VLMoeTextSparseMoeBlock(cfg)
    with torch.no_grad():
        block.experts.gate_up_proj.normal_(0, 0.3)
        block.experts.down_proj.normal_(0, 0.3)
    seen = []
    block.experts.register_forward_pre_hook(lambda mod, args: seen.append(args))
    x = torch.randn(1, 4, 16)
    ref = reference_moe(x[0], block.gate.weight, block.experts.gate_up_proj, block.experts.down_proj, 2)
    for mode in ("train", "eval"):
        block.train(mode == "train")
        try:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                y, logits = block(x)
            top = seen[-1][3] if len(seen[-1]) > 3 else None
            out[mode] = {
                "err": (y[0].double() - ref).abs().max().item(),
                "ref_max": ref.abs().max().item(),
                "n_args": len(seen[-1]),
                "topk": None
                if top is None
                else [list(top.shape), str(top.dtype), (top.float().sum(-1) - 1).abs().max().item()],
            }
        except Exception as exc:
            out[mode] = {"error": f"{type(exc).__name__}: {exc}"}
    # same dtypes (fp32, no autocast): identical to VeOmni's own forward, both outputs
    original = getattr(fwd, "__wrapped__", fwd)
    eq = []
    for mode in (True, False):
        block.train(mode)
        a, b = original(block, x), fwd(block, x)
        eq.append(bool(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])))
    out["fp32_identical"] = eq
except Exception:
    out["crash"] = traceback.format_exc()
print(json.dumps(out))
