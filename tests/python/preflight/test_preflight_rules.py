"""verl's own checks run early, and the cross-field rules (field cases B05, B09, B12, B13, B19)."""

from __future__ import annotations

from preflight_helpers import MODEL_30B, UPSTREAM_FULLY_ASYNC, UPSTREAM_VEOMNI, read_argv, set_override

from vlgrpo.preflight import run_preflight


def _by_code(report, code):
    return [f for f in report.findings if f.code == code]


# --- B12: fully-async invariants (messages are verl's own, read from the installed source) -----------------

B12_CASES = [
    ("data.train_batch_size", "64", "train_batch_size must be zero"),
    ("data.gen_batch_size", "2", "gen_batch_size must be one"),
    ("actor_rollout_ref.hybrid_engine", "True", "not self.hybrid_engine"),
    ("actor_rollout_ref.rollout.calculate_log_probs", "False", "must rollout calculate log_probs"),
    ("async_training.trigger_parameter_sync_step", "0", "trigger_parameter_sync_step must larger or equal than 1"),
]


def test_b12_fully_async_invariants(fixed_argv):
    """All five B12 inputs in one launch (one preflight run); each is reported with verl's own message at its
    argv position."""
    argv = list(fixed_argv)
    for key, value, _ in B12_CASES:
        argv = set_override(argv, key, value)
    report = run_preflight(argv, check_data=False)
    asserts = _by_code(report, "verl.assert")
    for key, value, verl_message in B12_CASES:
        hits = [f for f in asserts if verl_message in f.what and f.where.key == key]
        assert hits, (key, [f.line() for f in asserts])
        assert hits[0].where.position == argv.index(f"{key}={value}")
    assert report.exit_code == 2


def test_b12_topology_larger_than_the_node(fixed_argv):
    # the shipped 30B script: 16 per node for trainer and rollout, on 8-device nodes
    report = run_preflight(fixed_argv, check_data=False, devices_per_node=8)
    what = sorted(f.what.split(" but")[0] for f in _by_code(report, "rules.devices-per-node"))
    assert what == ["rollout.n_gpus_per_node=16", "trainer.n_gpus_per_node=16"]
    assert run_preflight(fixed_argv, check_data=False, devices_per_node=16).exit_code == 0


def test_fixed_argv_is_clean(clean_fixed_report):
    r = clean_fixed_report
    assert r.errors == [], [f.line() for f in r.errors]
    assert r.exit_code == 0
    assert r.summary["verl_asserts_evaluated"] >= 7  # rollouter/trainer/worker asserts decided from the config


# --- B09: max_model_len ----------------------------------------------------------------------------------


def test_b09a_max_model_len_below_prompt_plus_response(fixed_argv):
    argv = set_override(fixed_argv, "actor_rollout_ref.rollout.max_model_len", "8192")
    report = run_preflight(argv, check_data=False)
    (f,) = _by_code(report, "rules.max-model-len")
    assert "8192 < max_prompt_length 2048 + max_response_length 8192 = 10240" in f.what
    assert f.where.position == argv.index("actor_rollout_ref.rollout.max_model_len=8192")


def test_b09b_engine_kwargs_max_model_len_disagrees(fixed_argv):
    argv = set_override(fixed_argv, "data.max_prompt_length", "1024")
    argv = set_override(argv, "data.max_response_length", "2048")
    argv = set_override(argv, "actor_rollout_ref.rollout.max_model_len", "4096")
    argv = argv + ["+actor_rollout_ref.rollout.engine_kwargs.vllm.max_model_len=2048"]
    report = run_preflight(argv, check_data=False)
    (mismatch,) = _by_code(report, "rules.max-model-len-mismatch")
    assert "vLLM uses 2048" in mismatch.what
    assert mismatch.where.position == len(argv) - 1
    (short,) = _by_code(report, "rules.max-model-len")
    assert "2048" in short.what and "3072" in short.what  # effective vLLM value 2048 < 1024 + 2048


def test_b09_max_model_len_above_max_position_embeddings(fixed_argv):
    # the script's override_config sets max_position_embeddings=32768 (verl applies it to hf_config)
    argv = set_override(fixed_argv, "actor_rollout_ref.rollout.max_model_len", "40960")
    report = run_preflight(argv, check_data=False)
    (f,) = _by_code(report, "rules.max-position-embeddings")
    assert "40960" in f.what and "32768" in f.what
    # without the override, the real config's 262144 applies
    argv2 = set_override(argv, "actor_rollout_ref.model.override_config.max_position_embeddings", None)
    assert _by_code(run_preflight(argv2, check_data=False), "rules.max-position-embeddings") == []


def test_b09_rollout_expert_parallel_must_equal_tp_times_dp(fixed_argv):
    argv = set_override(fixed_argv, "actor_rollout_ref.rollout.expert_parallel_size", "4")  # tp=2, dp=1
    report = run_preflight(argv, check_data=False)
    hits = [
        f
        for f in _by_code(report, "verl.dataclass")
        if "expert_parallel_size must be equal to tensor_model_parallel_size * data_parallel_size" in f.what
    ]
    assert hits and hits[0].where.key == "actor_rollout_ref.rollout"


# --- B13: checkpoint engine backend --------------------------------------------------------------------------


def test_b13_hccl_backend_is_not_registered_and_nccl_is_explained(fixed_argv):
    argv = fixed_argv + ["actor_rollout_ref.rollout.checkpoint_engine.backend=hccl"]
    report = run_preflight(argv, check_data=False)
    (f,) = _by_code(report, "rules.checkpoint-backend")
    assert "'hccl' is not registered by verl 0.8.0" in f.what
    assert "under the name 'nccl'" in f.what
    assert "nccl (hccl_checkpoint_engine.py/nccl_checkpoint_engine.py)" in f.what
    assert f.severity == "error"


def test_b13_declared_backends_read_from_installed_source():
    from vlgrpo.preflight.verl_checks import declared_checkpoint_backends

    declared = declared_checkpoint_backends()
    # verl 0.8.0: HCCL and NCCL engines both register "nccl"; "naive" lives in base.py
    assert sorted(declared["nccl"]) == ["hccl_checkpoint_engine.py", "nccl_checkpoint_engine.py"]
    assert declared["naive"] == ["base.py"]
    assert "hccl" not in declared


# --- B05: vision placeholder tokens --------------------------------------------------------------------------


def test_b05_pinned_verl_does_not_ban_placeholders(clean_fixed_report):
    info = clean_fixed_report.summary["vision_tokens"]
    assert info["verl_bans_vision_placeholders"] is False  # PR #7038 is first in v0.9.0
    assert info["placeholder_ids"] == {"<|image_pad|>": 151655, "<|video_pad|>": 151656}
    # the vlgrpo patch package adds the ban; with it enabled there is nothing to report
    assert info["patch_id"] == "rollout.vision_placeholder_ban" and info["covered_by_patch"] is True
    assert [f for f in clean_fixed_report.findings if f.code == "rules.vision-token-ban"] == []


def test_b05_warns_when_the_ban_patch_is_disabled(fixed_argv, monkeypatch):
    monkeypatch.setenv("VLGRPO_PATCHES_DISABLED", "rollout.vision_placeholder_ban")
    report = run_preflight(fixed_argv, check_data=False)
    (f,) = _by_code(report, "rules.vision-token-ban")
    assert f.severity == "warning" and "151655" in f.what and "151656" in f.what and "switched off" in f.what


def test_b05_mask_patch_covers_the_pinned_verl(clean_fixed_report):
    info = clean_fixed_report.summary["vision_tokens"]
    # verl 0.8.0's agent-loop postprocess has no guard of its own (the patch detector reads the installed source)
    assert info["verl_masks_vision_placeholders"] is False and info["mask_patch_active"] is True
    assert _by_code(clean_fixed_report, "rules.vision-token-mask") == []


def test_b05_warns_when_the_mask_patch_is_disabled(fixed_argv, monkeypatch):
    monkeypatch.setenv("VLGRPO_PATCHES_DISABLED", "rollout.vision_placeholder_mask")
    report = run_preflight(fixed_argv, check_data=False)
    (f,) = _by_code(report, "rules.vision-token-mask")
    assert f.severity == "warning" and "rollout.vision_placeholder_mask" in f.what and "switched off" in f.what
    assert f.fix == "keep the vlgrpo patch rollout.vision_placeholder_mask enabled"
    # the ban patch is still on: only the mask is reported
    assert _by_code(report, "rules.vision-token-ban") == []
    monkeypatch.setenv("VLGRPO_PATCHES", "off")
    both = {f.code for f in run_preflight(fixed_argv, check_data=False).findings}
    assert {"rules.vision-token-mask", "rules.vision-token-ban"} <= both
    # the switches are read as at interpreter start (state.read_switches, the registry's rule): " OFF " is no
    # value of the enum on/off, so the patches stay on there and nothing is reported here
    monkeypatch.delenv("VLGRPO_PATCHES_DISABLED")
    monkeypatch.setenv("VLGRPO_PATCHES", " OFF ")
    both = {f.code for f in run_preflight(fixed_argv, check_data=False).findings}
    assert not {"rules.vision-token-mask", "rules.vision-token-ban"} & both


# --- B19: VeOmni layout ------------------------------------------------------------------------------------


def test_b19_veomni_fsdp_size_must_match_world_size():
    argv = set_override(read_argv(UPSTREAM_VEOMNI), "trainer.nnodes", "1")  # dp_size/fsdp_size stays 16 on 8
    report = run_preflight(argv, check_data=False, model_path=MODEL_30B)
    hits = {f.where.key: f for f in _by_code(report, "rules.veomni-layout")}
    # verl's veomni ref config takes its fsdp_size from the actor's, so both roles carry 16
    assert set(hits) <= {"actor_rollout_ref.actor.veomni.fsdp_size", "actor_rollout_ref.ref.veomni.fsdp_size"}
    f = hits["actor_rollout_ref.actor.veomni.fsdp_size"]
    assert "fsdp_size=16 x ulysses_parallel_size=1 = 16 != world size 8" in f.what
    assert "fsdp_size=8" in f.fix and "fsdp_size=-1" in f.fix
    ok = set_override(argv, "actor_rollout_ref.actor.veomni.fsdp_size", "-1")
    assert _by_code(run_preflight(ok, check_data=False, model_path=MODEL_30B), "rules.veomni-layout") == []


def test_b19_veomni_expert_parallel_must_divide_world_size():
    argv = set_override(read_argv(UPSTREAM_VEOMNI), "actor_rollout_ref.actor.veomni.expert_parallel_size", "3")
    report = run_preflight(argv, check_data=False, model_path=MODEL_30B)
    assert any(
        "expert_parallel_size=3 does not divide world size 16" in f.what
        for f in _by_code(report, "rules.veomni-layout")
    )


def test_validate_config_runs_for_main_ppo():
    # verl's validate_config: ppo_mini_batch_size must not exceed train_batch_size without dynamic bsz
    argv = set_override(read_argv(UPSTREAM_VEOMNI), "data.train_batch_size", "16")
    report = run_preflight(argv, check_data=False, model_path=MODEL_30B)
    assert any("train_batch_size (16) must be >= actor.ppo_mini_batch_size (32)" in f.what for f in report.findings), [
        f.line() for f in report.findings
    ]


def test_upstream_fully_async_has_no_verl_assert_failures():
    report = run_preflight(read_argv(UPSTREAM_FULLY_ASYNC), check_data=False, model_path=MODEL_30B)
    assert _by_code(report, "verl.assert") == [] and _by_code(report, "verl.dataclass") == []


def test_b19_veomni_version_is_the_pinned_one(monkeypatch):
    import importlib.metadata as md

    real = md.version
    monkeypatch.setattr(md, "version", lambda name: "0.1.11" if name == "veomni" else real(name))
    report = run_preflight(read_argv(UPSTREAM_VEOMNI), check_data=False, model_path=MODEL_30B)
    (f,) = _by_code(report, "rules.veomni-version")
    assert f.severity == "error" and "0.1.11" in f.what and "0.1.9a5" in f.what


def test_b19_veomni_absent_here_is_a_warning():
    report = run_preflight(read_argv(UPSTREAM_VEOMNI), check_data=False, model_path=MODEL_30B)
    hits = _by_code(report, "rules.veomni-version")
    try:
        import importlib.metadata as md

        md.version("veomni")
        installed = True
    except md.PackageNotFoundError:
        installed = False
    if installed:
        assert all(f.severity == "error" for f in hits) or hits == []
    else:
        assert [f.severity for f in hits] == ["warning"]


def test_reward_migration_from_source_equals_verls_import():
    """vlgrpo compiles verl's migrate_legacy_reward_impl from the installed source (skipping its module's
    heavy imports); the result must equal the real function's on the upstream fully-async config."""
    import copy

    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from vlgrpo.preflight.launch import parse_launch
    from vlgrpo.preflight.verl_checks import load_function

    spec = parse_launch(set_override(read_argv(UPSTREAM_FULLY_ASYNC), "trainer.logger", "[console]"))
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=spec.config_dir, version_base=None):
        cfg = compose(spec.config_name, overrides=[o.text for o in spec.overrides])
    from verl.experimental.reward_loop.reward_loop import migrate_legacy_reward_impl as real

    ours = load_function("experimental/reward_loop/reward_loop.py", "migrate_legacy_reward_impl")
    assert ours is not real
    a = OmegaConf.to_container(real(copy.deepcopy(cfg)))
    b = OmegaConf.to_container(ours(copy.deepcopy(cfg)))
    assert a == b and a["reward"]["reward_manager"]["name"] == "dapo" and "reward_model" not in a


# --- verl issue #6615: rollout DP > 1 on Ascend needs the weight-sync patch ----------------------------------------


def test_rollout_dp_with_the_weight_sync_patch_off_is_refused_on_npu(fixed_argv, monkeypatch):
    from omegaconf import OmegaConf

    from vlgrpo.patches.fixes import rollout_weight_sync_dp_rank as fix
    from vlgrpo.preflight.launch import verl_package_dir
    from vlgrpo.preflight.patch_checks import check_weight_sync_dp_rank
    from vlgrpo.preflight.report import Report

    # the installed verl 0.8.0 has the fault (its own source, read by the patch's detector)
    utils = f"{verl_package_dir()}/workers/rollout/vllm_rollout/utils.py"
    assert fix.is_faulty(None, module_source=open(utils).read())[0] is True
    argv = set_override(fixed_argv, "actor_rollout_ref.rollout.data_parallel_size", "2")
    # patch on (the default): nothing to say
    report = run_preflight(argv, check_data=False)
    assert _by_code(report, "rules.weight-sync-dp-rank") == []
    assert report.summary["weight_sync_dp_rank"]["patch_active"] is True
    monkeypatch.setenv("VLGRPO_PATCHES_DISABLED", "rollout.weight_sync_dp_rank")
    # this CPU machine sees no accelerator: a warning, naming the key, the patch and the fix
    report = run_preflight(argv, check_data=False)
    (f,) = _by_code(report, "rules.weight-sync-dp-rank")
    assert f.severity == "warning" and f.where.key == "actor_rollout_ref.rollout.data_parallel_size"
    assert "rollout.weight_sync_dp_rank" in f.what and "data_parallel_size to 1" in f.fix
    work = OmegaConf.create({"actor_rollout_ref": {"rollout": {"name": "vllm", "data_parallel_size": 2}}})
    for platform, expected in [("npu", ["error"]), ("gpu", []), ("", ["warning"])]:
        r = Report()
        check_weight_sync_dp_rank(work, r, platform=platform)
        assert [x.severity for x in r.findings] == expected, platform
    # DP 1: no shared socket, nothing to say
    r = Report()
    one = OmegaConf.create({"actor_rollout_ref": {"rollout": {"name": "vllm", "data_parallel_size": 1}}})
    assert check_weight_sync_dp_rank(one, r, platform="npu")["rollout_dp"] == 1 and r.findings == []
