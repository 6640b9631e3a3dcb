"""Model folder checks: config, model type, tokenizer/processor files, and no remote code (B17).

verl's reward loop loads the actor tokenizer with ``trust_remote_code=True`` whatever the config says
(verl ``verl/experimental/reward_loop/reward_loop.py``), so any ``auto_map`` in the folder's JSON files or
any ``*.py`` in it would execute code from the model folder. Qwen3-VL needs no remote code with
transformers 4.57.
"""

from __future__ import annotations

import json
import os
from typing import Any

from .report import ERROR, WARNING, Finding, Report, Where

#: JSON files transformers reads from a model folder that may carry ``auto_map``.
CODE_KEY_FILES = (
    "config.json",
    "tokenizer_config.json",
    "preprocessor_config.json",
    "processor_config.json",
    "video_preprocessor_config.json",
    "generation_config.json",
)
EXPECTED_MODEL_TYPES = ("qwen3_vl_moe",)  # Qwen3-VL-30B-A3B
ACCEPTED_MODEL_TYPES = ("qwen3_vl",)  # dense Qwen3-VL test models (2B/4B/8B)


def _find_key(obj: Any, key: str, path: str = "") -> list[str]:
    hits = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            sub = f"{path}.{k}" if path else str(k)
            if k == key:
                hits.append(sub)
            hits += _find_key(v, key, sub)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            hits += _find_key(v, key, f"{path}[{i}]")
    return hits


def check_model_dir(path: str, report: Report, key: str = "actor_rollout_ref.model.path") -> dict[str, Any]:
    """Check the model folder at ``path``. Returns facts (model_type, max_position_embeddings, clean flag).

    ``clean`` is True when nothing in the folder would run code and config.json is usable -- only then do
    later checks load the tokenizer/processor from it.
    """
    info: dict[str, Any] = {"path": path, "clean": False}
    where = Where(key=key, file=path)
    if os.path.exists(path) and not os.path.isdir(path):
        report.add(Finding("model.missing", ERROR, f"model path {path} is a file, not a model folder", where,
                           "verl loads config.json, the tokenizer and the weights from a folder",
                           f"point {key} at the folder that holds config.json"))
        return info
    if not os.path.isdir(path):
        report.add(Finding("model.missing", ERROR, f"model folder {path} does not exist", where,
                           "verl copies/loads it in the task runner", f"mount the model at {path} or fix {key}"))
        return info
    clean = True
    for fn in CODE_KEY_FILES:
        fp = os.path.join(path, fn)
        if not os.path.isfile(fp):
            continue
        try:
            with open(fp, encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, ValueError) as exc:
            report.add(Finding("model.bad-json", ERROR, f"{fn} is not readable JSON: {exc}", Where(key=key, file=fp),
                               "transformers fails to load the folder", "restore the file from the model release"))
            clean = False
            continue
        for hit in _find_key(data, "auto_map"):
            report.add(Finding(
                "model.auto-map", ERROR, f"{fn} has an auto_map entry ({hit}): the folder asks to run its own code",
                Where(key=key, file=fp),
                "verl's reward loop loads the tokenizer with trust_remote_code forced on, so this code would run "
                "regardless of data.trust_remote_code (verl reward_loop.py; cf. vLLM CVE-2026-4944)",
                f"remove '{hit}' from {fn} (Qwen3-VL needs no remote code with transformers 4.57)"))
            clean = False
    py_files = []
    for root, _dirs, files in os.walk(path):
        py_files += [os.path.relpath(os.path.join(root, f), path) for f in files if f.endswith(".py")]
    for rel in sorted(py_files):
        report.add(Finding(
            "model.python-file", ERROR, f"the model folder contains Python code: {rel}",
            Where(key=key, file=os.path.join(path, rel)),
            "with trust_remote_code forced on in verl's reward loop, an auto_map can import it",
            f"delete {rel} from the model folder"))
        clean = False
    cfg_path = os.path.join(path, "config.json")
    config: dict[str, Any] = {}
    if not os.path.isfile(cfg_path):
        report.add(Finding("model.no-config", ERROR, "config.json is missing", Where(key=key, file=path),
                           "transformers cannot build the model config", "copy config.json from the model release"))
        clean = False
    else:
        try:
            with open(cfg_path, encoding="utf-8") as fh:
                config = json.load(fh)
        except (OSError, ValueError):
            config = {}
            clean = False
        if not isinstance(config, dict):
            report.add(Finding("model.bad-json", ERROR, f"config.json holds a JSON {type(config).__name__}, not an "
                               "object", Where(key=key, file=cfg_path), "transformers reads config.json as a mapping "
                               "of settings", "restore config.json from the model release"))
            config = {}
            clean = False
    model_type = config.get("model_type")
    info["model_type"] = model_type
    if config and model_type not in EXPECTED_MODEL_TYPES + ACCEPTED_MODEL_TYPES:
        report.add(Finding(
            "model.type", ERROR,
            f"config.json model_type is {model_type!r}; this recipe trains {EXPECTED_MODEL_TYPES[0]} "
            f"(Qwen3-VL-30B-A3B; {', '.join(ACCEPTED_MODEL_TYPES)} accepted for small test models)",
            Where(key=key, file=cfg_path), "the patches, VeOmni model and memory plan assume Qwen3-VL",
            "point actor_rollout_ref.model.path at a Qwen3-VL-30B-A3B-Instruct folder"))
        clean = False
    text_cfg = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    info["max_position_embeddings"] = config.get("max_position_embeddings", text_cfg.get("max_position_embeddings"))
    info["is_vision_language"] = "vision_config" in config
    has_tok_cfg = os.path.isfile(os.path.join(path, "tokenizer_config.json"))
    has_vocab = os.path.isfile(os.path.join(path, "tokenizer.json")) or (
        os.path.isfile(os.path.join(path, "vocab.json")) and os.path.isfile(os.path.join(path, "merges.txt")))
    if not (has_tok_cfg and has_vocab):
        missing = [n for n, ok in (("tokenizer_config.json", has_tok_cfg),
                                   ("tokenizer.json or vocab.json+merges.txt", has_vocab)) if not ok]
        report.add(Finding("model.no-tokenizer", ERROR, "tokenizer files missing: " + ", ".join(missing),
                           Where(key=key, file=path), "verl loads the tokenizer from the model folder",
                           "copy the tokenizer files from the model release"))
        clean = False
    if info["is_vision_language"] and not os.path.isfile(os.path.join(path, "preprocessor_config.json")):
        report.add(Finding("model.no-processor", ERROR, "preprocessor_config.json is missing",
                           Where(key=key, file=path), "verl's hf_processor returns None and images are not encoded",
                           "copy preprocessor_config.json from the model release"))
        clean = False
    has_template = os.path.isfile(os.path.join(path, "chat_template.json")) or os.path.isfile(
        os.path.join(path, "chat_template.jinja"))
    if not has_template and has_tok_cfg:
        try:
            with open(os.path.join(path, "tokenizer_config.json"), encoding="utf-8") as fh:
                has_template = bool(json.load(fh).get("chat_template"))
        except (OSError, ValueError):
            pass
    if not has_template:
        report.add(Finding("model.no-chat-template", WARNING, "no chat template in the model folder",
                           Where(key=key, file=path), "verl applies the chat template to every prompt",
                           "copy chat_template.json from the model release"))
    info["clean"] = clean
    return info
