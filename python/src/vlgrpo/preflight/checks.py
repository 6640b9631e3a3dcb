"""The preflight's checks, in the order a failure would surface at run time, and every finding code, once.

:data:`CODES` declares each finding code (severity, one line, whether it is about code loading);
:data:`CHECKS` is the ordered list the runner (:mod:`vlgrpo.preflight.runner`) executes, each check with its
inputs, what it gives the later checks and the codes it can report. ``python -m vlgrpo preflight codes``
prints both tables. Nothing heavy is imported at module level: each check imports what it needs when it runs.

Values in the context, by name (who gives them):

- ``argv``, ``options`` (the caller), ``check_data`` (the caller, only without ``--no-data``);
- ``spec`` (launch): the parsed :class:`~vlgrpo.preflight.launch.LaunchSpec`;
- ``cfg``, ``overrides``, ``loc`` (compose): the composed config, the parsed overrides, the key -> argv locator;
- ``work`` (runtime-config): the config as verl's task runner sees it (resolved, reward migrated);
- ``typed_work`` (value-types): ``work`` once the keys the later rules do arithmetic on have usable values;
- ``veomni`` (veomni-install): the installed VeOmni version, only when model_engine=veomni and it is installed;
- ``model`` (model-dir): facts about the model folder; ``model_path``; ``clean_model`` only when nothing in the
  folder would run code and config.json is usable;
- ``hf_model`` (hf-model): verl's HFModelConfig; ``max_position_embeddings`` (+ ``mpe_source``);
- ``image_processor`` (image-patch-size): the image processor the rollout uses;
- ``counter`` (prompt-counter): the :class:`~vlgrpo.preflight.dataset.PromptCounter`.
"""

from __future__ import annotations

import os
from typing import Any

from .report import ERROR, WARNING
from .runner import EITHER, Check, Code, Context

_CODE_LIST = [
    # launch
    Code("launch.argv", ERROR, "the argv is not `python3 -m <verl module> <overrides...>` of a known recipe"),
    Code("launch.unsupported-flag", ERROR, "a command-line flag (--multirun, --cfg, ...) that is not a Hydra override"),
    Code("launch.hydra-override", WARNING, "an override of Hydra's own settings (hydra.*), not checked against verl"),
    # schema (Hydra compose of the installed verl)
    Code("schema.syntax", ERROR, "Hydra cannot parse the override"),
    Code("schema.duplicate-key", ERROR, "two overrides of one key (after stripping +/++); Hydra keeps the last"),
    Code("schema.unknown-key", ERROR, "the key does not exist in the installed verl's config"),
    Code("schema.missing-plus", ERROR, "a new key in an empty dict needs '+'"),
    Code("schema.plus-on-existing", ERROR, "'+' on a key that already exists (Hydra refuses it)"),
    Code("schema.delete-missing", ERROR, "'~' on a key that does not exist"),
    Code("schema.bad-group", ERROR, "a config group override Hydra rejects"),
    Code("schema.rejected", ERROR, "Hydra rejects the value"),
    Code("schema.compose", ERROR, "Hydra cannot compose the overrides together"),
    Code("schema.list-as-string", ERROR, "a list given as a quoted string"),
    Code("schema.dict-as-string", ERROR, "a mapping given as a string"),
    Code("schema.bool-as-string", ERROR, "a boolean given as a quoted string ('False' is truthy)"),
    Code("schema.number-as-string", ERROR, "a number given as a quoted string"),
    Code("schema.missing-value", ERROR, "a mandatory ('???') value of verl's config is not set"),
    Code("schema.required-key", ERROR, "a key verl reads was deleted with '~' (or never existed)"),
    Code("schema.value-type", ERROR, "a value of the wrong type for a key verl does arithmetic on or reads as a path"),
    # verl's own checks
    Code("verl.reward-migration", ERROR, "verl's migrate_legacy_reward_impl fails (main(), before Ray)"),
    Code("verl.interpolation", ERROR, "a ${...} interpolation does not resolve"),
    Code(
        "verl.dataclass",
        ERROR,
        "verl's config dataclass (actor, ref, RolloutConfig, HFModelConfig, ...) rejects the node",
    ),
    Code("verl.validate-config", ERROR, "verl's validate_config fails (main_ppo)"),
    Code("verl.assert", ERROR, "an assert of verl's fully-async rollouter/trainer/worker is false for this config"),
    # cross-field rules
    Code("rules.logger", ERROR, "trainer.logger is not a list of backends verl's Tracking knows"),
    Code("rules.max-model-len", ERROR, "max_model_len below prompt + response (verl clamps answers silently)"),
    Code(
        "rules.max-model-len-mismatch", ERROR, "engine_kwargs.<engine>.max_model_len differs from rollout.max_model_len"
    ),
    Code("rules.max-position-embeddings", ERROR, "max_model_len above the model's max_position_embeddings"),
    Code("rules.veomni-layout", ERROR, "VeOmni fsdp/ulysses/expert sizes do not fit the trainer world size"),
    Code("rules.veomni-version", EITHER, "VeOmni is not the pinned version (warning: not installed here)"),
    Code(
        "rules.setting-swallowed",
        ERROR,
        "a setting verl passes as a keyword the callee (VeOmni, vLLM, transformers) "
        "takes in **kwargs and never reads (C08)",
    ),
    Code("rules.veomni-build", ERROR, "VeOmni cannot build the folder's model on meta or run one image forward"),
    Code("rules.devices-per-node", ERROR, "n_gpus_per_node larger than the node's accelerators"),
    Code("rules.devices-unused", WARNING, "n_gpus_per_node leaves accelerators of a node idle"),
    Code(
        "rules.layout-local",
        EITHER,
        "no Ray address and the layout needs more devices than this node has "
        "(warning for a plan made with the planning override: it names the Ray cluster needed)",
    ),
    Code("rules.image-truncation", ERROR, "data.truncation cuts image prompts"),
    Code(
        "rules.image-patch-size",
        ERROR,
        "data.image_patch_size differs from the processor's patch size "
        "(verl's overlong filter counts image tokens wrong)",
    ),
    Code("rules.checkpoint-backend", ERROR, "the checkpoint-engine backend is not registered by the installed verl"),
    Code("rules.checkpoint-backend-import", WARNING, "the backend is declared but its imports fail here"),
    Code(
        "rules.vision-token-ban", WARNING, "vision placeholder tokens are not banned in vLLM sampling (verl PR #7038)"
    ),
    Code("rules.video-enabled", ERROR, "video inputs allowed on a vLLM inside CVE-2026-22778 / CVE-2026-34755"),
    Code("rules.image-limit", ERROR, "a data row has more images than limit_mm_per_prompt allows"),
    Code(
        "rules.checkpoint-untrusted",
        ERROR,
        "the checkpoint to resume has no valid manifest or an unsafe file "
        "(code loading when patch checkpoint.manifest is switched off)",
    ),
    Code(
        "patches.safety-off",
        EITHER,
        "a patch marked as a safety fix (checkpoint.manifest, rollout.server_loopback, reward.tokenizer_remote_code) "
        "is switched off (error for a launch; warning in a dry run)",
        runs_code=True,
    ),
    Code(
        "rules.checkpoint-space",
        EITHER,
        "the checkpoint volume cannot hold the checkpoints verl keeps at the peak "
        "of a save (max(keep, 2) x one; every one kept: fewer than two, error below one)",
    ),
    Code("rules.checkpoint-retention", WARNING, "every checkpoint is kept (no retention count) while the run saves"),
    Code("template.changed", WARNING, "a chat template of the model folder differs from the release's"),
    Code("template.drops-input", ERROR, "a chat template drops or repeats the problem text or the image (or fails)"),
    Code("media.image-source", ERROR, "an image entry verl would load from a URL, a relative path, or nothing"),
    Code("media.video", ERROR, "rows that bring video or audio (verl decodes them before vLLM's video:0 limit)"),
    Code("rules.checkpoint-storage", EITHER, "the checkpoint folder is on RAM (tmpfs, zram, a loop image on RAM)"),
    Code(
        "rules.reward-http-loopback", ERROR, "a reward model over HTTP while the vLLM servers listen on loopback only"
    ),
    Code("rules.vision-token-mask", WARNING, "a response with a vision placeholder is not masked (patch switched off)"),
    Code(
        "rules.weight-sync-dp-rank",
        EITHER,
        "rollout DP > 1 with patch rollout.weight_sync_dp_rank switched off "
        "(error on an NPU node, warning where no accelerator is seen)",
    ),
    # vLLM engine arguments (B08/B09): vLLM 0.13.0's rules on what verl builds from the argv
    Code(
        "vllm.setting-dropped",
        ERROR,
        "a False that verl's command-line builder never passes to vLLM (vLLM's default, True, runs)",
    ),
    Code(
        "vllm.max-num-batched-tokens",
        ERROR,
        "max_num_batched_tokens below max_model_len with chunked prefill off, or below max_num_seqs",
    ),
    Code("vllm.max-model-len", ERROR, "max_model_len above the length vLLM derives from the model's config.json"),
    Code("vllm.partial-prefill", ERROR, "partial-prefill settings vLLM's SchedulerConfig refuses"),
    Code("vllm.gpu-memory-utilization", ERROR, "gpu_memory_utilization outside (0, 1]"),
    Code("vllm.limit-mm-per-prompt", ERROR, "a limit_mm_per_prompt count vLLM refuses"),
    Code(
        "rules.env-rejected",
        ERROR,
        "an environment value the job gets that the pinned stack asserts on or rejects "
        "at start, with the settings that reach that code (C10)",
    ),
    Code("vllm.scheduler", ERROR, "a scheduler size that is not a whole number >= 1"),
    Code(
        "rules.rollout-parallel",
        EITHER,
        "rollout TP x DP x PP does not fit the rollout's devices (warning: some stay idle)",
    ),
    # no user code (B17)
    Code("security.trust-remote-code", ERROR, "a trust_remote_code setting is on", runs_code=True),
    Code(
        "security.code-loading",
        ERROR,
        "a key that makes verl import or execute a user file/module is set",
        runs_code=True,
    ),
    Code("security.target", ERROR, "an override names a _target_ (any importable callable)", runs_code=True),
    Code(
        "security.resolver", ERROR, "an override value is computed at run time by an OmegaConf resolver (${oc.env:X})"
    ),
    Code("security.interpolation", WARNING, "an override value is another key's (${a.b}), resolved at run time"),
    # model folder
    Code("model.missing", ERROR, "the model folder does not exist (or is a file)"),
    Code("model.bad-json", ERROR, "a JSON file of the model folder is not readable"),
    Code(
        "model.auto-map",
        ERROR,
        "a JSON file of the model folder has auto_map (asks to run its own code)",
        runs_code=True,
    ),
    Code("model.python-file", ERROR, "the model folder contains Python code", runs_code=True),
    Code(
        "model.redirect",
        ERROR,
        "the folder makes transformers load files from elsewhere (adapter_config.json, a "
        "tokenizer_config *_file entry, a weight_map path)",
        runs_code=True,
    ),
    Code(
        "model.untrusted",
        ERROR,
        "the model folder, an entry in it or a folder above it fails the one path rule (another user can change it)",
        runs_code=True,
    ),
    Code("model.no-config", ERROR, "config.json is missing"),
    Code("model.type", ERROR, "config.json model_type is not Qwen3-VL"),
    Code("model.no-tokenizer", ERROR, "tokenizer files are missing"),
    Code("model.no-processor", ERROR, "preprocessor_config.json is missing"),
    Code("model.no-chat-template", WARNING, "no chat template in the model folder"),
    # data
    Code("data.missing", ERROR, "a data file does not exist, matches nothing, or is not parquet/json"),
    Code(
        "data.untrusted", ERROR, "a data file or a folder above it fails the one path rule (another user can change it)"
    ),
    Code("data.unreadable", ERROR, "pyarrow cannot read a parquet file"),
    Code("data.columns", ERROR, "columns verl reads are missing"),
    Code("data.row", ERROR, "a row cannot be processed"),
    Code(
        "data.image-exceeds-budget",
        EITHER,
        "a row's image tokens alone exceed max_prompt_length (warning when verl's filter drops it)",
    ),
    Code("data.over-budget", EITHER, "rows longer than max_prompt_length (warning when verl's filter drops them)"),
    Code(
        "data.rollout-overlong",
        ERROR,
        "image rows verl keeps whose rollout prompt is longer than rollout.prompt_length (the agent loop raises)",
    ),
    Code(
        "data.filter-drops-fitting",
        WARNING,
        "verl's overlong filter drops rows that fit in the rollout (data.image_patch_size over-counts them)",
    ),
    Code("data.all-rows-dropped", ERROR, "every row of a split is longer than max_prompt_length (filter on)"),
    Code("data.data-source", ERROR, "a data_source verl's default_compute_score does not handle"),
    Code("data.reward-import", WARNING, "the scorer of a data_source cannot be imported here"),
    Code("data.empty", ERROR, "a data file has no rows"),
    Code("data.not-checked", WARNING, "a remote or JSON data file whose rows are not checked here"),
    Code(
        "data.count-cache",
        WARNING,
        "the token-count cache folder fails the trust check (symlink, another owner, "
        "group/other-writable); counted without it",
    ),
]
#: every finding code the preflight can report, by code
CODES: dict[str, Code] = {c.code: c for c in _CODE_LIST}
#: codes reported by :func:`vlgrpo.preflight.api.run_preflight` itself, for a failure outside any one check's rules
RUNNER_CODES = {"schema.required-key": "runner (a check read a key that was deleted)"}


# --- the checks -----------------------------------------------------------------------------------------------


def _launch(ctx: Context) -> None:
    from .launch import LaunchError, parse_launch
    from .report import Finding, Where
    from .schema import verl_version

    try:
        spec = parse_launch(ctx["argv"])
    except LaunchError as exc:
        ctx.report.add(
            Finding(
                "launch.argv",
                ERROR,
                str(exc),
                Where(),
                "the entrypoint would exec a launch preflight cannot interpret",
                "pass the argv as: python3 -m <verl module> <overrides...>",
            )
        )
        ctx.withhold("spec", "the argv is not a verl launch (launch.argv)")
        return
    ctx.summary.update(
        {
            "module": spec.module,
            "config_name": spec.config_name,
            "config_dir": spec.config_dir,
            "verl_version": verl_version(),
            "overrides": len(spec.overrides),
        }
    )
    for note in spec.notes:
        ctx.report.add(note)
    ctx.give("spec", spec)


def _compose(ctx: Context) -> None:
    from . import rules, schema

    result, state = schema.compose_cached(ctx["spec"], ctx.report, _compose_cache(ctx))
    ctx.summary["compose_cache"] = state
    ctx.give("overrides", result.overrides)
    if result.config is None:
        for name in ("cfg", "loc"):
            ctx.withhold(name, "Hydra refused an override (schema.* above)")
        return
    ctx.summary["model_engine"] = result.config.get("model_engine")
    ctx.give("cfg", result.config)
    ctx.give("loc", rules.Locator(result.overrides))


def _compose_cache(ctx: Context) -> Any:
    """The preflight cache for the composed config: ``--cache-dir``, else ``<trainer.default_local_dir>/
    .vlgrpo-preflight-cache`` when the argv sets ``trainer.default_local_dir`` to an absolute path (no
    interpolation) that exists; None when neither applies or the folder fails the trust check (the data check
    reports that as ``data.count-cache``)."""
    import os

    from .count_cache import CacheRefused, default_cache_dir, open_cache_dir

    path = ctx["options"].get("cache_dir")
    if path == "":
        return None
    if path is None:
        given = [
            o.text.split("=", 1)[1]
            for o in ctx["spec"].overrides
            if o.text.lstrip("+").split("=", 1)[0] == "trainer.default_local_dir" and "=" in o.text
        ]
        value = given[-1] if given else None
        path = default_cache_dir(value) if value and "${" not in value and os.path.isdir(value) else None
    if path is None:
        return None
    try:
        return open_cache_dir(path)
    except CacheRefused:
        return None


def _code_loading(ctx: Context) -> None:
    from .rules import check_code_loading

    check_code_loading(ctx["cfg"], ctx.report, ctx["loc"], ctx["overrides"])
    from .rules import check_interpolations

    check_interpolations(ctx.report, ctx["overrides"])


def _runtime_config(ctx: Context) -> None:
    from .verl_checks import prepare_runtime_config

    work = prepare_runtime_config(ctx["spec"], ctx["cfg"], ctx.report)
    if work is None:
        ctx.withhold("work", "verl's main() would stop before the task runner (verl.*/schema.missing-value above)")
    else:
        ctx.give("work", work)


def _dataclasses(ctx: Context) -> None:
    from .verl_checks import run_dataclass_checks

    run_dataclass_checks(ctx["spec"], ctx["work"], ctx.report)


def _validate_config(ctx: Context) -> None:
    from .verl_checks import run_validate_config

    run_validate_config(ctx["spec"], ctx["work"], ctx.report)


def _asserts(ctx: Context) -> None:
    from .verl_checks import run_source_asserts

    ctx.summary["verl_asserts_evaluated"] = run_source_asserts(ctx["spec"], ctx["work"], ctx.report, ctx["loc"])


def _checkpoint_engine(ctx: Context) -> None:
    from .verl_checks import check_checkpoint_engine

    check_checkpoint_engine(ctx["work"], ctx.report, ctx["loc"])


def _logger(ctx: Context) -> None:
    from .rules import check_logger

    check_logger(ctx["work"], ctx.report, ctx["loc"])


def _value_types(ctx: Context) -> None:
    from .rules import check_value_types

    if check_value_types(ctx["work"], ctx.report, ctx["loc"]):
        ctx.give("typed_work", ctx["work"])
    else:
        ctx.withhold("typed_work", "values of the wrong type (schema.value-type above)")


def _veomni_layout(ctx: Context) -> None:
    from .rules import check_veomni

    check_veomni(ctx["typed_work"], ctx.report, ctx["loc"])


def _veomni_install(ctx: Context) -> None:
    from .rules import check_veomni_install

    info = check_veomni_install(ctx["typed_work"], ctx.report)
    ctx.summary.update(info)
    if info.get("veomni"):
        ctx.give("veomni", info["veomni"])
    else:
        ctx.withhold("veomni", "model_engine is not veomni" if not info else "VeOmni is not installed here")


def _kwargs_audit(ctx: Context) -> None:
    from .kwargs_audit import check_swallowed_settings

    ctx.summary["kwargs_audit"] = check_swallowed_settings(
        ctx["typed_work"], ctx.report, ctx["loc"], cache=_compose_cache(ctx)
    )


def _env_values(ctx: Context) -> None:
    from .env_audit import check_env_values

    ctx.summary["env_audit"] = check_env_values(ctx["typed_work"], ctx.report)


def count_devices_per_node() -> tuple[int | None, str]:
    """Accelerators of this node and where the count came from: the one call site of the device counter.

    Returns ``(count, source)``; ``(None, why)`` when this node has none to count (a CPU build host).
    """
    from .rules import detect_devices_per_node

    return detect_devices_per_node()


def _topology(ctx: Context) -> None:
    from .launch import FULLY_ASYNC_MODULE
    from .rules import check_topology

    devices, source = ctx["options"].get("devices_per_node"), "given"
    if ctx["options"].get("devices_source") == "plan":
        source = "a planning count for other machines"
    if devices is None:
        devices, source = count_devices_per_node()
    ctx.summary["topology"] = check_topology(
        ctx["typed_work"],
        ctx.report,
        ctx["loc"],
        ctx["spec"].module == FULLY_ASYNC_MODULE,
        devices,
        source,
        ctx["options"].get("devices_source") or "node",
        os.environ.get("RAY_ADDRESS"),
    )


def _model_dir(ctx: Context) -> None:
    from .model_dir import check_model_dir

    mpath = ctx["options"].get("model_path") or str(ctx["typed_work"].actor_rollout_ref.model.path)
    model = check_model_dir(mpath, ctx.report)
    ctx.summary["model"] = {k: model.get(k) for k in ("path", "model_type", "max_position_embeddings")}
    ctx.give("model", model)
    ctx.give("model_path", mpath)
    if model.get("clean"):
        ctx.give("clean_model", model)
    else:
        ctx.withhold("clean_model", "the model folder failed its checks (model.* above)")


def _veomni_build(ctx: Context) -> None:
    from .rules import PINNED_VEOMNI
    from .veomni_build import check_veomni_build

    ctx.summary["veomni_build"] = check_veomni_build(
        ctx["typed_work"], ctx["model_path"], ctx.report, pinned=PINNED_VEOMNI
    )


def _hf_model(ctx: Context) -> None:
    from .hf_model import hf_model_config, max_position_embeddings

    hf_model = hf_model_config(ctx["typed_work"], ctx["model_path"], ctx.report)
    if hf_model is None:
        ctx.withhold("hf_model", "verl's HFModelConfig rejects the model (verl.dataclass above)")
        return
    ctx.give("hf_model", hf_model)
    ctx.give("max_position_embeddings", max_position_embeddings(hf_model))
    ctx.give("mpe_source", "config.json + actor_rollout_ref.model.override_config (verl HFModelConfig)")


def _chat_template(ctx: Context) -> None:
    from .chat_template import check_chat_templates

    tokenizer = getattr(ctx["hf_model"], "tokenizer", None)
    if tokenizer is None:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(ctx["model_path"], trust_remote_code=False)
    ctx.summary["chat_templates"] = check_chat_templates(ctx["model_path"], tokenizer, ctx.report)["templates"]


def _lengths(ctx: Context) -> None:
    from .rules import check_lengths

    if "hf_model" in ctx:
        mpe, source = ctx["max_position_embeddings"], ctx["mpe_source"]
    else:
        mpe, source = ctx["model"].get("max_position_embeddings"), "config.json"
    ctx.summary["token_budget"] = check_lengths(ctx["typed_work"], ctx.report, ctx["loc"], mpe, source)


def _image_patch_size(ctx: Context) -> None:
    from .dataset import load_image_processor
    from .rules import check_image_patch_size

    image_processor = load_image_processor(ctx["model_path"], getattr(ctx.get("hf_model"), "processor", None))
    if image_processor is None:
        ctx.withhold("image_processor", "the model folder has no image processor")
        return
    ctx.give("image_processor", image_processor)
    ctx.summary["image_patch_size"] = check_image_patch_size(
        ctx["typed_work"], ctx.report, ctx["loc"], image_processor, ctx["model_path"]
    )


def _vllm_engine(ctx: Context) -> None:
    from .vllm_engine import check_vllm_engine

    if "hf_model" in ctx:
        mpe = ctx["max_position_embeddings"]
    else:
        mpe = ctx["model"].get("max_position_embeddings")
    ctx.summary["vllm"] = check_vllm_engine(
        ctx["typed_work"],
        ctx.report,
        ctx["loc"],
        mpe,
        ctx.get("model_path"),
        use_vllm=ctx["options"].get("vllm_rules") == "vllm",
    )


def _rollout_parallel(ctx: Context) -> None:
    from .launch import FULLY_ASYNC_MODULE
    from .vllm_engine import check_rollout_parallel

    ctx.summary.setdefault("topology", {})["rollout_replicas"] = check_rollout_parallel(
        ctx["typed_work"], ctx.report, ctx["loc"], ctx["spec"].module == FULLY_ASYNC_MODULE
    )


def _prompt_counter(ctx: Context) -> None:
    from .dataset import PromptCounter

    work, hf_model = ctx["typed_work"], ctx.get("hf_model")
    counter = PromptCounter(
        ctx["model_path"],
        filter_patch_size=work.data.get("image_patch_size", 14),
        apply_chat_template_kwargs=dict(work.data.get("apply_chat_template_kwargs") or {}),
        mm_processor_kwargs=dict(work.data.get("mm_processor_kwargs") or {}),
        tokenizer=getattr(hf_model, "tokenizer", None),
        processor=getattr(hf_model, "processor", None),
        processor_tried="hf_model" in ctx,
        image_processor=ctx.get("image_processor"),
    )
    ctx.summary["counted_with"] = counter.method
    ctx.give("counter", counter)


def _vision_token_ban(ctx: Context) -> None:
    from .patch_checks import check_vision_token_ban

    counter = ctx.get("counter")
    tokenizer = counter.tokenizer if counter is not None else getattr(ctx.get("hf_model"), "tokenizer", None)
    ctx.summary["vision_tokens"] = check_vision_token_ban(ctx["typed_work"], ctx.report, tokenizer)


def _vision_token_mask(ctx: Context) -> None:
    from .patch_checks import check_vision_token_mask

    ctx.summary.setdefault("vision_tokens", {}).update(check_vision_token_mask(ctx.report))


def _weight_sync_dp_rank(ctx: Context) -> None:
    from .patch_checks import check_weight_sync_dp_rank

    ctx.summary["weight_sync_dp_rank"] = check_weight_sync_dp_rank(ctx["typed_work"], ctx.report)


def _safety_patches(ctx: Context) -> None:
    from .patch_checks import check_safety_patches

    ctx.summary["safety_patches"] = check_safety_patches(
        ctx.report, launch=ctx["options"].get("purpose", "launch") == "launch"
    )


def _data(ctx: Context) -> None:
    from .dataset import check_data

    work = ctx["typed_work"]
    custom = bool((work.get("reward") or {}).get("custom_reward_function", {}).get("path"))
    ctx.summary["data"] = check_data(
        work,
        ctx.report,
        ctx["loc"],
        ctx.get("counter"),
        progress=bool(ctx["options"].get("progress")),
        custom_reward=custom,
        cache_dir=ctx["options"].get("cache_dir"),
        model_path=ctx.get("model_path"),
    )


def _data_media(ctx: Context) -> None:
    from .data_media import check_media

    ctx.summary["data_media"] = check_media(ctx["typed_work"], ctx.report, ctx["loc"])


def _mm_limits(ctx: Context) -> None:
    from .mm_limits import check_mm_limits

    data = ctx.summary.get("data") or {}
    counts = [v.get("max_images", 0) for v in data.values() if isinstance(v, dict) and v.get("rows")]
    ctx.summary["mm_limits"] = check_mm_limits(
        ctx["typed_work"], ctx.report, ctx["loc"], max(counts) if counts else None
    )


def _reward_http(ctx: Context) -> None:
    from .reward_http import check_reward_http

    ctx.summary["reward_http"] = check_reward_http(ctx["typed_work"], ctx.report, ctx["loc"])


def _checkpoint_volume(ctx: Context) -> None:
    from .checkpoint_volume import check_checkpoint_volume

    ctx.summary["checkpoint"] = check_checkpoint_volume(
        ctx["typed_work"],
        ctx.report,
        ctx["loc"],
        ctx["model_path"],
        launch=ctx["options"].get("purpose", "launch") == "launch",
    )


def _truncation(ctx: Context) -> None:
    from .rules import check_truncation

    has_images = bool(ctx["model"].get("is_vision_language", True))
    data = ctx.summary.get("data")
    if data is not None:
        has_images = any(v.get("image_rows") for v in data.values() if isinstance(v, dict)) or has_images
    check_truncation(ctx["typed_work"], ctx.report, ctx["loc"], has_images)


_SCHEMA = tuple(
    c.code
    for c in _CODE_LIST
    if c.code.startswith("schema.")
    and c.code not in ("schema.missing-value", "schema.required-key", "schema.value-type")
)

#: the preflight, in order
CHECKS: tuple[Check, ...] = (
    Check(
        "launch",
        ("argv",),
        ("spec",),
        ("launch.argv", "launch.unsupported-flag", "launch.hydra-override"),
        _launch,
        "the argv: python3 -m <known verl module>, Hydra flags, config dir/name (hydra @hydra.main)",
    ),
    Check(
        "compose",
        ("spec",),
        ("cfg", "overrides", "loc"),
        _SCHEMA,
        _compose,
        "each override against the installed verl's YAML with Hydra's own override code, then Hydra compose",
    ),
    Check(
        "code-loading",
        ("cfg", "loc", "overrides"),
        (),
        (
            "security.trust-remote-code",
            "security.code-loading",
            "security.target",
            "security.resolver",
            "security.interpolation",
        ),
        _code_loading,
        "B17: no trust_remote_code, no key that imports a user file, no _target_ override",
    ),
    Check(
        "runtime-config",
        ("spec", "cfg"),
        ("work",),
        ("verl.reward-migration", "verl.interpolation", "schema.missing-value"),
        _runtime_config,
        "verl's main(): fully-async rollout copies, migrate_legacy_reward_impl, OmegaConf.resolve",
    ),
    Check(
        "verl-dataclasses",
        ("spec", "work"),
        (),
        ("verl.dataclass",),
        _dataclasses,
        "verl's omega_conf_to_dataclass of actor/ref/rollout/checkpoint engine/critic, as the workers convert them",
    ),
    Check(
        "verl-validate-config",
        ("spec", "work"),
        (),
        ("verl.validate-config",),
        _validate_config,
        "verl.utils.config.validate_config (main_ppo)",
    ),
    Check(
        "verl-asserts",
        ("spec", "work", "loc"),
        (),
        ("verl.assert",),
        _asserts,
        "the asserts of verl's fully-async rollouter/trainer/worker, read from the installed source",
    ),
    Check(
        "checkpoint-engine",
        ("work", "loc"),
        (),
        ("rules.checkpoint-backend", "rules.checkpoint-backend-import"),
        _checkpoint_engine,
        "B13: the backend is one verl registers (read from source), and it imports here",
    ),
    Check("logger", ("work", "loc"), (), ("rules.logger",), _logger, "trainer.logger against verl's Tracking"),
    Check(
        "value-types",
        ("work", "loc"),
        ("typed_work",),
        ("schema.value-type",),
        _value_types,
        "whole numbers, strings and file lists where verl and the rules below need them",
    ),
    Check(
        "veomni-layout",
        ("typed_work", "loc"),
        (),
        ("rules.veomni-layout",),
        _veomni_layout,
        "B19: VeOmni fsdp x ulysses = world size, expert parallel divides it",
    ),
    Check(
        "veomni-install",
        ("typed_work",),
        ("veomni",),
        ("rules.veomni-version",),
        _veomni_install,
        "B19: the pinned VeOmni for model_engine=veomni",
    ),
    Check(
        "kwargs-audit",
        ("typed_work", "loc"),
        (),
        ("rules.setting-swallowed",),
        _kwargs_audit,
        "C08: no setting whose value verl passes as a keyword the callee swallows in **kwargs (AST sweep)",
    ),
    Check(
        "topology",
        ("typed_work", "spec", "loc", "options"),
        (),
        ("rules.devices-per-node", "rules.devices-unused", "rules.layout-local"),
        _topology,
        "B12: per-node device counts against the node's accelerators",
    ),
    Check(
        "model-dir",
        ("typed_work", "options"),
        ("model", "model_path", "clean_model"),
        tuple(c for c in CODES if c.startswith("model.")),
        _model_dir,
        "B17: the model folder: config, type, tokenizer/processor files, no auto_map or Python files",
    ),
    Check(
        "veomni-build",
        ("typed_work", "model_path", "clean_model", "veomni"),
        (),
        ("rules.veomni-build",),
        _veomni_build,
        "B19: VeOmni builds the folder's model on meta and runs one image forward (child process)",
    ),
    Check(
        "hf-model",
        ("typed_work", "model_path", "clean_model"),
        ("hf_model", "max_position_embeddings", "mpe_source"),
        ("verl.dataclass",),
        _hf_model,
        "verl's HFModelConfig of the folder (override_config applied)",
    ),
    Check(
        "chat-template",
        ("model_path", "clean_model", "hf_model"),
        (),
        ("template.changed", "template.drops-input"),
        _chat_template,
        "the folder's chat templates against the release's, rendered once: problem and image kept",
    ),
    Check(
        "lengths",
        ("typed_work", "loc", "model"),
        (),
        ("rules.max-model-len", "rules.max-model-len-mismatch", "rules.max-position-embeddings"),
        _lengths,
        "B09: max_model_len against prompt + response and max_position_embeddings",
    ),
    Check(
        "vllm-engine",
        ("typed_work", "loc", "model", "options"),
        (),
        (
            "vllm.setting-dropped",
            "vllm.max-num-batched-tokens",
            "vllm.max-model-len",
            "vllm.partial-prefill",
            "vllm.gpu-memory-utilization",
            "vllm.limit-mm-per-prompt",
            "vllm.scheduler",
        ),
        _vllm_engine,
        "B08/B09: the vLLM arguments verl builds, resolved, against vLLM 0.13.0's config rules",
    ),
    Check(
        "env-values",
        ("typed_work",),
        (),
        ("rules.env-rejected",),
        _env_values,
        "C10: no environment value of this process that a swept assert/raise of vLLM, verl or torch rejects "
        "under the recipe's settings (expandable_segments:True with sleep mode)",
    ),
    Check(
        "rollout-parallel",
        ("typed_work", "loc", "spec"),
        (),
        ("rules.rollout-parallel",),
        _rollout_parallel,
        "rollout TP x DP x PP against the rollout's devices, as verl places vLLM replicas",
    ),
    Check(
        "image-patch-size",
        ("typed_work", "loc", "model_path", "clean_model"),
        ("image_processor",),
        ("rules.image-patch-size",),
        _image_patch_size,
        "B06: data.image_patch_size (verl's overlong filter) = the processor's patch size (verl's agent loop)",
    ),
    Check(
        "prompt-counter",
        ("typed_work", "model_path", "clean_model", "check_data"),
        ("counter",),
        (),
        _prompt_counter,
        "the folder's tokenizer, chat template and image processor, for the data check",
    ),
    Check(
        "vision-token-ban",
        ("typed_work",),
        (),
        ("rules.vision-token-ban",),
        _vision_token_ban,
        "B05: verl (PR #7038) or the vlgrpo patch bans the vision placeholders in vLLM sampling",
    ),
    Check(
        "vision-token-mask",
        ("typed_work",),
        (),
        ("rules.vision-token-mask",),
        _vision_token_mask,
        "B05: verl or the vlgrpo patch masks a response that holds a vision placeholder",
    ),
    Check(
        "weight-sync-dp-rank",
        ("typed_work",),
        (),
        ("rules.weight-sync-dp-rank",),
        _weight_sync_dp_rank,
        "verl #6615: rollout DP > 1 on Ascend needs the vlgrpo patch rollout.weight_sync_dp_rank",
    ),
    Check(
        "safety-patches",
        ("options",),
        (),
        ("patches.safety-off",),
        _safety_patches,
        "no patch marked as a safety fix (code execution, exposure) switched off for a launch (a dry run: warning)",
    ),
    Check(
        "data",
        ("typed_work", "loc", "check_data", "options"),
        (),
        tuple(c for c in CODES if c.startswith("data.")),
        _data,
        "B07: the parquet files, their columns, every row's prompt length, the data sources' scorers",
    ),
    Check(
        "data-media",
        ("typed_work", "loc", "check_data"),
        (),
        ("media.image-source", "media.video"),
        _data_media,
        "each image entry's source as verl reads it (bytes, else image/image_url: no URL, no relative path); no "
        "video or audio rows",
    ),
    Check(
        "mm-limits",
        ("typed_work", "loc"),
        (),
        ("rules.video-enabled", "rules.image-limit"),
        _mm_limits,
        "C01: video off on a vLLM inside CVE-2026-22778/CVE-2026-34755; image limit >= images of a data row",
    ),
    Check(
        "reward-http",
        ("typed_work", "loc"),
        (),
        ("rules.reward-http-loopback",),
        _reward_http,
        "C01: no reward model reached over HTTP while patch rollout.server_loopback binds vLLM to 127.0.0.1",
    ),
    Check(
        "checkpoint-volume",
        ("typed_work", "loc", "model_path", "clean_model", "options"),
        (),
        (
            "rules.checkpoint-untrusted",
            "rules.checkpoint-space",
            "rules.checkpoint-storage",
            "rules.checkpoint-retention",
        ),
        _checkpoint_volume,
        "C03: the folder a resume loads carries valid manifests; free space for the checkpoints kept at the peak of "
        "a save (error; a warning in a dry run, --purpose plan); unbounded retention (warning)",
    ),
    Check(
        "truncation",
        ("typed_work", "loc", "model"),
        (),
        ("rules.image-truncation",),
        _truncation,
        "B07: no token truncation of image prompts",
    ),
)


def code_rows() -> list[dict[str, Any]]:
    """The code table with the checks that can give each code (``python -m vlgrpo preflight codes``)."""
    from .runner import code_table

    return code_table(CODES, CHECKS, RUNNER_CODES)
