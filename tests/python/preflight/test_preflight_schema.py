"""Schema checks against the installed verl 0.8.0 config: upstream scripts, +/++ rules, duplicates, kinds.

Expected values come from Hydra's documented override rules and from the field cases (B11), not from
vlgrpo's output: e.g. `+` on an existing key is refused by Hydra, a quoted list reaches verl as a string.
"""

from __future__ import annotations

from preflight_helpers import MODEL_30B, UPSTREAM_FULLY_ASYNC, UPSTREAM_VEOMNI, read_argv, set_override

from vlgrpo.preflight import run_preflight

IGNORED = {"rules.checkpoint-backend-import", "rules.vision-token-ban", "data.reward-import"}


def _codes(report, prefix=""):
    return [f.code for f in report.findings if f.code.startswith(prefix) and f.code not in IGNORED]


def _find(report, code):
    hits = [f for f in report.findings if f.code == code]
    assert hits, f"{code} not reported; got {report.codes()}"
    return hits


def test_upstream_fully_async_composes_and_logger_string_is_caught():
    argv = read_argv(UPSTREAM_FULLY_ASYNC)
    report = run_preflight(argv, check_data=False, model_path=MODEL_30B)
    assert report.summary["verl_version"] == "0.8.0"
    assert report.summary["config_name"] == "fully_async_ppo_trainer"
    # all 91 overrides compose on v0.8.0; the only schema finding is the logger string at its argv position
    assert _codes(report, "schema.") == ["schema.list-as-string"]
    (f,) = _find(report, "schema.list-as-string")
    assert f.where.position == argv.index("trainer.logger='[console,wandb]'")
    assert f.where.key == "trainer.logger"
    assert "trainer.logger=[console,wandb]" in f.fix
    # B07: the script's data.truncation='left' on an image dataset
    (t,) = _find(report, "rules.image-truncation")
    assert t.where.position == argv.index("data.truncation='left'")
    assert report.exit_code == 2


def test_upstream_veomni_composes_and_its_faults_are_named():
    argv = read_argv(UPSTREAM_VEOMNI)
    report = run_preflight(argv, check_data=False, model_path=MODEL_30B)
    assert report.summary["config_name"] == "ppo_trainer"
    assert report.summary["model_engine"] == "veomni"
    # the script's faults: enable_chunked_prefill=False and enable_prefix_caching=False never reach vLLM (verl 0.8.0
    # drops False booleans from vLLM's command line, B08); data.image_patch_size stays at verl's default 14 while
    # Qwen3-VL's processor uses 16, so verl's overlong filter counts image tokens wrong (B06, verl issue #6592); and it
    # allows video inputs on vLLM 0.13.0 (C01)
    assert [f.code for f in report.errors] == [
        "vllm.setting-dropped",
        "vllm.setting-dropped",
        "rules.image-patch-size",
        "rules.video-enabled",
    ], [f.line() for f in report.errors]
    assert report.exit_code == 2
    # both max_model_len settings are 4096 >= 1024 + 2048, under the 32768 override of max_position_embeddings
    b = report.summary["token_budget"]
    assert (b["needed"], b["max_model_len"], b["engine_max_model_len"], b["max_position_embeddings"]) == (
        3072,
        4096,
        4096,
        32768,
    )


def test_duplicates_name_both_positions():
    """B11 inputs in one launch: a same-value duplicate, truncation left then error (Hydra keeps error),
    rollout.n=16 then ++rollout.n=16."""
    extra = ["data.max_prompt_length=2048", "data.truncation=error", "++actor_rollout_ref.rollout.n=16"]
    argv = read_argv(UPSTREAM_FULLY_ASYNC) + extra
    report = run_preflight(argv, check_data=False, model_path=MODEL_30B)
    dups = {f.where.position: f for f in _find(report, "schema.duplicate-key")}
    for offset, text in enumerate(extra):
        pos = len(argv) - len(extra) + offset
        key = text.lstrip("+").split("=")[0]
        first = next(i for i, a in enumerate(argv) if a.lstrip("+").split("=")[0] == key)
        f = dups[pos]
        assert f.where.key == key and f.where.override == text
        assert f"argv[{first}]" in f.what and f"argv[{pos}]" in f.what
    assert "(same value)" in dups[len(argv) - 3].what
    assert "(different values; Hydra keeps the last)" in dups[len(argv) - 2].what
    assert report.exit_code == 2


def test_plus_on_existing_key_missing_plus_and_unknown_key():
    argv = read_argv(UPSTREAM_VEOMNI)
    argv = set_override(argv, "data.max_prompt_length", None) + [
        "+data.max_prompt_length=1024",  # exists in verl's data config: Hydra refuses '+'
        "actor_rollout_ref.model.override_config.rope_theta=1000",  # new key in an empty dict: needs '+'
        "data.max_prompt_lenght=3",  # typo
    ]
    report = run_preflight(argv, check_data=False, model_path=MODEL_30B)
    n = len(argv)
    plus = _find(report, "schema.plus-on-existing")[0]
    assert (plus.where.position, plus.where.key) == (n - 3, "data.max_prompt_length")
    assert plus.fix.endswith("data.max_prompt_length=1024") and not plus.fix.endswith("+data.max_prompt_length=1024")
    miss = _find(report, "schema.missing-plus")[0]
    assert miss.where.position == n - 2
    assert "+actor_rollout_ref.model.override_config.rope_theta=1000" in miss.fix
    unk = _find(report, "schema.unknown-key")[0]
    assert unk.where.position == n - 1 and "data.max_prompt_length" in unk.what
    assert "0.8.0" in unk.what
    assert report.exit_code == 2


def test_list_given_as_string_json_form():
    argv = set_override(read_argv(UPSTREAM_VEOMNI), "trainer.logger", '\'["console","wandb"]\'')
    report = run_preflight(argv, check_data=False, model_path=MODEL_30B)
    (f,) = _find(report, "schema.list-as-string")
    assert f.fix == "trainer.logger=[console,wandb]"


def test_bool_given_as_string():
    argv = set_override(read_argv(UPSTREAM_VEOMNI), "data.filter_overlong_prompts", "'False'")
    report = run_preflight(argv, check_data=False, model_path=MODEL_30B)
    assert _find(report, "schema.bool-as-string")[0].where.key == "data.filter_overlong_prompts"


def test_quoted_key_segment_is_a_syntax_error():
    argv = read_argv(UPSTREAM_VEOMNI) + ["actor_rollout_ref.rollout.'n'=3"]
    report = run_preflight(argv, check_data=False, model_path=MODEL_30B)
    assert _find(report, "schema.syntax")[0].where.position == len(argv) - 1


def test_unknown_logger_backend():
    argv = set_override(read_argv(UPSTREAM_VEOMNI), "trainer.logger", "[console,neptune]")
    report = run_preflight(argv, check_data=False, model_path=MODEL_30B)
    (f,) = _find(report, "rules.logger")
    assert "neptune" in f.what and f.where.position == argv.index("trainer.logger=[console,neptune]")


def test_deleting_a_key_verl_reads():
    argv = set_override(read_argv(UPSTREAM_VEOMNI), "data.max_prompt_length", None) + ["~data.max_prompt_length"]
    report = run_preflight(argv, check_data=False, model_path=MODEL_30B)
    assert report.internal_error is None
    assert [f.where.key for f in report.findings if f.code == "schema.required-key"] == ["data.max_prompt_length"]
    assert report.exit_code == 2


def test_remote_code_and_code_loading_keys_are_refused():
    """B17 (a)/(b) for an argv checked on its own: trust_remote_code on (the key exists, no `+` needed),
    a `_target_` swapped in by an override, and a key that makes verl import a user file — each an error at
    its argv position. The upstream scripts set none of them (test_upstream_veomni_composes_and_its_faults_are_named)."""
    base = read_argv(UPSTREAM_VEOMNI)
    extra = [
        "data.trust_remote_code=True",
        "reward.reward_manager._target_=os.system",
        "custom_reward_function.path=/tmp/reward.py",
    ]
    argv = base + extra
    report = run_preflight(argv, check_data=False, model_path=MODEL_30B)
    (t,) = _find(report, "security.trust-remote-code")
    assert t.where.key == "data.trust_remote_code" and t.where.position == argv.index(extra[0])
    (g,) = _find(report, "security.target")
    assert g.where.position == argv.index(extra[1])
    (c,) = _find(report, "security.code-loading")
    assert c.where.key == "custom_reward_function.path" and c.where.position == argv.index(extra[2])
    assert report.exit_code == 2
