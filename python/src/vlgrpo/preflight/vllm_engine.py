"""B08/B09: the vLLM engine arguments verl 0.8.0 builds from the argv, resolved to the values vLLM 0.13.0 will use,
and vLLM 0.13.0's own rules on them.

How verl builds them (verl 0.8.0 ``verl/workers/rollout/vllm_rollout/vllm_async_server.py``,
``vLLMHttpServer.launch_server``): the RolloutConfig fields (``max_model_len``, ``max_num_seqs``,
``enable_chunked_prefill``, ``max_num_batched_tokens``, ``enable_prefix_caching``, ``gpu_memory_utilization``,
``tensor_model_parallel_size`` as ``tensor_parallel_size``), then ``engine_kwargs.vllm`` (its non-null values) spread
after them, so an engine_kwargs value wins; ``limit_images`` replaces ``limit_mm_per_prompt``; ``data_parallel_size``
when > 1; ``enable_expert_parallel`` = ``expert_parallel_size > 1``. ``max_model_len`` null becomes the model's
``max_position_embeddings`` with ``override_config`` applied (``_validate_configs``). The dict becomes a command line
through ``build_cli_args_from_config`` (``vllm_rollout/utils.py``), which passes a boolean only when it is True, so a
``False`` never reaches vLLM and vLLM's own default applies (read from the installed verl: :func:`drops_false`).

Resolution of what vLLM receives unset (vLLM 0.13.0 ``vllm/engine/arg_utils.py``): ``enable_chunked_prefill`` and
``enable_prefix_caching`` default to what the model supports (``ModelConfig.is_chunked_prefill_supported`` /
``is_prefix_caching_supported``: True for a generative decoder such as Qwen3-VL); ``max_num_batched_tokens`` /
``max_num_seqs`` unset take defaults that fit the other values by construction (not checked here).

Rules, mirrored from vLLM 0.13.0 (the preflight does not import vLLM: ``import vllm.config`` costs 3-8 s on the
2-core CI machine, see bench/RESULTS.md); ``tests/python/preflight/test_vllm_engine.py`` runs vLLM 0.13.0's own
classes (``.cache/vllm-0.13.0``, ``make vllm-0.13.0``) on the same values and requires the same verdicts, and
:func:`check_with_vllm` runs them in this process where vLLM is installed (``--vllm-rules vllm``):

- ``SchedulerConfig.verify_max_model_len`` (``vllm/config/scheduler.py``): with chunked prefill off,
  ``max_num_batched_tokens >= max_model_len``; always ``max_num_batched_tokens >= max_num_seqs``; partial prefills
  (``max_num_partial_prefills > 1``) need chunked prefill and ``long_prefill_token_threshold <= max_model_len``;
  ``max_long_partial_prefills <= max_num_partial_prefills``; fields ``>= 1``.
- ``CacheConfig.gpu_memory_utilization``: ``0 < value <= 1`` (``vllm/config/cache.py``).
- ``_get_and_verify_max_len`` (``vllm/config/model.py``): ``max_model_len`` no larger than the length derived from the
  model's own config.json text config (the smallest of its length keys, times a RoPE scaling factor); vLLM gets no
  ``override_config`` from verl, so this is the folder's value (262144 for Qwen3-VL-30B-A3B), not verl's.
- ``MultiModalConfig.limit_per_prompt`` (``vllm/config/multimodal.py``): each count a whole number ``>= 0``.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, TypeGuard

from .report import ERROR, WARNING, Finding, Report

VLLM_PIN = "0.13.0"
ROLLOUT = "actor_rollout_ref.rollout"
ENGINE_KWARGS = f"{ROLLOUT}.engine_kwargs.vllm"

#: vLLM argument -> RolloutConfig field verl takes it from (vllm_async_server.py launch_server)
FROM_ROLLOUT = {
    "max_model_len": "max_model_len",
    "max_num_seqs": "max_num_seqs",
    "enable_chunked_prefill": "enable_chunked_prefill",
    "max_num_batched_tokens": "max_num_batched_tokens",
    "enable_prefix_caching": "enable_prefix_caching",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "tensor_parallel_size": "tensor_model_parallel_size",
}
#: engine arguments the scheduler rules read besides those (vLLM 0.13.0 SchedulerConfig fields, defaults)
SCHEDULER_EXTRA = {"max_num_partial_prefills": 1, "max_long_partial_prefills": 1, "long_prefill_token_threshold": 0}
#: booleans vLLM resolves from the model when unset (vLLM 0.13.0 EngineArgs fields default None):
#: a generative decoder model supports both, so unset means True
MODEL_DEFAULT_TRUE = ("enable_chunked_prefill", "enable_prefix_caching")
#: keys of the text config vLLM 0.13.0 _get_and_verify_max_len takes the smallest of
MAX_LEN_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)


def drops_false() -> bool | None:
    """Does the installed verl's ``build_cli_args_from_config`` leave out a ``False`` boolean? Run from its source
    (``verl/workers/rollout/vllm_rollout/utils.py``; the module imports vLLM). None when the function is not found."""
    from .verl_checks import load_function

    try:
        build = load_function(
            "workers/rollout/vllm_rollout/utils.py", "build_cli_args_from_config", {"json": json}, import_fallback=False
        )
    except Exception:  # another verl layout: nothing to say
        return None
    return bool(build({"enable_chunked_prefill": False}) == [])


def engine_args(rollout: Any, verl_max_model_len: int | None) -> tuple[dict[str, Any], dict[str, str]]:
    """The vLLM arguments verl builds from ``rollout`` (the resolved ``actor_rollout_ref.rollout`` node), before
    the command line: ``(values, keys)``, ``keys`` naming the Hydra key each value came from.

    ``verl_max_model_len``: verl's resolution of a null ``rollout.max_model_len`` (max_position_embeddings of the
    model with override_config).
    """
    values: dict[str, Any] = {}
    keys: dict[str, str] = {}
    for arg, field in FROM_ROLLOUT.items():
        values[arg] = rollout.get(field)
        keys[arg] = f"{ROLLOUT}.{field}"
    if values["max_model_len"] is None and verl_max_model_len is not None:
        values["max_model_len"] = int(verl_max_model_len)
        keys["max_model_len"] += " (null: the model's max_position_embeddings, override_config applied)"
    ek = (rollout.get("engine_kwargs") or {}).get("vllm") or {}
    for k in list(ek.keys()) if hasattr(ek, "keys") else []:
        v = ek.get(k)
        if v is None:
            continue
        values[str(k)] = _plain(v)
        keys[str(k)] = f"{ENGINE_KWARGS}.{k}"
    if rollout.get("limit_images"):
        values["limit_mm_per_prompt"] = {"image": rollout.get("limit_images")}
        keys["limit_mm_per_prompt"] = f"{ROLLOUT}.limit_images"
    dp = rollout.get("data_parallel_size") or 1
    if dp > 1:
        values["data_parallel_size"] = dp
        keys["data_parallel_size"] = f"{ROLLOUT}.data_parallel_size"
    return values, keys


def _plain(value: Any) -> Any:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def resolve(values: dict[str, Any], drops: bool | None) -> tuple[dict[str, Any], list[str]]:
    """The values vLLM uses: a False the command line drops, and an unset model-dependent boolean, become vLLM's
    default (True for a generative decoder). Returns ``(resolved, dropped)``: ``dropped`` lists the arguments whose
    False never reached vLLM."""
    out = dict(values)
    dropped = []
    for arg in MODEL_DEFAULT_TRUE:
        v = out.get(arg)
        if v is False and drops:
            dropped.append(arg)
            out[arg] = True
        elif v is None:
            out[arg] = True
    # a --no-<flag> argument (engine_kwargs no_enable_chunked_prefill=True) is argparse's BooleanOptionalAction False
    for arg in MODEL_DEFAULT_TRUE:
        if out.get("no_" + arg) is True:
            out[arg] = False
    return out, dropped


def _is_int(v: object) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def derived_max_len(text_config: dict[str, Any]) -> tuple[float, str]:
    """vLLM 0.13.0 ``_get_and_verify_max_len``'s derived length of a model: the smallest of :data:`MAX_LEN_KEYS`
    present (``model_max_length`` alone if set), times the RoPE scaling factor (``rope_scaling``, which vLLM reads as
    ``rope_parameters``; ``yarn`` starts from ``original_max_position_embeddings``; ``su``/``longrope``/``llama3`` are
    not scaled). ``(inf, "")`` when no key is present (vLLM then assumes 2048 for an unset max_model_len)."""
    derived, key = math.inf, ""
    for k in MAX_LEN_KEYS:
        v = text_config.get(k)
        if v is not None and v < derived:
            derived, key = v, k
    if text_config.get("model_max_length"):
        derived, key = text_config["model_max_length"], "model_max_length"
    rope = text_config.get("rope_parameters") or text_config.get("rope_scaling")
    if rope and "gemma3" not in str(text_config.get("model_type", "")):
        rope_type = rope.get("rope_type", rope.get("type"))
        if rope_type not in ("su", "longrope", "llama3"):
            factor = rope.get("factor", 1.0)
            if rope_type == "yarn":
                derived = rope["original_max_position_embeddings"]
            derived = derived * factor
    return derived, key


def text_config_of(model_path: str) -> dict[str, Any]:
    """The text config vLLM reads from the folder's config.json (``text_config`` of a VL model, else the top level)."""
    with open(os.path.join(model_path, "config.json"), encoding="utf-8") as fh:
        cfg: dict[str, Any] = json.load(fh)
    text: dict[str, Any] = cfg["text_config"] if isinstance(cfg.get("text_config"), dict) else cfg
    return text


def mirrored_rules(resolved: dict[str, Any], text_config: dict[str, Any]) -> list[tuple[str, str]]:
    """vLLM 0.13.0's rules on ``resolved`` (see the module docstring): ``[(rule, message)]``, empty when vLLM would
    accept the values. ``rule`` is the finding code."""
    out: list[tuple[str, str]] = []
    mml = resolved.get("max_model_len")
    derived, key = derived_max_len(text_config)
    if _is_int(mml) and mml > derived:
        out.append(
            (
                "vllm.max-model-len",
                f"max_model_len ({mml}) is larger than the length vLLM derives from the "
                f"model's config.json ({key}={int(derived)})",
            )
        )
    first = _scheduler_rule(resolved)
    if first:
        out.append(first)
    gmu = resolved.get("gpu_memory_utilization")
    if gmu is not None and (isinstance(gmu, bool) or not isinstance(gmu, (int, float)) or not 0 < gmu <= 1):
        out.append(
            (
                "vllm.gpu-memory-utilization",
                f"gpu_memory_utilization ({gmu!r}) must be greater than 0 and less than or equal to 1",
            )
        )
    limits = resolved.get("limit_mm_per_prompt")
    if isinstance(limits, dict):
        for modality, v in limits.items():
            count = v.get("count", 999) if isinstance(v, dict) else v
            if not _is_int(count) or count < 0:
                out.append(
                    (
                        "vllm.limit-mm-per-prompt",
                        f"limit_mm_per_prompt[{modality!r}] ({v!r}): the count must be a whole number >= 0",
                    )
                )
                break
    return out


def _scheduler_rule(resolved: dict[str, Any]) -> tuple[str, str] | None:
    """The first rule vLLM 0.13.0's ``SchedulerConfig`` breaks on ``resolved`` (its field bounds, then
    ``verify_max_model_len`` in its order), or None."""
    mml = resolved.get("max_model_len")
    nbt, seqs = resolved.get("max_num_batched_tokens"), resolved.get("max_num_seqs")
    chunked = bool(resolved.get("enable_chunked_prefill"))
    for name in ("max_num_batched_tokens", "max_num_seqs"):
        v = resolved.get(name)
        if v is not None and (not _is_int(v) or v < 1):
            return "vllm.scheduler", f"{name} ({v!r}) must be a whole number >= 1"
    if not _is_int(mml) or not _is_int(nbt) or not _is_int(seqs):
        return None
    if nbt < mml and not chunked:
        return (
            "vllm.max-num-batched-tokens",
            f"max_num_batched_tokens ({nbt}) is smaller than max_model_len ({mml}) "
            "with chunked prefill off: no sequence could be longer than max_num_batched_tokens",
        )
    if nbt < seqs:
        return ("vllm.max-num-batched-tokens", f"max_num_batched_tokens ({nbt}) is smaller than max_num_seqs ({seqs})")
    partial = resolved.get("max_num_partial_prefills", SCHEDULER_EXTRA["max_num_partial_prefills"])
    long_partial = resolved.get("max_long_partial_prefills", SCHEDULER_EXTRA["max_long_partial_prefills"])
    threshold = resolved.get("long_prefill_token_threshold", SCHEDULER_EXTRA["long_prefill_token_threshold"])
    if _is_int(partial) and partial > 1:
        if threshold == 0:
            threshold = int(mml * 0.04)  # SchedulerConfig.__post_init__
        if not chunked:
            return "vllm.partial-prefill", f"max_num_partial_prefills {partial} > 1 needs chunked prefill on"
        if _is_int(threshold) and threshold > mml:
            return (
                "vllm.partial-prefill",
                f"long_prefill_token_threshold ({threshold}) is larger than max_model_len ({mml})",
            )
    if _is_int(long_partial) and _is_int(partial) and long_partial > partial:
        return (
            "vllm.partial-prefill",
            f"max_long_partial_prefills ({long_partial}) is larger than max_num_partial_prefills ({partial})",
        )
    return None


def check_with_vllm(resolved: dict[str, Any], model_path: str) -> list[tuple[str, str]]:
    """The same rules as :func:`mirrored_rules`, run by vLLM's own classes (imports vLLM; needs vLLM 0.13.0 and its
    dependencies): ``vllm.config.model._get_and_verify_max_len`` on the folder's text config as vLLM loads it
    (``vllm.transformers_utils.config.get_config`` / ``get_hf_text_config``), ``SchedulerConfig``, ``CacheConfig``,
    ``MultiModalConfig``. Returns ``[(rule, vLLM's message)]``."""
    from vllm.config import CacheConfig, MultiModalConfig, SchedulerConfig
    from vllm.config.model import _get_and_verify_max_len
    from vllm.transformers_utils.config import get_config, get_hf_text_config

    def message(exc: Exception) -> str:
        errors = getattr(exc, "errors", None)
        if callable(errors):
            return "; ".join(str(e.get("msg", "")).removeprefix("Value error, ") for e in errors())
        return " ".join(str(exc).split())

    out: list[tuple[str, str]] = []
    mml = resolved.get("max_model_len")
    try:
        text_config = get_hf_text_config(get_config(model_path, trust_remote_code=False))
        _get_and_verify_max_len(text_config, None, mml, False, None)
    except ValueError as exc:
        out.append(("vllm.max-model-len", message(exc)))
    sched = {
        k: resolved[k]
        for k in ("max_num_batched_tokens", "max_num_seqs", "enable_chunked_prefill", *SCHEDULER_EXTRA)
        if resolved.get(k) is not None
    }
    try:
        SchedulerConfig(max_model_len=mml, is_encoder_decoder=False, **sched)
    except Exception as exc:  # pydantic ValidationError or ValueError
        said = message(exc)
        rule = (
            "vllm.partial-prefill"
            if "partial" in said or "long_prefill" in said
            else "vllm.max-num-batched-tokens"
            if said.startswith("max_num_batched_tokens (")
            else "vllm.scheduler"
        )
        out.append((rule, said))
    if resolved.get("gpu_memory_utilization") is not None:
        try:
            CacheConfig(gpu_memory_utilization=resolved["gpu_memory_utilization"])
        except Exception as exc:
            out.append(("vllm.gpu-memory-utilization", message(exc)))
    if isinstance(resolved.get("limit_mm_per_prompt"), dict):
        try:
            MultiModalConfig(limit_per_prompt=dict(resolved["limit_mm_per_prompt"]))
        except Exception as exc:
            out.append(("vllm.limit-mm-per-prompt", message(exc)))
    return out


#: what each rule's finding says about its cause and fix
_RULE_TEXT = {
    "vllm.max-num-batched-tokens": (
        "vLLM 0.13.0's SchedulerConfig refuses it when the engine starts, after Ray placed the workers and loaded "
        "the weights (verl issues #7624, PR #259)",
        "raise max_num_batched_tokens to at least {mml} (or lower max_model_len), or keep chunked prefill on",
    ),
    "vllm.max-model-len": (
        "vLLM 0.13.0 checks max_model_len against the model's own config.json (verl does not pass override_config to "
        "vLLM) and refuses to start",
        "max_model_len at most the model's derived length",
    ),
    "vllm.partial-prefill": (
        "vLLM 0.13.0's SchedulerConfig refuses it when the engine starts",
        "drop the partial-prefill engine_kwargs or turn chunked prefill on",
    ),
    "vllm.gpu-memory-utilization": (
        "vLLM 0.13.0's CacheConfig refuses it when the engine starts",
        "a fraction in (0, 1], e.g. 0.8",
    ),
    "vllm.limit-mm-per-prompt": (
        "vLLM 0.13.0's MultiModalConfig refuses it when the engine starts",
        'counts are whole numbers >= 0, e.g. {"image": 1, "video": 0}',
    ),
    "vllm.scheduler": ("vLLM 0.13.0's SchedulerConfig refuses it when the engine starts", "a whole number >= 1"),
}
#: the engine argument a rule's finding points at
_RULE_ARG = {
    "vllm.max-num-batched-tokens": "max_num_batched_tokens",
    "vllm.max-model-len": "max_model_len",
    "vllm.partial-prefill": "max_num_partial_prefills",
    "vllm.gpu-memory-utilization": "gpu_memory_utilization",
    "vllm.limit-mm-per-prompt": "limit_mm_per_prompt",
    "vllm.scheduler": "max_num_batched_tokens",
}


def check_vllm_engine(
    work: Any, report: Report, loc: Any, verl_max_model_len: int | None, model_path: str | None, use_vllm: bool = False
) -> dict[str, Any]:
    """B08/B09: resolve the engine arguments (see the module docstring) and apply vLLM 0.13.0's rules.

    Reports ``vllm.setting-dropped`` (a False verl never passes, where vLLM's default is True) and one finding per
    broken rule, each naming the values. Returns the summary ``{"engine_args": {...}, "rules": "mirrored"|"vllm"}``.
    """
    rollout = work.actor_rollout_ref.rollout
    if rollout.get("name") != "vllm":
        return {}
    values, keys = engine_args(rollout, verl_max_model_len)
    drops = drops_false()
    resolved, dropped = resolve(values, drops)
    text_config: dict[str, Any] = {}
    if model_path:
        try:
            text_config = text_config_of(model_path)
        except (OSError, ValueError):
            text_config = {}
    if use_vllm and model_path:
        broken, how = check_with_vllm(resolved, model_path), f"vLLM {VLLM_PIN}'s own config classes"
    else:
        broken, how = mirrored_rules(resolved, text_config), f"vLLM {VLLM_PIN}'s rules, mirrored"
    for arg in dropped:
        hint = ""
        if arg == "enable_chunked_prefill":
            off = dict(resolved, enable_chunked_prefill=False)
            if any(r == "vllm.max-num-batched-tokens" for r, _ in mirrored_rules(off, text_config)):
                hint = (
                    f"; were it off, vLLM would refuse max_num_batched_tokens {resolved.get('max_num_batched_tokens')}"
                    f" < max_model_len {resolved.get('max_model_len')} (verl PR #7508 passes False through, verl "
                    "issue #7624)"
                )
        report.add(
            Finding(
                "vllm.setting-dropped",
                ERROR,
                f"{keys[arg]}=False never reaches vLLM: verl's build_cli_args_from_config passes a boolean only when it is "
                f"True, so vLLM {VLLM_PIN} uses its default for this model, {arg}=True" + hint,
                loc.where(keys[arg].split(" ")[0]),
                "the run differs from the launch: vLLM turns it on for a generative model "
                "(EngineArgs._set_default_chunked_prefill_and_prefix_caching_args), and vLLM 0.13.0 warns that turning "
                "chunked prefill off 'may cause the engine to crash or produce incorrect outputs'",
                f"drop the override (keep vLLM's default, on), or if it must be off: "
                f"+{ENGINE_KWARGS}.no_{arg}=True (vLLM's --no-{arg.replace('_', '-')})",
            )
        )
    for rule, msg in broken:
        arg = _RULE_ARG[rule]
        why, fix = _RULE_TEXT[rule]
        mml = resolved.get("max_model_len")
        where_key = keys.get(arg, f"{ENGINE_KWARGS}.{arg}").split(" ")[0]
        detail = ""
        if rule == "vllm.max-num-batched-tokens" and "smaller than max_model_len" in msg:
            detail = (
                f" (chunked prefill off: {keys.get('enable_chunked_prefill', '')}; max_model_len from "
                f"{keys.get('max_model_len', '')})"
            )
        report.add(
            Finding(
                rule,
                ERROR,
                f"vLLM {VLLM_PIN} refuses the engine arguments verl builds: {msg}{detail}",
                loc.where(where_key),
                why,
                fix.replace("{mml}", str(mml)),
            )
        )
    shown = {
        k: resolved.get(k)
        for k in (
            "max_model_len",
            "max_num_batched_tokens",
            "max_num_seqs",
            "enable_chunked_prefill",
            "gpu_memory_utilization",
            "tensor_parallel_size",
        )
    }
    shown.update({k: resolved[k] for k in ("data_parallel_size", "limit_mm_per_prompt") if k in resolved})
    return {"engine_args": shown, "rules": how, "false_dropped_by_verl": drops}


def check_rollout_parallel(work: Any, report: Report, loc: Any, fully_async: bool) -> dict[str, Any]:
    """TP/DP/PP sizes against the rollout's devices, as verl 0.8.0 places replicas: ``RolloutReplica.__init__``
    (``verl/workers/rollout/replica.py``: ``world_size % min(gpus_per_node, world_size) == 0``), the server manager
    (``verl/workers/rollout/llm_server.py``: ``num_replicas = devices // (tp * dp * pp)``, the rest idle) and
    ``launch_server`` (``gpus_per_node % tp == 0`` when dp > 1).

    Rollout devices: ``rollout.nnodes x rollout.n_gpus_per_node`` for fully async (its own pool), else the trainer's
    (the colocated rollout shares the trainer's devices).
    """
    r = work.actor_rollout_ref.rollout
    tp = int(r.get("tensor_model_parallel_size") or 1)
    dp = int(r.get("data_parallel_size") or 1)
    pp = int(r.get("pipeline_model_parallel_size") or 1)
    pool = work.rollout if fully_async else work.trainer
    pool_name = "rollout" if fully_async else "trainer"
    per_node, nodes = int(pool.n_gpus_per_node), int(pool.nnodes)
    devices = per_node * nodes
    replica = tp * dp * pp
    where = loc.where(f"{ROLLOUT}.tensor_model_parallel_size")
    sizes = f"tensor_model_parallel_size {tp} x data_parallel_size {dp} x pipeline_model_parallel_size {pp} = {replica}"
    info = {"replica_devices": replica, "rollout_devices": devices, "replicas": devices // replica if replica else 0}
    if replica > devices:
        report.add(
            Finding(
                "rules.rollout-parallel",
                ERROR,
                f"one rollout replica needs {sizes} devices but the rollout has {devices} "
                f"({pool_name}.nnodes {nodes} x {pool_name}.n_gpus_per_node {per_node})",
                where,
                "verl's server manager starts devices // replica = 0 vLLM replicas: rollout never starts",
                f"lower the rollout's parallel sizes or give it at least {replica} devices",
            )
        )
        return info
    per_replica_node = min(per_node, replica)
    if replica % per_replica_node:
        report.add(
            Finding(
                "rules.rollout-parallel",
                ERROR,
                f"a rollout replica of {sizes} devices does not fill whole nodes of "
                f"{per_node} ({pool_name}.n_gpus_per_node)",
                where,
                "verl's RolloutReplica asserts 'world_size must be divisible by gpus_per_node' when it is built",
                f"a replica size that divides {per_node} or is a multiple of it",
            )
        )
    if dp > 1 and per_node % tp:
        report.add(
            Finding(
                "rules.rollout-parallel",
                ERROR,
                f"data_parallel_size {dp} > 1 needs n_gpus_per_node ({per_node}) "
                f"divisible by tensor_model_parallel_size {tp}",
                where,
                "verl's vLLM server asserts 'gpus_per_node should be divisible by tensor_model_parallel_size'",
                "a tensor parallel size dividing the devices per node",
            )
        )
    if devices % replica:
        report.add(
            Finding(
                "rules.rollout-parallel",
                WARNING,
                f"{devices} rollout devices are not a multiple of a replica's {replica}: {devices % replica} stay idle",
                where,
                "verl starts devices // replica vLLM replicas and leaves the rest unused",
                f"a replica size dividing {devices}",
            )
        )
    return info
