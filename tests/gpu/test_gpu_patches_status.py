"""`python -m vlgrpo patches status --verify --json` on the GPU machine, in both transformers versions.

* transformers 4.57.6 (the carried wheel, first on PYTHONPATH): the Qwen3-VL fixes of TF_IDS are applied on their
  transformers targets and their verify() passes; nothing failed; exit 0.
* the machine's own transformers (5.17 on the lent H200): nothing failed and nothing of transformers is
  replaced -- the 5.x code has neither fault (the issue's "no-op on 5.x").
verl is not installed there, so its targets are reported absent.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

from gpu_helpers import log_dir, run_script

TF_IDS = ("qwen3_vl.vision_pos_embed", "qwen3_vl_moe.router_dtype", "qwen3_vl_moe.grouped_experts")


def _status(name: str, drop_site: bool) -> dict:
    cmd = [sys.executable, "-m", "vlgrpo", "patches", "status", "--verify", "--json"]
    if drop_site:
        site = os.environ.get("VLGRPO_GPU_SITE")
        if not site:
            pytest.skip("VLGRPO_GPU_SITE unset: no carried transformers to take away (run through tests/gpu/run.sh)")
        old = os.environ.get("PYTHONPATH", "")
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in old.split(os.pathsep) if p and p != site)
        try:
            proc = run_script(cmd, patched=True, name=name)
        finally:
            os.environ["PYTHONPATH"] = old
    else:
        proc = run_script(cmd, patched=True, name=name)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (log_dir() / f"{name}.json").write_text(proc.stdout)
    return json.loads(proc.stdout)


def _patch(report: dict, pid: str) -> dict:
    return next(p for p in report["patches"] if p["id"] == pid)


def _tf_targets(p: dict) -> list[dict]:
    return [t for t in p["targets"] if t["target"].startswith("transformers.")]


def test_status_on_transformers_4_57_6():
    rep = _status("status_tf457", drop_site=False)
    for pid in TF_IDS:
        p = _patch(rep, pid)
        assert p["status"] == "applied" and p["verify"] == "ok", p
        assert _tf_targets(p) and all(t["status"] == "applied" for t in _tf_targets(p)), p["targets"]
    assert all(p["status"] != "failed" for p in rep["patches"]), rep["patches"]


def test_status_on_machine_transformers_is_noop():
    rep = _status("status_tf_machine", drop_site=True)
    assert all(p["status"] != "failed" for p in rep["patches"]), rep["patches"]
    for pid in TF_IDS:
        for t in _tf_targets(_patch(rep, pid)):
            assert t["status"] in ("not needed", "target absent"), t
