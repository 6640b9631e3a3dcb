"""B19 1-step dry run: VeOmni 0.1.9a5's own ``build_foundation_model`` builds a scaled-down copy of the shipped
Qwen3-VL-30B-A3B config on the CPU with random weights (the way verl 0.8.0's VeOmni engine builds the actor), then
one forward + backward on one Geometry3K image row; prints one JSON line.

Run by test_veomni_build.py in a fresh interpreter with .cache/veomni-0.1.9a5 on PYTHONPATH (VeOmni patches
transformers process-wide on import). argv[1]: output folder for the scaled config.

Real pieces: VeOmni's builder, registry and Qwen3-VL-MoE model (transformers 4.57.6 underneath), transformers'
``Qwen3VLProcessor`` with the image processor, tokenizer and chat template of assets/models/qwen3-vl-30b-a3b-instruct,
train row 0 of assets/geo3k-sample. Left out: the video processor (it needs torchvision, absent beside the CPU torch
here; no video is processed). Kernels: every VeOmni kernel field ``eager``, attention ``eager`` (the image's fused
MoE / flash-attention kernels need an accelerator).

Scaled down (shapes of the 30B config kept where they are structure): the vision tower keeps patch_size 16,
temporal_patch_size 2, spatial_merge_size 2, num_position_embeddings 2304 (48x48 pos_embed grid), 3 deepstack
layers; widths, depths and the expert count shrink. The text model keeps the vocabulary (151936) and the token ids.
"""

import json
import math
import os
import sys
import time
import traceback

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
MODEL = os.path.join(REPO, "assets", "models", "qwen3-vl-30b-a3b-instruct")
SAMPLE = os.path.join(REPO, "assets", "geo3k-sample")

out = {}
t0 = time.perf_counter()
try:
    import torch
    from PIL import Image
    from transformers import AutoImageProcessor, AutoTokenizer
    from veomni.arguments.arguments_types import OpsImplementationConfig
    from veomni.models.auto import build_foundation_model

    from preflight_helpers import qwen3vl_processor  # this script's folder is sys.path[0]

    # --- the scaled-down config: a copy of the shipped config.json with small sizes ---------------------------
    with open(os.path.join(MODEL, "config.json"), encoding="utf-8") as fh:
        cfg = json.load(fh)
    text, vision = cfg["text_config"], cfg["vision_config"]
    text.update(
        hidden_size=64,
        intermediate_size=128,
        moe_intermediate_size=32,
        num_experts=4,
        num_experts_per_tok=2,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
    )
    text["rope_scaling"]["mrope_section"] = [4, 2, 2]  # sums to head_dim / 2, as [24, 20, 20] does for 128
    vision.update(
        depth=3,
        hidden_size=32,
        intermediate_size=64,
        num_heads=2,
        out_hidden_size=64,
        deepstack_visual_indexes=[0, 1, 2],
    )
    folder = sys.argv[1]
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as fh:
        json.dump(cfg, fh)

    fields = [f for f in OpsImplementationConfig.__dataclass_fields__ if f.endswith("_implementation")]
    ops = OpsImplementationConfig(**{f: "eager" for f in fields})
    torch.manual_seed(0)
    # bfloat16: what verl builds for the recipe (veomni.mixed_precision unset -> torch_dtype "bfloat16")
    model = build_foundation_model(folder, torch_dtype="bfloat16", init_device="cpu", ops_implementation=ops)
    out["model_class"] = f"{type(model).__module__}.{type(model).__qualname__}"
    out["devices"] = sorted({str(p.device) for p in model.parameters()})
    out["dtypes"] = sorted({str(p.dtype) for p in model.parameters()})
    pos_embed = model.model.visual.pos_embed
    out["pos_embed"] = list(pos_embed.weight.shape)

    # --- one geo3k image row through the real processor and chat template --------------------------------------
    with open(os.path.join(SAMPLE, "hiyouga-geometry3k-format", "rows.jsonl"), encoding="utf-8") as fh:
        row = json.loads(fh.readline())
    image = Image.open(os.path.join(SAMPLE, row["image"])).convert("RGB")
    tok = AutoTokenizer.from_pretrained(MODEL)
    with open(os.path.join(MODEL, "preprocessor_config.json"), encoding="utf-8") as fh:
        size = json.load(fh)["size"]
    # the slow processor (the fast one needs torchvision) with the folder's pixel bounds, which the fast one keeps
    improc = AutoImageProcessor.from_pretrained(
        MODEL, use_fast=False, min_pixels=size["shortest_edge"], max_pixels=size["longest_edge"]
    )
    proc = qwen3vl_processor(tok, improc, MODEL)  # transformers' own processor, without the video processor
    messages = [
        {
            "role": "user",
            "content": [{"type": "image"}, {"type": "text", "text": row["problem"].replace("<image>", "")}],
        }
    ]
    prompt = proc.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    full = prompt + row["answer"] + "<|im_end|>\n"
    batch = proc(text=[full], images=[image], return_tensors="pt")
    n_prompt = len(proc(text=[prompt], images=[image])["input_ids"][0])
    ids = batch["input_ids"]
    labels = ids.clone()
    labels[:, :n_prompt] = -100  # loss on the response only, as the actor's loss is
    grid = batch["image_grid_thw"]
    out["image_size"] = list(image.size)
    out["image_grid_thw"] = grid.tolist()
    out["pixel_values"] = list(batch["pixel_values"].shape)
    out["image_pad_tokens"] = int((ids == cfg["image_token_id"]).sum())
    out["seq_len"] = int(ids.shape[1])
    out["response_tokens"] = int((labels != -100).sum())

    # --- one forward + backward -------------------------------------------------------------------------------
    model.train()
    # verl 0.8.0 VeOmniEngine._apply_veomni_input_transforms hands VeOmni the placeholder masks (without them
    # VeOmni all-gathers input_ids over its sequence-parallel group, i.e. needs torch.distributed)
    res = model(
        input_ids=ids,
        attention_mask=batch["attention_mask"],
        pixel_values=batch["pixel_values"],
        image_grid_thw=grid,
        labels=labels,
        image_mask=ids == cfg["image_token_id"],
        video_mask=ids == cfg["video_token_id"],
    )
    loss = res.loss
    out["loss"] = float(loss)
    out["ln_vocab"] = math.log(cfg["text_config"]["vocab_size"])
    loss.backward()
    g = pos_embed.weight.grad
    out["pos_embed_grad"] = (
        None if g is None else {"finite": bool(torch.isfinite(g).all()), "abs_sum": float(g.abs().sum())}
    )
    missing = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
    out["params_without_grad"] = len(missing)
    out["params_without_grad_first"] = missing[:5]
    out["vision_params_without_grad"] = [n for n in missing if ".visual." in f".{n}"]
except Exception:
    out["crash"] = traceback.format_exc()
out["seconds"] = round(time.perf_counter() - t0, 2)
print(json.dumps(out))
