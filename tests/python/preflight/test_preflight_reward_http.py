"""C01 follow-up: verl's reward-model path calls the reward model's vLLM replicas over HTTP (verl v0.8.0
``RewardModelManager``: ``worker_urls = [f"http://{server._server_address}" ...]`` -> ``launch_router_process`` on the
node IP), and those replicas are the same ``vLLMHttpServer`` that the patch ``rollout.server_loopback`` binds to
127.0.0.1: every reward request would be refused after the accelerators were allocated. The preflight's
``reward-http`` check refuses the combination before Ray starts (exit 2)."""

from __future__ import annotations

from preflight_helpers import set_override

from vlgrpo.preflight import run_preflight

CODE = "rules.reward-http-loopback"


def _codes(report, code):
    return [f for f in report.findings if f.code == code]


def _with_reward_model(argv, key="reward.reward_model"):
    argv = set_override(argv, f"{key}.enable", "True")
    argv = set_override(
        argv, f"{key}.model_path" if key.startswith("reward.") else f"{key}.model.path", "/models/genrm"
    )
    return set_override(argv, f"{key}.rollout.name", "vllm")


def test_recipe_defaults_have_no_reward_model_over_http(clean_fixed_report):
    assert not _codes(clean_fixed_report, CODE)
    assert clean_fixed_report.summary["reward_http"] == {"reward_model": False, "loopback_patch": True}


def test_reward_model_with_the_loopback_patch_is_refused(fixed_argv):
    report = run_preflight(_with_reward_model(fixed_argv), check_data=False)
    hits = _codes(report, CODE)
    assert hits and hits[0].severity == "error" and report.exit_code == 2, [f.line() for f in report.findings]
    assert hits[0].where.key == "reward.reward_model.enable"
    assert "127.0.0.1" in hits[0].why and "rollout.server_loopback" in hits[0].why
    assert "VLGRPO_PATCHES_DISABLED=rollout.server_loopback" in hits[0].fix


def test_legacy_reward_model_key_is_refused_too(fixed_argv):
    """verl 0.8.0 still takes ``reward_model.enable`` and moves it to ``reward.reward_model`` (migrate_legacy_...)."""
    report = run_preflight(_with_reward_model(fixed_argv, key="reward_model"), check_data=False)
    hits = _codes(report, CODE)
    assert hits and hits[0].where.key == "reward_model.enable", [f.line() for f in report.findings]
    assert hits[0].where.override == "reward_model.enable=True"


def test_allowed_when_the_loopback_patch_is_switched_off(fixed_argv, monkeypatch):
    for name, value in (("VLGRPO_PATCHES_DISABLED", "rollout.server_loopback"), ("VLGRPO_PATCHES", "off")):
        with monkeypatch.context() as mp:
            mp.setenv(name, value)
            report = run_preflight(_with_reward_model(fixed_argv), check_data=False)
            assert not _codes(report, CODE), name
            assert report.summary["reward_http"] == {"reward_model": True, "loopback_patch": False}
