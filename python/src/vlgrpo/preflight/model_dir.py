"""Model folder checks: the one path rule for the folder and everything in it, config, model type,
tokenizer/processor files, and no remote code (B17).

verl's reward loop loads the actor tokenizer with ``trust_remote_code=True`` whatever the config says
(verl ``verl/experimental/reward_loop/reward_loop.py``; the patch ``reward.tokenizer_remote_code`` passes
``False`` there), so any ``auto_map`` in the folder's JSON files or any ``*.py`` in it would execute code from
the model folder. The folder must pass the one path rule down to every entry (:func:`vlgrpo.pathrule.check_tree`),
or another user could add them after this check looked. Qwen3-VL needs no remote code with
transformers 4.57.

The folder is read the way transformers 4.57.6 reads it, and refused (``model.redirect``) where it would make
transformers load files from elsewhere: an ``adapter_config.json`` (with peft installed, ``from_pretrained`` loads
the adapter's ``base_model_name_or_path`` instead: ``utils/peft_utils.py::find_adapter_config_file``), a
``*_file`` entry of ``tokenizer_config.json`` (it wins over the folder's own files:
``tokenization_utils_base.py::_from_pretrained`` merges resolved files only ``if args_name not in init_kwargs``),
and a safetensors/bin index whose ``weight_map`` names a path instead of a file of the folder
(``utils/hub.py::get_checkpoint_shard_files`` joins it to the folder, so ``/x`` or ``../x`` escapes it). Its JSON
files are bounded (:data:`MAX_JSON_BYTES`, nesting too deep for the parser) and must be JSON objects: a broken file
is ``model.bad-json`` (exit 2), never a traceback.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
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
#: the largest model-folder JSON file read (the shipped ones are < 11 KB; tokenizer.json is not read here)
MAX_JSON_BYTES = 16 << 20
#: weight index files transformers reads (``SAFE_WEIGHTS_INDEX_NAME``, ``WEIGHTS_INDEX_NAME``)
INDEX_FILES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
EXPECTED_MODEL_TYPES = ("qwen3_vl_moe",)  # Qwen3-VL-30B-A3B
ACCEPTED_MODEL_TYPES = ("qwen3_vl",)  # dense Qwen3-VL test models (2B/4B/8B)


def _find_key(obj: Any, key: str) -> list[str]:
    """Every dotted path (``a.b[2].c``) of ``key`` in the parsed JSON ``obj``, depth first in document order
    (iterative: any nesting the parser accepted is walked without recursion)."""

    def children(node: Any, path: str) -> Iterator[tuple[str, Any, Any]]:
        if isinstance(node, dict):
            return iter([(f"{path}.{k}" if path else str(k), k, v) for k, v in node.items()])
        if isinstance(node, list):
            return iter([(f"{path}[{i}]", None, v) for i, v in enumerate(node)])
        return iter(())

    hits: list[str] = []
    stack = [children(obj, "")]
    while stack:
        step = next(stack[-1], None)
        if step is None:
            stack.pop()
            continue
        sub, k, v = step
        if k == key:
            hits.append(sub)
        stack.append(children(v, sub))
    return hits


def load_json(fp: str) -> tuple[Any, str]:
    """``(data, "")`` for a readable JSON file of at most :data:`MAX_JSON_BYTES`, else ``(None, why)``: too large,
    unreadable, not UTF-8 or not JSON, or nested deeper than Python's parser goes (``RecursionError``)."""
    try:
        size = os.path.getsize(fp)
        if size > MAX_JSON_BYTES:
            return None, f"is {size} bytes, more than the {MAX_JSON_BYTES} a model config file can be"
        with open(fp, encoding="utf-8") as fh:
            return json.load(fh), ""
    except RecursionError:
        return None, "is nested too deeply to parse"
    except (OSError, ValueError) as exc:
        return None, f"is not readable JSON: {' '.join(str(exc).split())[:200]}"


def _redirects(path: str, parsed: dict[str, Any], report: Report, key: str) -> bool:
    """Report ``model.redirect`` for each way the folder makes transformers read files from elsewhere; True if any."""
    found = False
    adapter = os.path.join(path, "adapter_config.json")
    if os.path.lexists(adapter):
        data, _ = load_json(adapter)
        base = data.get("base_model_name_or_path") if isinstance(data, dict) else None
        if not (isinstance(base, str) and os.path.realpath(base) == os.path.realpath(path)):
            report.add(
                Finding(
                    "model.redirect",
                    ERROR,
                    f"adapter_config.json names another model to load (base_model_name_or_path {base!r})",
                    Where(key=key, file=adapter),
                    "with peft installed (the images pin it), transformers' from_pretrained loads that base model's "
                    "weights and applies this folder as an adapter: another model would be trained",
                    "remove adapter_config.json (merge the adapter into the weights first if it is wanted)",
                )
            )
            found = True
    tok = parsed.get("tokenizer_config.json")
    if isinstance(tok, dict):
        for name, value in tok.items():
            if name.endswith("_file") and value is not None:
                report.add(
                    Finding(
                        "model.redirect",
                        ERROR,
                        f"tokenizer_config.json sets {name}={value!r}",
                        Where(key=key, file=os.path.join(path, "tokenizer_config.json")),
                        "transformers passes it to the tokenizer in place of the folder's own file (a path read from "
                        "the worker's working directory or anywhere)",
                        f"remove the {name!r} entry",
                    )
                )
                found = True
    for index in INDEX_FILES:
        fp = os.path.join(path, index)
        if not os.path.isfile(fp):
            continue
        data, why = load_json(fp)
        wmap = data.get("weight_map") if isinstance(data, dict) else None
        if why or not isinstance(wmap, dict):
            report.add(
                Finding(
                    "model.bad-json",
                    ERROR,
                    f"{index} {why or 'has no weight_map object'}",
                    Where(key=key, file=fp),
                    "transformers cannot find the weight shards",
                    "restore the file from the model release",
                )
            )
            found = True
            continue
        bad = sorted(
            {
                str(v)
                for v in wmap.values()
                if not isinstance(v, str) or not v or "/" in v or "\\" in v or v in (".", "..")
            }
        )
        if bad:
            report.add(
                Finding(
                    "model.redirect",
                    ERROR,
                    f"{index} maps weights to paths, not files of the folder: "
                    + ", ".join(repr(b) for b in bad[:3])
                    + (f" and {len(bad) - 3} more" if len(bad) > 3 else ""),
                    Where(key=key, file=fp),
                    "transformers joins each name to the folder (an absolute or '..' path "
                    "leaves it) and loads those weights",
                    "list only the shard file names of the folder",
                )
            )
            found = True
    return found


def check_model_dir(path: str, report: Report, key: str = "actor_rollout_ref.model.path") -> dict[str, Any]:
    """Check the model folder at ``path``. Returns facts (model_type, max_position_embeddings, clean flag).

    ``clean`` is True when nothing in the folder would run code and config.json is usable -- only then do
    later checks load the tokenizer/processor from it.
    """
    info: dict[str, Any] = {"path": path, "clean": False}
    where = Where(key=key, file=path)
    if os.path.exists(path) and not os.path.isdir(path):
        report.add(
            Finding(
                "model.missing",
                ERROR,
                f"model path {path} is a file, not a model folder",
                where,
                "verl loads config.json, the tokenizer and the weights from a folder",
                f"point {key} at the folder that holds config.json",
            )
        )
        return info
    if not os.path.isdir(path):
        report.add(
            Finding(
                "model.missing",
                ERROR,
                f"model folder {path} does not exist",
                where,
                "verl copies/loads it in the task runner",
                f"mount the model at {path} or fix {key}",
            )
        )
        return info
    from vlgrpo.pathrule import check_tree

    problem = check_tree(path)
    if problem is not None:
        report.add(
            Finding(
                "model.untrusted",
                ERROR,
                f"the model folder is not safe from other users: {problem.text()}",
                Where(key=key, file=problem.path),
                "another user could add or change a file after this check looked (an auto_map and a .py file, "
                "which verl's reward loop runs without the patch reward.tokenizer_remote_code), or swap the weights; "
                "the one path rule (vlgrpo.pathrule): the folder, every entry in it and every folder above owned by "
                "root or the launching user, writable by no one else",
                f"{problem.fix} (for {key})",
            )
        )
    clean = problem is None
    parsed: dict[str, Any] = {}
    for fn in CODE_KEY_FILES:
        fp = os.path.join(path, fn)
        if not os.path.isfile(fp):
            continue
        data, why = load_json(fp)
        if not why and not isinstance(data, dict):
            why = f"holds a JSON {type(data).__name__}, not an object"
        if why:
            report.add(
                Finding(
                    "model.bad-json",
                    ERROR,
                    f"{fn} {why}",
                    Where(key=key, file=fp),
                    "transformers reads it as a mapping of settings and fails to load the folder",
                    "restore the file from the model release",
                )
            )
            clean = False
            continue
        parsed[fn] = data
        for hit in _find_key(data, "auto_map"):
            report.add(
                Finding(
                    "model.auto-map",
                    ERROR,
                    f"{fn} has an auto_map entry ({hit}): the folder asks to run its own code",
                    Where(key=key, file=fp),
                    "verl's reward loop loads the tokenizer with trust_remote_code forced on (unless the patch "
                    "reward.tokenizer_remote_code runs), so this code would run regardless of "
                    "data.trust_remote_code (verl reward_loop.py; cf. vLLM CVE-2026-4944)",
                    f"remove '{hit}' from {fn} (Qwen3-VL needs no remote code with transformers 4.57)",
                )
            )
            clean = False
    if _redirects(path, parsed, report, key):
        clean = False
    py_files = []
    for root, _dirs, files in os.walk(path):
        py_files += [os.path.relpath(os.path.join(root, f), path) for f in files if f.endswith(".py")]
    for rel in sorted(py_files):
        report.add(
            Finding(
                "model.python-file",
                ERROR,
                f"the model folder contains Python code: {rel}",
                Where(key=key, file=os.path.join(path, rel)),
                "with trust_remote_code forced on in verl's reward loop, an auto_map can import it",
                f"delete {rel} from the model folder",
            )
        )
        clean = False
    cfg_path = os.path.join(path, "config.json")
    config: dict[str, Any] = {}
    if not os.path.isfile(cfg_path):
        report.add(
            Finding(
                "model.no-config",
                ERROR,
                "config.json is missing",
                Where(key=key, file=path),
                "transformers cannot build the model config",
                "copy config.json from the model release",
            )
        )
        clean = False
    else:
        config = parsed.get("config.json", {})
        if "config.json" not in parsed:
            clean = False  # reported above (model.bad-json)
    model_type = config.get("model_type")
    info["model_type"] = model_type
    if config and model_type not in EXPECTED_MODEL_TYPES + ACCEPTED_MODEL_TYPES:
        report.add(
            Finding(
                "model.type",
                ERROR,
                f"config.json model_type is {model_type!r}; this recipe trains {EXPECTED_MODEL_TYPES[0]} "
                f"(Qwen3-VL-30B-A3B; {', '.join(ACCEPTED_MODEL_TYPES)} accepted for small test models)",
                Where(key=key, file=cfg_path),
                "the patches, VeOmni model and memory plan assume Qwen3-VL",
                "point actor_rollout_ref.model.path at a Qwen3-VL-30B-A3B-Instruct folder",
            )
        )
        clean = False
    text_cfg = config.get("text_config")
    if not isinstance(text_cfg, dict):
        text_cfg = {}
    info["max_position_embeddings"] = config.get("max_position_embeddings", text_cfg.get("max_position_embeddings"))
    info["is_vision_language"] = "vision_config" in config
    has_tok_cfg = os.path.isfile(os.path.join(path, "tokenizer_config.json"))
    has_vocab = os.path.isfile(os.path.join(path, "tokenizer.json")) or (
        os.path.isfile(os.path.join(path, "vocab.json")) and os.path.isfile(os.path.join(path, "merges.txt"))
    )
    if not (has_tok_cfg and has_vocab):
        missing = [
            n
            for n, ok in (
                ("tokenizer_config.json", has_tok_cfg),
                ("tokenizer.json or vocab.json+merges.txt", has_vocab),
            )
            if not ok
        ]
        report.add(
            Finding(
                "model.no-tokenizer",
                ERROR,
                "tokenizer files missing: " + ", ".join(missing),
                Where(key=key, file=path),
                "verl loads the tokenizer from the model folder",
                "copy the tokenizer files from the model release",
            )
        )
        clean = False
    if info["is_vision_language"] and not os.path.isfile(os.path.join(path, "preprocessor_config.json")):
        report.add(
            Finding(
                "model.no-processor",
                ERROR,
                "preprocessor_config.json is missing",
                Where(key=key, file=path),
                "verl's hf_processor returns None and images are not encoded",
                "copy preprocessor_config.json from the model release",
            )
        )
        clean = False
    has_template = os.path.isfile(os.path.join(path, "chat_template.json")) or os.path.isfile(
        os.path.join(path, "chat_template.jinja")
    )
    if not has_template and has_tok_cfg:
        has_template = bool(parsed.get("tokenizer_config.json", {}).get("chat_template"))
    if not has_template:
        report.add(
            Finding(
                "model.no-chat-template",
                WARNING,
                "no chat template in the model folder",
                Where(key=key, file=path),
                "verl applies the chat template to every prompt",
                "copy chat_template.json from the model release",
            )
        )
    info["clean"] = clean
    return info
