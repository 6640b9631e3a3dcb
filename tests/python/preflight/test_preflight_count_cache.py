"""The data check counts once and reuses after: the count cache (vlgrpo.preflight.count_cache) and the size-only
cold count (vlgrpo.preflight.dataset.count_row / RowCounts).

References: transformers' own Qwen3VLProcessor (tokenizer + image processor of the shipped 30B folder, the
processor verl builds) on the decoded, pre-resized images, row by row; the cache's own hit/miss counters for
which path ran (never a timing)."""

from __future__ import annotations

import io
import json
import os
import random

import pytest

from preflight_helpers import MODEL_30B, SAMPLE_HIYOUGA, qwen3vl_processor, set_override

from vlgrpo.preflight import run_preflight
from vlgrpo.preflight.count_cache import CacheRefused, open_cache_dir
from vlgrpo.preflight.dataset import PromptCounter, RowCounts, _open_image, build_messages, count_row


@pytest.fixture(scope="module")
def counter():
    return PromptCounter(MODEL_30B, filter_patch_size=14)


@pytest.fixture(scope="module")
def shipped(tmp_path_factory) -> str:
    """Every shipped Geometry3K sample row (train 20, validation 5, test 15) in verl's format."""
    from vlgrpo.data.geo3k import convert

    out = str(tmp_path_factory.mktemp("geo3k-all"))
    convert(SAMPLE_HIYOUGA, out, splits=("train", "validation", "test"))
    return out


def _rows(folder: str) -> list[dict]:
    import pyarrow.parquet as pq

    out = []
    for split in ("train", "validation", "test"):
        out += pq.read_table(os.path.join(folder, f"{split}.parquet")).to_pylist()
    return out


def _png(image) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def _resized_rows(rows: list[dict], seed: int = 0) -> list[dict]:
    """The shipped rows with their diagrams resized to varied sizes (below the processor's 65,536-pixel minimum,
    ordinary, and very wide/tall), so every branch of the pre-resize and the processor's resize is hit."""
    from PIL import Image

    rng = random.Random(seed)
    sizes = [(40, 40), (31, 70), (255, 257), (1600, 1600), (3000, 120), (90, 2500), (517, 333)]
    out = []
    for i, row in enumerate(rows):
        image = Image.open(io.BytesIO(row["images"][0]["bytes"])).convert("RGB")
        w, h = sizes[i % len(sizes)] if i < len(sizes) else (rng.randint(28, 1400), rng.randint(28, 1400))
        out.append({**row, "images": [{"bytes": _png(image.resize((w, h))), "path": None}]})
    return out


def _reference(counter, ref, row: dict, patch: int) -> tuple[int, int]:
    images = [_open_image(it, ".") for it in row["images"]]
    messages = build_messages(row["prompt"], images)
    raw = ref.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    got = ref(
        text=[raw], images=[counter.pre_resize(im, it, patch_size=patch) for im, it in zip(images, row["images"])]
    )
    return len(got["input_ids"][0]), sum(int(g.prod()) for g in got["image_grid_thw"]) // 4


def test_size_only_count_equals_the_processor_on_every_shipped_row(counter, shipped):
    """Every shipped row, and each of them again with its image resized to a varied size: the size-only count (PIL
    header, no pixels) equals transformers' Qwen3VLProcessor on the decoded, pre-resized image, at the rollout's
    patch size (16) and verl's filter's (14)."""
    ref = qwen3vl_processor(counter.tokenizer, counter.image_processor)
    rows = _rows(shipped)
    assert len(rows) == 40
    for row in rows + _resized_rows(rows):
        rec = count_row(counter, row, "prompt", "images", True, ".", filtering=True, fast=True)
        assert rec[0] == "ok", rec
        assert (rec[2], rec[3]) == _reference(counter, ref, row, 16)
        assert rec[4] == _reference(counter, ref, row, 14)[0]
        assert rec == count_row(counter, row, "prompt", "images", True, ".", filtering=True, fast=False)


def _write(rows: list[dict], path: str) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from vlgrpo.data.geo3k import arrow_schema

    pq.write_table(pa.Table.from_pylist(rows, schema=arrow_schema()), path)
    return path


def _records(counter, cache, path: str) -> tuple[list, RowCounts]:
    import pyarrow.parquet as pq

    counts = RowCounts(counter, "prompt", "images", True, cache, model_path=MODEL_30B)
    return counts.file_records(path, pq.ParquetFile(path), ["prompt", "images", "data_source"], True), counts


def test_warm_run_reads_the_cache_and_a_changed_row_recounts_only_itself(counter, shipped, tmp_path):
    ref = qwen3vl_processor(counter.tokenizer, counter.image_processor)
    rows = _rows(shipped)
    data = _write(rows, str(tmp_path / "all.parquet"))
    cache = open_cache_dir(str(tmp_path / "cache"))
    cold, c1 = _records(counter, cache, data)
    assert (c1.rows_counted, c1.rows_reused, c1.files_from_cache) == (40, 0, 0)
    assert [(r[2], r[3]) for r in cold] == [_reference(counter, ref, row, 16) for row in rows]
    warm, c2 = _records(counter, cache, data)
    assert warm == cold and (c2.rows_counted, c2.rows_reused, c2.files_from_cache) == (0, 40, 1)
    # one row's question changes (a longer prompt): only that row is counted again, and its new count is right
    rows[7] = {
        **rows[7],
        "prompt": [{"role": "user", "content": rows[7]["prompt"][0]["content"] + " Show every step."}],
    }
    _write(rows, data)
    changed, c3 = _records(counter, cache, data)
    assert (c3.rows_counted, c3.rows_reused, c3.files_from_cache) == (1, 39, 0)
    assert (changed[7][2], changed[7][3]) == _reference(counter, ref, rows[7], 16)
    assert changed[7][2] > cold[7][2] and changed[:7] == cold[:7] and changed[8:] == cold[8:]


def test_a_changed_processor_setting_misses(counter, shipped, tmp_path):
    """mm_processor_kwargs are part of the key: the same file under max_pixels=65536 is counted again."""
    rows = _rows(shipped)[:5]
    data = _write(rows, str(tmp_path / "five.parquet"))
    cache = open_cache_dir(str(tmp_path / "cache"))
    before, _ = _records(counter, cache, data)
    other = PromptCounter(
        MODEL_30B,
        filter_patch_size=14,
        mm_processor_kwargs={"max_pixels": 65536},
        tokenizer=counter.tokenizer,
        image_processor=counter.image_processor,
    )
    recs, counts = _records(other, cache, data)
    assert counts.rows_counted == 5 and counts.files_from_cache == 0 and recs != before
    ref = qwen3vl_processor(counter.tokenizer, counter.image_processor)
    for row, rec in zip(rows, recs):
        images = [_open_image(it, ".") for it in row["images"]]
        messages = build_messages(row["prompt"], images)
        raw = ref.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        got = ref(text=[raw], images=[counter.pre_resize(im) for im in images], max_pixels=65536)
        assert rec[2] == len(got["input_ids"][0])


def test_a_tampered_entry_is_recounted(counter, shipped, tmp_path):
    rows = _rows(shipped)[:6]
    data = _write(rows, str(tmp_path / "six.parquet"))
    cache = open_cache_dir(str(tmp_path / "cache"))
    cold, _ = _records(counter, cache, data)
    (ns,) = [d for d in os.listdir(cache.root) if d.startswith("counts-")]
    (name,) = os.listdir(os.path.join(cache.root, ns))
    entry = os.path.join(cache.root, ns, name)
    head, body = open(entry, "rb").read().split(b"\n", 1)
    doc = json.loads(body)
    doc["records"][2][2] = 1  # row 2 now "fits" anything
    with open(entry, "wb") as fh:
        fh.write(head + b"\n" + json.dumps(doc, separators=(",", ":")).encode())
    again, counts = _records(counter, cache, data)
    assert again == cold and again[2][2] > 1
    assert counts.rows_counted == 6 and counts.files_from_cache == 0 and cache.rejected >= 1
    # a truncated (corrupt) entry: the same
    with open(entry, "r+b") as fh:
        fh.truncate(100)
    again, counts = _records(counter, cache, data)
    assert again == cold and counts.rows_counted == 6


@pytest.mark.parametrize("fault", ["group-writable", "other-owner", "symlink"])
def test_an_untrusted_cache_folder_is_refused(tmp_path, fault):
    folder = tmp_path / "cache"
    folder.mkdir(mode=0o700)
    if fault == "group-writable":
        os.chmod(folder, 0o770)
    elif fault == "other-owner":
        if os.getuid() != 0:
            pytest.skip("chown to another uid needs root")
        os.chown(folder, 65534, 65534)
    else:
        real = tmp_path / "real"
        real.mkdir(mode=0o700)
        folder.rmdir()
        folder.symlink_to(real)
    with pytest.raises(CacheRefused):
        open_cache_dir(str(folder))
    assert not os.path.exists(os.path.join(str(folder), "key"))


def test_preflight_refuses_an_untrusted_folder_and_reads_a_trusted_one(fixed_argv, tmp_path):
    """Through the preflight: a group-writable --cache-dir is a data.count-cache warning and every row is counted
    (the counts equal the cached run's); a trusted folder is written on the first run and read on the second."""
    argv = set_override(fixed_argv, "data.val_files", None)  # train only: 20 rows, one file
    bad = tmp_path / "shared"
    bad.mkdir()
    os.chmod(bad, 0o777)
    refused = run_preflight(argv, cache_dir=str(bad))
    (warning,) = [f for f in refused.findings if f.code == "data.count-cache"]
    assert "writable by group or others" in warning.what and warning.severity == "warning"
    info = refused.summary["data"]["count_cache"]
    assert info["state"].startswith("refused") and info["rows_counted"] == 20 and os.listdir(bad) == []
    good = str(tmp_path / "mine")
    first = run_preflight(argv, cache_dir=good)
    second = run_preflight(argv, cache_dir=good)
    assert first.summary["data"]["count_cache"]["rows_counted"] == 20
    warm = second.summary["data"]["count_cache"]
    assert (warm["files_from_cache"], warm["rows_counted"], warm["rows_reused"]) == (1, 0, 20)
    assert first.summary["data"]["train"] == second.summary["data"]["train"] == refused.summary["data"]["train"]
    assert oct(os.stat(good).st_mode & 0o777) == "0o700"


def _comparable(report) -> dict:
    doc = json.loads(report.to_json())
    summary = {k: v for k, v in doc["summary"].items() if k not in ("timings_s", "checks", "compose_cache")}
    summary["data"] = {k: v for k, v in summary.get("data", {}).items() if k != "count_cache"}
    return {"findings": doc["findings"], "summary": summary}


def test_the_composed_config_is_cached_by_the_argv_and_verified(fixed_argv, tmp_path):
    """The second run of one argv takes the composed config from the cache (summary compose_cache: hit) and reports
    exactly what the first reported; another argv misses; a tampered entry is not used (composed again)."""
    from vlgrpo.preflight.launch import parse_launch
    from vlgrpo.preflight.schema import compose_cache_key

    argv = set_override(fixed_argv, "trainer.logger", "[console,nope]")  # one finding from the composed config
    cache = str(tmp_path / "cache")
    first = run_preflight(argv, check_data=False, cache_dir=cache)
    second = run_preflight(argv, check_data=False, cache_dir=cache)
    assert (first.summary["compose_cache"], second.summary["compose_cache"]) == ("miss", "hit")
    assert _comparable(first) == _comparable(second) and [f.code for f in second.errors] == ["rules.logger"]
    other = run_preflight(set_override(argv, "data.max_prompt_length", "1024"), check_data=False, cache_dir=cache)
    assert other.summary["compose_cache"] == "miss" and other.summary["token_budget"]["max_prompt_length"] == 1024
    entry = os.path.join(cache, "compose", compose_cache_key(parse_launch(argv)) + ".json")
    text = open(entry, encoding="utf-8").read()
    assert "max_prompt_length: 2048" in text
    with open(entry, "w", encoding="utf-8") as fh:
        fh.write(text.replace("max_prompt_length: 2048", "max_prompt_length: 99999"))
    third = run_preflight(argv, check_data=False, cache_dir=cache)
    assert third.summary["compose_cache"] == "miss" and _comparable(third) == _comparable(first)
