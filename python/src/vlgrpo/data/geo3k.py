"""Geometry3K -> verl RL parquet, offline.

Output schema: what verl v0.8.0 ``examples/data_preprocess/geo3k.py`` writes from the hub dataset
``hiyouga/geometry3k`` (one row per problem)::

    data_source  string   "hiyouga/geometry3k"
    prompt       list<struct<role, content>>  [{"role": "user", "content": problem + " " + INSTRUCTION}]
    images       list<struct<bytes, path>>    the problem's diagram (HF ``Image`` feature encoding)
    ability      string   "math"
    reward_model struct<style, ground_truth>  {"style": "rule", "ground_truth": answer}
    extra_info   struct<split, index, answer, question>  index = 0-based position in the split

``problem`` keeps hiyouga's ``<image>`` placeholder, which verl's RLHFDataset replaces with the image.

Inputs (auto-detected):

- the hiyouga/geometry3k layout: ``data/{train,validation,test}-*.parquet`` with columns images, problem,
  answer (or those parquet files directly under SRC);
- the original Geometry3K (InterGPS) layout: ``{train,val,test}/<id>/data.json`` + ``img_diagram.png``,
  mapped as the hiyouga/geometry3k dataset card documents: ``problem = "<image>" + annotat_text``,
  ``answer = choices["ABCD".index(answer)]``, ``images = [img_diagram.png]``; rows in numeric id order.
"""

from __future__ import annotations

import glob
import json
import os
from typing import Any, Iterator

DATA_SOURCE = "hiyouga/geometry3k"
#: The instruction verl's geo3k preprocessing appends to every problem (verl v0.8.0
#: examples/data_preprocess/geo3k.py, ``instruction_following``).
INSTRUCTION = (
    "You FIRST think about the reasoning process as an internal monologue and then provide the final answer. "
    "The reasoning process MUST BE enclosed within <think> </think> tags. "
    "The final answer MUST BE put in \\boxed{}."
)
ORIGINAL_SPLITS = {"train": "train", "validation": "val", "test": "test"}
CHOICE_LETTERS = "ABCD"
#: HF ``datasets`` feature metadata in the list form every datasets version reads, so verl's
#: ``datasets.load_dataset("parquet")`` decodes ``images`` as ``Sequence(Image)`` like the hub files.
HF_FEATURES = {
    "data_source": {"dtype": "string", "_type": "Value"},
    "prompt": [{"role": {"dtype": "string", "_type": "Value"}, "content": {"dtype": "string", "_type": "Value"}}],
    "images": [{"_type": "Image"}],
    "ability": {"dtype": "string", "_type": "Value"},
    "reward_model": {
        "style": {"dtype": "string", "_type": "Value"},
        "ground_truth": {"dtype": "string", "_type": "Value"},
    },
    "extra_info": {
        "split": {"dtype": "string", "_type": "Value"},
        "index": {"dtype": "int64", "_type": "Value"},
        "answer": {"dtype": "string", "_type": "Value"},
        "question": {"dtype": "string", "_type": "Value"},
    },
}


class SourceError(ValueError):
    """SRC is not a Geometry3K folder in either layout, or a record is malformed."""


def detect_layout(src: str) -> str:
    """``"hiyouga"`` or ``"original"``; raises SourceError otherwise."""
    if _hiyouga_files(src, "train") or _hiyouga_files(src, "test"):
        return "hiyouga"
    if any(os.path.isdir(os.path.join(src, d)) for d in ORIGINAL_SPLITS.values()):
        return "original"
    raise SourceError(f"{src}: neither data/<split>-*.parquet (hiyouga/geometry3k) nor train/val/test/<id>/data.json")


def _hiyouga_files(src: str, split: str) -> list[str]:
    for pattern in (os.path.join(src, "data", f"{split}-*.parquet"), os.path.join(src, f"{split}-*.parquet")):
        found = sorted(glob.glob(pattern))
        if found:
            return found
    return []


def iter_hiyouga(src: str, split: str) -> Iterator[dict[str, Any]]:
    """Rows ``{"images": [{"bytes", "path"}], "problem", "answer"}`` of one split of the hub layout."""
    import pyarrow.parquet as pq

    files = _hiyouga_files(src, split)
    if not files:
        raise SourceError(f"{src}: no {split} parquet files")
    for path in files:
        table = pq.read_table(path)
        missing = {"images", "problem", "answer"} - set(table.column_names)
        if missing:
            raise SourceError(f"{path}: columns {sorted(missing)} missing (has {table.column_names})")
        for row in table.select(["images", "problem", "answer"]).to_pylist():
            yield row


def iter_original(src: str, split: str) -> Iterator[dict[str, Any]]:
    """Rows of one split of the original layout, mapped as the hiyouga/geometry3k card documents."""
    folder = os.path.join(src, ORIGINAL_SPLITS[split])
    if not os.path.isdir(folder):
        raise SourceError(f"{src}: no {ORIGINAL_SPLITS[split]}/ folder")
    ids = sorted((d for d in os.listdir(folder) if d.isdigit()), key=int)
    for pid in ids:
        base = os.path.join(folder, pid)
        try:
            with open(os.path.join(base, "data.json"), encoding="utf-8") as fh:
                record = json.load(fh)
            with open(os.path.join(base, "img_diagram.png"), "rb") as fh:
                image = fh.read()
        except (OSError, ValueError) as exc:
            raise SourceError(f"{base}: {exc}") from exc
        if not isinstance(record, dict):
            raise SourceError(f"{base}/data.json: holds a JSON {type(record).__name__}, not a problem record")
        letter = record.get("answer")
        choices = record.get("choices")
        if not isinstance(choices, list) or not all(isinstance(c, str) for c in choices):
            raise SourceError(f"{base}/data.json: 'choices' must be a list of strings (got {choices!r:.80})")
        # one letter, exactly (a bare `in "ABCD"` would take '' or 'AB' for choice A)
        if not isinstance(letter, str) or len(letter) != 1 or letter not in CHOICE_LETTERS[: len(choices)]:
            raise SourceError(
                f"{base}/data.json: answer {letter!r} does not name one of the {len(choices)} "
                f"choices ({CHOICE_LETTERS[: len(choices)] or 'none'})"
            )
        text = record.get("annotat_text")
        if not isinstance(text, str) or not text.strip():
            raise SourceError(f"{base}/data.json: 'annotat_text' (the problem text) is missing or empty")
        yield {
            "images": [{"bytes": image, "path": "img_diagram.png"}],
            "problem": "<image>" + text,
            "answer": choices[CHOICE_LETTERS.index(letter)],
        }


def check_example(example: dict[str, Any], where: str) -> None:
    """Raise SourceError unless ``example`` is a usable problem: ``problem`` a non-empty string whose
    ``<image>`` placeholders match the number of images, ``answer`` a non-empty string, and every image
    decodable by PIL (verl's RLHFDataset opens each one; a broken one fails the row at training time)."""
    import io

    from PIL import Image

    problem, answer, images = example.get("problem"), example.get("answer"), example.get("images")
    if not isinstance(problem, str) or not problem.strip():
        raise SourceError(f"{where}: problem text is missing or not a string ({problem!r:.60})")
    if not isinstance(answer, str) or not answer.strip():
        raise SourceError(
            f"{where}: answer is missing or not a string ({answer!r:.60}); it becomes reward_model.ground_truth"
        )
    if not isinstance(images, list) or not images:
        raise SourceError(f"{where}: no image (Geometry3K problems each have a diagram)")
    if problem.count("<image>") != len(images):
        raise SourceError(
            f"{where}: {problem.count('<image>')} <image> placeholder(s) for {len(images)} image(s); "
            "verl's RLHFDataset asserts they match"
        )
    for i, im in enumerate(images):
        data = im.get("bytes") if isinstance(im, dict) else None
        if not data:
            raise SourceError(f"{where}: image {i} has no bytes")
        try:
            with Image.open(io.BytesIO(data)) as pic:
                pic.verify()
        except Exception as exc:  # PIL raises several types for broken files
            raise SourceError(f"{where}: image {i} is not a readable image: {exc}") from exc


def to_verl_row(example: dict[str, Any], split: str, index: int, data_source: str = DATA_SOURCE) -> dict[str, Any]:
    """One verl RL row from a hiyouga-style example (see the module docstring for the schema)."""
    problem, answer = example["problem"], example["answer"]
    return {
        "data_source": data_source,
        "prompt": [{"role": "user", "content": problem + " " + INSTRUCTION}],
        "images": [{"bytes": im["bytes"], "path": im.get("path")} for im in example["images"]],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": answer},
        "extra_info": {"split": split, "index": index, "answer": answer, "question": problem},
    }


def arrow_schema() -> Any:
    import pyarrow as pa

    s = pa.string()
    return pa.schema(
        [
            ("data_source", s),
            ("prompt", pa.list_(pa.struct([("role", s), ("content", s)]))),
            ("images", pa.list_(pa.struct([("bytes", pa.binary()), ("path", s)]))),
            ("ability", s),
            ("reward_model", pa.struct([("style", s), ("ground_truth", s)])),
            ("extra_info", pa.struct([("split", s), ("index", pa.int64()), ("answer", s), ("question", s)])),
        ],
        metadata={"huggingface": json.dumps({"info": {"features": HF_FEATURES}})},
    )


def convert(
    src: str,
    out: str,
    splits: tuple[str, ...] = ("train", "test"),
    layout: str = "auto",
    data_source: str = DATA_SOURCE,
) -> dict[str, int]:
    """Convert ``splits`` of Geometry3K at ``src`` into ``out/<split>.parquet``; returns rows per split.

    ``out`` (created if missing) must pass the one path rule (:func:`vlgrpo.pathrule.check_path`: no other user can
    write it or a folder above it). Each file is written to a fresh ``O_EXCL`` temporary file of mode 0600 in ``out``
    (``tempfile.mkstemp``) and renamed over ``<split>.parquet``: a name planted in ``out`` (a symlink to another
    file) is never opened or followed.

    Raises SourceError for an unrecognised or malformed source, ValueError for an unknown split or an output
    folder that fails the path rule.
    """
    import tempfile

    from vlgrpo.pathrule import check_path

    import pyarrow as pa
    import pyarrow.parquet as pq

    if layout == "auto":
        layout = detect_layout(src)
    reader = {"hiyouga": iter_hiyouga, "original": iter_original}.get(layout)
    if reader is None:
        raise ValueError(f"unknown layout {layout!r} (auto, hiyouga, original)")
    if not splits:
        raise ValueError("no split given (train, validation, test)")
    for split in splits:
        if split not in ORIGINAL_SPLITS:
            raise ValueError(f"unknown split {split!r} (train, validation, test)")
    if os.path.exists(out) and not os.path.isdir(out):
        raise ValueError(f"output {out} exists and is not a folder")
    os.makedirs(out, mode=0o755, exist_ok=True)
    problem = check_path(out, kind="dir")
    if problem is not None:
        raise ValueError(
            f"output folder {problem.text()}: another user could replace what is written there; fix: {problem.fix}"
        )
    counts = {}
    schema = arrow_schema()
    for split in splits:
        rows = []
        for i, ex in enumerate(reader(src, split)):
            check_example(ex, f"{src} {split} row {i}")
            rows.append(to_verl_row(ex, split, i, data_source))
        if not rows:
            raise SourceError(f"{src}: the {split} split has no problems")
        table = pa.Table.from_pylist(rows, schema=schema)
        fd, tmp = tempfile.mkstemp(dir=out, prefix=f".{split}.", suffix=".parquet.tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                pq.write_table(table, fh)
            os.chmod(tmp, 0o644)
            os.replace(tmp, os.path.join(out, f"{split}.parquet"))
        except BaseException:
            if os.path.lexists(tmp):
                os.unlink(tmp)
            raise
        counts[split] = len(rows)
    return counts
