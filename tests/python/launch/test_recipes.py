"""The recipe step of the launch (vlgrpo.launch.recipes), in process: derived defaults, the cross-field rules a user
meets, the topology and the argv.

References: the argv of each recipe with its defaults is tests/bats/fixtures/{fa,vo}-defaults.argv (kept by hand, the
file the bats suites compare the real entrypoints with); the numbers in the rules are worked out here from the
upstream formulas (token budget (P + R) / 4, fsdp = nodes x devices, a replica of TP x DP devices), not read from the
code under test. The same lines from the real entrypoints (exit 2) are in tests/bats/launch.bats and
tests/bats/field-cases.bats.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from vlgrpo.launch import recipes, settings

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "tests/bats/fixtures"


def _state(owner, tmp_path, env=None, node=16):
    (tmp_path / "model").mkdir(exist_ok=True)
    (tmp_path / "data").mkdir(exist_ok=True)
    (tmp_path / "ckpt").mkdir(exist_ok=True)
    for f in ("model/config.json", "data/train.parquet", "data/test.parquet"):
        (tmp_path / f).touch()
    base = {
        "VLGRPO_MODEL_PATH": f"{tmp_path}/model",
        "VLGRPO_TRAIN_FILE": f"{tmp_path}/data/train.parquet",
        "VLGRPO_VAL_FILE": f"{tmp_path}/data/test.parquet",
        "VLGRPO_CHECKPOINT_DIR": f"{tmp_path}/ckpt",
        "VLGRPO_PLATFORM": "npu",
    }
    base.update(env or {})
    got = settings.read_settings(owner, base, str(tmp_path))
    assert got.problems == []
    st = recipes.State()
    st.values, st.raw, st.source = dict(got.values), dict(got.raw), dict(got.source)
    st.platform, st.node, st.node_from = "npu", node, "npu-smi info -l"
    return st


def _run(owner, tmp_path, env=None, node=16):
    st = _state(owner, tmp_path, env, node)
    recipes.resolve_derived(owner, st, str(tmp_path))
    if not st.problems:
        recipes.CHECKS[owner](st)
    return st


@pytest.mark.parametrize("owner", ["fa", "vo"])
def test_the_default_argv_is_the_recipes_upstream_argv(owner, tmp_path):
    st = _run(owner, tmp_path)
    assert st.problems == []
    want = (FIXTURES / f"{owner}-defaults.argv").read_text().replace("@T@", str(tmp_path)).splitlines()
    assert recipes.build_argv(recipes.load(owner), st.values) == want


def test_derived_defaults_follow_the_upstream_formulas(tmp_path):
    st = _run(
        "fa",
        tmp_path,
        {
            "VLGRPO_MAX_PROMPT_LENGTH": "4096",
            "VLGRPO_MAX_RESPONSE_LENGTH": "6144",
            "VLGRPO_TRAINER_NNODES": "4",
            "VLGRPO_TRAINER_DEVICES_PER_NODE": "8",
            "VLGRPO_ROLLOUT_TP": "4",
        },
    )
    assert st.problems == []
    assert st.values["PPO_MAX_TOKEN_LEN_PER_DEVICE"] == str((4096 + 6144) // 4)
    assert st.values["FSDP_SIZE"] == str(4 * 8)
    assert st.values["ROLLOUT_EP"] == "4"
    assert st.values["ROLLOUT_DEVICES_PER_NODE"] == "16"  # the node's count
    assert st.values["max_num_batched_tokens"] == str(4096 + 6144)
    vo = _run(
        "vo", tmp_path, {"VLGRPO_TRAINER_NNODES": "2", "VLGRPO_TRAINER_DEVICES_PER_NODE": "8", "VLGRPO_SP_SIZE": "4"}
    )
    assert vo.values["FSDP_SIZE"] == str(2 * 8 // 4) and vo.values["EXPERIMENT_NAME"] == "grpo-8gpu"


def test_a_derived_default_out_of_range_names_its_inputs_and_stops(tmp_path):
    st = _run("fa", tmp_path, {"VLGRPO_MAX_PROMPT_LENGTH": "1", "VLGRPO_MAX_RESPONSE_LENGTH": "1"})
    # (1 + 1) / 4 = 0 tokens per device
    assert len(st.problems) == 1
    assert st.problems[0].startswith(
        "VLGRPO_PPO_MAX_TOKEN_LEN_PER_DEVICE: not set, so derived as (prompt + "
        "response) / 4 = 0 from VLGRPO_MAX_PROMPT_LENGTH=1, VLGRPO_MAX_RESPONSE_LENGTH=1"
    )


def test_a_refused_derived_value_takes_the_values_derived_from_it_along_without_more_problems(tmp_path):
    # a node of 100 devices: the per-node counts (1..64) are refused; fsdp (nodes x trainer devices) and the rest
    # that come from them are left out rather than reported as values the user never set
    st = _state("fa", tmp_path, node=100)
    recipes.resolve_derived("fa", st, str(tmp_path))
    assert [p.split(":")[0] for p in st.problems] == [
        "VLGRPO_TRAINER_DEVICES_PER_NODE",
        "VLGRPO_ROLLOUT_DEVICES_PER_NODE",
    ]
    assert "derived as this node's device count = 100 from , which is not in 1..64" in st.problems[0]
    assert st.values["FSDP_SIZE"] == "" and "FSDP_SIZE" not in st.raw
    assert st.values["PPO_MAX_TOKEN_LEN_PER_DEVICE"] == str((2048 + 8192) // 4)


def test_no_accelerator_here_in_cluster_mode_asks_for_the_per_node_counts(tmp_path):
    st = _state("fa", tmp_path, node=0)
    recipes.resolve_derived("fa", st, str(tmp_path))
    assert [p.split(":")[0] for p in st.problems] == [
        "VLGRPO_TRAINER_DEVICES_PER_NODE",
        "VLGRPO_ROLLOUT_DEVICES_PER_NODE",
    ]
    assert "unset, and this node has no accelerator to count" in st.problems[0]


# ---- cross-field rules, with worked numbers ----------------------------------------------------------------


@pytest.mark.parametrize(
    "env, var, fragment",
    [
        (
            {"VLGRPO_TRAINER_DEVICES_PER_NODE": "17"},
            "VLGRPO_TRAINER_DEVICES_PER_NODE",
            "17 devices per node, but this node has 16 (npu-smi info -l)",
        ),
        (
            {"VLGRPO_MAX_MODEL_LEN": "100"},
            "VLGRPO_MAX_MODEL_LEN",
            "100 is below max prompt + max response = 2048 + 8192 = 10240; verl would silently clamp responses",
        ),
        (
            {"VLGRPO_PPO_MAX_TOKEN_LEN_PER_DEVICE": "100", "VLGRPO_SP_SIZE": "1"},
            "VLGRPO_PPO_MAX_TOKEN_LEN_PER_DEVICE",
            "100 x SP size 1 = 100 tokens cannot hold one sequence of prompt + response = 10240",
        ),
        ({"VLGRPO_SP_SIZE": "3"}, "VLGRPO_SP_SIZE", "3 does not divide the trainer's 32 devices (2 x 16)"),
        (
            {"VLGRPO_PPO_MINI_BATCH_SIZE": "3", "VLGRPO_ROLLOUT_N": "3", "VLGRPO_SP_SIZE": "1"},
            "VLGRPO_PPO_MINI_BATCH_SIZE",
            "mini-batch 3 x 3 responses = 9 samples do not split evenly over 32 data-parallel ranks",
        ),
        ({"VLGRPO_FSDP_SIZE": "5"}, "VLGRPO_FSDP_SIZE", "5 does not divide the trainer's 32 devices (2 x 16)"),
        (
            {"VLGRPO_ROLLOUT_TP": "3", "VLGRPO_ROLLOUT_EP": "1"},
            "VLGRPO_ROLLOUT_TP",
            "a vLLM replica of TP x DP = 3 x 1 = 3 devices does not divide the 32 rollout devices (2 x 16)",
        ),
        (
            {"VLGRPO_ROLLOUT_TP": "2", "VLGRPO_ROLLOUT_EP": "4"},
            "VLGRPO_ROLLOUT_EP",
            "4 must be 1 or rollout TP x DP = 2",
        ),
        (
            {"VLGRPO_OVERLONG_BUFFER_LEN": "8192"},
            "VLGRPO_OVERLONG_BUFFER_LEN",
            "8192 is not below the max response length 8192",
        ),
        ({"VLGRPO_RESUME_MODE": "resume_path"}, "VLGRPO_RESUME_FROM_PATH", "unset, but VLGRPO_RESUME_MODE=resume_path"),
    ],
)
def test_fully_async_rules(env, var, fragment, tmp_path):
    st = _run("fa", tmp_path, env)
    mine = [p for p in st.problems if p.startswith(var + ": ")]
    assert mine and fragment in mine[0], st.problems


def test_a_replica_that_neither_fits_a_node_nor_spans_whole_nodes(tmp_path):
    # rollout 2 nodes x 12 devices = 24; TP 8: 24 % 8 == 0, but 12 % 8 and 8 % 12 are not 0
    st = _run("fa", tmp_path, {"VLGRPO_ROLLOUT_DEVICES_PER_NODE": "12", "VLGRPO_ROLLOUT_TP": "8"})
    assert any(
        p.startswith("VLGRPO_ROLLOUT_TP: a vLLM replica of 8 devices neither fits a node of 12") for p in st.problems
    ), st.problems


@pytest.mark.parametrize(
    "env, var, fragment",
    [
        ({"VLGRPO_SP_SIZE": "3"}, "VLGRPO_SP_SIZE", "3 does not divide the world size 32 (2 x 16)"),
        (
            {"VLGRPO_FSDP_SIZE": "8", "VLGRPO_SP_SIZE": "2"},
            "VLGRPO_FSDP_SIZE",
            "fsdp_size 8 x SP size 2 = 16 is not the world size 32 (2 x 16)",
        ),
        ({"VLGRPO_EP_SIZE": "3"}, "VLGRPO_EP_SIZE", "3 does not divide the world size 32"),
        (
            {"VLGRPO_TRAIN_BATCH_SIZE": "8", "VLGRPO_PPO_MINI_BATCH_SIZE": "16"},
            "VLGRPO_PPO_MINI_BATCH_SIZE",
            "16 is larger than the train batch size 8",
        ),
        (
            {"VLGRPO_TRAIN_BATCH_SIZE": "3", "VLGRPO_PPO_MINI_BATCH_SIZE": "1", "VLGRPO_ROLLOUT_N": "5"},
            "VLGRPO_TRAIN_BATCH_SIZE",
            "3 prompts x 5 responses = 15 samples are not divisible by the world size 32",
        ),
        (
            {"VLGRPO_ROLLOUT_TP": "2", "VLGRPO_ROLLOUT_DP": "3"},
            "VLGRPO_ROLLOUT_TP",
            "a vLLM replica of TP x DP = 2 x 3 = 6 devices does not divide the 32 rollout devices (2 x 16)",
        ),
    ],
)
def test_veomni_rules(env, var, fragment, tmp_path):
    st = _run("vo", tmp_path, env)
    mine = [p for p in st.problems if p.startswith(var + ": ")]
    assert mine and fragment in mine[0], st.problems


def test_topology_and_cluster_size(tmp_path):
    fa = _run(
        "fa",
        tmp_path,
        {"VLGRPO_TRAINER_NNODES": "2", "VLGRPO_ROLLOUT_NNODES": "1", "VLGRPO_ROLLOUT_DEVICES_PER_NODE": "8"},
    )
    assert fa.topology == "trainer 2 node(s) x 16 + rollout 1 node(s) x 8 = 40 npu devices"
    assert fa.cluster == (3, 16, 40)
    vo = _run("vo", tmp_path, {"VLGRPO_TRAINER_NNODES": "3"})
    assert vo.topology == "3 node(s) x 16 = 48 npu devices (trainer and rollout colocated)"
    assert vo.cluster == (3, 16, 48)


# ---- the resume folder (C03) --------------------------------------------------------------------------------


def test_a_resume_folder_outside_the_checkpoint_folder_needs_a_manifest(tmp_path):
    outside = tmp_path / "elsewhere" / "global_step_4"
    outside.mkdir(parents=True)
    env = {"VLGRPO_RESUME_MODE": "resume_path", "VLGRPO_RESUME_FROM_PATH": str(outside)}
    st = _run("fa", tmp_path, env)
    assert any(
        p.startswith(f"VLGRPO_RESUME_FROM_PATH: {outside} lies outside the checkpoint folder") for p in st.problems
    ), st.problems
    (outside / "vlgrpo-manifest-0001.json").write_text("{}")
    assert not [p for p in _run("fa", tmp_path, env).problems if "RESUME" in p]
    inside = tmp_path / "ckpt" / "global_step_2"
    inside.mkdir()
    env["VLGRPO_RESUME_FROM_PATH"] = str(inside)
    assert not [p for p in _run("fa", tmp_path, env).problems if "RESUME" in p]
    # a symlink inside the checkpoint folder that points outside is outside
    link = tmp_path / "ckpt" / "global_step_7"
    link.symlink_to(tmp_path / "elsewhere")
    env["VLGRPO_RESUME_FROM_PATH"] = str(link)
    (outside / "vlgrpo-manifest-0001.json").unlink()
    assert any("lies outside the checkpoint folder" in p for p in _run("fa", tmp_path, env).problems)


def test_the_launchs_recipe_step_halts_on_a_derived_problem_and_makes_the_argv_otherwise(tmp_path, capsys):
    from vlgrpo.launch import entry

    hooks = entry.Hooks()
    hooks.markers = []
    launch = entry.Launch("fa", [], "/proc/self/environ", True, hooks)
    launch.st = _state("fa", tmp_path)
    launch.recipe()
    assert launch.argv[:3] == ["python3", "-m", "verl.experimental.fully_async_policy.fully_async_main"]
    assert launch.argv == (FIXTURES / "fa-defaults.argv").read_text().replace("@T@", str(tmp_path)).splitlines()
    assert launch.st.topology == "trainer 2 node(s) x 16 + rollout 2 node(s) x 16 = 64 npu devices"
    assert launch.st.cluster == (4, 16, 64) and launch.problems == []
    # no device count on this node: the per-node default cannot be derived, the launch ends there with exit 2
    launch = entry.Launch("fa", [], "/proc/self/environ", True, hooks)
    launch.st = _state("fa", tmp_path, node=0)
    with pytest.raises(entry.Exit) as end:
        launch.recipe()
    assert end.value.code == 2 and launch.argv == []
    err = capsys.readouterr().err
    assert "fully-async-grpo.sh: error: " in err and "nothing was started" in err


@pytest.mark.parametrize("owner", ["fa", "vo"])
def test_the_registrys_hydra_column_names_the_keys_of_each_settings_placeholders(owner):
    # the reference is the registry file read with csv and the recipe file read line by line, here
    import csv

    reg = REPO / "python/src/vlgrpo/environment.tsv"
    with reg.open(newline="") as fh:
        rows = [r for r in csv.reader(fh, delimiter="\t") if r and not r[0].startswith("#") and r[0] != "name"]
    lines = (REPO / "python/src/vlgrpo/recipes" / recipes.FILES[owner]).read_text().splitlines()
    elements = [ln for ln in lines if ln and not ln.startswith("#")]
    checked = 0
    for name, own, kind, _t, _a, _d, hydra, *_ in rows:
        if kind != "setting" or owner not in own.split(","):
            continue
        short = name.removeprefix("VLGRPO_")
        want = ";".join(el.split("=", 1)[0] for el in elements if "{" + short + "}" in el)
        assert (hydra if hydra != "-" else "") == want, f"{name}: registry [{hydra}] template [{want}]"
        checked += 1
    assert checked >= 40


def test_placeholders_are_found_as_the_template_writes_them():
    assert recipes._placeholder("a={X}") == "X"
    assert recipes._placeholder("+x.limit={image:1,video:0}") is None
    assert recipes._placeholder("k={image:1}{NAME_2}") == "NAME_2"
    assert recipes._placeholder("k={1X}{y}") == "y"
    rec = recipes.Recipe()
    rec.program, rec.template = ["p"], ["a={A}", "b={B}", "c={A}-{A}", "d={image:1}"]
    assert recipes.build_argv(rec, {"A": "1", "B": ""}) == ["p", "a=1", "c=1-1", "d={image:1}"]
    with pytest.raises(KeyError):
        recipes.build_argv(rec, {"A": "1"})


# ---- B11: keys set twice; overrides in place -----------------------------------------------------------------


def test_b11_a_key_set_twice_is_refused_naming_both_positions():
    """Also the '+'/'++' forms and equal values (Hydra keeps the last of two without a word)."""
    prog = ["python3", "-m", "m"]
    assert recipes.duplicate_problems(prog + ["data.truncation=left", "data.truncation=error"], 3) == [
        "override data.truncation: set twice, at argv positions 4 and 5 (Hydra would silently keep the last); fix: "
        "set it once"
    ]
    got = recipes.duplicate_problems(
        prog + ["actor_rollout_ref.rollout.n=8", "x=1", "++actor_rollout_ref.rollout.n=16"], 3
    )
    assert got[0].startswith("override actor_rollout_ref.rollout.n: set twice, at argv positions 4 and 6")
    same = ["actor_rollout_ref.ref.veomni.param_offload=True"] * 2
    assert recipes.duplicate_problems(prog + same, 3)[0].startswith(
        "override actor_rollout_ref.ref.veomni.param_offload: set twice, at argv positions 4 and 5"
    )
    assert recipes.duplicate_problems(prog + ["+a.b=1", "a.c=1", "~a.d", "noequals"], 3) == []
    assert recipes.duplicate_problems(prog + ["~a.b=1", "+a.b=2"], 3) != []


def test_overrides_take_the_place_of_the_templates_element_or_are_appended():
    argv = ["python3", "-m", "m", "trainer.total_epochs=1", "+x.y=2"]
    merged, notes = recipes.merge_overrides(argv, 3, ["trainer.total_epochs=3", "x.y=5", "algorithm.kl=0.1"])
    assert merged == ["python3", "-m", "m", "trainer.total_epochs=3", "x.y=5", "algorithm.kl=0.1"]
    assert notes == [
        "override from VLGRPO_OVERRIDES_FILE: trainer.total_epochs=3 (in place of the template element "
        "trainer.total_epochs=1)",
        "override from VLGRPO_OVERRIDES_FILE: x.y=5 (in place of the template element +x.y=2)",
        "override from VLGRPO_OVERRIDES_FILE: algorithm.kl=0.1",
    ]
    # the program words are never replaced
    assert recipes.merge_overrides(["m=1", "-m", "m"], 3, ["m=2"])[0] == ["m=1", "-m", "m", "m=2"]
