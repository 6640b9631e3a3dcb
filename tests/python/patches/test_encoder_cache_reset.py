"""C07: encoder outputs computed with the previous weights are not reused after the prefix-cache reset verl runs
around a weight update (``rollout.encoder_cache_reset``).

vLLM 0.13.0's real ``EncoderCacheManager``, ``Request`` and scheduler methods (``_try_schedule_encoder_inputs``,
``reset_prefix_cache``, ``_free_request``) in a fresh interpreter with the sitecustomize shim
(scenarios/vllm_encoder_cache.py). "The encoder runs" = ``_try_schedule_encoder_inputs`` schedules input 0."""

from __future__ import annotations

import os

import pytest
from patch_helpers import REPO, SCENARIOS, run_py

from vlgrpo.patches.fixes import rollout_encoder_cache_reset as fix
from vlgrpo.patches.source import find_function

VLLM = REPO / ".cache" / "vllm-0.13.0"
SCRIPT = SCENARIOS / "vllm_encoder_cache.py"


def _scenario(shim_dir, reset, disabled=False):
    if not (VLLM / ".installed").is_file():
        pytest.fail(f"vLLM 0.13.0's sources are not in {VLLM}; run `make vllm-0.13.0` (make test-python does)")
    env = {
        "VLGRPO_TEST_VLLM_PATH": os.pathsep.join([str(VLLM / "src"), str(VLLM / "deps")]),
        "VLGRPO_TEST_RESET": "1" if reset else "0",
    }
    if disabled:
        env["VLGRPO_PATCHES_DISABLED"] = "rollout.encoder_cache_reset"
    out = run_py(SCRIPT, path=[shim_dir], env=env).json
    assert "crash" not in out, out.get("crash")
    assert out["vllm"].startswith(str(VLLM / "src")), out["vllm"]
    assert out["a_encoder_inputs"] == [0] and out["cached_after_a"] == ["img-1"]  # a ran the encoder; entry kept
    return out


def test_image_seen_before_the_weight_update_runs_the_encoder_again(shim_dir):
    out = _scenario(shim_dir, reset=True)
    assert out["status"][0] == "applied" and "issue #6523" in out["status"][1]
    assert out["reset"] is True
    assert out["freed_to_workers"] == ["img-1"]  # the next SchedulerOutput tells the model runners to drop it
    assert out["b_encoder_inputs"] == [0]
    assert out["slots"] == [1024 - 256, 1024 - 256]  # only b's entry is allocated: the old one's slots came back


def test_without_an_update_the_cache_is_shared_as_before(shim_dir):
    out = _scenario(shim_dir, reset=False)
    assert out["status"][0] == "applied"
    assert out["b_encoder_inputs"] == [] and out["freed_to_workers"] == []


def test_unpatched_vllm_reuses_the_old_encoder_output(shim_dir):
    """The fault: after the reset verl runs at the sync, the resumed request hits the entry of the old weights."""
    out = _scenario(shim_dir, reset=True, disabled=True)
    assert out["status"][0] == "disabled"
    assert out["reset"] is True and out["b_encoder_inputs"] == [] and out["freed_to_workers"] == []


def test_detector_on_vllm_013_and_on_a_scheduler_that_resets_its_encoder_cache():
    source = (VLLM / "src" / "vllm" / "v1" / "core" / "sched" / "scheduler.py").read_text()
    faulty, reason = fix.is_faulty(find_function(source, "Scheduler.reset_prefix_cache"))
    assert faulty and "encoder outputs" in reason
    fixed = (
        "class Scheduler:\n    def reset_prefix_cache(self, reset_running_requests=False):\n"
        "        ok = self.kv_cache_manager.reset_prefix_cache()\n"
        "        self.encoder_cache_manager.reset()\n        return ok\n"
    )
    assert fix.is_faulty(find_function(fixed, "Scheduler.reset_prefix_cache")) == (
        False,
        "reset_prefix_cache already resets the encoder cache",
    )


def test_verify_passes():
    fix.verify()
