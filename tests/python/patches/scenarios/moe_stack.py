"""All three Qwen3-VL-MoE patches in one interpreter (shim at start-up, verl 0.7.1's real NPU layer with the torch_npu
stand-in): ``qwen3_vl_moe.router_dtype`` and ``qwen3_vl_moe.grouped_experts`` on transformers' block and experts,
``npu.qwen3_vl_moe.train_routing`` on verl's NPU block. Prints one JSON line; run by test_moe_experts.py.

transformers' block class is taken before verl's NPU layer rebinds the module's class name (as a model built before
that import would hold it); the NPU block is what the name holds afterwards.
"""

import json
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
out = {}
try:
    import torch
    from reference_moe import reference_moe
    from transformers.models.qwen3_vl_moe import modeling_qwen3_vl_moe as m
    from transformers.models.qwen3_vl_moe.configuration_qwen3_vl_moe import Qwen3VLMoeTextConfig

    tf_block_cls = m.Qwen3VLMoeTextSparseMoeBlock
    import verl.models.transformers.npu_patch as npu

    import vlgrpo.patches

    rows = vlgrpo.patches.status(import_targets=False)
    out["status"] = {r["id"]: r["status"] for r in rows}
    out["experts_forward"] = [
        m.Qwen3VLMoeTextExperts.forward.__code__.co_filename.rsplit("/", 2)[-1],
        getattr(m.Qwen3VLMoeTextExperts.forward, "__vlgrpo_patch__", None),
    ]
    out["npu_experts_forward"] = [
        npu.NPUQwen3VLMoeTextExperts.forward.__code__.co_filename.rsplit("/", 1)[-1],
        getattr(npu.NPUQwen3VLMoeTextExperts.forward, "__vlgrpo_patch__", None),
    ]
    out["block_classes"] = [tf_block_cls.__module__, m.Qwen3VLMoeTextSparseMoeBlock.__module__]
    out["block_forward_patches"] = [
        getattr(tf_block_cls.forward, "__vlgrpo_patch__", None),
        getattr(m.Qwen3VLMoeTextSparseMoeBlock.forward, "__vlgrpo_patch__", None),
    ]
    cfg = Qwen3VLMoeTextConfig(
        hidden_size=16, moe_intermediate_size=8, num_experts=8, num_experts_per_tok=2, hidden_act="silu"
    )
    x = torch.randn(1, 6, 16, generator=torch.Generator().manual_seed(0))
    for name, cls, autocast in (("transformers", tf_block_cls, True), ("npu", m.Qwen3VLMoeTextSparseMoeBlock, False)):
        torch.manual_seed(0)
        block = cls(cfg)
        with torch.no_grad():
            block.experts.gate_up_proj.normal_(0, 0.3)
            block.experts.down_proj.normal_(0, 0.3)
        ref = reference_moe(x[0], block.gate.weight, block.experts.gate_up_proj, block.experts.down_proj, 2)
        res = {"experts_class": type(block.experts).__name__}
        for mode in ("train", "eval"):
            block.train(mode == "train")
            try:
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                    y = block(x)
                y = y[0] if isinstance(y, tuple) else y
                res[mode] = {"err": (y[0].double() - ref).abs().max().item(), "ref_max": ref.abs().max().item()}
            except Exception as exc:
                res[mode] = {"error": f"{type(exc).__name__}: {exc}"}
        out[name] = res
except Exception:
    out["crash"] = traceback.format_exc()
print(json.dumps(out))
