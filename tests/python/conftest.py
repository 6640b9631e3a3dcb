"""Test tiers of tests/python: which tests are ``slow`` and why, and how the Ray tests share two cores.

``make check`` runs ``-m "not slow and not ray"`` (the fast tier); ``make test`` runs everything. A test is slow
when it costs seconds on the 2-core CI machine (bench/RESULTS.md, "Test tiers"), nearly always because it starts
fresh interpreters that import torch, transformers or verl, or composes verl's Hydra config. Mark it here in
:data:`SLOW` (one line: the file, optionally ``::test_function``, and the reason) or in place with
``@pytest.mark.slow(reason="...")``; a ``slow`` mark without a reason is refused at collection, and so is an entry
of :data:`SLOW` that matches no test (a renamed test would silently drop out of its tier).

Under pytest-xdist (``-n 2 --dist loadgroup``) every ``ray`` test is put in one group, so one worker runs the real
Ray clusters one after another while the other worker takes the rest. ``make check`` distributes whole files
(``--dist loadfile``): several files share a costly module-scoped fixture (a scenario run, a sweep of the pinned
sources) that each worker would otherwise build again.
"""

from __future__ import annotations

import pytest

_SUBPROCESS = "fresh interpreters with the patch shim import torch, transformers and verl"
_COMPOSE = "each case composes verl's Hydra config and runs the preflight on it"
_DATA = "each case runs the preflight with its data check (the model folder's processor, every row counted)"
_WATCHDOG = "a fresh interpreter that runs a stage for seconds, past the watchdog's bound"
_SCHEDULER = _SUBPROCESS + " and run vLLM 0.13.0's scheduler"
_RENDEZVOUS = "two fresh interpreters wait out the rendezvous bound over a loopback gloo group"

#: file (relative to tests/python) or file::test_function -> why it is slow
SLOW: dict[str, str] = {
    "demo/test_demo.py": "runs make demo and the preflight CLI in subprocesses",
    "environment/test_preflight_waive.py": "runs the real entrypoint with its preflight per case",
    "environment/test_ray_launch.py": "starts real Ray clusters through the entrypoint",
    "patches/test_bootstrap.py": _SUBPROCESS,
    "patches/test_checkpoint_manifest.py": _SUBPROCESS + " and save/load real checkpoints",
    "patches/test_cli.py": _SUBPROCESS,
    "patches/test_import_order.py::test_all_modules_give_the_same_result_with_torch_importers_first_last_and_between": "imports every patched module in three orders, in fresh interpreters",
    "patches/test_moe_experts.py::test_fsdp2_sharded_experts_on_two_cpu_ranks_match_the_unsharded_loop": "two CPU ranks under torch.distributed",
    "patches/test_moe_experts.py::test_all_three_moe_patches_in_one_process": _SUBPROCESS,
    "patches/test_moe_routing.py::test_veomni_block_forward_unpatched_raises": _SUBPROCESS + " and VeOmni",
    "patches/test_moe_routing.py::test_veomni_block_forward_fixed_after_its_patch": _SUBPROCESS + " and VeOmni",
    "patches/test_npu_routing.py": _SUBPROCESS,
    "patches/test_partial_rollout_budget.py": _SUBPROCESS + " and run the fully-async rollouter",
    "patches/test_pos_embed.py::test_bf16_no_farther_from_fp64_than_transformers_4576": "float64 reference at 256 patches per case",
    "patches/test_pos_embed.py::test_fp32_matches_transformers_4576": "float64 reference at 256 patches per case",
    "patches/test_pos_embed_compile.py": "torch.compile on the CPU (inductor builds C++ per case)",
    "patches/test_resume_pending_prompts.py": _SUBPROCESS + " and train/resume a stub trainer",
    "patches/test_reward_tokenizer_remote_code.py": _SUBPROCESS + " and load tokenizers with transformers",
    "patches/test_resume_step_label.py": _SUBPROCESS + " and resume a stub trainer",
    "patches/test_stall_watchdog.py": _SUBPROCESS + " and stall a stub trainer past the bound",
    "patches/test_rollout_ban.py": _SUBPROCESS,
    "patches/test_rollout_mask.py::test_the_case_input_is_one_image_with_grid_1_16_16": _SUBPROCESS,
    "patches/test_rollout_mask.py::test_disabled_switch_leaves_verl_crashing": _SUBPROCESS,
    "patches/test_rollout_server_loopback.py": _SUBPROCESS + " and serve HTTP",
    "patches/test_vision_wiring.py": _SUBPROCESS,
    "patches/test_weight_sync_dp_rank.py::"
    "test_6615_unpatched_tp4_dp2_on_ascend_two_receivers_share_a_name_and_senders_4_to_7_get_none": _SUBPROCESS,
    "preflight/test_plus_keys.py": _COMPOSE,
    "preflight/test_preflight_bad_input.py": _COMPOSE,
    "preflight/test_preflight_checkpoint.py": _COMPOSE,
    "preflight/test_preflight_checks.py::test_each_check_is_timed_and_skipped_checks_name_the_missing_input": _DATA,
    "preflight/test_preflight_cli.py": "runs python -m vlgrpo preflight in subprocesses",
    "preflight/test_preflight_counts.py": _DATA,
    "preflight/test_preflight_mm_limits.py": _DATA,
    "preflight/test_preflight_model_data.py::test_b07_image_alone_exceeds_budget_and_left_truncation": _DATA,
    "preflight/test_preflight_model_data.py::test_b17_auto_map_and_python_file_are_refused": _DATA,
    "preflight/test_preflight_reward_http.py": _COMPOSE,
    "preflight/test_preflight_rules.py": _COMPOSE,
    "preflight/test_preflight_schema.py": _COMPOSE,
    "preflight/test_veomni_build.py": "builds the 30B model on the meta device with VeOmni",
    "preflight/test_vllm_engine.py": "imports vLLM 0.13.0's config code per case",
    "preflight/test_vllm_mm_limit.py": "runs vLLM 0.13.0's multimodal parser in a subprocess",
    "doctor/test_devices.py::test_cli_json_and_torch_count_with_the_stand_in": _SUBPROCESS,
    "test_docs.py::test_generated_docs_are_up_to_date": "runs scripts/gen-docs (every entrypoint's --help)",
    "test_watchdog.py::test_a_stalled_stage_ends_the_process_with_75_and_names_the_function": _WATCHDOG,
    "test_watchdog.py::test_an_async_stage_shows_the_await_chain": _WATCHDOG,
    "test_watchdog.py::test_a_slow_stage_that_beats_is_not_ended": _WATCHDOG,
    "test_watchdog.py::test_bound_zero_is_off": _WATCHDOG,
    "test_watchdog.py::test_a_world_writable_parent_is_refused_and_the_stacks_go_to_stderr": _WATCHDOG,
    "test_watchdog.py::test_a_hang_holding_the_gil_is_ended_by_the_faulthandler_backstop": _WATCHDOG,
    "patches/test_encoder_cache_reset.py::test_image_seen_before_the_weight_update_runs_the_encoder_again": _SCHEDULER,
    "patches/test_encoder_cache_reset.py::test_without_an_update_the_cache_is_shared_as_before": _SCHEDULER,
    "patches/test_encoder_cache_reset.py::test_unpatched_vllm_reuses_the_old_encoder_output": _SCHEDULER,
    "patches/test_ckpt_engine_rendezvous.py::test_unreachable_peer_ends_within_the_bound_naming_the_stage": _RENDEZVOUS,
    "patches/test_ckpt_engine_rendezvous.py::test_unpatched_engine_waits_past_the_bound": _RENDEZVOUS,
    "patches/test_ckpt_engine_rendezvous.py::test_healthy_late_peer_is_not_cut_off": _RENDEZVOUS,
    "patches/test_unpatch.py::test_status_reports_an_undone_patch_as_disabled_until_applied_again": _SUBPROCESS,
    "preflight/test_env_audit.py::test_c10_preflight_refuses_expandable_segments_with_sleep_mode_both_names": _COMPOSE
    + ", sweeping the pinned sources",
    "preflight/test_env_audit.py::test_c10_not_reported_without_sleep_mode_or_with_a_harmless_value": _COMPOSE
    + ", sweeping the pinned sources",
    "preflight/test_preflight_count_cache.py::test_size_only_count_equals_the_processor_on_every_shipped_row": "runs the model folder's processor on every shipped row",
    "preflight/test_preflight_count_cache.py::test_the_composed_config_is_cached_by_the_argv_and_verified": _COMPOSE,
    "preflight/test_preflight_safety_patches.py::test_one_safety_patch_disabled_is_refused_other_patches_and_bad_values_are_not": _COMPOSE
    + " (per patch)",
    "ray/test_examples.py::test_rayjob_entrypoint_line_passes_its_dry_run_as_shipped": "the shipped entrypoint line's dry run",
    "patches/test_moe_experts.py::test_torch_compile_of_a_caller_gives_the_same_values": "torch.compile on the CPU "
    "(inductor builds C++ per case)",
    "patches/test_import_order.py::test_light_modules_give_the_same_result_in_every_sampled_order": "imports the light "
    "modules in sampled orders, in fresh interpreters",
    "preflight/test_data_media.py::test_through_the_preflight": _DATA,
    "preflight/test_kwargs_audit.py::test_c08_preflight_refuses_the_setting_naming_veomni_and_the_fix": _COMPOSE
    + ", sweeping the pinned sources",
}


def _key(item: pytest.Item) -> tuple[str, str]:
    rel = item.path.relative_to(item.config.rootpath / "tests" / "python").as_posix()
    return rel, getattr(item, "originalname", item.name)


@pytest.hookimpl(tryfirst=True)  # before xdist's loadgroup reads the xdist_group marks
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    xdist = config.pluginmanager.hasplugin("xdist")
    unreasoned = []
    for item in items:
        try:
            rel, name = _key(item)
        except ValueError:  # not under tests/python
            continue
        for key in (f"{rel}::{name}", rel):
            if key in SLOW:
                item.add_marker(pytest.mark.slow(reason=SLOW[key]))
                break
        marks = list(item.iter_markers("slow"))
        if marks and not any(m.kwargs.get("reason") for m in marks):
            unreasoned.append(item.nodeid)
        if xdist and item.get_closest_marker("ray") is not None:
            item.add_marker(pytest.mark.xdist_group("ray"))
    if unreasoned:
        raise pytest.UsageError(
            "slow tests without a reason (add @pytest.mark.slow(reason=...) or a line in "
            "tests/python/conftest.py SLOW): " + ", ".join(unreasoned[:10])
        )
    # an entry whose file or test function is gone is stale (read from the files: -k or a node id collect less)
    root = config.rootpath / "tests" / "python"
    stale = [
        k
        for k in SLOW
        if not (root / k.split("::")[0]).is_file()
        or ("::" in k and f"def {k.split('::')[1]}(" not in (root / k.split("::")[0]).read_text(encoding="utf-8"))
    ]
    if stale:
        raise pytest.UsageError(f"tests/python/conftest.py SLOW names tests that do not exist: {stale}")
