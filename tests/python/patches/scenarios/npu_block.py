"""NPU MoE block scenario, run in a fresh interpreter by test_npu_routing.py; prints one JSON line.

Environment: ORDER=startup|before (bootstrap from the shim at start-up, or vlgrpo.patches.install() after
npu_patch was imported); STACK=verl_router (call verl's own router fix after the NPU layer, as verl does for
transformers<=4.57.3); FAKE_QWEN3_5=1 (stand-in transformers.models.qwen3_5* modules, as verl 0.8.0 + upstream
c5a9ed569 would not need). PYTHONPATH chooses verl (0.7.1 from .cache or the venv's 0.8.0) and the torch_npu stand-in.
"""

import json
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
out = {}


def fake_qwen3_5():
    import types

    import transformers.models as tm

    for pkg, names in (
        ("qwen3_5", ("Qwen3_5RMSNormGated", "Qwen3_5RMSNorm")),
        ("qwen3_5_moe", ("Qwen3_5MoeExperts", "Qwen3_5MoeRMSNormGated", "Qwen3_5MoeRMSNorm")),
    ):
        parent = types.ModuleType(f"transformers.models.{pkg}")
        mod = types.ModuleType(f"transformers.models.{pkg}.modeling_{pkg}")
        for n in names:
            setattr(mod, n, type(n, (), {}))
        setattr(parent, f"modeling_{pkg}", mod)
        sys.modules[parent.__name__], sys.modules[mod.__name__] = parent, mod
        setattr(tm, pkg, parent)


try:
    import torch
    import verl

    out["verl"] = verl.__version__
    if os.environ.get("FAKE_QWEN3_5"):
        fake_qwen3_5()
    try:
        import verl.models.transformers.npu_patch as npu  # noqa: F401

        out["npu_import"] = "ok"
    except Exception as exc:
        out["npu_import"] = f"{type(exc).__name__}: {exc}"
    if os.environ.get("ORDER") == "before":
        import vlgrpo.patches

        vlgrpo.patches.install()
    if os.environ.get("STACK") == "verl_router":
        from verl.models.transformers.qwen3_vl import patch_qwen3_vl_moe_sparse_moe_block_forward

        patch_qwen3_vl_moe_sparse_moe_block_forward()
    from reference_moe import reference_moe
    from transformers.models.qwen3_vl_moe import modeling_qwen3_vl_moe as m
    from transformers.models.qwen3_vl_moe.configuration_qwen3_vl_moe import Qwen3VLMoeTextConfig

    import vlgrpo.patches

    cls = m.Qwen3VLMoeTextSparseMoeBlock
    out["block_class"] = f"{cls.__module__}.{cls.__qualname__}"
    out["forward_file"] = cls.forward.__code__.co_filename  # names can be copied by functools.wraps; code cannot
    rows = vlgrpo.patches.status(import_targets=False)
    out["status"] = {r["id"]: [r["status"], r["reason"]] for r in rows}
    out["targets"] = {t["target"]: t["status"] for r in rows for t in r["targets"]}
    # B04 minimal input: hidden 16, moe_intermediate 8, 8 experts, top-2, 4 tokens, fixed seed
    cfg = Qwen3VLMoeTextConfig(
        hidden_size=16, moe_intermediate_size=8, num_experts=8, num_experts_per_tok=2, hidden_act="silu"
    )
    torch.manual_seed(0)
    block = cls(cfg)
    with torch.no_grad():
        block.experts.gate_up_proj.normal_(0, 0.3)
        block.experts.down_proj.normal_(0, 0.3)
    x0 = torch.randn(1, 4, 16)
    params = [block.gate.weight, block.experts.gate_up_proj, block.experts.down_proj]
    xr = x0[0].clone().requires_grad_(True)
    pr = [p.detach().clone().requires_grad_(True) for p in params]
    ref = reference_moe(xr, *pr, top_k=2)
    ref.pow(2).sum().backward()
    outs = {}
    for mode in ("train", "eval"):
        block.train(mode == "train").zero_grad()
        x = x0.clone().requires_grad_(True)
        try:
            y = block(x)
            y = y[0] if isinstance(y, tuple) else y
            y.double().pow(2).sum().backward()
            outs[mode] = y.detach()
            out[mode] = {
                "out_err": (y[0].double() - ref).abs().max().item(),
                "grad_x_err": (x.grad[0].double() - xr.grad).abs().max().item(),
                "grad_param_err": max((p.grad.double() - q.grad).abs().max().item() for p, q in zip(params, pr)),
            }
        except Exception as exc:
            out[mode] = {"error": f"{type(exc).__name__}: {exc}"}
    if len(outs) == 2:
        out["train_eval_diff"] = (outs["train"] - outs["eval"]).abs().max().item()
except Exception:
    out["crash"] = traceback.format_exc()
print(json.dumps(out))
