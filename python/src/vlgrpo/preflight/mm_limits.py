"""C01: vLLM's per-prompt multimodal limits. Video stays off on a vLLM inside the two video advisories' ranges;
the image limit holds the largest image count of a data row.

vLLM 0.13.0 (both images) is inside CVE-2026-22778 (PIL error text leaks a heap address, chained with a JPEG2000
overflow through a video input: code execution; fixed in 0.14.1) and CVE-2026-34755 / GHSA-pq5c-rjhq-qp7p
(``video/jpeg`` data URLs decoded frame by frame with no limit: host OOM; fixed in 0.19.0). With
``limit_mm_per_prompt`` ``{"image": N, "video": 0}`` vLLM refuses a video item before decoding it
(``vllm/entrypoints/chat_utils.py`` ``BaseMultiModalItemTracker.add`` -> ``validate_num_items``: "At most 0
video(s) may be provided in one prompt."). verl v0.8.0 (``vLLMHttpServer.launch_server``) replaces the whole
``limit_mm_per_prompt`` by ``{"image": limit_images}`` when ``rollout.limit_images`` is set, which drops
``video: 0`` (vLLM's default for an unnamed modality is 999).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .report import ERROR, Finding, Report

if TYPE_CHECKING:
    from .rules import Locator

ADVISORIES = "CVE-2026-22778 (fixed in vLLM 0.14.1) and CVE-2026-34755 / GHSA-pq5c-rjhq-qp7p (fixed in 0.19.0)"
FIXED_IN = (0, 19, 0)  # first vLLM outside both ranges
PINNED = "0.13.0"  # the images' vLLM (docker/pins.env), assumed where vLLM is not installed (a CPU preflight)
KEY = "actor_rollout_ref.rollout.engine_kwargs.vllm.limit_mm_per_prompt"


def vllm_version() -> str:
    """The installed vLLM's version, or the images' pinned one when vLLM is not installed here."""
    try:
        from importlib.metadata import version

        return version("vllm")
    except Exception:
        return PINNED


def _release(text: str) -> tuple[int, ...]:
    from packaging.version import Version

    return Version(text).release


def _count(value: Any) -> int | None:
    if isinstance(value, dict) or hasattr(value, "get"):
        value = value.get("count")
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def check_mm_limits(
    work: Any, report: Report, loc: Locator, max_images: int | None, version: str | None = None
) -> dict[str, Any]:
    """Add ``rules.video-enabled`` when video inputs are allowed on a vLLM inside the advisories' ranges, and
    ``rules.image-limit`` when a data row has more images than the limit. Returns the effective limits."""
    version = version or vllm_version()
    rollout = work.actor_rollout_ref.rollout
    vllm_kwargs = (rollout.get("engine_kwargs") or {}).get("vllm") or {}
    limits = dict(vllm_kwargs.get("limit_mm_per_prompt") or {})
    limit_images = rollout.get("limit_images")
    where_key = KEY
    if limit_images:  # verl replaces the whole dict (v0.8.0 launch_server)
        limits, where_key = {"image": limit_images}, "actor_rollout_ref.rollout.limit_images"
    video = _count(limits["video"]) if "video" in limits else 999
    image = _count(limits["image"]) if "image" in limits else 999
    out = {"vllm": version, "image": image, "video": video, "max_images_per_row": max_images}
    if video != 0 and _release(version) < FIXED_IN:
        why = (
            f"vLLM {version} is inside {ADVISORIES}, both reached through video inputs of a video-capable model "
            "such as Qwen3-VL; the rollout servers accept requests with video_url parts"
        )
        if limit_images:
            why += (
                "; verl replaces limit_mm_per_prompt by {'image': limit_images} when rollout.limit_images is "
                "set, so video falls back to vLLM's default of 999"
            )
        report.add(
            Finding(
                "rules.video-enabled",
                ERROR,
                f"video inputs are allowed ({video} per prompt) on vLLM {version}",
                loc.where(where_key),
                why,
                f"+{KEY}={{image:{max(1, max_images or 1)},video:0}} and leave actor_rollout_ref.rollout.limit_images "
                "unset (or use a vLLM >= 0.19.0)",
            )
        )
    if max_images is not None and image is not None and max_images > image:
        report.add(
            Finding(
                "rules.image-limit",
                ERROR,
                f"a data row has {max_images} images, the limit is {image} per prompt",
                loc.where(where_key),
                "vLLM refuses such a prompt at rollout ('At most N image(s) may be provided in one prompt')",
                f"set image:{max_images} in {KEY}",
            )
        )
    return out
