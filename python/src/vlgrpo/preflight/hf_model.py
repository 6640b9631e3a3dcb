"""verl's own model config (``HFModelConfig``) for the launch, cached per folder, and what the rollout reads from it."""

from __future__ import annotations

import os
from typing import Any

from .report import ERROR, Finding, Report, Where

#: one HFModelConfig per (folder, folder mtimes, model node): repeated runs in one process (tests, the demo)
#: do not reload the tokenizer; the object is only read.
_HF_MODEL_CACHE: dict[tuple[object, ...], Any] = {}


def _folder_stamp(path: str) -> tuple[tuple[str, int, int], ...]:
    try:
        return tuple(sorted((e.name, e.stat().st_mtime_ns, e.stat().st_size) for e in os.scandir(path)))
    except OSError:
        return ()


def hf_model_config(work: Any, mpath: str, report: Report) -> Any:
    """verl's ``HFModelConfig`` for ``actor_rollout_ref.model`` of ``work`` with the folder ``mpath``: what every worker
    builds with ``omega_conf_to_dataclass`` (verl 0.8.0 ``verl/workers/config/model.py``; loads config.json with
    ``override_config`` applied, the tokenizer and the processor). ``trust_remote_code`` is forced off. Returns None
    after reporting ``verl.dataclass`` when verl rejects the node."""
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
        node.hf_config_path = (
            mpath
            if node.get("hf_config_path") is None or not os.path.isdir(str(node.hf_config_path))
            else node.hf_config_path
        )
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
    except Exception as exc:
        report.add(
            Finding(
                "verl.dataclass",
                ERROR,
                f"verl's HFModelConfig rejects actor_rollout_ref.model: {' '.join(str(exc).split())[:300]}",
                Where(key="actor_rollout_ref.model", file=mpath),
                "every worker builds it from the model folder",
                "fix the model folder or model settings",
            )
        )
        return None


def max_position_embeddings(hf_model: Any) -> int | None:
    """The lookup of verl 0.8.0 ``verl/workers/rollout/utils.py::get_max_position_embeddings`` (that module imports
    uvicorn, absent outside the images): the top-level attribute of ``hf_model.hf_config``, else its
    ``text_config``'s. None when neither has one."""
    hf = hf_model.hf_config
    mpe = getattr(hf, "max_position_embeddings", None)
    if mpe is None and getattr(hf, "text_config", None) is not None:
        mpe = getattr(hf.text_config, "max_position_embeddings", None)
    return mpe
