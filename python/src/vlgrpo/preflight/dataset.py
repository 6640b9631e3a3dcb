"""Data checks: parquet readable, the columns the config points at, and every row's prompt length.

Prompt lengths are counted the way verl 0.8.0's rollout makes them (``verl/experimental/agent_loop/agent_loop.py``:
``AgentLoopBase.process_multi_modal_info`` pre-resizes each image with ``processor.image_processor.patch_size``,
``apply_chat_template`` renders the processor's chat template and calls the processor with
``data.mm_processor_kwargs``), with the model folder's real tokenizer, chat template and image processor. verl's
overlong filter (``verl/utils/dataset/rl_dataset.py::maybe_filter_out_long_prompts``) makes the same calls but
pre-resizes with ``data.image_patch_size`` (default 14; verl issue #6592): where the two differ, a row over the
limit is also counted the filter's way, to tell the rows verl drops from the rows it keeps and the rollout refuses.

Which processor is used:

1. ``transformers.AutoProcessor.from_pretrained(model, use_fast=True)`` -- what verl's ``hf_processor`` does.
   The Qwen3-VL processor needs torchvision (for its video processor); the training images have it.
2. Without torchvision (a CPU build host): the folder's tokenizer renders the processor's chat template
   (``chat_template.json``), the folder's image processor (``AutoImageProcessor``, its own patch_size/merge_size/
   min/max pixels) gives each image's ``image_grid_thw``, and every ``<|image_pad|>`` is expanded to
   ``prod(grid_thw) // merge_size**2`` tokens, the rule of ``Qwen3VLProcessor.__call__`` (transformers 4.57.6
   ``processing_qwen3_vl.py``). The report's ``token counts:`` line says which path counted.

Image pre-resize: ``qwen_vl_utils.fetch_image`` when qwen_vl_utils is importable (it needs torchvision), else
:func:`pre_resize_hw`, which implements the same rule (qwen-vl-utils 0.0.14 ``smart_resize``: nearest
multiple of ``2 x patch size``, pixel count kept within [4, 16384] x factor**2, or the image entry's own
``min_pixels``/``max_pixels``/``resized_height``+``resized_width``).
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


def pre_resize_hw(height: int, width: int, image_patch_size: int, min_pixels: int | None = None,
                  max_pixels: int | None = None) -> tuple[int, int]:
    """(height, width) after qwen-vl-utils' image resize for ``image_patch_size`` (qwen-vl-utils 0.0.14
    ``vision_process.py``: ``fetch_image`` -> ``smart_resize``).

    Each side goes to the nearest multiple of ``factor = 2 * image_patch_size`` (at least ``factor``); if
    the area then exceeds ``max_pixels`` (default ``16384 * factor**2``) both sides are scaled by
    ``sqrt(area / max)`` and floored to the factor, if it is below ``min_pixels`` (default ``4 * factor**2``)
    they are scaled up and ceiled. Raises ValueError for an aspect ratio above 200 (as qwen-vl-utils does).
    """
    factor = 2 * image_patch_size
    max_pixels = QWEN_VL_UTILS_MAX_TOKENS * factor * factor if max_pixels is None else int(max_pixels)
    min_pixels = QWEN_VL_UTILS_MIN_TOKENS * factor * factor if min_pixels is None else int(min_pixels)
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


#: the patch size verl 0.8.0's agent loop falls back to when the processor has none
#: (``getattr(getattr(processor, "image_processor", None), "patch_size", 14)`` in ``agent_loop.py``)
AGENT_LOOP_DEFAULT_PATCH = 14


def load_image_processor(model_path: str, processor: Any = None) -> Any:
    """The image processor the rollout uses: ``processor.image_processor`` when verl's processor loaded, else the
    folder's ``AutoImageProcessor`` (slow class, with the folder's pixel bounds, see :func:`_pixel_bounds`).
    None for a folder without one (a text-only model)."""
    if processor is not None and getattr(processor, "image_processor", None) is not None:
        return processor.image_processor
    from transformers import AutoImageProcessor

    try:
        return AutoImageProcessor.from_pretrained(model_path, use_fast=False, trust_remote_code=False,
                                                  **_pixel_bounds(model_path))
    except Exception:  # noqa: BLE001 - text-only model folder
        return None


def rollout_patch_size(image_processor: Any) -> int:
    """The patch size verl 0.8.0's agent loop pre-resizes images with: the image processor's ``patch_size``."""
    return int(getattr(image_processor, "patch_size", AGENT_LOOP_DEFAULT_PATCH) or AGENT_LOOP_DEFAULT_PATCH)


class PromptCounter:
    """Count prompt tokens (text + image tokens) as verl's rollout makes them, with a model folder's own tokenizer,
    chat template and processors.

    ``count(messages, images, items) -> (total_tokens, image_tokens)`` with the images pre-resized by the processor's
    patch size (the agent loop's rule); ``count_filter(...)`` the same with ``filter_patch_size`` (verl's overlong
    filter: ``data.image_patch_size``). ``messages`` in verl's structured form (content lists with
    ``{"type": "image"}`` items), ``images`` PIL images in placeholder order, ``items`` the rows' image entries
    (dicts; their ``min_pixels``/``max_pixels``/``resized_height``/``resized_width`` reach qwen-vl-utils).
    """

    def __init__(self, model_path: str, filter_patch_size: int | None = AGENT_LOOP_DEFAULT_PATCH,
                 apply_chat_template_kwargs: dict | None = None, mm_processor_kwargs: dict | None = None,
                 tokenizer: Any = None, processor: Any = None, processor_tried: bool = False,
                 image_processor: Any = None):
        self.kwargs = dict(apply_chat_template_kwargs or {})
        self.mm_kwargs = dict(mm_processor_kwargs or {})
        self.processor = processor
        self.tokenizer = tokenizer
        self.image_processor = image_processor
        self.chat_template = None
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
            from transformers import AutoTokenizer

            self.processor = None
            if self.tokenizer is None:
                self.tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=False)
            if self.image_processor is None:
                self.image_processor = load_image_processor(model_path)
            self.chat_template = _processor_chat_template(model_path)
            self.method = (f"{type(self.tokenizer).__name__} + {type(self.image_processor).__name__} "
                           "(no processor: torchvision missing; Qwen3VLProcessor's <|image_pad|> expansion rule)")
        self.patch_size = rollout_patch_size(self.image_processor)
        self.filter_patch_size = filter_patch_size
        self.image_pad_id = self.tokenizer.convert_tokens_to_ids("<|image_pad|>")
        try:
            import qwen_vl_utils  # noqa: F401

            self._fetch = qwen_vl_utils.fetch_image
            self.method += "; images pre-resized by qwen_vl_utils.fetch_image"
        except Exception:  # noqa: BLE001 - needs torchvision
            self._fetch = None
            self.method += "; images pre-resized by vlgrpo's qwen-vl-utils rule"
        self.method += (f" with the processor's patch size {self.patch_size}, as verl's agent loop does"
                        if self.image_processor is not None else "")

    @property
    def merge_size(self) -> int:
        return int(getattr(self.image_processor, "merge_size", 2))

    def pre_resize(self, image: Any, item: dict | None = None, patch_size: int | None = None) -> Any:
        """The image verl hands to the processor (RGB, pre-resized with ``patch_size``, default the processor's)."""
        patch = self.patch_size if patch_size is None else patch_size
        item = item if isinstance(item, dict) else {}
        if self._fetch is not None:
            return self._fetch({**{k: v for k, v in item.items() if k in _ITEM_KEYS}, "image": image},
                               image_patch_size=patch)
        image = image.convert("RGB")
        if "resized_height" in item and "resized_width" in item:
            h, w = pre_resize_hw(int(item["resized_height"]), int(item["resized_width"]), patch)
        else:
            h, w = pre_resize_hw(image.height, image.width, patch, item.get("min_pixels"), item.get("max_pixels"))
        return image.resize((w, h))

    def render(self, messages: list[dict]) -> str:
        if self.processor is not None:
            return self.processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False,
                                                      **self.kwargs)
        extra = {"chat_template": self.chat_template} if self.chat_template else {}
        return self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False,
                                                  **{**extra, **self.kwargs})

    def count(self, messages: list[dict], images: list[Any], items: list[Any] | None = None) -> tuple[int, int]:
        """(prompt tokens, image tokens) of the prompt the rollout builds."""
        return self._count(messages, images, items, self.patch_size)

    def count_filter(self, messages: list[dict], images: list[Any], items: list[Any] | None = None
                     ) -> tuple[int, int]:
        """(prompt tokens, image tokens) as verl's overlong filter estimates them (``data.image_patch_size``)."""
        if self.filter_patch_size == self.patch_size or not images:
            return self.count(messages, images, items)
        if not isinstance(self.filter_patch_size, int) or self.filter_patch_size < 1:
            raise ValueError(f"data.image_patch_size={self.filter_patch_size!r}: qwen-vl-utils cannot pre-resize")
        return self._count(messages, images, items, self.filter_patch_size)

    def _count(self, messages: list[dict], images: list[Any], items: list[Any] | None, patch: int
               ) -> tuple[int, int]:
        raw = self.render(messages)
        if not images:
            return len(self.tokenizer(text=raw, add_special_tokens=False, return_attention_mask=False)["input_ids"]), 0
        items = list(items or [None] * len(images))
        prepared = [self.pre_resize(im, it, patch) for im, it in zip(images, items)]
        if self.processor is not None:
            out = self.processor(text=[raw], images=prepared, **self.mm_kwargs)
            grid = out["image_grid_thw"]
            image_tokens = int(sum(int(g[0]) * int(g[1]) * int(g[2]) for g in grid)) // self.merge_size ** 2
            return len(out["input_ids"][0]), image_tokens
        if self.image_processor is None:
            raise RuntimeError("the model folder has no image processor but the row has images")
        grid = self.image_processor(images=prepared, **self.mm_kwargs)["image_grid_thw"]
        per_image = [int(g[0]) * int(g[1]) * int(g[2]) // self.merge_size ** 2 for g in grid]
        ids = self.tokenizer(text=raw, add_special_tokens=False, return_attention_mask=False)["input_ids"]
        pads = sum(1 for t in ids if t == self.image_pad_id)
        if pads != len(per_image):
            raise ValueError(f"chat template produced {pads} <|image_pad|> tokens for {len(per_image)} images")
        return len(ids) - pads + sum(per_image), sum(per_image)


#: keys of a row's image entry that qwen-vl-utils 0.0.14 ``fetch_image`` reads besides the image itself
_ITEM_KEYS = ("min_pixels", "max_pixels", "resized_height", "resized_width")


def _processor_chat_template(model_path: str) -> str | None:
    """The processor's chat template (``chat_template.json`` / ``chat_template.jinja`` of the folder), which
    ``Qwen3VLProcessor.apply_chat_template`` renders; None when the folder has neither (the tokenizer's is used)."""
    import json

    jinja = os.path.join(model_path, "chat_template.jinja")
    try:
        if os.path.isfile(jinja):
            with open(jinja, encoding="utf-8") as fh:
                return fh.read()
        with open(os.path.join(model_path, "chat_template.json"), encoding="utf-8") as fh:
            return json.load(fh).get("chat_template")
    except (OSError, ValueError):
        return None


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
    # the agent loop refuses an image prompt longer than rollout.prompt_length (default data.max_prompt_length)
    r_len = work.actor_rollout_ref.rollout.get("prompt_length")
    rollout_len = r_len if isinstance(r_len, int) and not isinstance(r_len, bool) else max_len
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
            kept_overlong: list[tuple[int, int, int, int]] = []  # (row, rollout tokens, image tokens, filter's count)
            dropped_fitting: list[tuple[int, int, int]] = []  # (row, rollout tokens, filter's count)
            dropped = 0
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
                        items = list(row.get(image_key) or []) if has_images else []
                        images = [_open_image(it, base_dir) for it in items]
                        prompt = row[prompt_key]
                        if isinstance(prompt, str) or not isinstance(prompt, list):
                            raise ValueError("prompt must be a list of {role, content} messages")
                        if not images and _placeholders(prompt):
                            placeholder_rows.append(idx)
                            continue
                        messages = build_messages(prompt, images)
                        total, img_tokens = counter.count(messages, images, items)
                        estimate = total
                        if filtering and images and counter.filter_patch_size != counter.patch_size:
                            try:
                                estimate = counter.count_filter(messages, images, items)[0]
                            except Exception:  # noqa: BLE001 - verl's doc2len counts a failing row as max + 1
                                estimate = max_len + 1
                    except Exception as exc:  # noqa: BLE001
                        bad_rows.append((idx, " ".join(str(exc).split())[:160]))
                        continue
                    if images:
                        info["image_rows"] += 1
                        info["max_images"] = max(info.get("max_images", 0), len(images))
                    if not largest or total > largest["tokens"]:
                        largest = {"tokens": total, "image_tokens": img_tokens, "row": idx, "file": path}
                    kept = not filtering or estimate <= max_len
                    dropped += not kept
                    if kept and images and total > rollout_len and (filtering or total <= max_len):
                        kept_overlong.append((idx, total, img_tokens, estimate))
                    elif total > max_len:
                        over.append((idx, total, img_tokens))
                    elif not kept:
                        dropped_fitting.append((idx, total, estimate))
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
            info["over_budget"] += len(over) + sum(1 for r in kept_overlong if r[1] > max_len)
            info["rollout_overlong"] = info.get("rollout_overlong", 0) + len(kept_overlong)
            info["dropped_by_filter"] = info.get("dropped_by_filter", 0) + dropped
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
            if kept_overlong:
                report.add(_kept_overlong_finding(kept_overlong, counter, filtering, max_len, rollout_len,
                                                  Where(position=where.position, override=where.override, key=key,
                                                        file=path, row=kept_overlong[0][0])))
            if dropped_fitting:
                rows = ", ".join(f"row {i}: {n} tokens in the rollout, {e} by verl's filter"
                                 for i, n, e in dropped_fitting[:MAX_LISTED_ROWS])
                more = f" (+{len(dropped_fitting) - MAX_LISTED_ROWS} more)" if len(dropped_fitting) > MAX_LISTED_ROWS else ""
                report.add(Finding(
                    "data.filter-drops-fitting", WARNING,
                    f"verl's overlong filter drops {len(dropped_fitting)} row(s) that fit max_prompt_length {max_len} "
                    f"in the rollout: {rows}{more}",
                    Where(position=where.position, override=where.override, key=key, file=path,
                          row=dropped_fitting[0][0]),
                    f"the filter pre-resizes images with data.image_patch_size={counter.filter_patch_size}, the "
                    f"rollout with the processor's {counter.patch_size}, so it over-counts these (verl issue #6592)",
                    f"data.image_patch_size={counter.patch_size}"))
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
        if filtering and counter is not None and info["rows"] and info.get("dropped_by_filter") == info["rows"]:
            report.add(Finding(
                "data.all-rows-dropped", ERROR,
                f"verl's overlong filter drops every {split} row ({info['rows']}): each is longer than "
                f"max_prompt_length {max_len} by its count",
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


def _kept_overlong_finding(rows: list[tuple[int, int, int, int]], counter: PromptCounter, filtering: bool,
                           max_len: int, rollout_len: int, where: Where) -> Finding:
    """``data.rollout-overlong``: rows verl keeps (its filter's count fits, or filtering is off) whose prompt, as
    the rollout builds it, is longer than ``rollout.prompt_length``; the agent loop raises on each of them."""
    limit = (f"max_prompt_length {max_len}" if rollout_len == max_len else
             f"actor_rollout_ref.rollout.prompt_length {rollout_len}")
    mismatch = filtering and counter.filter_patch_size != counter.patch_size

    def one(i: int, n: int, m: int, est: int) -> str:
        text = f"row {i}: {n} tokens ({m} image) in the rollout"
        if mismatch:
            text += f", {est} by verl's filter"
        return text

    listed = ", ".join(one(*r) for r in rows[:MAX_LISTED_ROWS])
    more = f" (+{len(rows) - MAX_LISTED_ROWS} more)" if len(rows) > MAX_LISTED_ROWS else ""
    if mismatch:
        what = (f"{len(rows)} row(s) pass verl's overlong filter but are longer than {limit} in the rollout: "
                f"{listed}{more}; the filter pre-resizes images with data.image_patch_size="
                f"{counter.filter_patch_size}, the rollout with the processor's patch size {counter.patch_size}")
        fix = (f"data.image_patch_size={counter.patch_size} (the processor's) so verl's filter drops them, or raise "
               f"data.max_prompt_length to at least {max(r[1] for r in rows)}")
    elif filtering:
        what = (f"{len(rows)} row(s) fit data.max_prompt_length {max_len} (verl's filter keeps them) but are longer "
                f"than {limit}: {listed}{more}")
        fix = f"actor_rollout_ref.rollout.prompt_length >= {max(r[1] for r in rows)}, or drop the override"
    else:
        what = f"{len(rows)} row(s) are longer than {limit}: {listed}{more}"
        fix = f"actor_rollout_ref.rollout.prompt_length >= {max(r[1] for r in rows)}, or drop the override"
    return Finding(
        "data.rollout-overlong", ERROR, what, where,
        "verl's agent loop (verl 0.8.0 agent_loop.py apply_chat_template) raises 'Multimodal prompt produced N "
        "tokens, exceeding rollout.prompt_length' on such a row, after Ray placed the workers (verl issue #6592)",
        fix)


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
