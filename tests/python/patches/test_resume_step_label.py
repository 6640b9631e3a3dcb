"""C04 (a) / verl #7933: ``fully_async.resume_step_label`` on verl v0.8.0's real trainer (scenarios/
resume_step_label.py). Worked number: resuming from global_step_5 with T = 16, the first step is 5 x 16 + 1 = 81."""

from __future__ import annotations

import ast

from patch_helpers import REPO, SCENARIOS, run_py
from vlgrpo.patches.fixes import fully_async_resume_step_label as fix

SCRIPT = SCENARIOS / "resume_step_label.py"
PATCH = "fully_async.resume_step_label"


def _run(tmp_path, shim_dir, resume="auto", disabled=False):
    env = {"VLGRPO_TEST_TMP": str(tmp_path), "VLGRPO_TEST_RESUME": resume}
    if disabled:
        env["VLGRPO_PATCHES_DISABLED"] = PATCH
    out = run_py(SCRIPT, path=[shim_dir], env=env).json
    assert out is not None and "crash" not in out, out
    return out


def test_v080_labels_the_first_resumed_step_82(tmp_path, shim_dir):
    out = _run(tmp_path, shim_dir, disabled=True)
    assert out["version"] == 5 and out["first_label"] == 82


def test_patched_first_resumed_step_is_81(tmp_path, shim_dir):
    out = _run(tmp_path, shim_dir)
    assert out["status"] == "applied"
    assert out["version"] == 5 and out["first_label"] == 81
    assert out["loaded"] == [str(tmp_path / "ckpt" / "global_step_5" / "actor")]


def test_fresh_start_still_begins_at_step_1(tmp_path, shim_dir):
    assert _run(tmp_path, shim_dir, resume="disable")["first_label"] == 1


def _methods(path):
    tree = ast.parse(path.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "FullyAsyncTrainer")
    return {n.name: n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def test_detector_faulty_on_verl_091_and_not_on_pr_7935s_fix():
    """No released verl has PR #7935 (0.9.0 and 0.9.1 keep '+ 1'); its change (drop the '+ 1') is not needed."""
    src = REPO / ".cache/verl-0.9.1/verl/experimental/fully_async_policy/fully_async_trainer.py"
    m = _methods(src)
    assert fix.is_faulty(m["load_checkpoint"], fit=m["fit"])[0]
    fixed = ast.parse(
        ast.unparse(m["load_checkpoint"]).replace(
            "self.current_param_version * self.trigger_parameter_sync_step + 1",
            "self.current_param_version * self.trigger_parameter_sync_step",
        )
    ).body[0]
    faulty, reason = fix.is_faulty(fixed, fit=m["fit"])
    assert not faulty and "PR #7935" in reason


def test_verify_passes():
    fix.verify()
