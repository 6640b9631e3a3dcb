"""C05 / verl PR #7207: ``fully_async.partial_rollout_budget`` on verl v0.8.0's real client and server code
(scenarios/partial_rollout_resume.py). The worked numbers are the field case's: a 400-token prompt of the recipe
(max_prompt_length 2048, max_response_length 8192) aborted after 6,000 tokens: v0.8.0 grants 3,840 more (9,840 in
all, 1,648 past 8,192); the right second limit is 8,192 - 6,000 = 2,192."""

from __future__ import annotations

import ast
import pytest

from patch_helpers import REPO, SCENARIOS, run_py
from vlgrpo.patches.fixes import fully_async_partial_rollout_budget as fix

SCRIPT = SCENARIOS / "partial_rollout_resume.py"
PATCH = "fully_async.partial_rollout_budget"


def _run(tmp_path, shim_dir, partial=True, abort_at=6000, disabled=False):
    env = {
        "VLGRPO_TEST_PARTIAL": "1" if partial else "0",
        "VLGRPO_TEST_ABORT_AT": str(abort_at),
        "VLGRPO_TEST_TMP": str(tmp_path),
    }
    if disabled:
        env["VLGRPO_PATCHES_DISABLED"] = PATCH
    out = run_py(SCRIPT, path=[shim_dir], env=env).json
    assert out is not None and "crash" not in out, out
    return out


def test_unpatched_v080_overruns_the_response_budget(tmp_path, shim_dir):
    out = _run(tmp_path, shim_dir, disabled=True)
    assert out["status"] == "disabled"
    assert out["calls"] == [[400, 8192], [6400, 3840]]
    assert out["generated"] == 9840 and out["generated"] - 8192 == 2048 - 400


def test_patched_resume_gets_the_remaining_budget(tmp_path, shim_dir):
    out = _run(tmp_path, shim_dir)
    assert out["status"] == "applied"
    assert out["calls"] == [[400, 8192], [6400, 2192]]  # first call unchanged
    assert out["generated"] == 8192 and out["stop_reason"] == "length"
    assert out["caller_params"] == {"temperature": 1.0, "top_p": 1.0, "logprobs": False}


def test_budget_used_up_at_the_abort_stops_without_a_second_call(tmp_path, shim_dir):
    out = _run(tmp_path, shim_dir, abort_at=8192)
    assert out["calls"] == [[400, 8192]] and out["generated"] == 8192


def test_unchanged_when_partial_rollout_is_off(tmp_path, shim_dir):
    on = _run(tmp_path, shim_dir, partial=False)
    off = _run(tmp_path, shim_dir, partial=False, disabled=True)
    assert on["calls"] == off["calls"] == [[400, 8192]]
    assert on["generated"] == off["generated"] == 6000 and on["stop_reason"] == off["stop_reason"] == "aborted"


VERL_091 = REPO / ".cache" / "verl-0.9.1"


def test_not_needed_on_verl_091_which_has_pr_7207(shim_dir):
    if not (VERL_091 / "verl" / "workers" / "rollout" / "llm_server.py").is_file():
        pytest.fail(f"verl 0.9.1 is not installed in {VERL_091}; run `make verl-0.9.1` (make test-python does)")
    tree = ast.parse((VERL_091 / "verl/workers/rollout/llm_server.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "FullyAsyncLLMServerClient")
    gen = next(n for n in cls.body if getattr(n, "name", None) == "generate")
    faulty, reason = fix.is_faulty(gen)
    assert not faulty and "PR #7207" in reason
    stubs = ("vllm", "zmq", "msgspec", "uvicorn", "fastapi", "cachetools", "peft", "accelerate", "tensordict")
    proc = run_py(
        f"import sys, json; sys.path.insert(0, {str(SCENARIOS)!r}); from stub_modules import StubFinder; "
        f"sys.meta_path.append(StubFinder({stubs!r})); import vlgrpo.patches as p; "
        f"r = {{x['id']: x for x in p.status()}}; print(json.dumps(r[{PATCH!r}]))",
        path=[shim_dir, VERL_091],
    )
    row = proc.json
    assert row["status"] == "not needed", row
    assert any(t["status"] == "not needed" and "PR #7207" in t["reason"] for t in row["targets"]), row


def test_verify_passes():
    fix.verify()
