"""B17: ``reward.tokenizer_remote_code`` on verl's real ``RewardLoopWorker._init_reward_fn`` and the real transformers
``AutoTokenizer`` (scenarios/reward_loop_remote_code.py, a fresh interpreter with the sitecustomize shim). What a user
checks: a model folder whose ``tokenizer_config.json`` has an ``auto_map`` runs its Python code in the unpatched
reward worker (the code writes a canary file) and not in the patched one, which refuses to load it (transformers'
ValueError); the shipped Qwen3-VL metadata folder (no remote code) still loads. The detector on verl 0.7.1's and
0.9.1's source (the same literal) and on a call that passes the config's value."""

from __future__ import annotations

import pytest

from patch_helpers import REPO, SCENARIOS, run_py
from vlgrpo.patches.fixes import reward_tokenizer_remote_code as fix

SCRIPT = SCENARIOS / "reward_loop_remote_code.py"
PATCH = "reward.tokenizer_remote_code"
MODEL_30B = REPO / "assets" / "models" / "qwen3-vl-30b-a3b-instruct"


def _run(tmp_path, shim_dir, disabled=False, model=None):
    env = {"VLGRPO_TEST_TMP": str(tmp_path)}
    if disabled:
        env["VLGRPO_PATCHES_DISABLED"] = PATCH
    if model:
        env["VLGRPO_TEST_MODEL"] = str(model)
    out = run_py(SCRIPT, path=[shim_dir], env=env).json
    assert out is not None and "crash" not in out, out
    return out


def test_unpatched_reward_worker_runs_the_folders_code(tmp_path, shim_dir):
    out = _run(tmp_path, shim_dir, disabled=True)
    assert out["status"] == "disabled"
    assert out["canary"] is True, out  # the planted module ran in the worker


def test_patched_reward_worker_refuses_the_folders_code(tmp_path, shim_dir):
    out = _run(tmp_path, shim_dir)
    assert out["status"] == "applied"
    assert out["canary"] is False, out
    assert out["error"].startswith("ValueError: ") and "contains custom code which must be executed" in out["error"], (
        out
    )
    assert out["tokenizer_loaded"] is False


def test_patched_reward_worker_still_loads_a_folder_without_remote_code(tmp_path, shim_dir):
    out = _run(tmp_path, shim_dir, model=MODEL_30B)
    assert out["status"] == "applied" and out["tokenizer_loaded"] is True and out["canary"] is False, out


@pytest.mark.parametrize("version", ["0.7.1", "0.9.1"])
def test_detector_on_other_verl_releases_and_a_config_driven_call(version):
    path = REPO / f".cache/verl-{version}/verl/experimental/reward_loop/reward_loop.py"
    if not path.is_file():
        pytest.fail(f"verl {version} is not installed in .cache; run `make verl-{version}` (make test-python does)")
    src = path.read_text()
    faulty, reason = fix.is_faulty(None, src)
    assert faulty and "2 call(s)" in reason, reason
    fixed = src.replace(
        "trust_remote_code=True", "trust_remote_code=self.config.actor_rollout_ref.model.trust_remote_code"
    )
    assert not fix.is_faulty(None, fixed)[0]


def test_verify_passes():
    fix.verify()
