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
        launch = _codes(run_preflight(argv, check_data=False, devices_per_node=16, purpose="launch"),
                        "rules.checkpoint-storage")
        plan = _codes(run_preflight(argv, check_data=False, devices_per_node=16, purpose="plan"),
                      "rules.checkpoint-storage")
        assert [f.severity for f in launch] == ["error"] and "tmpfs" in launch[0].what
        assert [f.severity for f in plan] == ["warning"]
        assert not _codes(run_preflight(_with_ckpt(fixed_argv, tmp_path, "disable"), check_data=False,
                                        devices_per_node=16), "rules.checkpoint-storage")
    finally:
        shutil.rmtree(root)
