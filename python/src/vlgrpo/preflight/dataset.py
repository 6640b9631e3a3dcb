"""Data checks: parquet readable, the columns the config points at, and every row's prompt length.

Prompt lengths are counted the way verl 0.8.0 counts them when it filters overlong prompts
(``verl/utils/dataset/rl_dataset.py``: ``_build_messages`` -> ``processor.apply_chat_template`` ->
``qwen_vl_utils.process_vision_info`` (image pre-resize with ``data.image_patch_size``) -> processor), with
the model folder's real tokenizer, chat template and image processor.

Which processor is used:

1. ``transformers.AutoProcessor.from_pretrained(model, use_fast=True)`` -- what verl's ``hf_processor`` does.
   The Qwen3-VL processor needs torchvision (for its video processor); the training images have it.
2. Without torchvision (a CPU build host): the folder's tokenizer renders the same chat template, the folder's
   image processor (``AutoImageProcessor``, its own patch_size/merge_size/min/max pixels) gives each image's
   ``image_grid_thw``, and every ``<|image_pad|>`` is expanded to ``prod(grid_thw) // merge_size**2`` tokens,
   the rule of ``Qwen3VLProcessor.__call__`` (transformers 4.57.6 ``processing_qwen3_vl.py``).

Image pre-resize: ``qwen_vl_utils.fetch_image`` when qwen_vl_utils is importable (it needs torchvision), else
:func:`pre_resize_hw`, which implements the same rule (qwen-vl-utils 0.0.14 ``smart_resize``: nearest
multiple of ``2 x image_patch_size``, pixel count kept within [4, 16384] x factor**2).
"""

from __future__ import annotations

import io
import math
import os
import re
import sys
from typing import Any

from .report import ERROR, WARNING, Finding, Report, Where

PLACEHOLDER_RE = re.compile(r"(<image>|<video>|<audio>)")
#: qwen-vl-utils 0.0.14 ``vision_process.py`` defaults for a still image.
QWEN_VL_UTILS_MIN_TOKENS = 4
QWEN_VL_UTILS_MAX_TOKENS = 16384
QWEN_VL_UTILS_MAX_RATIO = 200
MAX_LISTED_ROWS = 20


def pre_resize_hw(height: int, width: int, image_patch_size: int) -> tuple[int, int]:
    """(height, width) after qwen-vl-utils' default image resize for ``image_patch_size``.

    Each side goes to the nearest multiple of ``factor = 2 * image_patch_size`` (at least ``factor``); if
    the area then exceeds ``16384 * factor**2`` both sides are scaled by ``sqrt(area / max)`` and floored to
    the factor, if it is below ``4 * factor**2`` they are scaled up and ceiled. Raises ValueError for an
    aspect ratio above 200 (as qwen-vl-utils does).
    """
    factor = 2 * image_patch_size
    max_pixels = QWEN_VL_UTILS_MAX_TOKENS * factor * factor
    min_pixels = QWEN_VL_UTILS_MIN_TOKENS * factor * factor
    if max(height, width) / min(height, width) > QWEN_VL_UTILS_MAX_RATIO:
        raise ValueError(f"aspect ratio {max(height, width) / min(height, width):.1f} exceeds 200")
    h = max(factor, round(height / factor) * factor)
    w = max(factor, round(width / factor) * factor)
    if h * w > max_pixels:
        scale = math.sqrt(height * width / max_pixels)
        h = math.floor(height / scale / factor) * factor
        w = math.floor(width / scale / factor) * factor
    elif h * w < min_pixels:
        scale = math.sqrt(min_pixels / (height * width))
        h = math.ceil(height * scale / factor) * factor
        w = math.ceil(width * scale / factor) * factor
    return h, w


class PromptCounter:
    """Count prompt tokens (text + image tokens) with a model folder's own tokenizer and processors.

    ``count(messages, images) -> (total_tokens, image_tokens)``; ``messages`` in verl's structured form
    (content lists with ``{"type": "image"}`` items), ``images`` PIL images in placeholder order.
    """

    def __init__(self, model_path: str, image_patch_size: int = 14, apply_chat_template_kwargs: dict | None = None,
                 tokenizer: Any = None, processor: Any = None, processor_tried: bool = False):
        self.image_patch_size = int(image_patch_size)
        self.kwargs = dict(apply_chat_template_kwargs or {})
        self.processor = processor
        self.tokenizer = tokenizer
        self.image_processor = None
        self.method = ""
        if self.processor is None and not processor_tried:  # verl's HFModelConfig may have tried already
            try:
                from transformers import AutoProcessor

                self.processor = AutoProcessor.from_pretrained(model_path, use_fast=True, trust_remote_code=False)
            except Exception as exc:  # noqa: BLE001 - e.g. torchvision missing for the video processor
                self.processor = None
                self.processor_error = " ".join(str(exc).split())[:200]
        if self.processor is not None and hasattr(self.processor, "image_processor"):
            self.tokenizer = self.processor.tokenizer
            self.image_processor = self.processor.image_processor
            self.method = f"{type(self.processor).__name__} (AutoProcessor, use_fast=True)"
        else:
            from transformers import AutoImageProcessor, AutoTokenizer

            self.processor = None
            if self.tokenizer is None:
                self.tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=False)
            try:
                self.image_processor = AutoImageProcessor.from_pretrained(
                    model_path, use_fast=False, trust_remote_code=False, **_pixel_bounds(model_path))
            except Exception:  # noqa: BLE001 - text-only model folder
                self.image_processor = None
            self.method = (f"{type(self.tokenizer).__name__} + {type(self.image_processor).__name__} "
                           "(no processor: torchvision missing; Qwen3VLProcessor's <|image_pad|> expansion rule)")
        self.image_pad_id = self.tokenizer.convert_tokens_to_ids("<|image_pad|>")
        try:
            import qwen_vl_utils  # noqa: F401

            self._fetch = qwen_vl_utils.fetch_image
            self.method += "; images pre-resized by qwen_vl_utils.fetch_image"
        except Exception:  # noqa: BLE001 - needs torchvision
            self._fetch = None
            self.method += "; images pre-resized by vlgrpo's qwen-vl-utils rule"

    @property
    def merge_size(self) -> int:
        return int(getattr(self.image_processor, "merge_size", 2))

    def pre_resize(self, image: Any) -> Any:
        """The image verl hands to the processor (RGB, pre-resized)."""
        if self._fetch is not None:
            return self._fetch({"image": image}, image_patch_size=self.image_patch_size)
        image = image.convert("RGB")
        h, w = pre_resize_hw(image.height, image.width, self.image_patch_size)
        return image.resize((w, h))

    def render(self, messages: list[dict]) -> str:
        owner = self.processor if self.processor is not None else self.tokenizer
        return owner.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **self.kwargs)

    def count(self, messages: list[dict], images: list[Any]) -> tuple[int, int]:
        raw = self.render(messages)
        if not images:
            return len(self.tokenizer(text=raw, add_special_tokens=False, return_attention_mask=False)["input_ids"]), 0
        prepared = [self.pre_resize(im) for im in images]
        if self.processor is not None:
            out = self.processor(text=[raw], images=prepared)
            grid = out["image_grid_thw"]
            image_tokens = int(sum(int(g[0]) * int(g[1]) * int(g[2]) for g in grid)) // self.merge_size ** 2
            return len(out["input_ids"][0]), image_tokens
        if self.image_processor is None:
            raise RuntimeError("the model folder has no image processor but the row has images")
        grid = self.image_processor(images=prepared)["image_grid_thw"]
        per_image = [int(g[0]) * int(g[1]) * int(g[2]) // self.merge_size ** 2 for g in grid]
        ids = self.tokenizer(text=raw, add_special_tokens=False, return_attention_mask=False)["input_ids"]
        pads = sum(1 for t in ids if t == self.image_pad_id)
        if pads != len(per_image):
            raise ValueError(f"chat template produced {pads} <|image_pad|> tokens for {len(per_image)} images")
        return len(ids) - pads + sum(per_image), sum(per_image)


def _pixel_bounds(model_path: str) -> dict[str, int]:
    """min_pixels/max_pixels from the folder's preprocessor_config.json ``size``.

    transformers 4.57.6's slow ``Qwen2VLImageProcessor.__init__`` replaces a valid ``size`` with its defaults
    (shortest 56*56, longest 28*28*1280 pixels) -- its ``else`` branch runs for any size -- while the fast
    processor verl uses (``use_fast=True``) keeps the folder's values (Qwen3-VL: 65536 .. 16777216). Passing
    the folder's bounds as min_pixels/max_pixels gives the slow processor the same numbers.
    """
    import json

    try:
        with open(os.path.join(model_path, "preprocessor_config.json"), encoding="utf-8") as fh:
            size = json.load(fh).get("size") or {}
    except (OSError, ValueError):
        return {}
    if "shortest_edge" in size and "longest_edge" in size:
        return {"min_pixels": int(size["shortest_edge"]), "max_pixels": int(size["longest_edge"])}
    return {}


def build_messages(prompt: Any, images: list[Any]) -> list[dict]:
    """verl's ``RLHFDataset._build_messages`` structure: split each string content on ``<image>``/``<video>``
    placeholders into ``{"type": "image"}``/``{"type": "text"}`` items. Raises ValueError when the number of
    ``<image>`` placeholders differs from the number of images (verl asserts the same)."""
    messages = [dict(m) for m in prompt]
    used = 0
    for msg in messages:
        content = msg.get("content")
        if not images or not isinstance(content, str):
            continue
        parts = []
        for seg in PLACEHOLDER_RE.split(content):
            if not seg:
                continue
            if seg == "<image>":
                if used >= len(images):
                    raise ValueError(f"more <image> placeholders than images ({len(images)})")
                parts.append({"type": "image", "image": images[used]})
                used += 1
            elif seg in ("<video>", "<audio>"):
                raise ValueError(f"{seg} placeholders are not supported by this recipe")
            else:
                parts.append({"type": "text", "text": seg})
        msg["content"] = parts
    if used != len(images):
        raise ValueError(f"{used} <image> placeholders for {len(images)} images")
    return messages


def _open_image(item: Any, base_dir: str) -> Any:
    from PIL import Image

    if isinstance(item, dict):
        if item.get("bytes") is not None:
            return Image.open(io.BytesIO(item["bytes"]))
        if item.get("path"):
            p = item["path"] if os.path.isabs(item["path"]) else os.path.join(base_dir, item["path"])
            return Image.open(p)
    raise ValueError(f"unsupported image entry {type(item).__name__}")


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


def _placeholders(prompt: Any) -> int:
    """Number of ``<image>`` placeholders in the string contents of a prompt (verl's message list)."""
    if not isinstance(prompt, list):
        return 0
    return sum(m.get("content").count("<image>") for m in prompt
               if isinstance(m, dict) and isinstance(m.get("content"), str))


#: file endings verl 0.8.0 ``RLHFDataset._read_files_and_tokenize`` accepts (anything else: ValueError).
VERL_DATA_SUFFIXES = (".parquet", ".json", ".jsonl")


def _expand(files: list[str], key: str, report: Report, loc: Any) -> list[str]:
    """The local parquet files to check for ``files`` (one setting's value), reporting the rest.

    verl 0.8.0 (``rl_dataset.py``) reads each entry with ``datasets.load_dataset("parquet"|"json",
    data_files=entry)`` when it ends in .parquet/.json/.jsonl and raises ValueError otherwise; ``datasets``
    expands glob patterns in ``data_files``, so ``/data/*.parquet`` is a valid entry. Remote entries
    (``hdfs://``, ``s3://`` ...) are downloaded by verl and cannot be checked here (warning).
    """
    import glob

    out: list[str] = []
    for path in files:
        where = loc.where(key, file=path)
        if "://" in path:
            report.add(Finding("data.not-checked", WARNING, f"{path} is remote; its rows are not checked here",
                               where, "verl downloads it in the trainer", "check a local copy with --argv-file"))
            continue
        if not path.endswith(VERL_DATA_SUFFIXES):
            what = "is a folder" if os.path.isdir(path) else "does not end in .parquet, .json or .jsonl"
            report.add(Finding("data.missing", ERROR, f"{path} {what}", where,
                               "verl's RLHFDataset raises 'Unsupported file format' for it in the trainer",
                               f"list the parquet files themselves in {key} (a glob such as dir/*.parquet works)"))
            continue
        if glob.has_magic(path):
            found = sorted(p for p in glob.glob(path) if os.path.isfile(p))
            if not found:
                report.add(Finding("data.missing", ERROR, f"{path} matches no file", where,
                                   "datasets.load_dataset raises FileNotFoundError in the trainer", f"fix {key}"))
            out += [p for p in found if p.endswith(".parquet")]
            continue
        if not os.path.isfile(path):
            report.add(Finding("data.missing", ERROR, f"{path} does not exist", where,
                               "verl's RLHFDataset fails to load it in the trainer", f"fix {key}"))
            continue
        if not path.endswith(".parquet"):
            report.add(Finding("data.not-checked", WARNING, f"{path} is JSON; preflight checks parquet rows only",
                               where, "verl reads it with datasets' json loader", "convert it to parquet to have it "
                               "checked"))
            continue
        out.append(path)
    return out


def reward_handles(data_source: str) -> tuple[bool, str]:
    """Does verl's ``default_compute_score`` handle ``data_source``? (handled, note)."""
    from verl.utils.reward_score import default_compute_score

    try:
        default_compute_score(data_source, "<think></think>\\boxed{0}", "0")
    except NotImplementedError as exc:
        return False, " ".join(str(exc).split())
    except ImportError as exc:
        return True, f"its scorer cannot be imported here: {exc}"
    except Exception:  # noqa: BLE001 - scoring a dummy answer may fail in other ways; the source is handled
        return True, ""
    return True, ""


def check_data(work: Any, report: Report, loc: Any, counter: PromptCounter | None, progress: bool = False,
               custom_reward: bool = False) -> dict[str, Any]:
    """Check ``data.train_files`` and ``data.val_files``; returns per-split summaries."""
    import pyarrow.parquet as pq

    data = work.data
    prompt_key = data.get("prompt_key", "prompt")
    image_key = data.get("image_key", "images")
    max_len = int(data.max_prompt_length)
    filtering = bool(data.get("filter_overlong_prompts", False))
    summary: dict[str, Any] = {}
    sources: dict[str, list[str]] = {}
    for split, key in (("train", "data.train_files"), ("val", "data.val_files")):
        files = _as_list(data.get(key.split(".", 1)[1]))
        info: dict[str, Any] = {"files": files, "rows": 0, "max_prompt_length": max_len, "over_budget": 0,
                                "image_rows": 0}
        summary[split] = info
        largest: dict[str, Any] = {}
        for path in _expand(files, key, report, loc):
            try:
                pf = pq.ParquetFile(path)
            except Exception as exc:  # noqa: BLE001
                report.add(Finding("data.unreadable", ERROR, f"pyarrow cannot read {path}: {exc}",
                                   loc.where(key, file=path), "verl loads it with datasets/pyarrow", "rewrite the file"))
                continue
            names = pf.schema_arrow.names
            missing = [c for c in (prompt_key, "data_source", "reward_model") if c not in names]
            if missing:
                report.add(Finding(
                    "data.columns", ERROR, f"columns missing: {missing} (has {names})", loc.where(key, file=path),
                    "verl reads data.prompt_key, data_source and reward_model.ground_truth from every row",
                    "convert the data with `python -m vlgrpo data geo3k SRC OUT`"))
                continue
            rm_type = pf.schema_arrow.field("reward_model").type
            if not (hasattr(rm_type, "names") and "ground_truth" in [f.name for f in rm_type]):
                report.add(Finding("data.columns", ERROR, "reward_model has no ground_truth field",
                                   loc.where(key, file=path), "the reward function compares against it",
                                   "write reward_model={'style': 'rule', 'ground_truth': ...}"))
            has_images = image_key in names
            placeholder_rows: list[int] = []  # rows with <image> in the prompt but no image to put there
            columns = [c for c in (prompt_key, image_key, "data_source") if c in names]
            over: list[tuple[int, int, int]] = []
            image_alone: list[tuple[int, int]] = []
            bad_rows: list[tuple[int, str]] = []
            row_index = 0
            bar = _progress(pf.metadata.num_rows, f"{split}: {os.path.basename(path)}", progress)
            base_dir = os.path.dirname(os.path.abspath(path))
            for batch in pf.iter_batches(batch_size=64, columns=columns):
                for row in batch.to_pylist():
                    idx = row_index
                    row_index += 1
                    bar.update(1)
                    sources.setdefault(str(row.get("data_source")), []).append(path)
                    if counter is None:
                        continue
                    try:
                        images = [_open_image(it, base_dir) for it in (row.get(image_key) or [])] if has_images else []
                        prompt = row[prompt_key]
                        if isinstance(prompt, str) or not isinstance(prompt, list):
                            raise ValueError("prompt must be a list of {role, content} messages")
                        if not images and _placeholders(prompt):
                            placeholder_rows.append(idx)
                            continue
                        messages = build_messages(prompt, images)
                        total, img_tokens = counter.count(messages, images)
                    except Exception as exc:  # noqa: BLE001
                        bad_rows.append((idx, " ".join(str(exc).split())[:160]))
                        continue
                    if images:
                        info["image_rows"] += 1
                        info["max_images"] = max(info.get("max_images", 0), len(images))
                    if not largest or total > largest["tokens"]:
                        largest = {"tokens": total, "image_tokens": img_tokens, "row": idx, "file": path}
                    if total > max_len:
                        over.append((idx, total, img_tokens))
                    if img_tokens > max_len:
                        image_alone.append((idx, img_tokens))
            bar.close()
            info["rows"] += row_index
            if row_index == 0:
                report.add(Finding(
                    "data.empty", ERROR, f"{path} has no rows", loc.where(key, file=path),
                    "verl builds an empty dataloader from it: training has no steps (validation no samples)",
                    "point the setting at the converted split (python -m vlgrpo data geo3k SRC OUT)"))
            if placeholder_rows:
                listed = ", ".join(str(i) for i in placeholder_rows[:MAX_LISTED_ROWS])
                more = f" (+{len(placeholder_rows) - MAX_LISTED_ROWS} more)" if len(placeholder_rows) > MAX_LISTED_ROWS else ""
                what = (f"column {image_key!r} (data.image_key) is missing" if not has_images else
                        f"{len(placeholder_rows)} row(s) have no image in column {image_key!r}")
                report.add(Finding(
                    "data.columns" if not has_images else "data.row", ERROR,
                    f"{what}, but their prompts carry <image> placeholders: rows {listed}{more}",
                    (loc.where("data.image_key", file=path, row=placeholder_rows[0]) if not has_images else
                     Where(key=key, file=path, row=placeholder_rows[0])),
                    "verl's RLHFDataset splits <image> into image slots only when the row has images; otherwise the "
                    "policy is trained on the literal text '<image>' and never sees the diagram",
                    f"set data.image_key to the images column, or reconvert the data so every such row has its image"))
            info["over_budget"] += len(over)
            where = loc.where(key, file=path)
            for idx, why in bad_rows[:MAX_LISTED_ROWS]:
                report.add(Finding("data.row", ERROR, f"row cannot be processed: {why}",
                                   Where(key=key, file=path, row=idx),
                                   "verl's dataset asserts on it or drops it", "fix or remove the row"))
            severity = WARNING if filtering else ERROR
            if image_alone:
                rows = ", ".join(f"row {i}: {n} image tokens" for i, n in image_alone[:MAX_LISTED_ROWS])
                report.add(Finding(
                    "data.image-exceeds-budget", severity,
                    f"{len(image_alone)} row(s) whose image tokens alone exceed max_prompt_length {max_len}: {rows}",
                    Where(position=where.position, override=where.override, key=key, file=path, row=image_alone[0][0]),
                    "no truncation can fit them: verl raises at rollout for image prompts (verl issue #4975)"
                    + (" -- with filtering on, verl drops them" if filtering else ""),
                    "downscale those images, drop the rows, or raise data.max_prompt_length"))
            if over:
                rows = ", ".join(f"row {i}: {n} tokens ({m} image)" for i, n, m in over[:MAX_LISTED_ROWS])
                more = f" (+{len(over) - MAX_LISTED_ROWS} more)" if len(over) > MAX_LISTED_ROWS else ""
                report.add(Finding(
                    "data.over-budget", severity,
                    f"{len(over)} row(s) longer than max_prompt_length {max_len}: {rows}{more}",
                    Where(position=where.position, override=where.override, key=key, file=path, row=over[0][0]),
                    ("data.filter_overlong_prompts=True: verl drops these rows before training" if filtering else
                     "data.filter_overlong_prompts is off, so these rows reach rollout and fail or get truncated"),
                    ("raise data.max_prompt_length (VLGRPO_MAX_PROMPT_LENGTH) or downscale the images to keep these rows"
                     if filtering else "data.filter_overlong_prompts=True, or raise data.max_prompt_length")))
        if largest:
            info["largest_prompt"] = largest
        if filtering and counter is not None and info["rows"] and info["over_budget"] == info["rows"]:
            report.add(Finding(
                "data.all-rows-dropped", ERROR,
                f"every {split} row ({info['rows']}) is longer than max_prompt_length {max_len}",
                loc.where("data.max_prompt_length"),
                "with data.filter_overlong_prompts=True verl drops them all and the dataloader is empty",
                f"raise data.max_prompt_length (largest prompt: {largest.get('tokens')} tokens)"))
    if not custom_reward:
        for ds, paths in sorted(sources.items()):
            handled, note = reward_handles(ds)
            if not handled:
                report.add(Finding(
                    "data.data-source", ERROR, f"data_source {ds!r} is not handled by verl's default_compute_score",
                    Where(key="data_source", file=paths[0]), note or "the reward loop raises NotImplementedError",
                    "use the data_source verl expects (geo3k: 'hiyouga/geometry3k') or set a custom reward function"))
            elif note:
                report.add(Finding(
                    "data.reward-import", WARNING, f"data_source {ds!r}: {note}", Where(key="data_source", file=paths[0]),
                    "the reward loop imports the scorer on the first batch",
                    "install it in the training image (geo3k's scorer needs mathruler)"))
    return summary


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _progress(total: int, desc: str, enabled: bool) -> Any:
    if not enabled:
        return _NoBar()
    try:
        from tqdm import tqdm

        return tqdm(total=total, desc=desc, file=sys.stderr, unit="row", mininterval=0.5, leave=False)
    except Exception:  # noqa: BLE001
        return _NoBar()
