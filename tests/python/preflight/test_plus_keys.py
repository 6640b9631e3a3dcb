"""B10: override keys against what consumes them (verl's dataclasses, free-form mappings, the names verl reads), and
"did you mean" only from plausible keys. References: verl 0.8.0's own dataclasses (dataclasses.fields of the class
its YAML's _target_ names), its YAML, and hand-checked spellings."""

from __future__ import annotations

import pytest

from preflight_helpers import MODEL_30B, UPSTREAM_FULLY_ASYNC, read_argv, set_override

from vlgrpo.preflight import run_preflight
from vlgrpo.preflight.plus_keys import osa_distance


@pytest.fixture(scope="module")
def base_argv():
    argv = set_override(read_argv(UPSTREAM_FULLY_ASYNC), "trainer.logger", "[console]")
    return [a for a in argv if not a.startswith("+actor_rollout_ref.rollout.enable_sleep_mode")]


def _one(base_argv, extra):
    argv = base_argv + [extra]
    report = run_preflight(argv, check_data=False, model_path=MODEL_30B)
    return report, [f for f in report.findings if f.where.position == len(argv) - 1]


def test_b10_typo_under_plus_names_the_key_the_version_and_the_real_key(base_argv):
    """Today '+data.max_prompt_lenght=4096' composes and verl never reads it (exit 0)."""
    report, (f,) = _one(base_argv, "+data.max_prompt_lenght=4096")
    assert f.code == "schema.unknown-key" and f.severity == "error" and report.exit_code == 2
    assert "'data.max_prompt_lenght'" in f.what and "verl 0.8.0" in f.what
    assert "(did you mean data.max_prompt_length?)" in f.what
    assert f.fix.startswith("use data.max_prompt_length=4096")


def test_b10_a_dataclass_field_missing_from_the_yaml_needs_plus_not_a_wrong_suggestion(base_argv):
    """enable_sleep_mode is a field of verl 0.8.0's RolloutConfig that rollout.yaml lacks (verl PR #7430); the old
    'did you mean' offered actor_rollout_ref.rollout.name."""
    import dataclasses

    from verl.workers.config import RolloutConfig

    assert "enable_sleep_mode" in {f.name for f in dataclasses.fields(RolloutConfig)}
    report, (f,) = _one(base_argv, "actor_rollout_ref.rollout.enable_sleep_mode=False")
    assert f.code == "schema.missing-plus" and "RolloutConfig" in f.what and "rollout.name" not in f.what
    assert f.fix == "add a '+': +actor_rollout_ref.rollout.enable_sleep_mode=False"
    _, hits = _one(base_argv, "+actor_rollout_ref.rollout.enable_sleep_mode=False")
    assert hits == []


@pytest.mark.parametrize(
    "extra, nearest",
    [
        ("+actor_rollout_ref.rollout.enable_sleep_modee=False", "+actor_rollout_ref.rollout.enable_sleep_mode=False"),
        ("+trainer.total_epoch=1", "trainer.total_epochs=1"),
        (
            "+actor_rollout_ref.actor.fsdp_config.param_ofload=True",
            "actor_rollout_ref.actor.fsdp_config.param_offload=True",
        ),
        ("+algorithm.kl_ctrl.kl_coeff=0.1", "algorithm.kl_ctrl.kl_coef=0.1"),
        ("+async_training.staleness_treshold=0.5", "async_training.staleness_threshold=0.5"),
        ("+actor_rollout_ref.actor.optim.lr_warmup_step=5", "actor_rollout_ref.actor.optim.lr_warmup_steps=5"),
    ],
)
def test_more_typos_under_plus(base_argv, extra, nearest):
    """A dataclass section (RolloutConfig, FSDPEngineConfig, KLControlConfig, FSDPOptimizerConfig) or a plain mapping
    (trainer, async_training): each typo is refused with the one near key of the same section."""
    report, (f,) = _one(base_argv, extra)
    assert f.code == "schema.unknown-key" and report.exit_code == 2
    assert f.fix.startswith(f"use {nearest} "), f.fix


@pytest.mark.parametrize(
    "extra",
    [
        "+actor_rollout_ref.rollout.limit_images=2",  # RolloutConfig field, not in rollout.yaml
        "+actor_rollout_ref.model.override_config.rope_theta=1000000",  # free-form (empty mapping in the YAML)
        "+actor_rollout_ref.rollout.engine_kwargs.vllm.max_num_partial_prefills=1",  # free-form
        "+data.cache_dir=/tmp/verl-cache",  # not in the YAML; RLHFDataset reads config.get("cache_dir")
        "+reward_model.reward_kwargs.overlong_buffer_cfg.warmup=1",  # reward_kwargs: read by migrate_legacy_reward_impl
    ],
)
def test_keys_verl_consumes_are_accepted(base_argv, extra):
    """No key finding (other checks may still judge the value: limit_images=2 lets video through, rules.video-enabled)."""
    _, hits = _one(base_argv, extra)
    hits = [f for f in hits if f.code.startswith("schema.")]
    assert hits == [], [f.line() for f in hits]


def test_no_suggestion_beats_a_wrong_one(base_argv):
    _, (f,) = _one(base_argv, "+data.zzzqqq=1")
    assert "did you mean" not in f.what and f.fix.startswith("remove it")
    _, (g,) = _one(base_argv, "actor_rollout_ref.rollout.nme=vllm")  # a plain override: same rule
    assert "(did you mean actor_rollout_ref.rollout.name?)" in g.what


def test_edit_distance_counts_a_swap_once():
    assert osa_distance("lenght", "length") == 1
    assert osa_distance("enable_sleep_mode", "name") > 3
    assert osa_distance("kl_coeff", "kl_coef") == 1
