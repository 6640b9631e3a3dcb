"""``run_preflight``: every check on one launch argv, in the order a failure would surface at run time."""

from __future__ import annotations

import os
import time
import traceback
from typing import Any

from .launch import FULLY_ASYNC_MODULE, LaunchError, parse_launch
from .report import ERROR, Finding, Report, Where


def run_preflight(argv: list[str], *, check_data: bool = True, model_path: str | None = None,
                  devices_per_node: int | None = None, progress: bool = False) -> Report:
    """Check a complete launch argv against the installed verl, the model folder and the data.

    Args:
        argv: the exact argv the entrypoint will exec: ``["python3", "-m", <module>, <hydra args>...]``.
        check_data: read the parquet files and count every row's prompt tokens (``--no-data`` turns it off).
        model_path: check this model folder instead of ``actor_rollout_ref.model.path`` (e.g. the host path of
            a folder the container sees elsewhere).
        devices_per_node: accelerators per node for the topology check; None detects them on this machine
            (``/dev/davinci*`` or CUDA) and skips the check when there are none.
        progress: show a progress bar on stderr while counting tokens.

    Returns:
        :class:`vlgrpo.preflight.report.Report` (``exit_code`` 0 clean, 2 findings, 1 internal error).
        Never raises for bad input; a crash inside a check is caught into ``report.internal_error``.
    """
    report = Report()
    timings: dict[str, float] = {}
    report.summary["timings_s"] = timings
    t0 = time.perf_counter()
    try:
        _run(argv, report, timings, check_data, model_path, devices_per_node, progress)
    except LaunchError as exc:
        report.add(Finding("launch.argv", ERROR, str(exc), Where(), "the entrypoint would exec a launch preflight "
                           "cannot interpret", "pass the argv as: python3 -m <verl module> <overrides...>"))
    except Exception as exc:  # noqa: BLE001
        from omegaconf.errors import ConfigAttributeError, ConfigKeyError

        if isinstance(exc, (ConfigAttributeError, ConfigKeyError)) and getattr(exc, "full_key", None):
            # a key verl reads (and these checks read) was removed with '~' or never existed
            report.add(Finding("schema.required-key", ERROR,
                               f"{exc.full_key} is read by verl but missing from the composed config",
                               Where(key=str(exc.full_key)), "verl raises the same error after Ray start",
                               f"do not delete {exc.full_key} (remove its '~' override)"))
        else:  # internal error -> exit 1
            report.internal_error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}\n" + \
                traceback.format_exc()
    timings["total"] = round(time.perf_counter() - t0, 3)
    return report


def _lap(timings: dict[str, float], name: str, start: float) -> float:
    now = time.perf_counter()
    timings[name] = round(now - start, 3)
    return now


def _run(argv: list[str], report: Report, timings: dict[str, float], check_data: bool, model_path: str | None,
         devices_per_node: int | None, progress: bool) -> None:
    from . import rules
    from .model_dir import check_model_dir
    from .schema import _verl_version, compose_config

    t = time.perf_counter()
    spec = parse_launch(argv)
    s = report.summary
    s.update({"module": spec.module, "config_name": spec.config_name, "config_dir": spec.config_dir,
              "verl_version": _verl_version(), "overrides": len(spec.overrides)})
    for note in spec.notes:
        report.add(note)

    result = compose_config(spec, report)
    t = _lap(timings, "compose", t)
    if result.config is None:
        return
    cfg = result.config
    s["model_engine"] = cfg.get("model_engine")
    loc = rules.Locator(result.overrides)
    rules.check_code_loading(cfg, report, loc, result.overrides)

    from . import verl_checks

    work = verl_checks.prepare_runtime_config(spec, cfg, report)
    if work is None:
        return
    verl_checks.run_dataclass_checks(spec, work, report)
    verl_checks.run_validate_config(spec, work, report)
    s["verl_asserts_evaluated"] = verl_checks.run_source_asserts(spec, work, report, loc)
    verl_checks.check_checkpoint_engine(work, report, loc)
    rules.check_logger(work, report, loc)
    if not rules.check_value_types(work, report, loc):
        return  # the rules below do arithmetic on these values
    rules.check_veomni(work, report, loc)
    s.update(rules.check_veomni_install(work, report))
    source = "given"
    if devices_per_node is None:
        devices_per_node, source = rules.detect_devices_per_node()
    s["topology"] = rules.check_topology(work, report, loc, spec.module == FULLY_ASYNC_MODULE, devices_per_node,
                                         source)
    t = _lap(timings, "verl_checks", t)

    mpath = model_path or str(work.actor_rollout_ref.model.path)
    model = check_model_dir(mpath, report)
    s["model"] = {k: model.get(k) for k in ("path", "model_type", "max_position_embeddings")}
    if s.get("veomni") and model.get("clean"):  # B19: VeOmni installed -> it must build this folder's model
        from .veomni_build import check_veomni_build

        s["veomni_build"] = check_veomni_build(work, mpath, report, pinned=rules.PINNED_VEOMNI)
        t = _lap(timings, "veomni_build", t)
    hf_model = None
    if model.get("clean"):
        hf_model = _hf_model_config(work, mpath, report)
    mpe, mpe_source = model.get("max_position_embeddings"), "config.json"
    if hf_model is not None:
        # the lookup of verl 0.8.0 verl/workers/rollout/utils.py::get_max_position_embeddings (that module
        # imports uvicorn, absent outside the images): top-level attribute, else text_config's.
        hf = hf_model.hf_config
        mpe = getattr(hf, "max_position_embeddings", None)
        if mpe is None and getattr(hf, "text_config", None) is not None:
            mpe = getattr(hf.text_config, "max_position_embeddings", None)
        mpe_source = "config.json + actor_rollout_ref.model.override_config (verl HFModelConfig)"
    s["token_budget"] = rules.check_lengths(work, report, loc, mpe, mpe_source)
    t = _lap(timings, "model", t)

    tokenizer = getattr(hf_model, "tokenizer", None)
    counter = None
    if check_data and model.get("clean"):
        from .dataset import PromptCounter

        counter = PromptCounter(mpath, image_patch_size=int(work.data.get("image_patch_size", 14) or 14),
                                apply_chat_template_kwargs=dict(work.data.get("apply_chat_template_kwargs") or {}),
                                tokenizer=tokenizer, processor=getattr(hf_model, "processor", None),
                                processor_tried=hf_model is not None)
        tokenizer = counter.tokenizer
        s["counted_with"] = counter.method
    s["vision_tokens"] = verl_checks.check_vision_token_ban(work, report, tokenizer)
    s["vision_tokens"].update(verl_checks.check_vision_token_mask(report))
    has_images = bool(model.get("is_vision_language", True))
    if check_data:
        from .dataset import check_data as _check_data

        custom = bool((work.get("reward") or {}).get("custom_reward_function", {}).get("path"))
        s["data"] = _check_data(work, report, loc, counter, progress=progress, custom_reward=custom)
        has_images = any(v.get("image_rows") for v in s["data"].values() if isinstance(v, dict)) or has_images
    rules.check_truncation(work, report, loc, has_images)
    _lap(timings, "data", t)


#: one HFModelConfig per (folder, folder mtimes, model node): repeated runs in one process (tests, the demo)
#: do not reload the tokenizer; the object is only read.
_HF_MODEL_CACHE: dict[tuple, Any] = {}


def _folder_stamp(path: str) -> tuple:
    try:
        return tuple(sorted((e.name, e.stat().st_mtime_ns, e.stat().st_size) for e in os.scandir(path)))
    except OSError:
        return ()


def _hf_model_config(work: Any, mpath: str, report: Report) -> Any:
    """verl's HFModelConfig for the model node (loads config with override_config, tokenizer, processor)."""
    import contextlib
    import copy
    import io

    from omegaconf import open_dict

    from verl.utils.config import omega_conf_to_dataclass

    node = copy.deepcopy(work.actor_rollout_ref.model)
    with open_dict(node):
        node.path = mpath
        if node.get("tokenizer_path") is not None and not os.path.isdir(str(node.tokenizer_path)):
            node.tokenizer_path = mpath
        node.hf_config_path = mpath if node.get("hf_config_path") is None or not os.path.isdir(
            str(node.hf_config_path)) else node.hf_config_path
        node.trust_remote_code = False  # remote code was refused above; never run it here
    from omegaconf import OmegaConf

    cache_key = (mpath, _folder_stamp(mpath), OmegaConf.to_yaml(node))
    if cache_key in _HF_MODEL_CACHE:
        return _HF_MODEL_CACHE[cache_key]
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            result = omega_conf_to_dataclass(node)
        _HF_MODEL_CACHE.clear()
        _HF_MODEL_CACHE[cache_key] = result
        return result
    except Exception as exc:  # noqa: BLE001
        report.add(Finding("verl.dataclass", ERROR, f"verl's HFModelConfig rejects actor_rollout_ref.model: "
                           f"{' '.join(str(exc).split())[:300]}", Where(key="actor_rollout_ref.model", file=mpath),
                           "every worker builds it from the model folder", "fix the model folder or model settings"))
        return None
