"""Fixtures for the preflight tests: the Geometry3K sample converted once per session, the fixed launch argv,
one full clean run shared by the tests that read its summary, and a parquet with a 1600x1600 image."""

from __future__ import annotations

import io
import os
import shutil

import pytest

from preflight_helpers import ARGV_DIR, MODEL_30B, SAMPLE_HIYOUGA


@pytest.fixture(autouse=True)
def _declared_codes_only(monkeypatch):
    """Every preflight run in these tests fails if a check reported a finding code it does not declare
    (vlgrpo.preflight.checks), so the declarations cannot drift from what the checks report."""
    from vlgrpo.preflight import runner
    from vlgrpo.preflight.checks import CHECKS

    real = runner.run_checks

    def strict(check_list, ctx):
        try:
            return real(check_list, ctx)
        finally:
            bad = {e["check"]: e["undeclared"] for e in ctx.summary.get("checks") or [] if e.get("undeclared")}
            if check_list is CHECKS and bad:
                raise AssertionError(f"checks reported finding codes they do not declare: {bad}")

    monkeypatch.setattr(runner, "run_checks", strict)


@pytest.fixture(autouse=True, scope="session")
def _roomy_checkpoint_volume():
    """The test machines have far less free disk than one 30B checkpoint (373 GB): in this process the
    preflight's checkpoint-volume check sees 10 TB free (test_preflight_checkpoint.py sets its own values)."""
    from vlgrpo.preflight import checkpoint_volume

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(checkpoint_volume, "free_bytes", lambda path: 10 * 10**12)
        yield


@pytest.fixture(autouse=True, scope="session")
def _cluster_ray_address():
    """The fixed argv plans 2+2 nodes of 16: the tests check it as a launch onto a Ray cluster (RAY_ADDRESS set,
    never contacted: the preflight starts no Ray), so the local-layout rule (rules.layout-local, which applies when
    RAY_ADDRESS is unset or ``local``) stays out of their findings; test_preflight_layout_local.py sets its own."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_ADDRESS", "10.0.0.1:6379")
        yield


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
