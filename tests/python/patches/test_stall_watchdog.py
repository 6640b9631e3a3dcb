"""C13: ``fully_async.stall_watchdog`` on verl v0.8.0's real fully-async trainer (scenarios/stall_watchdog.py), each
case in a fresh interpreter with the sitecustomize shim and ``VLGRPO_STALL_TIMEOUT=2``.

What a user would check: every stage method the record names is verl's own (the wrapper's ``__wrapped__`` is the
object bound before the patch, defined in verl's file) and is wrapped; a weight sync whose checkpoint engine never
answers and a checkpoint save whose worker-group call never returns end the process with exit code 75 within the
bound plus the report's time, naming the stage (with step and version) on stderr and leaving a stacks file whose
frames run through verl's method; a wait for rollout samples that takes twice the bound but receives a sample
every 0.5 s through verl's ``MessageQueueClient.get_sample`` returns."""

from __future__ import annotations

import ast
import re
import time

from patch_helpers import SCENARIOS, run_py
from vlgrpo import watchdog
from vlgrpo.patches.fixes import fully_async_stall_watchdog as fix

SCRIPT = SCENARIOS / "stall_watchdog.py"
VERL = "verl/experimental/fully_async_policy/fully_async_trainer.py"
BOUND = 2


def _run(tmp_path, shim_dir, case, check=True, **env):
    full = {"VLGRPO_TEST_TMP": str(tmp_path), "VLGRPO_TEST_CASE": case, "VLGRPO_STALL_TIMEOUT": str(BOUND), **env}
    start = time.monotonic()
    proc = run_py(SCRIPT, path=[shim_dir], env=full, check=check)
    proc.seconds = time.monotonic() - start
    return proc


def _event(tmp_path):
    stalls = tmp_path / "ckpt" / "stalls"
    (event,) = list(stalls.iterdir())
    (stacks,) = [p for p in event.iterdir() if p.name.startswith("stacks-")]
    return event, stacks.read_text()


def test_every_target_is_verls_own_method_and_wrapped(tmp_path, shim_dir):
    out = _run(tmp_path, shim_dir, "status").json
    assert out is not None and "crash" not in out, out
    expected = {f"{t[0]}.{t[1]}" for t in fix.RECORD["targets"]}
    assert set(out["targets"]) == expected
    assert set(out["targets"].values()) == {"applied"}, out["reasons"]
    assert all(out["wrapped_is_original"].values()), out
    assert out["originals"]["_fit_update_weights"].startswith(
        "verl.experimental.fully_async_policy.fully_async_trainer"
    )
    assert (
        out["originals"]["_fit_update_actor"]
        == "verl.experimental.separation.ray_trainer.SeparateRayPPOTrainer._fit_update_actor"
    )
    reason = out["reasons"][f"{fix._TRAINER}.{fix._T}_save_checkpoint"]
    assert reason.startswith("checkpoint save (_save_checkpoint) waits with no deadline"), reason


def _assert_stalled(proc, tmp_path, stage, frame):
    assert proc.returncode == watchdog.EXIT_CODE, proc.stderr[-3000:]
    (line,) = [ln for ln in proc.stderr.splitlines() if "vlgrpo watchdog: STALL" in ln]
    assert f"'FullyAsyncTrainer: {stage} at trainer step 7, param version 2'" in line, line
    event, text = _event(tmp_path)
    assert str(event) in line and "exit code 75" in line
    assert re.search(rf'{re.escape(VERL)}", line \d+ in {frame}', text), text


def test_a_weight_sync_that_never_finishes_ends_the_trainer_with_75(tmp_path, shim_dir):
    proc = _run(tmp_path, shim_dir, "weight_sync", check=False)
    _assert_stalled(proc, tmp_path, "weight sync (_fit_update_weights)", "_fit_update_weights")
    _, text = _event(tmp_path)
    chain = text[text.index("asyncio:") :]
    assert chain.index("in _fit_update_weights") < chain.index("in update_weights"), chain


def test_a_checkpoint_save_that_never_returns_ends_the_trainer_with_75(tmp_path, shim_dir):
    proc = _run(tmp_path, shim_dir, "checkpoint_save", check=False)
    _assert_stalled(proc, tmp_path, "checkpoint save (_save_checkpoint)", "_save_checkpoint")
    _, text = _event(tmp_path)
    assert "in save_checkpoint" in text  # the stand-in worker-group call verl's method is blocked in


def test_a_slow_rollout_that_delivers_samples_is_not_ended(tmp_path, shim_dir):
    proc = _run(tmp_path, shim_dir, "beating")
    out = proc.json
    assert out is not None and "crash" not in out, out
    assert out["result"] == [None, None] and out["seconds"] >= 2 * BOUND, out  # 7 samples then the end signal
    assert not (tmp_path / "ckpt" / "stalls").exists()


def _methods(src):
    tree = ast.parse(src)
    return {
        n.name: n
        for c in ast.walk(tree)
        if isinstance(c, ast.ClassDef)
        for n in c.body
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
    }


def test_detector_on_verl_080_source_and_on_a_bounded_wait():
    import importlib.util

    path = importlib.util.find_spec("verl").submodule_search_locations[0]
    with open(f"{path}/experimental/fully_async_policy/message_queue.py") as fh:
        get_sample = _methods(fh.read())["get_sample"]
    faulty, reason = fix.is_faulty(get_sample)
    assert faulty and "get_sample" in reason, reason
    bounded = ast.parse(
        ast.unparse(get_sample).replace(
            "await asyncio.wrap_future(future.future())",
            "await asyncio.wait_for(asyncio.wrap_future(future.future()), timeout=60)",
        )
    ).body[0]
    faulty, reason = fix.is_faulty(bounded)
    assert not faulty and "timeout" in reason, reason
    assert not fix.is_faulty(ast.parse("def something_else(self):\n    pass").body[0])[0]


def test_stage_names_need_step_and_version_only_where_the_object_has_them():
    class FullyAsyncRollouter:
        pass

    assert fix.stage_name(FullyAsyncRollouter(), "init_workers") == (
        "FullyAsyncRollouter: worker start-up (init_workers: placement, model load, engines)"
    )


def test_verify_passes():
    fix.verify()


# ---- ppo.stall_watchdog: main_ppo's RayPPOTrainer (the VeOmni recipe) -------------------------------------------

PPO_SCRIPT = SCENARIOS / "ppo_stall_watchdog.py"
PPO_VERL = "verl/trainer/ppo/ray_trainer.py"


def _run_ppo(tmp_path, shim_dir, case, check=True):
    env = {"VLGRPO_TEST_TMP": str(tmp_path), "VLGRPO_TEST_CASE": case, "VLGRPO_STALL_TIMEOUT": str(BOUND)}
    return run_py(PPO_SCRIPT, path=[shim_dir], env=env, check=check)


def test_ppo_every_target_is_verls_own_method_and_wrapped(tmp_path, shim_dir):
    from vlgrpo.patches.fixes import ppo_stall_watchdog as ppo

    out = _run_ppo(tmp_path, shim_dir, "status").json
    assert out is not None and "crash" not in out, out
    assert set(out["targets"]) == {f"{t[0]}.{t[1]}" for t in ppo.RECORD["targets"]}
    assert set(out["targets"].values()) == {"applied"}, out["reasons"]
    assert all(out["wrapped_is_original"].values()), out
    assert set(out["originals"].values()) == {
        f"verl.trainer.ppo.ray_trainer.RayPPOTrainer.{n}" for n in out["originals"]
    }
    # the checkpoint save stays checkpoint.manifest's (a target holds one patch): a hang there is the open fit stage's
    assert not any(t[1].endswith("_save_checkpoint") for t in ppo.RECORD["targets"])


def test_ppo_a_worker_start_that_never_gets_its_placement_groups_ends_the_trainer_with_75(tmp_path, shim_dir):
    start = time.monotonic()
    proc = _run_ppo(tmp_path, shim_dir, "init_workers", check=False)
    assert proc.returncode == watchdog.EXIT_CODE, proc.stderr[-3000:]
    assert time.monotonic() - start < BOUND + watchdog.GRACE_S
    (line,) = [ln for ln in proc.stderr.splitlines() if "vlgrpo watchdog: STALL" in ln]
    assert "'RayPPOTrainer: worker start-up (init_workers: placement, model load, engines)'" in line, line
    event, text = _event(tmp_path)
    assert str(event) in line and "exit code 75" in line
    assert re.search(rf'{re.escape(PPO_VERL)}", line \d+ in init_workers', text), text
    assert "in create_resource_pool" in text  # the stand-in call verl's method is blocked in


def test_ppo_a_slow_start_that_makes_progress_is_not_ended(tmp_path, shim_dir):
    out = _run_ppo(tmp_path, shim_dir, "slow_pools").json
    assert out is not None and "crash" not in out, out
    assert out["seconds"] >= 1.5 * BOUND and "after" in out, out  # verl's init_workers went on past the stand-in
    assert not (tmp_path / "ckpt" / "stalls").exists()


def test_ppo_stage_names_carry_the_trainer_step_when_it_has_one():
    class RayPPOTrainer:
        global_steps = 12

    assert (
        fix.stage_name(RayPPOTrainer(), "_update_actor")
        == "RayPPOTrainer: actor update (_update_actor) at trainer step 12"
    )
