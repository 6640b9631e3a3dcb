"""Tiny Qwen3-VL / Qwen3-VL-MoE model (real configs scaled down) through verl's monkey patch; prints one JSON line.

Run by test_vision_wiring.py in a fresh interpreter. Environment: STEPS="dense:0,moe:1" builds the models in that
order; ":1" calls verl's ``apply_monkey_patch`` on the model (which binds verl's module-level
``fast_pos_embed_interpolate`` onto both vision classes). The shim on PYTHONPATH (or VLGRPO_PATCHES=off)
decides whether vlgrpo's patches are active.
"""

import json
import os
import sys
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[4]
out = {}


def run(model_kind, apply_verl):
    """Build the tiny model, optionally apply verl's monkey patch, run one forward with two images."""
    out = {}
    if model_kind == "dense":
        from transformers.models.qwen3_vl import modeling_qwen3_vl as mod
        from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLConfig as Config

        cls, vision_cls = mod.Qwen3VLForConditionalGeneration, mod.Qwen3VLVisionModel
        raw = json.loads((REPO / "assets/models/qwen3-vl-2b-instruct/config.json").read_text())
    else:
        from transformers.models.qwen3_vl_moe import modeling_qwen3_vl_moe as mod
        from transformers.models.qwen3_vl_moe.configuration_qwen3_vl_moe import Qwen3VLMoeConfig as Config

        cls, vision_cls = mod.Qwen3VLMoeForConditionalGeneration, mod.Qwen3VLMoeVisionModel
        raw = json.loads((REPO / "assets/models/qwen3-vl-30b-a3b-instruct/config.json").read_text())
        raw["text_config"].update(moe_intermediate_size=16, num_experts=8, num_experts_per_tok=2)
    raw["text_config"].update(
        hidden_size=32,
        head_dim=16,
        num_attention_heads=2,
        num_key_value_heads=1,
        num_hidden_layers=2,
        intermediate_size=64,
    )
    raw["text_config"]["rope_scaling"]["mrope_section"] = [4, 2, 2]
    raw["text_config"].pop("dtype", None)
    raw["vision_config"].update(
        depth=2, hidden_size=32, num_heads=2, intermediate_size=64, out_hidden_size=32, deepstack_visual_indexes=[0, 1]
    )
    cfg = Config(**raw)
    torch.manual_seed(0)
    model = cls(cfg).eval()
    if apply_verl:
        from verl.models.transformers.monkey_patch import apply_monkey_patch

        apply_monkey_patch(model, use_remove_padding=False)
        out["apply_monkey_patch_wrapped"] = hasattr(apply_monkey_patch, "__wrapped__")
    bound = vision_cls.fast_pos_embed_interpolate
    out["bound_file"] = bound.__code__.co_filename
    verl_mod = sys.modules.get("verl.models.transformers.qwen3_vl")
    if verl_mod is not None:
        out["verl_copy_file"] = verl_mod.fast_pos_embed_interpolate.__code__.co_filename
    grids = [[1, 4, 4], [1, 8, 12]]
    merge = cfg.vision_config.spatial_merge_size
    ids = [1, 2]
    for t, h, w in grids:
        ids += [cfg.vision_start_token_id] + [cfg.image_token_id] * (t * h * w // merge**2) + [cfg.vision_end_token_id]
    ids += [5, 6]
    input_ids = torch.tensor([ids])
    vc = cfg.vision_config
    pixel_values = torch.randn(
        sum(t * h * w for t, h, w in grids), vc.in_channels * vc.temporal_patch_size * vc.patch_size**2
    )
    with torch.no_grad():
        logits = model(
            input_ids=input_ids,
            attention_mask=torch.ones_like(input_ids),
            pixel_values=pixel_values,
            image_grid_thw=torch.tensor(grids),
        ).logits
    out["logits"] = logits[0, :, :16].tolist()
    import vlgrpo.patches

    out["status"] = {r["id"]: r["status"] for r in vlgrpo.patches.status(import_targets=False)}
    out["targets"] = {
        t["target"]: t["status"] for r in vlgrpo.patches.status(import_targets=False) for t in r["targets"]
    }
    return out


try:
    import torch

    for step in os.environ.get("STEPS", "dense:0").split(","):
        kind, verl = step.split(":")
        out[step] = run(kind, verl == "1")
except Exception:
    out["crash"] = traceback.format_exc()
print(json.dumps(out))
