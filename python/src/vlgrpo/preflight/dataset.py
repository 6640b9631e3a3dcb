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
from collections.abc import Callable
from typing import Any

from .report import ERROR, WARNING, Finding, Report, Where

PLACEHOLDER_RE = re.compile(r"(<image>|<video>|<audio>)")
#: qwen-vl-utils 0.0.14 ``vision_process.py`` defaults for a still image.
QWEN_VL_UTILS_MIN_TOKENS = 4
QWEN_VL_UTILS_MAX_TOKENS = 16384
QWEN_VL_UTILS_MAX_RATIO = 200
MAX_LISTED_ROWS = 20
#: one row's count record (:func:`count_row`): ``[kind, data_source, ...]``
Record = list[Any]
#: the image processor's size rule: ``(its module's smart_resize, factor, patch size, min_pixels, max_pixels)``
_GridRule = tuple[Callable[..., tuple[int, int]], int, int, int, int]


def pre_resize_hw(
    height: int, width: int, image_patch_size: int, min_pixels: int | None = None, max_pixels: int | None = None
) -> tuple[int, int]:
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
        return AutoImageProcessor.from_pretrained(
            model_path, use_fast=False, trust_remote_code=False, **_pixel_bounds(model_path)
        )
    except Exception:  # text-only model folder
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

    #: set by :meth:`_grid_rule` on first use (absent until then)
    _grid_rule_state: _GridRule | None

    def __init__(
        self,
        model_path: str,
        filter_patch_size: int | None = AGENT_LOOP_DEFAULT_PATCH,
        apply_chat_template_kwargs: dict[str, Any] | None = None,
        mm_processor_kwargs: dict[str, Any] | None = None,
        tokenizer: Any = None,
        processor: Any = None,
        processor_tried: bool = False,
        image_processor: Any = None,
    ):
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
            except Exception as exc:  # e.g. torchvision missing for the video processor
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
            self.method = (
                f"{type(self.tokenizer).__name__} + {type(self.image_processor).__name__} "
                "(no processor: torchvision missing; Qwen3VLProcessor's <|image_pad|> expansion rule)"
            )
        self.patch_size = rollout_patch_size(self.image_processor)
        self.filter_patch_size = filter_patch_size
        self.image_pad_id = self.tokenizer.convert_tokens_to_ids("<|image_pad|>")
        try:
            import qwen_vl_utils  # noqa: F401

            self._fetch = qwen_vl_utils.fetch_image
            self.method += "; images pre-resized by qwen_vl_utils.fetch_image"
        except Exception:  # needs torchvision
            self._fetch = None
            self.method += "; images pre-resized by vlgrpo's qwen-vl-utils rule"
        self.method += (
            f" with the processor's patch size {self.patch_size}, as verl's agent loop does"
            if self.image_processor is not None
            else ""
        )

    @property
    def merge_size(self) -> int:
        return int(getattr(self.image_processor, "merge_size", 2))

    def pre_resize(self, image: Any, item: dict[str, Any] | None = None, patch_size: int | None = None) -> Any:
        """The image verl hands to the processor (RGB, pre-resized with ``patch_size``, default the processor's)."""
        patch = self.patch_size if patch_size is None else patch_size
        item = item if isinstance(item, dict) else {}
        if self._fetch is not None:
            return self._fetch(
                {**{k: v for k, v in item.items() if k in _ITEM_KEYS}, "image": image}, image_patch_size=patch
            )
        image = image.convert("RGB")
        if "resized_height" in item and "resized_width" in item:
            h, w = pre_resize_hw(int(item["resized_height"]), int(item["resized_width"]), patch)
        else:
            h, w = pre_resize_hw(image.height, image.width, patch, item.get("min_pixels"), item.get("max_pixels"))
        return image.resize((w, h))

    def render(self, messages: list[dict[str, Any]]) -> str:
        if self.processor is not None:
            return str(
                self.processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **self.kwargs)
            )
        extra = {"chat_template": self.chat_template} if self.chat_template else {}
        return str(
            self.tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=False, **{**extra, **self.kwargs}
            )
        )

    def count(
        self, messages: list[dict[str, Any]], images: list[Any], items: list[Any] | None = None
    ) -> tuple[int, int]:
        """(prompt tokens, image tokens) of the prompt the rollout builds."""
        return self._count(messages, images, items, self.patch_size)

    def count_filter(
        self, messages: list[dict[str, Any]], images: list[Any], items: list[Any] | None = None
    ) -> tuple[int, int]:
        """(prompt tokens, image tokens) as verl's overlong filter estimates them (``data.image_patch_size``)."""
        if self.filter_patch_size == self.patch_size or not images:
            return self.count(messages, images, items)
        if not isinstance(self.filter_patch_size, int) or self.filter_patch_size < 1:
            raise ValueError(f"data.image_patch_size={self.filter_patch_size!r}: qwen-vl-utils cannot pre-resize")
        return self._count(messages, images, items, self.filter_patch_size)

    def _count(
        self, messages: list[dict[str, Any]], images: list[Any], items: list[Any] | None, patch: int
    ) -> tuple[int, int]:
        raw = self.render(messages)
        if not images:
            return len(self.tokenizer(text=raw, add_special_tokens=False, return_attention_mask=False)["input_ids"]), 0
        items = list(items or [None] * len(images))
        prepared = [self.pre_resize(im, it, patch) for im, it in zip(images, items)]
        if self.processor is not None:
            out = self.processor(text=[raw], images=prepared, **self.mm_kwargs)
            grid = out["image_grid_thw"]
            image_tokens = int(sum(int(g[0]) * int(g[1]) * int(g[2]) for g in grid)) // self.merge_size**2
            return len(out["input_ids"][0]), image_tokens
        if self.image_processor is None:
            raise RuntimeError("the model folder has no image processor but the row has images")
        grid = self.image_processor(images=prepared, **self.mm_kwargs)["image_grid_thw"]
        per_image = [int(g[0]) * int(g[1]) * int(g[2]) // self.merge_size**2 for g in grid]
        ids = self.tokenizer(text=raw, add_special_tokens=False, return_attention_mask=False)["input_ids"]
        pads = sum(1 for t in ids if t == self.image_pad_id)
        if pads != len(per_image):
            raise ValueError(f"chat template produced {pads} <|image_pad|> tokens for {len(per_image)} images")
        return len(ids) - pads + sum(per_image), sum(per_image)

    # --- size-only counting (the cold count's fast path) -----------------------------------------------------

    def image_tokens_for_size(self, height: int, width: int) -> int:
        """Image tokens of one image already pre-resized to ``height`` x ``width`` pixels.

        The processor's grid depends only on the image's size (transformers 4.57.6 ``Qwen2VLImageProcessor`` /
        ``...Fast``: ``smart_resize`` of height and width to multiples of ``patch_size * merge_size`` within the
        pixel bounds), so it is computed from the size, memoised per size:

        - by the image processor's own module function ``smart_resize`` with its factor and the bounds the call
          uses (``mm_processor_kwargs`` ``min_pixels``/``max_pixels``/``size``, else the processor's
          ``min_pixels``/``max_pixels``, else its ``size``), checked against the processor itself
          (``image_grid_thw`` of a blank image of that size) on the first :data:`GRID_PROBES` sizes and on the
          first half as many below the lower and above the upper bound; one difference, a kwarg the rule does not
          know, or no ``smart_resize`` in the module, and every size is taken from the processor call instead.
        """
        key = (height, width)
        memo: dict[tuple[int, int], int] = self.__dict__.setdefault("_grid_memo", {})
        if key in memo:
            return memo[key]
        if self.image_processor is None:
            raise RuntimeError("the model folder has no image processor but the row has images")
        rule = self._grid_rule()
        tokens = None
        if rule is not None:
            smart_resize, factor, patch, lo, hi = rule
            rh, rw = smart_resize(height, width, factor, min_pixels=lo, max_pixels=hi)
            tokens = (rh // patch) * (rw // patch) // self.merge_size**2
            probes = self.__dict__.setdefault("_grid_probes", {"first": 0, "below": 0, "above": 0})
            branch = "below" if height * width < lo else "above" if height * width > hi else "first"
            if probes["first"] < GRID_PROBES or probes[branch] < GRID_PROBES // 2:
                probes["first" if probes["first"] < GRID_PROBES else branch] += 1
                if self._processor_grid(height, width) != tokens:
                    self._grid_rule_state = None  # the rule does not match this processor: ask it for every size
                    memo.clear()
                    tokens = None
        if tokens is None:
            tokens = self._processor_grid(height, width)
        memo[key] = tokens
        return tokens

    def _processor_grid(self, height: int, width: int) -> int:
        from PIL import Image

        grid = self.image_processor(images=[Image.new("RGB", (width, height))], **self.mm_kwargs)["image_grid_thw"]
        return int(grid[0][0]) * int(grid[0][1]) * int(grid[0][2]) // self.merge_size**2

    def _grid_rule(self) -> _GridRule | None:
        if "_grid_rule_state" not in self.__dict__:
            ip = self.image_processor
            state: _GridRule | None = None
            module = sys.modules.get(type(ip).__module__)
            fn = getattr(module, "smart_resize", None)
            patch, merge = getattr(ip, "patch_size", None), getattr(ip, "merge_size", None)
            size = dict(self.mm_kwargs.get("size") or getattr(ip, "size", None) or {})
            lo = self.mm_kwargs.get("min_pixels", getattr(ip, "min_pixels", None) or size.get("shortest_edge"))
            hi = self.mm_kwargs.get("max_pixels", getattr(ip, "max_pixels", None) or size.get("longest_edge"))
            if "size" in self.mm_kwargs:
                lo, hi = size.get("shortest_edge"), size.get("longest_edge")
            known = set(self.mm_kwargs) <= {"min_pixels", "max_pixels", "size"}
            if (
                callable(fn)
                and known
                and isinstance(patch, int)
                and isinstance(merge, int)
                and isinstance(lo, int)
                and isinstance(hi, int)
                and min(patch, merge, lo, hi) > 0
            ):
                state = (fn, patch * merge, patch, lo, hi)
            self._grid_rule_state = state
        return self._grid_rule_state

    def pre_resize_size(self, height: int, width: int, item: dict[str, Any] | None, patch: int) -> tuple[int, int]:
        """(height, width) :meth:`pre_resize` gives an image of ``height`` x ``width`` (qwen-vl-utils' size rule,
        :func:`pre_resize_hw`, with the entry's ``resized_height``/``resized_width`` or pixel bounds)."""
        item = item if isinstance(item, dict) else {}
        if "resized_height" in item and "resized_width" in item:
            return pre_resize_hw(int(item["resized_height"]), int(item["resized_width"]), patch)
        return pre_resize_hw(height, width, patch, item.get("min_pixels"), item.get("max_pixels"))

    def count_sizes(
        self,
        messages: list[dict[str, Any]],
        sizes: list[tuple[int, int]],
        items: list[Any] | None,
        patch: int | None = None,
    ) -> tuple[int, int]:
        """:meth:`count` (``patch`` None) or :meth:`count_filter`'s per-patch count from the images' (height, width)
        alone: the rendered template tokenized once, each ``<|image_pad|>`` expanded to the image's tokens
        (``Qwen3VLProcessor.__call__``'s rule, transformers 4.57.6 ``processing_qwen3_vl.py``)."""
        patch = self.patch_size if patch is None else patch
        raw = self.render(messages)
        ids = self.tokenizer(text=raw, add_special_tokens=False, return_attention_mask=False)["input_ids"]
        if not sizes:
            return len(ids), 0
        items = list(items or [None] * len(sizes))
        per_image = [
            self.image_tokens_for_size(*self.pre_resize_size(h, w, it, patch)) for (h, w), it in zip(sizes, items)
        ]
        pads = sum(1 for t in ids if t == self.image_pad_id)
        if pads != len(per_image):
            raise ValueError(f"chat template produced {pads} <|image_pad|> tokens for {len(per_image)} images")
        return len(ids) - pads + sum(per_image), sum(per_image)

    def fingerprint(self, model_path: str, extra: dict[str, Any] | None = None) -> str:
        """Hex SHA-256 of everything a row's count depends on besides the row: the model folder's non-weight files
        (tokenizer, chat template, processor configs), the counting path, the tokenizer/processor classes and
        their settings (pixel bounds, patch and merge sizes), ``mm_processor_kwargs``, the chat-template kwargs,
        both patch sizes, the library versions that count (transformers, tokenizers, Pillow, qwen-vl-utils) and
        this module's source (the counting code's version); plus ``extra`` (the data check's own settings)."""
        import hashlib
        import json
        from importlib.metadata import PackageNotFoundError, version

        h = hashlib.sha256()
        try:
            names = sorted(os.listdir(model_path))
        except OSError:
            names = []
        for name in names:
            full = os.path.join(model_path, name)
            if name.endswith(_WEIGHT_SUFFIXES) or not os.path.isfile(full) or os.path.getsize(full) > 64 << 20:
                continue
            from .count_cache import file_sha256

            h.update(f"file {name} {file_sha256(full)}\n".encode())
        versions: dict[str, str | None] = {}
        for dist in ("transformers", "tokenizers", "pillow", "qwen-vl-utils"):
            try:
                versions[dist] = version(dist)
            except PackageNotFoundError:
                versions[dist] = None
        ip = self.image_processor
        ip_state = ip.to_dict() if hasattr(ip, "to_dict") else None
        with open(__file__, "rb") as fh:
            source = hashlib.sha256(fh.read()).hexdigest()
        state = {
            "count_version": COUNT_VERSION,
            "source": source,
            "method": self.method,
            "versions": versions,
            "tokenizer": type(self.tokenizer).__name__,
            "vocab": len(self.tokenizer),
            "processor": type(self.processor).__name__ if self.processor is not None else None,
            "image_processor": type(ip).__name__ if ip is not None else None,
            "image_processor_state": ip_state,
            "chat_template": getattr(self.processor, "chat_template", None) or self.chat_template,
            "patch_size": self.patch_size,
            "filter_patch_size": self.filter_patch_size,
            "merge_size": self.merge_size if ip is not None else None,
            "mm_processor_kwargs": self.mm_kwargs,
            "apply_chat_template_kwargs": self.kwargs,
            "extra": extra or {},
        }
        h.update(json.dumps(state, sort_keys=True, default=repr).encode())
        return h.hexdigest()


#: sizes whose grid by ``smart_resize`` is checked against the image processor's own call, per counter
GRID_PROBES = 8
#: bump when the counting rules change in a way the source hash would not show (e.g. a data file they read)
COUNT_VERSION = 1
#: model-folder files the fingerprint skips (weights: large, and no count depends on them)
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack", ".onnx", ".ckpt")


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
            template = json.load(fh).get("chat_template")
        return template if isinstance(template, str) else None
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


def build_messages(prompt: Any, images: list[Any]) -> list[dict[str, Any]]:
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
        # the field verl hands qwen-vl-utils (image, else image_url) wins over path, as in the trainer; what is not a
        # local file there is refused by the data-media check (media.image-source)
        src = item.get("image") if isinstance(item.get("image"), str) else item.get("image_url")
        if isinstance(src, str) and src:
            local = src[7:] if src.startswith("file://") else src
            if os.path.isabs(local) and os.path.isfile(local):
                return Image.open(local)
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
    return sum(
        m["content"].count("<image>") for m in prompt if isinstance(m, dict) and isinstance(m.get("content"), str)
    )


#: file endings verl 0.8.0 ``RLHFDataset._read_files_and_tokenize`` accepts (anything else: ValueError).
VERL_DATA_SUFFIXES = (".parquet", ".json", ".jsonl")


def _trusted(path: str, key: str, report: Report, loc: Any) -> bool:
    """Whether data file ``path`` passes the one path rule (:func:`vlgrpo.pathrule.check_path`: it and every folder
    above it owned by root or the launching user, writable by no one else); ``data.untrusted`` when it does not."""
    from vlgrpo.pathrule import check_path

    problem = check_path(path, kind="file")
    if problem is None:
        return True
    report.add(
        Finding(
            "data.untrusted",
            ERROR,
            f"the data file is not safe from other users: {problem.text()}",
            loc.where(key, file=path),
            "another user could change or swap the rows the run trains and validates on after this check read them",
            f"{problem.fix} (for {key})",
        )
    )
    return False


def _expand(files: list[str], key: str, report: Report, loc: Any) -> list[str]:
    """The local parquet files to check for ``files`` (one setting's value), reporting the rest.

    verl 0.8.0 (``rl_dataset.py``) reads each entry with ``datasets.load_dataset("parquet"|"json",
    data_files=entry)`` when it ends in .parquet/.json/.jsonl and raises ValueError otherwise; ``datasets``
    expands glob patterns in ``data_files``, so ``/data/*.parquet`` is a valid entry. Remote entries
    (``hdfs://``, ``s3://`` ...) are downloaded by verl and cannot be checked here (warning). A local file must pass
    the one path rule (:func:`_trusted`); one that fails is reported and not read.
    """
    import glob

    out: list[str] = []
    for path in files:
        where = loc.where(key, file=path)
        if "://" in path:
            report.add(
                Finding(
                    "data.not-checked",
                    WARNING,
                    f"{path} is remote; its rows are not checked here",
                    where,
                    "verl downloads it in the trainer",
                    "check a local copy with --argv-file",
                )
            )
            continue
        if not path.endswith(VERL_DATA_SUFFIXES):
            what = "is a folder" if os.path.isdir(path) else "does not end in .parquet, .json or .jsonl"
            report.add(
                Finding(
                    "data.missing",
                    ERROR,
                    f"{path} {what}",
                    where,
                    "verl's RLHFDataset raises 'Unsupported file format' for it in the trainer",
                    f"list the parquet files themselves in {key} (a glob such as dir/*.parquet works)",
                )
            )
            continue
        if glob.has_magic(path):
            found = sorted(p for p in glob.glob(path) if os.path.isfile(p))
            if found:
                found = [p for p in found if _trusted(p, key, report, loc)]
            else:
                report.add(
                    Finding(
                        "data.missing",
                        ERROR,
                        f"{path} matches no file",
                        where,
                        "datasets.load_dataset raises FileNotFoundError in the trainer",
                        f"fix {key}",
                    )
                )
            out += [p for p in found if p.endswith(".parquet")]
            continue
        if not os.path.isfile(path):
            report.add(
                Finding(
                    "data.missing",
                    ERROR,
                    f"{path} does not exist",
                    where,
                    "verl's RLHFDataset fails to load it in the trainer",
                    f"fix {key}",
                )
            )
            continue
        if not _trusted(path, key, report, loc):
            continue
        if not path.endswith(".parquet"):
            report.add(
                Finding(
                    "data.not-checked",
                    WARNING,
                    f"{path} is JSON; preflight checks parquet rows only",
                    where,
                    "verl reads it with datasets' json loader",
                    "convert it to parquet to have it checked",
                )
            )
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
    except Exception:  # scoring a dummy answer may fail in other ways; the source is handled
        return True, ""
    return True, ""


def check_data(
    work: Any,
    report: Report,
    loc: Any,
    counter: PromptCounter | None,
    progress: bool = False,
    custom_reward: bool = False,
    cache_dir: str | None = None,
    model_path: str | None = None,
) -> dict[str, Any]:
    """Check ``data.train_files`` and ``data.val_files``; returns per-split summaries (and ``count_cache``: the
    cache folder, its hits/misses/refused entries and the rows counted, reused and recounted).

    ``cache_dir``: the count cache folder (:mod:`vlgrpo.preflight.count_cache`); None: ``--cache-dir`` was not
    given, use ``<trainer.default_local_dir>/.vlgrpo-preflight-cache`` when that is an absolute path; ``""``: no
    cache. ``model_path``: the folder the counter was built from (its files enter the cache key).
    """
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
    cache = None
    cache_note = "off (--cache-dir '')" if cache_dir == "" else "off (no count to cache)"
    if counter is not None and cache_dir != "":
        from .count_cache import CacheRefused, default_cache_dir, open_cache_dir

        source = "--cache-dir"
        if cache_dir is None:
            cache_dir, source = default_cache_dir(work.trainer.get("default_local_dir")), "trainer.default_local_dir"
        if cache_dir is None:
            cache_note = "off (trainer.default_local_dir is not an absolute path; give --cache-dir)"
        elif source != "--cache-dir" and not os.path.isdir(os.path.dirname(cache_dir)):
            cache_note = "off (trainer.default_local_dir does not exist here; give --cache-dir)"
            cache_dir = None
        else:
            try:
                cache = open_cache_dir(cache_dir)
                cache_note = "on"
            except CacheRefused as exc:
                cache_note = f"refused ({exc})"
                report.add(
                    Finding(
                        "data.count-cache",
                        WARNING,
                        f"the token-count cache folder is refused: {exc}",
                        loc.where("trainer.default_local_dir") if source != "--cache-dir" else Where(key="--cache-dir"),
                        "a count read from a folder another user can write could hide an over-long row; every row was "
                        "counted without the cache",
                        f"give a folder of your own (mode 0700) with --cache-dir, or fix the owner/mode of {cache_dir}",
                    )
                )
    counts = RowCounts(counter, prompt_key, image_key, filtering, cache, progress, model_path)
    for split, key in (("train", "data.train_files"), ("val", "data.val_files")):
        files = _as_list(data.get(key.split(".", 1)[1]))
        info: dict[str, Any] = {
            "files": files,
            "rows": 0,
            "max_prompt_length": max_len,
            "over_budget": 0,
            "image_rows": 0,
        }
        summary[split] = info
        largest: dict[str, Any] = {}
        for path in _expand(files, key, report, loc):
            try:
                pf = pq.ParquetFile(path)
            except Exception as exc:
                report.add(
                    Finding(
                        "data.unreadable",
                        ERROR,
                        f"pyarrow cannot read {path}: {exc}",
                        loc.where(key, file=path),
                        "verl loads it with datasets/pyarrow",
                        "rewrite the file",
                    )
                )
                continue
            names = pf.schema_arrow.names
            missing = [c for c in (prompt_key, "data_source", "reward_model") if c not in names]
            if missing:
                report.add(
                    Finding(
                        "data.columns",
                        ERROR,
                        f"columns missing: {missing} (has {names})",
                        loc.where(key, file=path),
                        "verl reads data.prompt_key, data_source and reward_model.ground_truth from every row",
                        "convert the data with `python -m vlgrpo data geo3k SRC OUT`",
                    )
                )
                continue
            rm_type = pf.schema_arrow.field("reward_model").type
            if not (hasattr(rm_type, "names") and "ground_truth" in [f.name for f in rm_type]):
                report.add(
                    Finding(
                        "data.columns",
                        ERROR,
                        "reward_model has no ground_truth field",
                        loc.where(key, file=path),
                        "the reward function compares against it",
                        "write reward_model={'style': 'rule', 'ground_truth': ...}",
                    )
                )
            has_images = image_key in names
            placeholder_rows: list[int] = []  # rows with <image> in the prompt but no image to put there
            columns = [c for c in (prompt_key, image_key, "data_source") if c in names]
            over: list[tuple[int, int, int]] = []
            kept_overlong: list[tuple[int, int, int, int]] = []  # (row, rollout tokens, image tokens, filter's count)
            dropped_fitting: list[tuple[int, int, int]] = []  # (row, rollout tokens, filter's count)
            dropped = 0
            image_alone: list[tuple[int, int]] = []
            bad_rows: list[tuple[int, str]] = []
            records = counts.file_records(path, pf, columns, has_images)
            row_index = len(records)
            for idx, rec in enumerate(records):
                kind, source = rec[0], rec[1]
                sources.setdefault(str(source), []).append(path)
                if kind == "skip":
                    continue
                if kind == "placeholder":
                    placeholder_rows.append(idx)
                    continue
                if kind == "bad":
                    bad_rows.append((idx, rec[2]))
                    continue
                total, img_tokens, estimate, n_images = rec[2], rec[3], rec[4], rec[5]
                if estimate is None:  # verl's doc2len counts a row its filter cannot process as max + 1
                    estimate = max_len + 1
                if n_images:
                    info["image_rows"] += 1
                    info["max_images"] = max(info.get("max_images", 0), n_images)
                if not largest or total > largest["tokens"]:
                    largest = {"tokens": total, "image_tokens": img_tokens, "row": idx, "file": path}
                kept = not filtering or estimate <= max_len
                dropped += not kept
                if kept and n_images and total > rollout_len and (filtering or total <= max_len):
                    kept_overlong.append((idx, total, img_tokens, estimate))
                elif total > max_len:
                    over.append((idx, total, img_tokens))
                elif not kept:
                    dropped_fitting.append((idx, total, estimate))
                if img_tokens > max_len:
                    image_alone.append((idx, img_tokens))
            info["rows"] += row_index
            if row_index == 0:
                report.add(
                    Finding(
                        "data.empty",
                        ERROR,
                        f"{path} has no rows",
                        loc.where(key, file=path),
                        "verl builds an empty dataloader from it: training has no steps (validation no samples)",
                        "point the setting at the converted split (python -m vlgrpo data geo3k SRC OUT)",
                    )
                )
            if placeholder_rows:
                listed = ", ".join(str(i) for i in placeholder_rows[:MAX_LISTED_ROWS])
                more = (
                    f" (+{len(placeholder_rows) - MAX_LISTED_ROWS} more)"
                    if len(placeholder_rows) > MAX_LISTED_ROWS
                    else ""
                )
                what = (
                    f"column {image_key!r} (data.image_key) is missing"
                    if not has_images
                    else f"{len(placeholder_rows)} row(s) have no image in column {image_key!r}"
                )
                report.add(
                    Finding(
                        "data.columns" if not has_images else "data.row",
                        ERROR,
                        f"{what}, but their prompts carry <image> placeholders: rows {listed}{more}",
                        (
                            loc.where("data.image_key", file=path, row=placeholder_rows[0])
                            if not has_images
                            else Where(key=key, file=path, row=placeholder_rows[0])
                        ),
                        "verl's RLHFDataset splits <image> into image slots only when the row has images; otherwise the "
                        "policy is trained on the literal text '<image>' and never sees the diagram",
                        "set data.image_key to the images column, or reconvert the data so every such row has its image",
                    )
                )
            info["over_budget"] += len(over) + sum(1 for r in kept_overlong if r[1] > max_len)
            info["rollout_overlong"] = info.get("rollout_overlong", 0) + len(kept_overlong)
            info["dropped_by_filter"] = info.get("dropped_by_filter", 0) + dropped
            where = loc.where(key, file=path)
            for idx, why in bad_rows[:MAX_LISTED_ROWS]:
                report.add(
                    Finding(
                        "data.row",
                        ERROR,
                        f"row cannot be processed: {why}",
                        Where(key=key, file=path, row=idx),
                        "verl's dataset asserts on it or drops it",
                        "fix or remove the row",
                    )
                )
            severity = WARNING if filtering else ERROR
            if image_alone:
                rows = ", ".join(f"row {i}: {n} image tokens" for i, n in image_alone[:MAX_LISTED_ROWS])
                report.add(
                    Finding(
                        "data.image-exceeds-budget",
                        severity,
                        f"{len(image_alone)} row(s) whose image tokens alone exceed max_prompt_length {max_len}: {rows}",
                        Where(
                            position=where.position, override=where.override, key=key, file=path, row=image_alone[0][0]
                        ),
                        "no truncation can fit them: verl raises at rollout for image prompts (verl issue #4975)"
                        + (" -- with filtering on, verl drops them" if filtering else ""),
                        "downscale those images, drop the rows, or raise data.max_prompt_length",
                    )
                )
            if kept_overlong:
                assert counter is not None  # only a counter makes "ok" records (file_records)
                report.add(
                    _kept_overlong_finding(
                        kept_overlong,
                        counter,
                        filtering,
                        max_len,
                        rollout_len,
                        Where(
                            position=where.position,
                            override=where.override,
                            key=key,
                            file=path,
                            row=kept_overlong[0][0],
                        ),
                    )
                )
            if dropped_fitting:
                assert counter is not None  # as above
                rows = ", ".join(
                    f"row {i}: {n} tokens in the rollout, {e} by verl's filter"
                    for i, n, e in dropped_fitting[:MAX_LISTED_ROWS]
                )
                more = (
                    f" (+{len(dropped_fitting) - MAX_LISTED_ROWS} more)"
                    if len(dropped_fitting) > MAX_LISTED_ROWS
                    else ""
                )
                report.add(
                    Finding(
                        "data.filter-drops-fitting",
                        WARNING,
                        f"verl's overlong filter drops {len(dropped_fitting)} row(s) that fit max_prompt_length {max_len} "
                        f"in the rollout: {rows}{more}",
                        Where(
                            position=where.position,
                            override=where.override,
                            key=key,
                            file=path,
                            row=dropped_fitting[0][0],
                        ),
                        f"the filter pre-resizes images with data.image_patch_size={counter.filter_patch_size}, the "
                        f"rollout with the processor's {counter.patch_size}, so it over-counts these (verl issue #6592)",
                        f"data.image_patch_size={counter.patch_size}",
                    )
                )
            if over:
                rows = ", ".join(f"row {i}: {n} tokens ({m} image)" for i, n, m in over[:MAX_LISTED_ROWS])
                more = f" (+{len(over) - MAX_LISTED_ROWS} more)" if len(over) > MAX_LISTED_ROWS else ""
                report.add(
                    Finding(
                        "data.over-budget",
                        severity,
                        f"{len(over)} row(s) longer than max_prompt_length {max_len}: {rows}{more}",
                        Where(position=where.position, override=where.override, key=key, file=path, row=over[0][0]),
                        (
                            "data.filter_overlong_prompts=True: verl drops these rows before training"
                            if filtering
                            else "data.filter_overlong_prompts is off, so these rows reach rollout and fail or get truncated"
                        ),
                        (
                            "raise data.max_prompt_length (VLGRPO_MAX_PROMPT_LENGTH) or downscale the images to keep these rows"
                            if filtering
                            else "data.filter_overlong_prompts=True, or raise data.max_prompt_length"
                        ),
                    )
                )
        if largest:
            info["largest_prompt"] = largest
        if filtering and counter is not None and info["rows"] and info.get("dropped_by_filter") == info["rows"]:
            report.add(
                Finding(
                    "data.all-rows-dropped",
                    ERROR,
                    f"verl's overlong filter drops every {split} row ({info['rows']}): each is longer than "
                    f"max_prompt_length {max_len} by its count",
                    loc.where("data.max_prompt_length"),
                    "with data.filter_overlong_prompts=True verl drops them all and the dataloader is empty",
                    f"raise data.max_prompt_length (largest prompt: {largest.get('tokens')} tokens)",
                )
            )
    summary["count_cache"] = {"state": cache_note, **counts.stats()}
    if not custom_reward:
        for ds, paths in sorted(sources.items()):
            handled, note = reward_handles(ds)
            if not handled:
                report.add(
                    Finding(
                        "data.data-source",
                        ERROR,
                        f"data_source {ds!r} is not handled by verl's default_compute_score",
                        Where(key="data_source", file=paths[0]),
                        note or "the reward loop raises NotImplementedError",
                        "use the data_source verl expects (geo3k: 'hiyouga/geometry3k') or set a custom reward function",
                    )
                )
            elif note:
                report.add(
                    Finding(
                        "data.reward-import",
                        WARNING,
                        f"data_source {ds!r}: {note}",
                        Where(key="data_source", file=paths[0]),
                        "the reward loop imports the scorer on the first batch",
                        "install it in the training image (geo3k's scorer needs mathruler)",
                    )
                )
    return summary


def _kept_overlong_finding(
    rows: list[tuple[int, int, int, int]],
    counter: PromptCounter,
    filtering: bool,
    max_len: int,
    rollout_len: int,
    where: Where,
) -> Finding:
    """``data.rollout-overlong``: rows verl keeps (its filter's count fits, or filtering is off) whose prompt, as
    the rollout builds it, is longer than ``rollout.prompt_length``; the agent loop raises on each of them."""
    limit = (
        f"max_prompt_length {max_len}"
        if rollout_len == max_len
        else f"actor_rollout_ref.rollout.prompt_length {rollout_len}"
    )
    mismatch = filtering and counter.filter_patch_size != counter.patch_size

    def one(i: int, n: int, m: int, est: int) -> str:
        text = f"row {i}: {n} tokens ({m} image) in the rollout"
        if mismatch:
            text += f", {est} by verl's filter"
        return text

    listed = ", ".join(one(*r) for r in rows[:MAX_LISTED_ROWS])
    more = f" (+{len(rows) - MAX_LISTED_ROWS} more)" if len(rows) > MAX_LISTED_ROWS else ""
    if mismatch:
        what = (
            f"{len(rows)} row(s) pass verl's overlong filter but are longer than {limit} in the rollout: "
            f"{listed}{more}; the filter pre-resizes images with data.image_patch_size="
            f"{counter.filter_patch_size}, the rollout with the processor's patch size {counter.patch_size}"
        )
        fix = (
            f"data.image_patch_size={counter.patch_size} (the processor's) so verl's filter drops them, or raise "
            f"data.max_prompt_length to at least {max(r[1] for r in rows)}"
        )
    elif filtering:
        what = (
            f"{len(rows)} row(s) fit data.max_prompt_length {max_len} (verl's filter keeps them) but are longer "
            f"than {limit}: {listed}{more}"
        )
        fix = f"actor_rollout_ref.rollout.prompt_length >= {max(r[1] for r in rows)}, or drop the override"
    else:
        what = f"{len(rows)} row(s) are longer than {limit}: {listed}{more}"
        fix = f"actor_rollout_ref.rollout.prompt_length >= {max(r[1] for r in rows)}, or drop the override"
    return Finding(
        "data.rollout-overlong",
        ERROR,
        what,
        where,
        "verl's agent loop (verl 0.8.0 agent_loop.py apply_chat_template) raises 'Multimodal prompt produced N "
        "tokens, exceeding rollout.prompt_length' on such a row, after Ray placed the workers (verl issue #6592)",
        fix,
    )


# --- per-row records, the count cache and the cold count's pool ----------------------------------------------

#: image rows of a count checked both ways (pixels decoded and pre-resized as verl does, and the size-only count)
#: before the size-only count is trusted for the rest; any difference turns it off for the whole run
SELF_CHECK_ROWS = 3
#: rows still to count from which a process pool (one worker per free core) is used
POOL_MIN_ROWS = 256
#: rows handed to the pool at a time (bounds the memory of rows in flight)
POOL_WINDOW = 2048


def _image_size(item: Any, base_dir: str) -> tuple[int, int]:
    """(height, width) of a row's image from its header (PIL ``Image.open`` reads no pixels); ``verify()`` walks the
    file's chunks (e.g. a PNG's CRCs) so a truncated or corrupt file still fails here, as a decode would."""
    image = _open_image(item, base_dir)
    with image:
        width, height = image.size
        image.verify()
    return int(height), int(width)


def count_row(
    counter: PromptCounter,
    row: dict[str, Any],
    prompt_key: str,
    image_key: str,
    has_images: bool,
    base_dir: str,
    filtering: bool,
    fast: bool = True,
) -> Record:
    """One row's record: ``["ok", data_source, tokens, image_tokens, filter_estimate | None, n_images]``,
    ``["placeholder", data_source]`` (``<image>`` in the prompt, no image) or ``["bad", data_source, why]``.

    ``fast``: images by their size alone (:meth:`PromptCounter.count_sizes`); else decoded and pre-resized
    (:meth:`PromptCounter.count`, today's reference path). ``filter_estimate`` is verl's overlong filter's count
    (None: the filter cannot process the row; the caller counts it as ``max_prompt_length + 1``, as verl does).
    """
    source = row.get("data_source")
    try:
        items = list(row.get(image_key) or []) if has_images else []
        prompt = row[prompt_key]
        if fast:
            sizes = [_image_size(it, base_dir) for it in items]
            images: list[Any] = [None] * len(items)
        else:
            images = [_open_image(it, base_dir) for it in items]
        if isinstance(prompt, str) or not isinstance(prompt, list):
            raise ValueError("prompt must be a list of {role, content} messages")
        if not items and _placeholders(prompt):
            return ["placeholder", source]
        messages = build_messages(prompt, images)
        if fast:
            total, img_tokens = counter.count_sizes(messages, sizes, items)
        else:
            total, img_tokens = counter.count(messages, images, items)
        estimate: int | None = total
        if filtering and items and counter.filter_patch_size != counter.patch_size:
            try:
                if fast:
                    if not isinstance(counter.filter_patch_size, int) or counter.filter_patch_size < 1:
                        raise ValueError(f"data.image_patch_size={counter.filter_patch_size!r}")
                    estimate = counter.count_sizes(messages, sizes, items, counter.filter_patch_size)[0]
                else:
                    estimate = counter.count_filter(messages, images, items)[0]
            except Exception:  # verl's doc2len counts a failing row as max + 1
                estimate = None
    except Exception as exc:
        return ["bad", source, " ".join(str(exc).split())[:160]]
    return ["ok", source, total, img_tokens, estimate, len(items)]


def _row_hash(row: dict[str, Any], image_key: str, base_dir: str, external: dict[str, str | None]) -> str:
    """SHA-256 (first 32 hex digits) of what a row's record depends on: its prompt, data_source and image entries
    (the bytes, or the content of the file a ``path`` entry names -- recorded in ``external``)."""
    import hashlib
    import json

    from .count_cache import file_sha256

    h = hashlib.sha256()
    items = row.get(image_key)
    rest = {k: v for k, v in row.items() if k != image_key}
    h.update(json.dumps(rest, sort_keys=True, default=repr).encode())
    if items is not None and not isinstance(items, (list, tuple)):
        h.update(b"items " + repr(items).encode())
        items = []
    for item in items or []:
        if not isinstance(item, dict):
            h.update(b"item " + repr(item).encode())
            continue
        h.update(json.dumps({k: v for k, v in item.items() if k != "bytes"}, sort_keys=True, default=repr).encode())
        if item.get("bytes") is not None:
            h.update(b"bytes " + hashlib.sha256(item["bytes"]).digest())
        elif item.get("path"):
            p = item["path"] if os.path.isabs(item["path"]) else os.path.join(base_dir, item["path"])
            if p not in external:
                try:
                    external[p] = file_sha256(p)
                except OSError:
                    external[p] = None
            h.update(f"file {p} {external[p]}".encode())
    return h.hexdigest()[:32]


#: ``(counter, prompt_key, image_key, has_images, base_dir, filtering, fast)`` for the forked workers
_POOL_STATE: tuple[Any, ...] = ()


def _pool_count(rows: list[dict[str, Any]]) -> list[Record]:
    counter, prompt_key, image_key, has_images, base_dir, filtering, fast = _POOL_STATE
    return [count_row(counter, r, prompt_key, image_key, has_images, base_dir, filtering, fast) for r in rows]


def _free_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


class RowCounts:
    """Every row's record (:func:`count_row`) of one data file, counted once and reused after.

    With a cache (:class:`vlgrpo.preflight.count_cache.CountCache`): the records of a file are stored under its
    content hash (SHA-256) in a namespace named by the counter's :meth:`PromptCounter.fingerprint`; a file whose
    hash (and the files its ``path`` image entries name) matches a trusted entry is not read at all. Otherwise each
    row is hashed (:func:`_row_hash`) and a row whose hash a recent entry of the same fingerprint holds keeps that
    record: only new or changed rows are counted. Counting: images by their size (PIL header) after a self-check
    on the first :data:`SELF_CHECK_ROWS` image rows against the decoding path; a fork process pool over the free
    cores for :data:`POOL_MIN_ROWS` rows or more; a progress line on stderr (rows/s, ETA) when ``progress``.

    ``stats()``: files read from the cache, rows reused, rows counted, whether the size-only count was used.
    """

    def __init__(
        self,
        counter: PromptCounter | None,
        prompt_key: str,
        image_key: str,
        filtering: bool,
        cache: Any = None,
        progress: bool = False,
        model_path: str | None = None,
    ):
        self.counter, self.prompt_key, self.image_key, self.filtering = counter, prompt_key, image_key, filtering
        self.cache, self.progress = cache, progress
        self.fast: bool | None = None
        self.files_from_cache = self.rows_reused = self.rows_counted = 0
        self.namespace = ""
        self._reuse: dict[str, Record] | None = None
        if counter is not None and cache is not None:
            fp = counter.fingerprint(
                model_path or "", extra={"prompt_key": prompt_key, "image_key": image_key, "filtering": filtering}
            )
            self.fingerprint, self.namespace = fp, "counts-" + fp[:32]

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "files_from_cache": self.files_from_cache,
            "rows_reused": self.rows_reused,
            "rows_counted": self.rows_counted,
            "size_only_count": self.fast,
        }
        if self.cache is not None:
            out.update(self.cache.stats())
        return out

    def file_records(self, path: str, pf: Any, columns: list[str], has_images: bool) -> list[Record]:
        """The records of every row of parquet file ``path`` (``pf``: its open ``pyarrow.parquet.ParquetFile``)."""
        if self.counter is None:
            out: list[Record] = []
            for batch in pf.iter_batches(batch_size=4096, columns=["data_source"]):
                out += [["skip", ds] for ds in batch.column(0).to_pylist()]
            return out
        sha = self._content_sha(path) if self.cache is not None else ""
        if self.cache is not None:
            entry = self.cache.get(self.namespace, sha)
            if entry is not None and self._entry_usable(entry, sha, pf.metadata.num_rows, has_images):
                self.files_from_cache += 1
                cached: list[Record] = entry["records"]
                self.rows_reused += len(cached)
                return cached
        base_dir = os.path.dirname(os.path.abspath(path))
        external: dict[str, str | None] = {}
        reuse = self._reuse_map()
        records: list[Any] = []
        hashes: list[str] = []
        pending: list[tuple[int, dict[str, Any]]] = []
        bar = _Progress(pf.metadata.num_rows, os.path.basename(path), self.progress)
        for batch in pf.iter_batches(batch_size=256, columns=columns):
            for row in batch.to_pylist():
                h = _row_hash(row, self.image_key, base_dir, external) if self.cache is not None else ""
                hashes.append(h)
                known = reuse.get(h)
                records.append(known)
                if known is None:
                    pending.append((len(records) - 1, row))
                else:
                    self.rows_reused += 1
                    bar.update(1)
                if len(pending) >= POOL_WINDOW:
                    self._count(pending, records, has_images, base_dir, bar)
                    pending = []
        if pending:
            self._count(pending, records, has_images, base_dir, bar)
        bar.close()
        if self.cache is not None:
            body = {
                "fingerprint": self.fingerprint,
                "file_sha256": sha,
                "has_images": has_images,
                "external": external,
                "hashes": hashes,
                "records": records,
            }
            try:
                self.cache.put(self.namespace, sha, body)
            except OSError:
                pass  # a full or read-only volume: the counts are right, only not kept
            if self._reuse is not None:
                self._reuse.update(zip(hashes, records))
        return records

    def _content_sha(self, path: str) -> str:
        """SHA-256 of the file's content. Hashing a large file on every launch is most of a warm check (2.4 GB:
        about 3 s), so the hash is kept beside the file's (device, inode, size, mtime_ns, ctime_ns), the rule
        git's index uses: while all five are unchanged the kept hash is used; any write changes ctime, which no
        user can set back, and the file is hashed again."""
        import hashlib

        from .count_cache import file_sha256

        st = os.stat(path)
        ident = [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
        key = hashlib.sha256(os.path.realpath(path).encode()).hexdigest()
        memo = self.cache.get("file-hashes", key)
        if memo is not None and memo.get("stat") == ident and isinstance(memo.get("sha256"), str):
            return str(memo["sha256"])
        sha = file_sha256(path)
        try:
            self.cache.put("file-hashes", key, {"stat": ident, "sha256": sha})
        except OSError:
            pass
        return sha

    def _entry_usable(self, entry: dict[str, Any], sha: str, num_rows: int, has_images: bool) -> bool:
        from .count_cache import file_sha256

        records = entry.get("records")
        if (
            entry.get("fingerprint") != self.fingerprint
            or entry.get("file_sha256") != sha
            or entry.get("has_images") != has_images
            or not isinstance(records, list)
            or len(records) != num_rows
            or not all(_valid_record(r) for r in records)
        ):
            self.cache.rejected += 1
            return False
        for p, digest in (entry.get("external") or {}).items():
            try:
                now = file_sha256(p)
            except OSError:
                now = None
            if now != digest:
                return False  # an image file a row names changed: recount what changed
        return True

    def _reuse_map(self) -> dict[str, Record]:
        """row hash -> record from the recent trusted entries of this fingerprint (loaded once)."""
        if self._reuse is None:
            self._reuse = {}
            if self.cache is not None:
                for key in self.cache.list(self.namespace):
                    entry = self.cache.get(self.namespace, key)
                    if (
                        entry is None
                        or entry.get("fingerprint") != self.fingerprint
                        or not isinstance(entry.get("hashes"), list)
                        or not isinstance(entry.get("records"), list)
                        or len(entry["hashes"]) != len(entry["records"])
                    ):
                        continue
                    for h, rec in zip(entry["hashes"], entry["records"]):
                        if isinstance(h, str) and _valid_record(rec):
                            self._reuse.setdefault(h, rec)
        return self._reuse

    def _count(
        self,
        pending: list[tuple[int, dict[str, Any]]],
        records: list[Record | None],
        has_images: bool,
        base_dir: str,
        bar: "_Progress",
    ) -> None:
        counter = self.counter
        assert counter is not None  # file_records answers "skip" records without a counter and counts nothing
        args = (self.prompt_key, self.image_key, has_images, base_dir, self.filtering)
        start = 0
        if self.fast is None:  # self-check: the size-only count against the decoding path on the first image rows
            checked = 0
            while start < len(pending) and checked < SELF_CHECK_ROWS:
                i, row = pending[start]
                slow = count_row(counter, row, *args, fast=False)
                if row.get(self.image_key) and slow[0] == "ok":
                    checked += 1
                    if count_row(counter, row, *args, fast=True) != slow:
                        self.fast = False
                records[i] = slow
                start += 1
                bar.update(1)
                if self.fast is False:
                    break
            if checked >= SELF_CHECK_ROWS and self.fast is None:
                self.fast = True
        fast = self.fast is not False and self.fast is not None
        rest = pending[start:]
        self.rows_counted += len(pending)
        workers = min(_free_cores(), 8)
        if len(rest) >= POOL_MIN_ROWS and workers > 1:
            global _POOL_STATE
            import multiprocessing

            os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # the children tokenize; no fork warning
            _POOL_STATE = (counter, *args, fast)
            chunk = max(16, min(128, len(rest) // (workers * 4) or 16))
            parts = [rest[k : k + chunk] for k in range(0, len(rest), chunk)]
            try:
                with multiprocessing.get_context("fork").Pool(workers) as pool:
                    for part, out in zip(parts, pool.imap(_pool_count, [[r for _, r in p] for p in parts])):
                        for (i, _), rec in zip(part, out):
                            records[i] = rec
                        bar.update(len(part))
            finally:
                _POOL_STATE = ()
            return
        for i, row in rest:
            records[i] = count_row(counter, row, *args, fast=fast)
            bar.update(1)


def _valid_record(rec: Any) -> bool:
    """A record as :func:`count_row` makes it (types and ranges), so a cache entry cannot smuggle in another shape."""
    if not isinstance(rec, list) or not rec:
        return False
    src_ok = len(rec) > 1 and (rec[1] is None or isinstance(rec[1], str))
    if rec[0] == "ok" and len(rec) == 6 and src_ok:
        ints = [rec[2], rec[3], rec[5]] + ([] if rec[4] is None else [rec[4]])
        return all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in ints) and rec[3] <= rec[2]
    if rec[0] == "placeholder" and len(rec) == 2:
        return src_ok
    if rec[0] == "bad" and len(rec) == 3:
        return src_ok and isinstance(rec[2], str)
    return False


class _Progress:
    """A progress line on stderr for a long count: rows done, rows/s and the ETA, shown once the count has run
    for 2 s (rewritten in place on a terminal, a new line every 10 s otherwise)."""

    def __init__(self, total: int, desc: str, enabled: bool):
        import time

        self.total, self.desc, self.enabled, self.done = total, desc, enabled, 0
        self.t0 = self.last = time.monotonic()
        self.tty = enabled and sys.stderr.isatty()
        self.shown = False

    def update(self, n: int) -> None:
        if not self.enabled:
            return
        import time

        self.done += n
        now = time.monotonic()
        if now - self.t0 < 2 or now - self.last < (0.5 if self.tty else 10):
            return
        self.last = now
        rate = self.done / (now - self.t0)
        eta = (self.total - self.done) / rate if rate > 0 else float("inf")
        line = f"preflight: counting {self.desc}: {self.done}/{self.total} rows, {rate:.0f} rows/s, ETA {eta:.0f} s"
        sys.stderr.write(("\r" + line + "\x1b[K") if self.tty else line + "\n")
        sys.stderr.flush()
        self.shown = True

    def close(self) -> None:
        if self.enabled and self.shown and self.tty:
            sys.stderr.write("\n")
            sys.stderr.flush()
