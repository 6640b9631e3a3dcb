"""A scaled-down Qwen3-VL-30B-A3B and a Geometry3K batch, for the GPU suite (tests/gpu).

Everything here uses the real library code of the transformers that is imported (the suite pins
4.57.6, carried as a wheel to the GPU machine): the model classes
``transformers.Qwen3VLMoeForConditionalGeneration`` / ``Qwen3VLMoeConfig``, and the real processor
(``AutoProcessor``: Qwen2VLImageProcessor(Fast) + Qwen2TokenizerFast built offline from vocab.json /
merges.txt) read from the shipped model folder ``assets/models/qwen3-vl-30b-a3b-instruct``.

Scaling (what changes against the real config.json, and why):

* text model: 3 decoder layers (real 48), 16 experts (real 128) with top-8 routing kept, hidden 512
  (real 2048), 4 query / 2 KV heads of head_dim 128 (head_dim kept so that the M-RoPE sections
  [24, 20, 20] still fit), MoE intermediate 256, vocabulary kept (151936) so the real tokenizer's ids
  (``<|image_pad|>`` = 151655) index it. Every layer is a sparse MoE layer, as in the real model.
* vision tower: 3 blocks (real 27) with deepstack taps at [0, 1, 2] (real [8, 16, 24]); hidden 1152,
  16 heads, intermediate 4304, patch 16, temporal patch 2, spatial merge 2 and the 2304 (48 x 48)
  learned position embeddings are all the real values; ``out_hidden_size`` follows the text hidden.

No code here is copied from transformers; the config keys are the ones in the shipped config.json.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
MODEL_DIR = REPO / "assets" / "models" / "qwen3-vl-30b-a3b-instruct"
GEO3K_DIR = REPO / "assets" / "geo3k-sample"
GEO3K_ROWS = GEO3K_DIR / "hiyouga-geometry3k-format" / "rows.jsonl"

#: overrides applied to the real config.json (see the module docstring).
TEXT_OVERRIDES: dict[str, Any] = {
    "num_hidden_layers": 3,
    "num_experts": 16,
    "num_experts_per_tok": 8,
    "hidden_size": 512,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 128,
    "intermediate_size": 1024,
    "moe_intermediate_size": 256,
}
VISION_OVERRIDES: dict[str, Any] = {
    "depth": 3,
    "deepstack_visual_indexes": [0, 1, 2],
    "out_hidden_size": 512,
}


def real_config_dict() -> dict:
    """The shipped Qwen3-VL-30B-A3B-Instruct config.json as a dict (no network)."""
    with open(MODEL_DIR / "config.json", encoding="utf-8") as f:
        return json.load(f)


def config_with(text: dict, vision: dict, attn_implementation: str = "sdpa"):
    """Qwen3VLMoeConfig: the real config.json with the ``text`` / ``vision`` keys replaced (a
    ``transformers.Qwen3VLMoeConfig``; ImportError when the installed transformers has no Qwen3-VL-MoE)."""
    from transformers import Qwen3VLMoeConfig

    d = copy.deepcopy(real_config_dict())
    d["text_config"].update(text)
    d["vision_config"].update(vision)
    d.pop("transformers_version", None)
    d["text_config"].pop("dtype", None)  # the caller chooses the parameter dtype
    cfg = Qwen3VLMoeConfig(**d)
    cfg._attn_implementation = attn_implementation
    return cfg


#: the real widths (hidden 2048, 128 experts, moe_intermediate 768, top-8; vision hidden 1152), cut to 2 text layers
#: and 1 vision block: the model of the FSDP2 grouped-experts check (gpu_fsdp_moe.py)
REAL_WIDTH_2_LAYERS = ({"num_hidden_layers": 2}, {"depth": 1, "deepstack_visual_indexes": [0]})


def scaled_config(attn_implementation: str = "sdpa"):
    """Qwen3VLMoeConfig: the real config with :data:`TEXT_OVERRIDES` / :data:`VISION_OVERRIDES`.

    Returns a ``transformers.Qwen3VLMoeConfig`` (raises ImportError when the installed transformers
    has no Qwen3-VL-MoE, i.e. < 4.57). Asserts the structural facts the suite relies on.
    """
    cfg = config_with(TEXT_OVERRIDES, VISION_OVERRIDES, attn_implementation)
    v, t = cfg.vision_config, cfg.text_config
    assert v.num_position_embeddings == 2304 and v.spatial_merge_size == 2 and v.hidden_size == 1152
    assert t.num_experts == 16 and t.num_experts_per_tok == 8 and not cfg.tie_word_embeddings
    return cfg


def build_model(dtype=None, seed: int = 0, attn_implementation: str = "sdpa"):
    """Qwen3VLMoeForConditionalGeneration from :func:`scaled_config`, initialised on the CPU.

    ``torch.manual_seed(seed)`` before construction makes the weights identical in every process
    (CPU initialisation is deterministic). ``dtype`` (default float32, verl's training dtype) is the
    parameter dtype. About 250 M parameters (1 GB in fp32).
    """
    import torch
    from transformers import Qwen3VLMoeForConditionalGeneration

    torch.manual_seed(seed)
    cfg = scaled_config(attn_implementation)
    model = Qwen3VLMoeForConditionalGeneration._from_config(cfg, dtype=dtype or torch.float32)
    return model.to(dtype or torch.float32)


def load_processor():
    """The real Qwen3-VL processor from the shipped model folder, offline.

    There is no tokenizer.json in the folder: transformers builds the fast tokenizer from
    vocab.json + merges.txt. Needs torchvision (the video processor of Qwen3VLProcessor requires it).
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(str(MODEL_DIR))


def geo3k_rows(n: int) -> list[dict]:
    """The first ``n`` rows of the shipped Geometry3K sample (rows.jsonl; image path per row)."""
    rows = []
    with open(GEO3K_ROWS, encoding="utf-8") as f:
        for line in f:
            rows.append(json.loads(line))
            if len(rows) == n:
                break
    if len(rows) < n:
        raise ValueError(f"geo3k sample has {len(rows)} rows, {n} asked for")
    return rows


def build_batch(n: int = 2, processor=None) -> dict:
    """A padded training batch of ``n`` Geometry3K problems, made by the real processor.

    Each sample is the chat-templated user turn (image + problem text) followed by the answer.
    Returns a dict of CPU tensors: input_ids / attention_mask (n, L) long, pixel_values
    (sum of patches, 3*2*16*16) float32, image_grid_thw (n, 3) long, and labels (n, L) long: the
    input ids with padding and vision tokens set to -100 (ignored by the loss).
    """
    from PIL import Image

    proc = processor or load_processor()
    rows = geo3k_rows(n)
    images = [Image.open(GEO3K_DIR / r["image"]).convert("RGB") for r in rows]
    texts = []
    for r in rows:
        question = r["problem"].replace("<image>", "").strip()
        msgs = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]
        prompt = proc.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        texts.append(prompt + r["answer"] + "<|im_end|>")
    proc.tokenizer.padding_side = "right"
    batch = dict(proc(text=texts, images=images, return_tensors="pt", padding=True))
    labels = batch["input_ids"].clone()
    labels[batch["attention_mask"] == 0] = -100
    for tid in (151652, 151653, 151655, 151656):  # vision start/end, image pad, video pad
        labels[labels == tid] = -100
    batch["labels"] = labels
    return batch


def to_device(batch: dict, device) -> dict:
    """Move every tensor of ``batch`` to ``device`` (non-tensors unchanged)."""
    return {k: (v.to(device) if hasattr(v, "to") else v) for k, v in batch.items()}
