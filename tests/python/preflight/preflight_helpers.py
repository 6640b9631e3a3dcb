"""Shared constants and helpers of the preflight tests (a uniquely named module: several test folders have a
conftest.py, so tests import from here, never ``from conftest``)."""

from __future__ import annotations

import os

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
ARGV_DIR = os.path.join(os.path.dirname(__file__), "argv")
MODEL_30B = os.path.join(REPO, "assets", "models", "qwen3-vl-30b-a3b-instruct")
SAMPLE_HIYOUGA = os.path.join(REPO, "assets", "geo3k-sample", "hiyouga-geometry3k-format")
UPSTREAM_FULLY_ASYNC = os.path.join(ARGV_DIR, "upstream-v0.8.0-geo3k_qwen3vl_30b_a3b_fsdp2_32_32.argv")
UPSTREAM_VEOMNI = os.path.join(ARGV_DIR, "upstream-v0.8.0-run_qwen3_vl_30b_moe_veomni.argv")


def qwen3vl_processor(tokenizer, image_processor, model_dir: str = MODEL_30B):
    """transformers' own Qwen3VLProcessor (its ``__call__`` and ``apply_chat_template``, transformers 4.57.6
    ``processing_qwen3_vl.py``) assembled from ``tokenizer``, ``image_processor`` and ``model_dir``'s
    chat_template.json. ``ProcessorMixin.__init__`` insists on the video processor, which needs torchvision (absent
    beside the CPU torch on the test machine), so the object is assembled without it; images never touch the video
    path. Shared by the preflight tests, the VeOmni dry run and the agent-loop scenario of the patch tests."""
    import json

    from transformers.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor

    proc = object.__new__(Qwen3VLProcessor)
    proc.image_processor, proc.tokenizer, proc.video_processor = image_processor, tokenizer, None
    with open(os.path.join(model_dir, "chat_template.json"), encoding="utf-8") as fh:
        proc.chat_template = json.load(fh)["chat_template"]
    for name, text in (
        ("image", "<|image_pad|>"),
        ("video", "<|video_pad|>"),
        ("vision_start", "<|vision_start|>"),
        ("vision_end", "<|vision_end|>"),
    ):
        setattr(proc, f"{name}_token", text)
        setattr(proc, f"{name}_token_id", tokenizer.convert_tokens_to_ids(text))
    return proc


def read_argv(path: str) -> list[str]:
    from vlgrpo.preflight.launch import read_argv_file

    return read_argv_file(path)


def set_override(argv: list[str], key: str, value: str | None) -> list[str]:
    """Replace the override of ``key`` (any +/++ form) with ``key=value``; append if absent; drop if None."""
    out, done = [], False
    for arg in argv:
        k = arg.lstrip("+").split("=", 1)[0]
        if k == key:
            if value is not None and not done:
                out.append(f"{key}={value}")
            done = True
            continue
        out.append(arg)
    if not done and value is not None:
        out.append(f"{key}={value}")
    return out
