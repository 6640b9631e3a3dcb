"""Where each row's image comes from, as verl reads it, and rows that bring video or audio (the data rows as input).

verl v0.8.0 (``verl/utils/dataset/rl_dataset.py``, ``RLHFDataset._build_messages``) turns every ``<image>`` of a
row into a content item ``{"type": "image", **entry}`` of the image column's entry, after replacing its ``image``
field by the decoded ``bytes`` when the entry has a ``bytes`` key; qwen-vl-utils 0.0.14 (``vision_process.py``,
``fetch_image``) then reads ``image`` (else ``image_url``): an ``http(s)://`` URL is fetched with requests,
``file://`` and any other string is opened as a local path (relative to the worker's working directory), a
``data:image...;base64,`` string is decoded. So, per image entry (:func:`verl_image_source`):

- ``bytes`` present: that is the image; ``None`` there makes verl raise (``BytesIO(None)``);
- else ``image`` / ``image_url``: a URL is refused (the trainer would train on what a server sends, and the preflight
  counted something else), a relative path is refused (the launch runs the trainer in a fresh empty folder), an
  absolute path must be a file;
- neither: qwen-vl-utils raises ``image, image_url or video should in content``.

Video and audio: the recipes set ``limit_mm_per_prompt={image:1,video:0}``, but verl's dataset decodes a row's
videos (``process_vision_info``) and audio before vLLM's limit sees them, so the decoder surface the limit closes
(vLLM 0.13.0 inside CVE-2026-22778 / CVE-2026-34755) would be back: rows with a non-empty ``videos`` / ``audios``
column (``data.video_key`` / ``data.audio_key``), a ``<video>`` / ``<audio>`` placeholder, or a structured content
item of type video/audio are refused (``media.video``).
"""

from __future__ import annotations

import os
import re
from typing import Any

from .report import ERROR, Finding, Report

MAX_LISTED = 5


def verl_image_source(entry: Any) -> tuple[str, str]:
    """``(kind, detail)`` of the image verl would load for one image-column entry: kind ``bytes``, ``data-uri``,
    ``path`` (detail: the path), or a refusal kind ``url``, ``relative``, ``missing``, ``null-bytes``, ``none``,
    ``type`` (detail: what was found)."""
    if not isinstance(entry, dict):
        return ("type", type(entry).__name__)
    if "bytes" in entry:
        data = entry["bytes"]
        if isinstance(data, (bytes, bytearray)) and data:
            return ("bytes", f"{len(data)} bytes")
        return ("null-bytes", repr(data)[:40])
    value = entry.get("image") if "image" in entry else entry.get("image_url")
    if not isinstance(value, str) or not value:
        return ("none", repr(value)[:40])
    if value.startswith("data:image"):
        return ("data-uri", value[:30])
    # any scheme but file:// is remote (http(s) is fetched; others would be opened as odd local paths)
    scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]*)://", value)
    if scheme and scheme.group(1).lower() != "file":
        return ("url", value[:80])
    path = value[7:] if value.startswith("file://") else value
    if not os.path.isabs(path):
        return ("relative", path[:80])
    if not os.path.isfile(path):
        return ("missing", path[:80])
    return ("path", path)


_WHY = {
    "url": "a URL: the trainer (qwen-vl-utils' fetch_image) would download it at training time, and the preflight "
    "counted another image",
    "relative": "a relative path: qwen-vl-utils opens it from the trainer's working directory, a fresh empty folder",
    "missing": "an absolute path that is not a file here",
    "null-bytes": "a 'bytes' field without data: verl opens BytesIO(None) and raises",
    "none": "neither bytes nor an image/image_url string: qwen-vl-utils raises",
    "type": "not a mapping: verl raises TypeError",
}


def _content_kinds(prompt: Any) -> list[str]:
    """Media kinds a prompt brings by itself: ``<video>``/``<audio>`` placeholders in string contents, structured
    content items of type video/audio (verl passes list contents through unchanged)."""
    out = []
    for msg in prompt if isinstance(prompt, list) else []:
        content = msg.get("content") if isinstance(msg, dict) else None
        if isinstance(content, str):
            out += [k for k in ("video", "audio") if f"<{k}>" in content]
        elif isinstance(content, list):
            out += [
                str(i.get("type"))
                for i in content
                if isinstance(i, dict) and str(i.get("type", "")).startswith(("video", "audio"))
            ]
    return out


def check_media(work: Any, report: Report, loc: Any) -> dict[str, Any]:
    """Add ``media.image-source`` / ``media.video`` findings for the local parquet files of ``data.train_files`` and
    ``data.val_files`` (remote, missing or non-parquet entries are the data check's); returns counts per kind."""
    import pyarrow.parquet as pq

    from .dataset import _as_list, _expand

    data = work.data
    keys = {
        "image": data.get("image_key", "images"),
        "video": data.get("video_key", "videos"),
        "audio": data.get("audio_key", "audios"),
        "prompt": data.get("prompt_key", "prompt"),
    }
    summary: dict[str, Any] = {}
    quiet = Report()  # _expand's own findings are the data check's; not repeated here
    for key in ("data.train_files", "data.val_files"):
        for path in _expand(_as_list(work.data.get(key.split(".", 1)[1])), key, quiet, loc):
            try:
                pf = pq.ParquetFile(path)
            except Exception:  # unreadable: the data check reports it
                continue
            names = set(pf.schema_arrow.names)
            columns = [c for c in keys.values() if c in names]
            bad: dict[str, list[str]] = {}
            media: list[str] = []
            row = 0
            kinds: dict[str, int] = {}
            for batch in pf.iter_batches(batch_size=256, columns=columns):
                for rec in batch.to_pylist():
                    for entry in rec.get(keys["image"]) or []:
                        kind, detail = verl_image_source(entry)
                        kinds[kind] = kinds.get(kind, 0) + 1
                        if kind in _WHY:
                            bad.setdefault(kind, []).append(f"row {row}: {detail}")
                    brought = _content_kinds(rec.get(keys["prompt"]))
                    brought += [k for k in ("video", "audio") if rec.get(keys[k])]
                    if brought:
                        media.append(f"row {row}: {', '.join(sorted(set(brought)))}")
                    row += 1
            summary[path] = {"rows": row, "image_sources": kinds, "media_rows": len(media)}
            for kind, rows in bad.items():
                report.add(
                    Finding(
                        "media.image-source",
                        ERROR,
                        f"{len(rows)} image entr{'y' if len(rows) == 1 else 'ies'} whose "
                        f"image is {_WHY[kind]}: "
                        + "; ".join(rows[:MAX_LISTED])
                        + (" ..." if len(rows) > MAX_LISTED else ""),
                        loc.where(key, file=path),
                        "verl reads the entry's bytes, else its image/image_url field "
                        "(rl_dataset.py _build_messages, qwen-vl-utils fetch_image)",
                        "embed the images as bytes (python -m vlgrpo data geo3k writes them so), or give absolute paths "
                        "of local files",
                    )
                )
            if media:
                report.add(
                    Finding(
                        "media.video",
                        ERROR,
                        f"{len(media)} row(s) bring video or audio: "
                        + "; ".join(media[:MAX_LISTED])
                        + (" ..." if len(media) > MAX_LISTED else ""),
                        loc.where(key, file=path),
                        "video is off (limit_mm_per_prompt video:0), but verl's dataset decodes a row's videos and audio "
                        "before vLLM's limit sees them: the decoder surface of CVE-2026-22778 / CVE-2026-34755 is back",
                        "drop those rows or their video/audio columns and placeholders (these recipes train on images)",
                    )
                )
    return summary
