"""C04 (b) / verl PR #4199's TODO: ``fully_async.resume_pending_prompts`` on verl v0.8.0's real fully-async rollouter
(scenarios/rollouter_resume.py: real rollouter, dataloader, Ray MessageQueue and checkpoint code; stand-in servers and
trainer). The job is stopped right after global_step_5 is saved (5 versions x T 2 x 2 samples = 20 trained) and
resumed; the stand-in trainer records the dataset row of every prompt it trained (``extra_info.index``). What a user
checks: every row trained exactly once per epoch, none skipped, none twice."""

from __future__ import annotations

import ast
import collections

import pytest

from patch_helpers import REPO, SCENARIOS, run_py
from vlgrpo.patches.fixes import fully_async_resume_pending_prompts as fix

SCRIPT = SCENARIOS / "rollouter_resume.py"
PATCH = "fully_async.resume_pending_prompts"
ROLLOUTER = "verl/experimental/fully_async_policy/fully_async_rollouter.py"
V080 = REPO / ".venv/lib/python3.11/site-packages" / ROLLOUTER
V091 = REPO / ".cache/verl-0.9.1" / ROLLOUTER


def _run(tmp_path, shim_dir, rows, epochs, workers=0, disabled=False):
    env = {
        "VLGRPO_TEST_TMP": str(tmp_path),
        "VLGRPO_TEST_ROWS": str(rows),
        "VLGRPO_TEST_EPOCHS": str(epochs),
        "VLGRPO_TEST_STOP": "5",
        "VLGRPO_TEST_WORKERS": str(workers),
    }
    if disabled:
        env["VLGRPO_PATCHES_DISABLED"] = PATCH
    out = run_py(SCRIPT, path=[shim_dir], env=env, timeout=480).json
    assert out is not None and "crash" not in out, out
    assert out["status"][PATCH] == ("disabled" if disabled else "applied"), out["status"]
    assert out["first"]["version"] == 5 and out["trained_before_stop"] == 20  # stopped right after global_step_5
    assert out["second"]["start"]["version"] == 5
    return out


def test_v080_skips_prompts_drawn_before_the_save(tmp_path, shim_dir):
    out = _run(tmp_path, shim_dir, rows=40, epochs=1, disabled=True)
    counts = collections.Counter(out["trained"])
    missing = sorted(set(range(40)) - set(counts))
    assert missing, counts  # the prompts drawn for queued / running samples at the save are never trained
    assert len(out["trained"]) == 40 - len(missing)
    # and the prompt counter claims they were: it resumes at 21 (20 trained + 1) though more had been drawn
    assert out["second"]["start"]["global_steps"] == 21


def test_patched_trains_every_row_exactly_once_across_a_stop_at_step_5(tmp_path, shim_dir):
    out = _run(tmp_path, shim_dir, rows=40, epochs=1)
    assert collections.Counter(out["trained"]) == {i: 1 for i in range(40)}
    second = out["second"]
    # counters as in a run never stopped: 40 prompts generated; verl's feed stops when the counter reaches
    # total_rollout_steps (rows x epochs = 40) without counting on
    assert second["total_generated"] == second["processed"] == 40 and second["end_global_steps"] == 40
    assert set(out["first"]["epochs"] + second["epochs"]) == {0}
    # verl's sample names and the GRPO uids made from them are those of a run never stopped: a re-fed prompt keeps
    # its own (with a fresh counter it could take the uid of a prompt trained before the stop)
    assert sorted(out["first"]["uids"] + second["uids"]) == sorted(f"uid_sample_0_{c}" for c in range(1, 41))
    assert fix.KEY not in out["first"]["agent_keys"] + second["agent_keys"]  # our row mark never reaches the agent


def test_patched_two_epochs_with_a_dataloader_worker(tmp_path, shim_dir):
    """The stop falls in epoch 0 with epoch-1 prompts already drawn; rows go through a DataLoader worker process."""
    out = _run(tmp_path, shim_dir, rows=24, epochs=2, workers=1)
    assert collections.Counter(out["trained"]) == {i: 2 for i in range(24)}
    epochs = out["first"]["epochs"] + out["second"]["epochs"]
    # the order in which samples finish is not the order they were fed (the rollouter generates several at once,
    # and the re-fed epoch-0 prompts run beside epoch-1 ones drawn before the save): counts per epoch, not order
    assert collections.Counter(epochs) == {0: 24, 1: 24}
    assert set(out["first"]["epochs"]) <= {0, 1} and 0 in out["second"]["epochs"]
    by_epoch = collections.defaultdict(list)
    for epoch, row in zip(epochs, out["trained"]):
        by_epoch[epoch].append(row)
    assert sorted(by_epoch[0]) == sorted(by_epoch[1]) == list(range(24))
    assert out["second"]["end_global_steps"] == out["second"]["total_generated"] == 48
    assert sorted(out["first"]["uids"] + out["second"]["uids"]) == sorted(
        f"uid_sample_{(c - 1) // 24}_{c}" for c in range(1, 49)
    )


def test_detector_faulty_on_v080_and_v091():
    for path in (V080, V091):
        if not path.is_file():
            pytest.fail(f"{path} is missing; run `make venv verl-0.9.1` (make test-python does)")
        faulty, reason = fix.is_faulty(rollouter_source=path.read_text())
        assert faulty and "save_checkpoint" in reason, (path, reason)


def _replace_method(source, name, new_source):
    tree = ast.parse(source)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "FullyAsyncRollouter")
    i = next(i for i, n in enumerate(cls.body) if getattr(n, "name", None) == name)
    cls.body[i] = ast.parse(new_source).body[0]
    return ast.unparse(tree)


def test_not_needed_when_save_checkpoint_records_the_in_flight_samples():
    """The shape an upstream fix must take: the save looks at the queued / running samples too."""
    fixed = _replace_method(
        V080.read_text(),
        "save_checkpoint",
        (
            "async def save_checkpoint(self, folder):\n"
            "    state = self.train_dataloader.state_dict()\n"
            "    state['pending'] = [s.sample_id for s in self.pending_queue._queue]\n"
            "    torch.save(state, folder)\n"
        ),
    )
    faulty, reason = fix.is_faulty(rollouter_source=fixed)
    assert not faulty and "records the queued and running samples" in reason


def test_refuses_to_hook_into_a_rollouter_shaped_differently():
    changed = _replace_method(V080.read_text(), "_feed_samples", "async def _feed_samples(self):\n    pass\n")
    with pytest.raises(RuntimeError, match="_feed_samples"):
        fix.is_faulty(rollouter_source=changed)


def test_verify_passes():
    fix.verify()
