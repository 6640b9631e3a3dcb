"""Fixtures for the preflight tests: the shipped model metadata, the Geometry3K sample converted once per
session, and launch argv built from the fixtures in ``argv/``."""

from __future__ import annotations

import io
import os
import shutil

import pytest

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


@pytest.fixture(scope="session")
def sample_data(tmp_path_factory) -> str:
    """The shipped Geometry3K sample converted by ``vlgrpo.data.geo3k`` (train 20 rows, test 15 rows)."""
    from vlgrpo.data.geo3k import convert

    out = str(tmp_path_factory.mktemp("geo3k"))
    convert(SAMPLE_HIYOUGA, out, splits=("train", "test"))
    return out


@pytest.fixture(scope="session")
def fixed_argv(sample_data, tmp_path_factory) -> list[str]:
    """The upstream fully-async argv with its faults fixed and pointed at the sample data and real model."""
    ckpt = str(tmp_path_factory.mktemp("ckpt"))
    with open(os.path.join(ARGV_DIR, "fixed-fully-async.argv.in"), encoding="utf-8") as fh:
        text = fh.read()
    text = text.replace("@DATA_DIR@", sample_data).replace("@MODEL_DIR@", MODEL_30B).replace("@CKPT_DIR@", ckpt)
    return text.rstrip("\n").split("\n")


@pytest.fixture(scope="session")
def clean_fixed_report(fixed_argv):
    """One full run (data included) of the fixed argv, shared by the tests that read its summary."""
    from vlgrpo.preflight import run_preflight

    return run_preflight(fixed_argv)


@pytest.fixture(scope="session")
def big_image_data(tmp_path_factory, sample_data) -> str:
    """A verl-format parquet: sample train row 0 plus one row whose diagram is a 1600x1600 image (row 1)."""
    import pyarrow.parquet as pq
    from PIL import Image

    from vlgrpo.data.geo3k import arrow_schema

    rows = pq.read_table(os.path.join(sample_data, "train.parquet")).to_pylist()[:2]
    buf = io.BytesIO()
    Image.new("RGB", (1600, 1600), (255, 255, 255)).save(buf, format="PNG")
    rows[1]["images"] = [{"bytes": buf.getvalue(), "path": "big.png"}]
    out = str(tmp_path_factory.mktemp("bigimg"))
    import pyarrow as pa

    pq.write_table(pa.Table.from_pylist(rows, schema=arrow_schema()), os.path.join(out, "train.parquet"))
    return out


@pytest.fixture
def model_copy(tmp_path) -> str:
    """A writable copy of the real Qwen3-VL-30B-A3B metadata folder."""
    dst = tmp_path / "model"
    shutil.copytree(MODEL_30B, dst)
    return str(dst)
