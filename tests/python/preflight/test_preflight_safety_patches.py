"""Safety patches stay on for a launch. A patch whose registry record has a ``safety`` field (checkpoint.manifest:
verl unpickles checkpoints with weights_only=False; rollout.server_loopback: vLLM's unauthenticated API on the node
IP; reward.tokenizer_remote_code: the reward loop's trust_remote_code=True) switched off by VLGRPO_PATCHES=off or VLGRPO_PATCHES_DISABLED is refused for a launch (``patches.safety-off``,
not waivable) and a warning in a dry run; with checkpoint.manifest off, an untrusted checkpoint to resume is a
finding about code the launch would run, which VLGRPO_PREFLIGHT=warn (``--waive``) cannot pass over."""

from __future__ import annotations

import pytest
from preflight_helpers import set_override

from vlgrpo.patches import registry
from vlgrpo.preflight import cli, run_preflight

SAFETY = ("checkpoint.manifest", "rollout.server_loopback", "reward.tokenizer_remote_code")


def _hits(report, code="patches.safety-off"):
    return [f for f in report.findings if f.code == code]


@pytest.fixture(autouse=True)
def _no_switches(monkeypatch):
    monkeypatch.delenv("VLGRPO_PATCHES", raising=False)
    monkeypatch.delenv("VLGRPO_PATCHES_DISABLED", raising=False)


def test_the_records_mark_the_code_execution_and_exposure_fixes():
    marked = registry.safety_ids()
    assert set(SAFETY) <= set(marked)
    assert "weights_only=False" in marked["checkpoint.manifest"]
    assert "unauthenticated" in marked["rollout.server_loopback"]
    assert "auto_map" in marked["reward.tokenizer_remote_code"]
    # fixes of crashes, hangs and numbers are not safety fixes
    assert not {"qwen3_vl.vision_pos_embed", "rollout.weight_sync_dp_rank", "fully_async.resume_step_label"} & set(
        marked
    )


def test_patches_off_for_a_launch_is_refused_naming_every_safety_patch(fixed_argv, monkeypatch):
    for value in ("off",):
        monkeypatch.setenv("VLGRPO_PATCHES", value)
        report = run_preflight(fixed_argv, check_data=False, purpose="launch")
        hits = _hits(report)
        assert [h.severity for h in hits] == ["error"] * len(SAFETY) and report.exit_code == 2
        assert {pid for pid in SAFETY if any(pid in h.what for h in hits)} == set(SAFETY)
        plan = _hits(run_preflight(fixed_argv, check_data=False, purpose="plan"))
        assert [h.severity for h in plan] == ["warning"] * len(SAFETY) and "dry run" in plan[0].why


def test_one_safety_patch_disabled_is_refused_other_patches_and_bad_values_are_not(fixed_argv, monkeypatch):
    for pid in SAFETY:
        monkeypatch.setenv("VLGRPO_PATCHES_DISABLED", f"qwen3_vl.vision_pos_embed,{pid}")
        (hit,) = _hits(run_preflight(fixed_argv, check_data=False, purpose="launch"))
        assert hit.severity == "error" and pid in hit.what and f"remove {pid}" in hit.fix
    monkeypatch.setenv("VLGRPO_PATCHES_DISABLED", "qwen3_vl.vision_pos_embed")
    assert not _hits(run_preflight(fixed_argv, check_data=False, purpose="launch"))
    # a value the entrypoints refuse fails closed: the patches stay on, nothing to refuse here
    monkeypatch.delenv("VLGRPO_PATCHES_DISABLED")
    for value in ("no", "0", "false", "disabled", " OFF ", "Off"):  # the registry's enum is exact: on or off
        monkeypatch.setenv("VLGRPO_PATCHES", value)
        assert not _hits(run_preflight(fixed_argv, check_data=False, purpose="launch")), value
    monkeypatch.delenv("VLGRPO_PATCHES")
    for pid in SAFETY:  # an id list the entrypoints refuse (a space, an empty item) leaves every patch on
        for value in (f"qwen3_vl.vision_pos_embed, {pid}", f"{pid},"):
            monkeypatch.setenv("VLGRPO_PATCHES_DISABLED", value)
            assert not _hits(run_preflight(fixed_argv, check_data=False, purpose="launch")), value


def test_warn_cannot_waive_a_safety_patch_switched_off(fixed_argv, tmp_path, monkeypatch):
    path = tmp_path / "argv"
    path.write_text("\n".join(fixed_argv) + "\n")
    monkeypatch.setenv("VLGRPO_PATCHES_DISABLED", "rollout.server_loopback")
    assert cli.main(["--argv-file", str(path), "--no-data", "--waive"]) == 2
    monkeypatch.delenv("VLGRPO_PATCHES_DISABLED")
    assert cli.main(["--argv-file", str(path), "--no-data", "--waive"]) == 0


def _untrusted_resume(fixed_argv, tmp_path):
    """A checkpoint folder with a step and tracker but no vlgrpo manifest (what another user could plant)."""
    root = tmp_path / "ckpt"
    step = root / "global_step_1"
    (step / "actor").mkdir(parents=True)
    (step / "data.pt").write_bytes(b"\x80\x04not a checkpoint")
    (root / "latest_checkpointed_iteration.txt").write_text("1")
    argv = set_override(fixed_argv, "trainer.default_local_dir", str(root))
    return set_override(argv, "trainer.resume_mode", "auto")


def test_an_untrusted_checkpoint_counts_as_code_when_the_manifest_patch_is_off(fixed_argv, tmp_path, monkeypatch):
    argv = _untrusted_resume(fixed_argv, tmp_path)
    # patch on: the runtime patch refuses the load again, so the finding is waivable
    report = run_preflight(argv, check_data=False, purpose="launch")
    (hit,) = _hits(report, "rules.checkpoint-untrusted")
    assert not hit.runs_code and not cli.unwaivable(report)
    for env in ({"VLGRPO_PATCHES_DISABLED": "checkpoint.manifest"}, {"VLGRPO_PATCHES": "off"}):
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        report = run_preflight(argv, check_data=False, purpose="launch")
        (hit,) = _hits(report, "rules.checkpoint-untrusted")
        assert hit.runs_code and "unpickled as they are" in hit.why
        keep = cli.unwaivable(report)
        assert any(k.startswith("[rules.checkpoint-untrusted]") for k in keep), keep
        for k in env:
            monkeypatch.delenv(k)
    path = tmp_path / "argv"
    path.write_text("\n".join(argv) + "\n")
    monkeypatch.setenv("VLGRPO_PATCHES_DISABLED", "checkpoint.manifest")
    assert cli.main(["--argv-file", str(path), "--no-data", "--waive"]) == 2
    monkeypatch.delenv("VLGRPO_PATCHES_DISABLED")
    assert cli.main(["--argv-file", str(path), "--no-data", "--waive"]) == 3
