"""C03: ``checkpoint.manifest`` on verl v0.8.0's real checkpoint code (scenarios/checkpoint_cycle.py: a tiny FSDP2
model over 2 gloo ranks through ``FSDPCheckpointManager``, the fully-async rollouter's ``data.pt``).

What a user checks: a checkpoint this job wrote resumes (weights, LR schedule and dataloader position equal); a
pickled ``data.pt`` or shard (canary: its ``__reduce__`` creates a file) never runs, with or without a manifest; a
changed or foreign-owned file is refused with its name before anything is loaded; without the patch the same canary
runs (so the test can fail)."""

from __future__ import annotations

import os

import pytest
import torch

from patch_helpers import SCENARIOS, run_py
from vlgrpo.checkpoint import manifest
from vlgrpo.patches.fixes import checkpoint_manifest

SCRIPT = SCENARIOS / "checkpoint_cycle.py"
PATCH = "checkpoint.manifest"
pytestmark = pytest.mark.slow


class Canary:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def _run(shim_dir, mode, root, env=None):
    full = {"VLGRPO_TEST_CKPT_MODE": mode, "VLGRPO_TEST_CKPT_ROOT": str(root), **(env or {})}
    out = run_py(SCRIPT, path=[shim_dir], env=full).json
    assert out is not None and "crash" not in out, out
    return out


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """One real save (patched): ROOT/global_step_1 with 2 ranks' shards, data.pt and their manifests."""
    from patch_helpers import SHIM
    import shutil

    shim = tmp_path_factory.mktemp("shim")
    shutil.copy(SHIM, shim / "sitecustomize.py")
    root = tmp_path_factory.mktemp("ckpt")
    out = _run(shim, "save", root)
    assert out["status"] == "applied", out
    assert all(r["ok"] for r in out["ranks"].values()), out
    return shim, root, out


def _copy(src, tmp_path):
    import shutil

    dst = tmp_path / "ckpt"
    shutil.copytree(src, dst, symlinks=True)
    return dst


def test_save_writes_one_manifest_per_writer_and_a_resume_restores_everything(saved, tmp_path):
    shim, src, first = saved
    root = _copy(src, tmp_path)
    step = root / "global_step_1"
    parts = sorted(p.name for p in step.iterdir() if manifest.is_manifest(p.name))
    assert parts == [
        "vlgrpo-manifest-actor-rank-00000.json",
        "vlgrpo-manifest-actor-rank-00001.json",
        "vlgrpo-manifest-rollouter.json",
    ]
    listed = manifest.inventory(step)
    assert "actor/fsdp_config.json" in listed and "data.pt" in listed
    assert "actor/model_world_size_2_rank_1.pt" in listed and "actor/extra_state_world_size_2_rank_0.pt" in listed
    out = _run(shim, "load", root)
    assert all(r["ok"] and r["equal"] and r["lr_step"] == 1 for r in out["ranks"].values()), out
    assert out["rollouter"]["ok"] and out["rollouter"]["next"] == first["rollouter"]["next"], out


def test_every_verl_file_loads_weights_only(saved):
    """The measurement behind weights_only=True: each .pt verl wrote loads under the patch's guard."""
    _, src, _ = saved
    step = src / "global_step_1"
    with checkpoint_manifest.weights_only_loads():
        for path in sorted(step.rglob("*.pt")):
            torch.load(path, weights_only=False)  # forced to weights_only=True by the guard
    unsafe = torch.serialization.get_unsafe_globals_in_checkpoint(step / "actor/extra_state_world_size_2_rank_0.pt")
    assert set(unsafe) <= set(checkpoint_manifest.NUMPY_ARRAY_GLOBALS), unsafe
    assert torch.serialization.get_unsafe_globals_in_checkpoint(step / "data.pt") == []


def _plant_canary(step, rel, marker):
    torch.save({"state": Canary(str(marker))}, step / rel)


def test_canary_data_pt_without_manifest_is_refused_and_never_runs(saved, tmp_path):
    shim, src, _ = saved
    root = _copy(src, tmp_path)
    step = root / "global_step_1"
    for p in step.iterdir():
        if manifest.is_manifest(p.name):
            p.unlink()  # a checkpoint of an unpatched verl
    marker = tmp_path / "ran"
    _plant_canary(step, "data.pt", marker)
    out = _run(shim, "load", root)
    for r in out["ranks"].values():
        assert "CheckpointRefused" in r["error"] and "has no vlgrpo manifest" in r["error"], r
        assert f"python -m vlgrpo checkpoint trust {step}" in r["error"]
    assert not out["rollouter"]["ok"] and "has no vlgrpo manifest" in out["rollouter"]["error"]
    assert not marker.exists()


def test_canary_in_a_trusted_folder_is_not_unpickled(saved, tmp_path):
    shim, src, _ = saved
    root = _copy(src, tmp_path)
    step = root / "global_step_1"
    marker = tmp_path / "ran"
    _plant_canary(step, "actor/extra_state_world_size_2_rank_1.pt", marker)
    _plant_canary(step, "data.pt", marker)
    for p in step.iterdir():
        if manifest.is_manifest(p.name):
            p.unlink()
    manifest.trust(step)  # the user trusted it without looking
    out = _run(shim, "load", root)
    # rank 0's own files are fine; it then fails in verl's final barrier, as rank 1 left
    assert "holds objects other than tensors" in out["ranks"]["1"]["error"], out
    assert "extra_state_world_size_2_rank_1.pt" in out["ranks"]["1"]["error"]
    assert "holds objects other than tensors" in out["rollouter"]["error"], out
    assert not marker.exists()


def test_without_the_patch_the_canary_runs(saved, tmp_path):
    shim, src, _ = saved
    root = _copy(src, tmp_path)
    marker = tmp_path / "ran"
    _plant_canary(root / "global_step_1", "data.pt", marker)
    out = _run(shim, "load", root, env={"VLGRPO_PATCHES_DISABLED": PATCH})
    assert out["status"] == "disabled"
    assert marker.exists(), "verl v0.8.0 itself did not unpickle data.pt; the scenario is not what it claims"


def test_changed_shard_refused_on_the_rank_that_reads_it(saved, tmp_path):
    shim, src, _ = saved
    root = _copy(src, tmp_path)
    shard = root / "global_step_1" / "actor" / "optim_world_size_2_rank_1.pt"
    data = bytearray(shard.read_bytes())
    data[-100] ^= 0xFF
    shard.write_bytes(bytes(data))
    out = _run(shim, "load", root)
    assert "CheckpointRefused" not in out["ranks"]["0"].get("error", ""), out  # rank 0 reads no rank-1 file
    assert "optim_world_size_2_rank_1.pt: changed since it was written" in out["ranks"]["1"]["error"], out


@pytest.mark.skipif(os.getuid() != 0, reason="chown to another uid needs root (CI runs as root)")
def test_foreign_owned_file_refused_on_every_rank(saved, tmp_path):
    shim, src, _ = saved
    root = _copy(src, tmp_path)
    os.chown(root / "global_step_1" / "actor" / "huggingface" / "config.json", 4242, 4242)
    out = _run(shim, "load", root)
    for r in out["ranks"].values():
        assert "config.json: file is owned by uid 4242" in r["error"], out


def test_detector_on_a_fixed_loader(tmp_path):
    import ast

    src = (
        "import hashlib, torch\n"
        "class M:\n"
        "    def load_checkpoint(self, p):\n"
        "        return torch.load(p, weights_only=True)\n"
        "    def save_checkpoint(self, p):\n"
        "        torch.save({}, p); hashlib.sha256()\n"
    )
    tree = ast.parse(src)
    load, save = tree.body[1].body
    assert checkpoint_manifest.is_faulty(load, src)[0] is False
    assert checkpoint_manifest.is_faulty(save, src)[0] is False
    assert checkpoint_manifest.is_faulty(save, src.replace("hashlib.sha256()", "pass").replace("hashlib, ", ""))[0]


def test_verify_passes():
    checkpoint_manifest.verify()
