"""The size of one verl FSDP checkpoint of a model, for the free-space check of the checkpoint volume.

verl v0.8.0's ``FSDPCheckpointManager.save_checkpoint`` writes every rank's shard of the fp32 master weights
(4 bytes per parameter) and of the AdamW state (``exp_avg`` and ``exp_avg_sq``, fp32: 8 bytes per parameter), plus
small files (extra state, ``huggingface/`` config and tokenizer). Qwen3-VL-30B-A3B: 31.07e9 parameters -> 373 GB.

The parameter count comes from the model folder's ``model.safetensors.index.json`` (``metadata.total_size`` over
the bytes of ``config.json``'s dtype), else from transformers' own model class built on the meta device.
"""

from __future__ import annotations

import functools
import json
import os

BYTES_PER_PARAM = 4 + 8  # fp32 weights + AdamW's two fp32 moments
_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "float": 4, "half": 2}


@functools.lru_cache(maxsize=8)
def parameter_count(model_path: str) -> tuple[int, str]:
    """``(parameters, how)`` of the Hugging Face model folder ``model_path``. Raises ``OSError``/``ValueError``
    when neither the safetensors index nor the config can be read."""
    index = os.path.join(model_path, "model.safetensors.index.json")
    with open(os.path.join(model_path, "config.json"), encoding="utf-8") as fh:
        config = json.load(fh)
    dtype = config.get("torch_dtype") or config.get("dtype") or (config.get("text_config") or {}).get("dtype")
    if os.path.isfile(index) and dtype in _DTYPE_BYTES:
        with open(index, encoding="utf-8") as fh:
            total = int(json.load(fh)["metadata"]["total_size"])
        return total // _DTYPE_BYTES[dtype], "model.safetensors.index.json total_size"
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText

    cfg = AutoConfig.from_pretrained(model_path, trust_remote_code=False)
    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(cfg)
    return int(sum(p.numel() for p in model.parameters())), f"{type(model).__name__} on the meta device"


def checkpoint_bytes(model_path: str) -> tuple[int, str]:
    """``(bytes, how)``: one checkpoint (all ranks) of the model with its AdamW state."""
    params, how = parameter_count(model_path)
    return params * BYTES_PER_PARAM, f"{params / 1e9:.2f}e9 parameters ({how}) x {BYTES_PER_PARAM} bytes"
