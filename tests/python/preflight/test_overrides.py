"""VLGRPO_OVERRIDES_FILE: a user's verl keys, allowlisted and typed (python/src/vlgrpo/preflight/overrides.py).

References: the recipes' real templates and fixed-keys notes (the recipe files, python/src/vlgrpo/recipes), the registry
(environment.tsv), verl 0.8.0's composed config and dataclasses as installed, Hydra's own compose for the accepted
values, and verl's own source for the code-loading sweep (grep of the lines that load code).
"""

from __future__ import annotations

import os
import subprocess

import pytest

from vlgrpo.preflight import code_sinks, overrides
from vlgrpo.preflight.overrides import Entry, OverridesError

pytestmark = pytest.mark.slow(reason="composes verl's Hydra config (imports verl) and sweeps verl's source")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
RECIPES = ("fa", "vo")


def _recipe(owner: str) -> dict:
    """The recipe's module, fixed-keys note and template, as the launcher reads them (its recipe file)."""
    from vlgrpo.launch import recipes

    rec = recipes.load(owner)
    return {"module": rec.program[2], "fixed_note": rec.fixed, "template": list(rec.template)}


@pytest.fixture(scope="module")
def recipes():
    got = {}
    for owner in RECIPES:
        r = _recipe(owner)
        r["base"] = overrides._compose_base(r["module"], r["template"])
        got[owner] = r
    return got


def _check(recipes, key, value, owner="fa"):
    r = recipes[owner]
    return overrides.check(
        [Entry(key, value, 1)],
        owner=owner,
        module=r["module"],
        template=r["template"],
        fixed_note=r["fixed_note"],
        base=r["base"],
    )


def _composed_value(recipes, owner, texts):
    """Hydra's own compose of the recipe's config groups plus ``texts``: the reference for an accepted value."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from vlgrpo.preflight.launch import parse_launch

    r = recipes[owner]
    groups = [e for e in r["template"] if "=" in e and "." not in e.split("=", 1)[0] and "{" not in e]
    spec = parse_launch(["python3", "-m", r["module"]])
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=spec.config_dir, version_base=None):
        return compose(spec.config_name, overrides=groups + texts)


# ---- the field case: accepted ------------------------------------------------------------------------------------
ACCEPTED = [
    ("fa", "algorithm.kl_ctrl.kl_coef", 0.001),
    ("fa", "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio", 0.05),
    ("fa", "trainer.total_epochs", 3),
    # three more of the kind: a template literal (upstream value) replaced, a bool, a text value
    ("fa", "actor_rollout_ref.actor.clip_ratio_high", 0.3),
    ("fa", "algorithm.norm_adv_by_std_in_grpo", False),
    ("fa", "trainer.log_val_generations", 10),
    ("vo", "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio", 0.1),
    ("vo", "actor_rollout_ref.actor.optim.lr_scheduler_type", "cosine"),
    ("fa", "+reward_model.reward_kwargs.overlong_buffer_cfg.penalty_factor", 0.5),
]


@pytest.mark.parametrize(("owner", "key", "value"), ACCEPTED, ids=[f"{o}-{k}" for o, k, _ in ACCEPTED])
def test_accepted_keys_compose_in_hydra_to_the_value_written(recipes, owner, key, value):
    from omegaconf import OmegaConf

    result = _check(recipes, key, value, owner)
    assert result.problems == [], result.problems
    (text,) = result.accepted
    cfg = _composed_value(recipes, owner, [text])
    got = OmegaConf.select(cfg, key.lstrip("+"))
    assert got == value and type(got) is type(value), (text, got)


# ---- the field case: refused, with the reason ----------------------------------------------------------------------
REFUSED = [
    # code loading or trust (found by the sweep of verl's source)
    ("custom_reward_function.path", "/data/reward.py", "reaches code loading"),
    ("actor_rollout_ref.model.trust_remote_code", True, "reaches code loading or trust"),
    ("data.custom_cls.path", "/data/ds.py", "reaches code loading"),
    ("actor_rollout_ref.model.external_lib", "mylib", "reaches code loading"),
    ("actor_rollout_ref.rollout.agent.agent_loop_config_path", "/data/agents.yaml", "reaches code loading"),
    ("reward_model.reward_loop_module_path", "/data/rm.py", "reaches code loading"),
    ("+actor_rollout_ref.actor._target_", "os.system", "reaches code loading"),
    # what verl then trusts or deletes (attack review: a /dev/shm model copy planted by another user was loaded)
    (
        "actor_rollout_ref.model.use_shm",
        True,
        "changes what the job trusts or keeps: verl copies the model to /dev/shm",
    ),
    ("critic.model.use_shm", True, "changes what the job trusts or keeps"),
    ("trainer.del_local_ckpt_after_load", True, "verl deletes the checkpoint folder a resume loaded"),
    ("reward.reward_manager.source", "importlib", "changes what the job trusts or keeps"),
    # owned by a VLGRPO_* setting (named)
    ("data.max_prompt_length", 2048, "is set by VLGRPO_MAX_PROMPT_LENGTH"),
    ("actor_rollout_ref.actor.optim.lr", 1.0e-5, "is set by VLGRPO_LR"),
    ("trainer.save_freq", 10, "is set by VLGRPO_SAVE_FREQ"),
    ("actor_rollout_ref.rollout.n", 4, "is set by VLGRPO_ROLLOUT_N"),
    # derived or fixed by the entrypoint (layout, devices)
    ("trainer.nnodes", 4, "is set by VLGRPO_TRAINER_NNODES"),
    ("actor_rollout_ref.rollout.max_num_batched_tokens", 8192, "derived by the entrypoint"),
    ("actor_rollout_ref.rollout.data_parallel_size", 2, "is a layout/device key"),
    ("data.truncation", "left", "fixed for every launch of this recipe"),
    ("actor_rollout_ref.rollout.mode", "sync", "fixed for every launch of this recipe"),
    ("ray_kwargs.ray_init.num_cpus", 8, "is the entrypoint's"),
    # interpolations and resolvers
    ("trainer.total_epochs", "${oc.env:X}", "computed at run time (resolver oc.env)"),
    ("trainer.total_epochs", "${data.max_response_length}", "computed at run time (node ${data.max_response_length})"),
    ("trainer.default_hdfs_dir", "/x/${now:%H}", "computed at run time (resolver now)"),
    ("actor_rollout_ref.actor.loss_agg_mode", "${oc.decode:'seq-mean'}", "computed at run time (resolver oc.decode)"),
    # types (verl's dataclasses / defaults) and keys verl does not have
    ("trainer.total_epochs", "3", "verl's default (30) needs a whole number"),
    ("trainer.total_epochs", 1.5, "needs a whole number"),
    ("algorithm.kl_ctrl.kl_coef", True, "verl's dataclass field needs a number"),
    ("actor_rollout_ref.rollout.temperature", "hot", "verl's dataclass field needs a number"),
    ("trainer.total_epoch", 3, "(did you mean trainer.total_epochs?)"),
    ("+trainer.total_epochs", 3, "drop the '+'"),
    ("actor_rollout_ref.rollout.enable_sleep_mode", False, "write it with a '+': +actor_rollout_ref.rollout"),
    ("reward_model.reward_kwargs.overlong_buffer_cfg.penalty_factor", 0.5, "write it with a '+': +reward_model"),
    ("+trainer.total_epochz", 3, "(did you mean trainer.total_epochs?)"),
    ("algorithm.kl_ctrl", 0.1, "is a mapping in verl's config"),
    # values that name a file, folder, URL or model: a path is a setting's (the tokenizer path reaches os.system in
    # verl's hdfs_io for an hdfs:// value; a rollout or validation dump folder is where generations are written)
    ("actor_rollout_ref.model.tokenizer_path", "hdfs://x;touch /tmp/p;#", "names a file, folder, URL or model"),
    ("actor_rollout_ref.model.hf_config_path", "/tmp/evil", "names a file, folder, URL or model"),
    ("trainer.rollout_data_dir", "/tmp/steal", "names a file, folder, URL or model"),
    ("trainer.validation_data_dir", "/tmp/steal", "names a file, folder, URL or model"),
    ("global_profiler.save_path", "/tmp/x", "names a file, folder, URL or model"),
    # the inference engine's own arguments: vLLM reads unique prefixes and imports the classes some options name
    ("+actor_rollout_ref.rollout.engine_kwargs.vllm.trust_remote_cod", True, "the inference engine's own argument"),
    ("+actor_rollout_ref.rollout.engine_kwargs.vllm.tokenizer", "evil_tok", "the inference engine's own argument"),
    (
        "+actor_rollout_ref.rollout.engine_kwargs.vllm.worker_extension_cls",
        "evil.Ext",
        "the inference engine's own argument",
    ),
    ("+actor_rollout_ref.rollout.engine_kwargs.vllm.limit_mm_per.video", 5, "the inference engine's own argument"),
    # the model's identity under override_config (setattr'd onto the HF config the preflight checked)
    ("+actor_rollout_ref.model.override_config.auto_map.AutoModelForCausalLM", "evilmod.Evil", "sets auto_map"),
    ("+actor_rollout_ref.model.override_config.model_type", "qwen2", "sets model_type"),
    ("+actor_rollout_ref.model.override_config.architectures", "EvilForCausalLM", "sets architectures"),
    ("+actor_rollout_ref.model.override_config.quantization_config.quant_method", "x", "sets quantization_config"),
    ("+actor_rollout_ref.model.override_config.model_config.auto_map.AutoConfig", "evil.Cfg", "sets auto_map"),
    ("+actor_rollout_ref.model.override_config.attn_implementation", "eager", "sets attn_implementation"),
    # a config group or a whole section
    ("model_engine", "megatron", "is a top-level key of verl's config"),
    ("trainer", 3, "is a top-level key of verl's config"),
    # text that is not a plain word: paths, commands, terminal controls, non-ASCII
    ("actor_rollout_ref.actor.optim.lr_scheduler_type", "run/../../x", "is not a plain word"),
    ("actor_rollout_ref.actor.optim.lr_scheduler_type", "a;b", "is not a plain word"),
    ("actor_rollout_ref.actor.optim.lr_scheduler_type", "ok\u009b2K", "is not a plain word"),
    ("actor_rollout_ref.actor.optim.lr_scheduler_type", "caf\u00e9", "is not a plain word"),
]


@pytest.mark.parametrize(("key", "value", "reason"), REFUSED, ids=[f"{k}={v}" for k, v, _ in REFUSED])
def test_refused_keys_name_the_reason(recipes, key, value, reason):
    result = _check(recipes, key, value)
    assert result.accepted == []
    (p,) = result.problems
    assert reason in p.what + "; fix: " + p.fix, p
    text = p.text("/data/ov.yaml")
    assert text.startswith(f"VLGRPO_OVERRIDES_FILE (/data/ov.yaml, line 1): {key}: ") and "; fix: " in text


def test_every_hydra_key_a_setting_owns_is_refused_naming_that_setting(recipes):
    """All registry rows of both recipes, not a sample: the key is refused and the setting named."""
    from vlgrpo import environment

    checked = 0
    for owner in RECIPES:
        for row in environment.settings(owner):
            for key in filter(None, row.hydra.split(";")):
                (p,) = _check(recipes, key.lstrip("+"), 1, owner).problems
                assert f"is set by {row.name}" in p.what, (owner, key, p)
                checked += 1
    assert checked >= 60


def test_a_code_finding_names_verl_s_own_line(recipes):
    """The evidence is a line of the installed verl that loads code (read back from the file itself)."""
    (p,) = _check(recipes, "custom_reward_function.path", "/x.py").problems
    what = p.what
    rel = what.split("(verl/", 1)[1].split(":", 1)[0]
    line = int(what.split(f"(verl/{rel}:", 1)[1].split(",")[0].rstrip(")"))
    from vlgrpo.preflight.launch import verl_package_dir

    with open(os.path.join(verl_package_dir(), rel), encoding="utf-8") as fh:
        src = fh.read().splitlines()[line - 1]
    assert "spec_from_file_location" in src or "import_module" in src, src


# ---- the sweep, against verl's real source -------------------------------------------------------------------------
KNOWN_CODE_KEYS = {
    "custom_reward_function.path",
    "reward.custom_reward_function.path",
    "reward.reward_manager.module.path",
    "reward_model.reward_loop_module_path",
    "data.custom_cls.path",
    "actor_rollout_ref.model.trust_remote_code",
    "critic.model.trust_remote_code",
    "data.trust_remote_code",
    "actor_rollout_ref.model.external_lib",
    "actor_rollout_ref.rollout.agent.agent_loop_config_path",
    "actor_rollout_ref.rollout.multi_turn.tool_config_path",
    "actor_rollout_ref.rollout.multi_turn.function_tool_path",
    "actor_rollout_ref.rollout.checkpoint_engine.custom_backend_module",
    "actor_rollout_ref.rollout._target_",
}


@pytest.mark.parametrize("owner", list(RECIPES))
def test_sweep_of_the_installed_verl_finds_the_known_code_loading_keys(recipes, owner):
    s = code_sinks.sweep()
    found = code_sinks.keys_in_config(s.hits, recipes[owner]["base"], s.copies)
    assert KNOWN_CODE_KEYS <= set(found), sorted(KNOWN_CODE_KEYS - set(found))
    # and not the keys a user tunes
    for _, key, _ in ACCEPTED:
        assert key.lstrip("+") not in found


def test_sweep_covers_the_preflight_s_hand_list_except_keys_verl_never_reads(recipes):
    """rules.CODE_LOADING_KEYS (kept by hand for B17) against the sweep: every key of it in the composed config is
    found, or its last two segments appear in verl's source only where the dataclass declares them."""
    from vlgrpo.preflight.launch import verl_package_dir
    from vlgrpo.preflight.rules import CODE_LOADING_KEYS

    s = code_sinks.sweep()
    found = code_sinks.keys_in_config(s.hits, recipes["fa"]["base"], s.copies)
    missing = [
        k
        for k in CODE_LOADING_KEYS
        if overrides._node(recipes["fa"]["base"], k) is not overrides._MISSING and k not in found
    ]
    for key in missing:
        holder = key.split(".")[-2]
        uses = subprocess.run(
            ["grep", "-rn", "--include=*.py", holder, verl_package_dir()], capture_output=True, text=True
        ).stdout.splitlines()
        reads = [u for u in uses if f"{holder}:" not in u and f"{holder} =" not in u]
        assert reads == [], (key, reads)
    assert len(missing) <= 1  # custom_async_server.path: declared in 0.8.0's RolloutConfig, never read


def test_sweep_reads_the_source_not_a_list(tmp_path):
    """A sweep of a tiny stand-in package: a value that reaches importlib through a helper and a copy is found; the
    same code without the import is not (the canary can fire)."""
    pkg = tmp_path / "verl"
    pkg.mkdir()
    (pkg / "loader.py").write_text(
        "import importlib\n\ndef load(name):\n    mod = name.strip()\n    return importlib.import_module(mod)\n"
    )
    (pkg / "main.py").write_text(
        "from verl.loader import load\n\n"
        "def run(config):\n    plugin = config.extras.get('plugin_module')\n    load(plugin)\n"
        "    config.other.size = config.extras.size\n"
    )
    (pkg / "migrate.py").write_text("def migrate(config):\n    config.extras.plugin_module = config.legacy.plugin\n")
    from omegaconf import OmegaConf

    cfg = OmegaConf.create(
        {"extras": {"plugin_module": None, "size": 1}, "legacy": {"plugin": None}, "other": {"size": 2}}
    )
    s = code_sinks.Sweep(str(pkg))
    found = code_sinks.keys_in_config(s.hits, cfg, s.copies)
    assert set(found) == {"extras.plugin_module", "legacy.plugin"}, found
    (pkg / "loader.py").write_text("def load(name):\n    return name\n")
    s = code_sinks.Sweep(str(pkg))
    assert code_sinks.keys_in_config(s.hits, cfg, s.copies) == {}


# ---- the file --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("a: &x 1\nb: *x\n", "anchors and aliases"),
        ("trainer.total_epochs: !!python/object:os.system 3\n", "tags"),
        ("trainer.total_epochs: !!str 3\n", "tags"),
        ("trainer:\n  total_epochs: 3\n", "a mapping or a list"),
        ("trainer.logger: [console]\n", "a mapping or a list"),
        ("- trainer.total_epochs\n", "is not a YAML mapping"),
        ("trainer.total_epochs: 3\ntrainer.total_epochs: 4\n", "is given twice"),
        ("trainer.total_epochs: 3\n+trainer.total_epochs: 4\n", "is given twice"),
        ("a: [\n", "is not valid YAML"),
        ("x: " + "1" * (overrides.MAX_BYTES + 1) + "\n", "larger than"),
        (b"\xff\xfe: 1\n", "not UTF-8"),
    ],
)
def test_the_file_is_plain_key_value_yaml(tmp_path, text, reason):
    f = tmp_path / "ov.yaml"
    f.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(OverridesError, match=reason.replace("(", r"\(").replace("[", r"\[")):
        overrides.read_file(str(f))


def test_the_file_keeps_order_lines_and_yaml_types(tmp_path):
    f = tmp_path / "ov.yaml"
    f.write_text(
        "# comment\n\nalgorithm.kl_ctrl.kl_coef: 0.001\ntrainer.total_epochs: 3\n+a.b: null\nx.y: 'text'\nz: true\n"
    )
    got = [(e.key, e.value, e.line) for e in overrides.read_file(str(f))]
    assert got == [
        ("algorithm.kl_ctrl.kl_coef", 0.001, 3),
        ("trainer.total_epochs", 3, 4),
        ("+a.b", None, 5),
        ("x.y", "text", 6),
        ("z", True, 7),
    ]
    (tmp_path / "empty.yaml").write_text("# nothing\n")
    assert overrides.read_file(str(tmp_path / "empty.yaml")) == []


def test_cli_prints_nul_separated_overrides_or_exits_2_naming_file_and_key(tmp_path, capsys):
    r = _recipe("fa")
    args = ["--owner", "fa", "--module", r["module"], "--prog", "fully-async-grpo.sh", "--fixed", r["fixed_note"]]
    good = tmp_path / "good.yaml"
    good.write_text("trainer.total_epochs: 3\nalgorithm.kl_ctrl.kl_coef: 0.001\n")
    os.chmod(tmp_path, 0o700)
    assert overrides.main(args + ["--file", str(good), "--"] + r["template"]) == 0
    out = capsys.readouterr()
    assert out.out == "trainer.total_epochs=3\0algorithm.kl_ctrl.kl_coef=0.001\0vlgrpo-overrides-accepted 2\0"
    bad = tmp_path / "bad.yaml"
    bad.write_text("trainer.total_epochs: 3\ncustom_reward_function.path: /x.py\n")
    assert overrides.main(args + ["--file", str(bad), "--"] + r["template"]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert (
        f"fully-async-grpo.sh: error: VLGRPO_OVERRIDES_FILE ({bad}, line 2): custom_reward_function.path: " in out.err
    )
    assert "1 problem(s) in VLGRPO_OVERRIDES_FILE; nothing was started" in out.err
    os.chmod(bad, 0o666)  # the one path rule: a file others can write is refused before it is read
    assert overrides.main(args + ["--file", str(bad), "--"] + r["template"]) == 2
    assert "VLGRPO_OVERRIDES_FILE" in capsys.readouterr().err


@pytest.mark.parametrize(
    "text, secret",
    [
        ('password: "SECRETPW123\n', "SECRETPW123"),
        ("[global]\nindex-url = https://__token__:pypi-AgEIcHlwaS5vcmc@example.org/simple\n", "pypi-AgEIcHlwaS5vcmc"),
        ("aws_access_key_id = AKIAIOSFODNN7EXAMPLE\naws_secret_access_key: [x\n", "AKIAIOSFODNN"),
    ],
)
def test_a_yaml_error_names_the_problem_and_place_never_the_text(tmp_path, text, secret):
    # the setting can be pointed at any readable file, a credentials file included: PyYAML's message quotes a
    # snippet of it, which would reach the launch's log
    f = tmp_path / "ov.yaml"
    f.write_text(text)
    with pytest.raises(OverridesError) as err:
        overrides.read_file(str(f))
    assert secret not in str(err.value) and "line" in str(err.value), err.value


# ---- one document ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "what", "line"),
    [
        ("trainer.total_epochs: 3\n---\ntrainer.save_freq: 1\n", "a second YAML document", 2),
        ("---\ntrainer.total_epochs: 3\n---\ncustom_reward_function.path: /x.py\n", "a second YAML document", 3),
        ("trainer.total_epochs: 3\n--- \n", "a second YAML document", 2),
        ("---\n---\ntrainer.total_epochs: 3\n", "a second YAML document", 2),
        ("trainer.total_epochs: 3\n...\n---\ntrainer.save_freq: 1\n", "a second YAML document", 3),
        ("%YAML 1.1\n---\ntrainer.total_epochs: 3\n---\ntrainer.save_freq: 1\n", "a second YAML document", 4),
        ("trainer.total_epochs: 3\n...\ntrainer.save_freq: 1\n", "after the document end marker '...' of line 2", 3),
        (
            "a.b: 1\n...\n\n# c\ncustom_reward_function.path: /x.py\n",
            "after the document end marker '...' of line 2",
            5,
        ),
        ("---\n", "an empty YAML document", 1),
        ("# header\n--- # start\n...\n", "an empty YAML document", 2),
        ("\n\n---\n# nothing\n", "an empty YAML document", 3),
    ],
)
def test_the_file_is_one_yaml_document(tmp_path, text, what, line):
    # the reference: PyYAML's own reading of the stream, which holds several documents (or an empty one) here;
    # the line is counted in the text as written
    import yaml

    try:
        docs = list(yaml.safe_load_all(text))
        assert len(docs) > 1 or docs == [None]
    except yaml.YAMLError:
        assert "..." in text  # content after '...' is no YAML stream at all; safe_load_all stops there
    f = tmp_path / "ov.yaml"
    f.write_text(text)
    with pytest.raises(OverridesError) as err:
        overrides.read_file(str(f))
    assert str(err.value).startswith(f"line {line}: ") and what in str(err.value), err.value


@pytest.mark.parametrize(
    ("text", "keys"),
    [
        ("---\ntrainer.total_epochs: 3\n", ["trainer.total_epochs"]),
        ("trainer.total_epochs: 3\n...\n", ["trainer.total_epochs"]),
        ("trainer.total_epochs: 3\n...\n# done\n", ["trainer.total_epochs"]),
        ("trainer.experiment_name: '---'\n", ["trainer.experiment_name"]),
        ("# only a comment\n", []),
    ],
)
def test_one_document_with_its_markers_is_read(tmp_path, text, keys):
    import yaml

    f = tmp_path / "ov.yaml"
    f.write_text(text)
    assert [e.key for e in overrides.read_file(str(f))] == keys == list(yaml.safe_load(text) or {})
