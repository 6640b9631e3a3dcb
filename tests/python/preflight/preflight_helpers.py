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


