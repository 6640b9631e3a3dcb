"""C03 in the preflight: the folder a resume would load and the checkpoint volume's free space, checked before Ray
starts (exit 2). One 30B-A3B checkpoint with AdamW state: 31.07e9 parameters x 12 bytes = 372.8 GB (transformers'
own class on the meta device: the shipped model folder has no safetensors index)."""

from __future__ import annotations

import os
import shutil

from preflight_helpers import MODEL_30B, set_override

from vlgrpo.checkpoint import manifest
from vlgrpo.checkpoint.size import checkpoint_bytes
from vlgrpo.preflight import checkpoint_volume, run_preflight


def _codes(report, code):
    return [f for f in report.findings if f.code == code]


def _with_ckpt(argv, root, mode="auto", path=None):
    argv = set_override(argv, "trainer.default_local_dir", str(root))
    argv = set_override(argv, "trainer.resume_mode", mode)
    return set_override(argv, "trainer.resume_from_path", path) if path else argv


def test_checkpoint_size_of_the_30b_model():
    need, how = checkpoint_bytes(MODEL_30B)
    assert need == 31_070_754_032 * 12 and "meta device" in how


def test_resume_of_an_untrusted_checkpoint_is_refused_before_ray(fixed_argv, tmp_path):
    root = tmp_path / "ckpt"
    step = root / "global_step_5"
    (step / "actor").mkdir(parents=True)
    (step / "data.pt").write_bytes(b"pickle")
    (root / "latest_checkpointed_iteration.txt").write_text("5")
    report = run_preflight(_with_ckpt(fixed_argv, root), check_data=False)
    hits = _codes(report, "rules.checkpoint-untrusted")
    assert hits and report.exit_code == 2
    assert "has no vlgrpo manifest" in hits[0].what and f"checkpoint trust {step}" in hits[0].fix
    manifest.trust(step)
    assert not _codes(run_preflight(_with_ckpt(fixed_argv, root), check_data=False), "rules.checkpoint-untrusted")
    os.chmod(step / "data.pt", 0o666)
    hits = _codes(run_preflight(_with_ckpt(fixed_argv, root), check_data=False), "rules.checkpoint-untrusted")
    assert hits and "data.pt: file is group- or world-writable" in hits[0].what


def test_free_space_below_one_checkpoint_is_an_error_below_two_a_warning(fixed_argv, tmp_path, monkeypatch):
    root = tmp_path / "ckpt"
    root.mkdir()
    need = 31_070_754_032 * 12
    argv = _with_ckpt(fixed_argv, root, "disable")
    for free, severity in ((need - 1, "error"), (2 * need - 1, "warning"), (2 * need, None)):
        monkeypatch.setattr(checkpoint_volume, "free_bytes", lambda path, free=free: free)
        report = run_preflight(argv, check_data=False, devices_per_node=16, purpose="launch")
        assert [h.severity for h in _codes(report, "rules.checkpoint-space")] == ([severity] if severity else []), free
    real = shutil.disk_usage(root).free  # this machine's disk, as a launch here would see it
    monkeypatch.setattr(checkpoint_volume, "free_bytes", lambda path: shutil.disk_usage(path).free)
    hits = _codes(run_preflight(argv, check_data=False, devices_per_node=16), "rules.checkpoint-space")
    assert bool(hits) == (real < 2 * need)


def test_a_real_launch_is_refused_below_one_checkpoint_whatever_the_node_counts(fixed_argv, tmp_path, monkeypatch):
    """The launch writes the checkpoints wherever its preflight ran (a CPU head node of a cluster included): the
    accelerator count of the node does not soften the error; only the entrypoint's dry run (``plan``) does."""
    root = tmp_path / "ckpt"
    root.mkdir()
    need = 31_070_754_032 * 12
    argv = _with_ckpt(fixed_argv, root, "disable")
    monkeypatch.setattr(checkpoint_volume, "free_bytes", lambda path: need - 1)
    for devices in (0, 16):
        report = run_preflight(argv, check_data=False, devices_per_node=devices, purpose="launch")
        assert [h.severity for h in _codes(report, "rules.checkpoint-space")] == ["error"], devices
        assert report.exit_code == 2
        report = run_preflight(argv, check_data=False, devices_per_node=devices, purpose="plan")
        hits = _codes(report, "rules.checkpoint-space")
        assert [h.severity for h in hits] == ["warning"] and "dry run" in hits[0].why, devices
    # below two checkpoints: a warning for both purposes
    monkeypatch.setattr(checkpoint_volume, "free_bytes", lambda path: 2 * need - 1)
    for purpose in ("launch", "plan"):
        hits = _codes(run_preflight(argv, check_data=False, purpose=purpose), "rules.checkpoint-space")
        assert [h.severity for h in hits] == ["warning"], purpose


def test_the_default_purpose_is_a_launch_and_a_bad_one_is_refused(fixed_argv, tmp_path, monkeypatch):
    import pytest

    from vlgrpo.preflight import cli

    root = tmp_path / "ckpt"
    root.mkdir()
    monkeypatch.setattr(checkpoint_volume, "free_bytes", lambda path: 1)
    argv = _with_ckpt(fixed_argv, root, "disable")
    assert [h.severity for h in _codes(run_preflight(argv, check_data=False), "rules.checkpoint-space")] == ["error"]
    path = tmp_path / "argv"
    path.write_text("\n".join(argv) + "\n")
    assert cli.main(["--argv-file", str(path), "--no-data", "--purpose", "plan"]) == 0
    assert cli.main(["--argv-file", str(path), "--no-data", "--purpose", "launch"]) == 2
    with pytest.raises(SystemExit) as exc:
        cli.main(["--argv-file", str(path), "--no-data", "--purpose", "planning"])
    assert exc.value.code == 2
    with pytest.raises(ValueError, match="purpose"):
        run_preflight(argv, check_data=False, purpose="dry")


def test_a_checkpoint_folder_on_ram_is_refused_for_a_launch_and_warned_in_a_plan(fixed_argv, tmp_path):
    """/dev/shm is the kernel's own tmpfs here: a checkpoint there is lost at reboot (vlgrpo.checkpoint.volume)."""
    import tempfile

    if not os.path.isdir("/dev/shm"):
        import pytest

        pytest.skip("no /dev/shm")
    root = tempfile.mkdtemp(dir="/dev/shm", prefix="vlgrpo-ckpt-")
    try:
        argv = _with_ckpt(fixed_argv, root, "disable")
        launch = _codes(
            run_preflight(argv, check_data=False, devices_per_node=16, purpose="launch"), "rules.checkpoint-storage"
        )
        plan = _codes(
            run_preflight(argv, check_data=False, devices_per_node=16, purpose="plan"), "rules.checkpoint-storage"
        )
        assert [f.severity for f in launch] == ["error"] and "tmpfs" in launch[0].what
        assert [f.severity for f in plan] == ["warning"]
        assert not _codes(
            run_preflight(_with_ckpt(fixed_argv, tmp_path, "disable"), check_data=False, devices_per_node=16),
            "rules.checkpoint-storage",
        )
    finally:
        shutil.rmtree(root)


# ---- retention (VLGRPO_CHECKPOINTS_TO_KEEP -> trainer.max_actor_ckpt_to_keep) -----------------------------------


def _verl_peak(keep, saves, tmp_path):
    """The most checkpoint folders on disk at once while verl v0.8.0's own BaseCheckpointManager rotates ``saves``
    saves with ``max_ckpt_to_keep=keep`` (its ensure_checkpoint_capacity before each save, register_checkpoint
    after it, as fsdp_checkpoint_manager.py calls them): the independent reference for ``retention_peak``. The
    module file is loaded alone (verl.utils.checkpoint's package imports peft, not in the CPU venv)."""
    import importlib.util

    import verl

    path = os.path.join(os.path.dirname(verl.__file__), "utils", "checkpoint", "checkpoint_manager.py")
    spec = importlib.util.spec_from_file_location("_verl_checkpoint_manager_alone", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mgr = object.__new__(mod.BaseCheckpointManager)
    mgr.previous_saved_paths = []
    root = tmp_path / f"rot-{keep}-{saves}"
    root.mkdir()
    peak = 0
    for step in range(1, saves + 1):
        mgr.ensure_checkpoint_capacity(keep)
        (root / f"global_step_{step}" / "actor").mkdir(parents=True)  # the save being written
        peak = max(peak, sum(1 for p in root.glob("global_step_*/actor")))
        mgr.register_checkpoint(str(root / f"global_step_{step}" / "actor"), keep)
    return peak


def test_retention_peak_is_what_verls_checkpoint_manager_holds_at_once(tmp_path):
    for keep in (1, 2, 3, 5):
        assert checkpoint_volume.retention_peak(keep) == _verl_peak(keep, 8, tmp_path), keep
    # null, 0 and negative counts: verl removes nothing (every save stays)
    for keep in (None, 0, -1):
        assert checkpoint_volume.retention_peak(keep) is None
        assert _verl_peak(keep, 6, tmp_path) == 6


def _default_keep():
    from vlgrpo.environment import setting_row

    fa, vo = setting_row("VLGRPO_CHECKPOINTS_TO_KEEP", "fa"), setting_row("VLGRPO_CHECKPOINTS_TO_KEEP", "vo")
    assert fa is not None and vo is not None and fa.default == vo.default
    return int(fa.default)


def test_save_freq_5_with_the_default_retention_passes_only_when_kept_checkpoints_fit(
    fixed_argv, tmp_path, monkeypatch
):
    root = tmp_path / "ckpt"
    root.mkdir()
    need = 31_070_754_032 * 12
    keep = _default_keep()
    peak = max(keep, 2)
    argv = _with_ckpt(fixed_argv, root, "disable")
    assert "trainer.save_freq=5" in argv
    argv = set_override(argv, "trainer.max_actor_ckpt_to_keep", str(keep))
    for free, severity in ((peak * need - 1, "error"), (need, "error"), (peak * need, None), (50 * need, None)):
        monkeypatch.setattr(checkpoint_volume, "free_bytes", lambda path, free=free: free)
        report = run_preflight(argv, check_data=False, devices_per_node=16, purpose="launch")
        hits = _codes(report, "rules.checkpoint-space")
        assert [h.severity for h in hits] == ([severity] if severity else []), free
        assert not _codes(report, "rules.checkpoint-retention")
        if hits:
            assert f"keeping {keep} checkpoint(s) needs {peak} x 372.8 GB = {peak * need / 1e9:.1f} GB" in hits[0].what
            assert report.exit_code == 2
            plan = _codes(
                run_preflight(argv, check_data=False, devices_per_node=16, purpose="plan"), "rules.checkpoint-space"
            )
            assert [h.severity for h in plan] == ["warning"]


def test_more_kept_checkpoints_need_more_space_and_one_kept_still_needs_two(fixed_argv, tmp_path, monkeypatch):
    root = tmp_path / "ckpt"
    root.mkdir()
    need = 31_070_754_032 * 12
    base = _with_ckpt(fixed_argv, root, "disable")
    for keep, peak in ((1, 2), (3, 3), (4, 4)):
        argv = set_override(base, "trainer.max_actor_ckpt_to_keep", str(keep))
        for free, bad in ((peak * need - 1, True), (peak * need, False)):
            monkeypatch.setattr(checkpoint_volume, "free_bytes", lambda path, free=free: free)
            hits = _codes(run_preflight(argv, check_data=False, purpose="launch"), "rules.checkpoint-space")
            assert bool(hits) == bad, (keep, free)
    # 4 kept on a volume for 3: the fix names the count that fits
    argv = set_override(base, "trainer.max_actor_ckpt_to_keep", "4")
    monkeypatch.setattr(checkpoint_volume, "free_bytes", lambda path: 3 * need + 1)
    hits = _codes(run_preflight(argv, check_data=False, purpose="launch"), "rules.checkpoint-space")
    assert "VLGRPO_CHECKPOINTS_TO_KEEP=3" in hits[0].fix


def test_unbounded_retention_warns_with_the_number_of_saves(fixed_argv, tmp_path, monkeypatch):
    """The fixed argv: 51200 rollout samples / (mini-batch 32 x require_batches 1 x trigger 16) = 100 parameter
    versions, a save every 5 = 20 saves of 372.8 GB; with 1 TB free the volume fills at the third."""
    root = tmp_path / "ckpt"
    root.mkdir()
    need = 31_070_754_032 * 12
    monkeypatch.setattr(checkpoint_volume, "free_bytes", lambda path: 10**12)
    base = _with_ckpt(fixed_argv, root, "disable")
    for keep in (None, "0"):
        argv = base if keep is None else set_override(base, "trainer.max_actor_ckpt_to_keep", keep)
        report = run_preflight(argv, check_data=False, purpose="launch")
        hits = _codes(report, "rules.checkpoint-retention")
        assert [h.severity for h in hits] == ["warning"], keep
        assert "up to 20 checkpoints" in hits[0].what and "fills at save 3" in hits[0].what
        assert "VLGRPO_CHECKPOINTS_TO_KEEP" in hits[0].fix
        assert report.summary["checkpoint"]["saves"] == 51200 // (32 * 16) // 5
    # no save, no retention or space finding
    argv = set_override(base, "trainer.save_freq", "-1")
    monkeypatch.setattr(checkpoint_volume, "free_bytes", lambda path: need - 1)
    report = run_preflight(argv, check_data=False, purpose="launch")
    assert not _codes(report, "rules.checkpoint-retention") and not _codes(report, "rules.checkpoint-space")
