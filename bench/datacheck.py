"""Wall time of the preflight's data check (``vlgrpo.preflight.dataset.check_data``): cold (empty count cache) and
warm (the same files again), on synthetic files built from the shipped Geometry3K sample.

Usage::

    .venv/bin/python bench/datacheck.py [--work DIR] [--sets geo3k,100k] [--verify] [--baseline-rows N]

Data sets (built once into ``--work``, default ``/tmp/vlgrpo-bench-datacheck``, reused by later runs):

- ``geo3k``: the size of the full Geometry3K (train 2,101 + validation 300 + test 601 = 3,002 rows, three files),
  each row one of the 40 shipped sample rows with its diagram resized to a random size (28-1,000 px a side, every
  row its own PNG);
- ``100k``: one 100,000-row file; rows cycle through 2,000 resized diagrams (48-640 px a side) and carry the sample
  questions with a row number appended, so every row (and its hash) differs.

Each set is checked as the preflight does (the 30B folder's tokenizer and image processor, ``data.image_patch_size``
16, ``filter_overlong_prompts=True``, ``max_prompt_length`` 2048), cold into a fresh cache folder, then warm
``--warm-runs`` times. The counter is built before the clock starts (the preflight's earlier checks load it anyway);
the scorer lookup per data source is left out (``custom_reward``: it imports verl). ``--verify`` also counts every
``geo3k`` row the decoding way (``count_row(fast=False)``, the reference path, today's code) and asserts that each
record equals the cached one. ``--baseline-rows N`` times the decoding path on the first N rows of the ``geo3k``
train file (rows/s of the count before this change).

Prints one Markdown table row per set and pass, with the machine's CPU count and load average.
"""

from __future__ import annotations

import argparse
import io
import os
import random
import shutil
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(REPO, "python", "src"))
MODEL = os.path.join(REPO, "assets", "models", "qwen3-vl-30b-a3b-instruct")
SAMPLE = os.path.join(REPO, "assets", "geo3k-sample", "hiyouga-geometry3k-format")
GEO3K_SPLITS = (("train", 2101), ("validation", 300), ("test", 601))


def _sample_rows() -> list[dict]:
    import pyarrow.parquet as pq

    from vlgrpo.data.geo3k import convert

    with tempfile.TemporaryDirectory() as tmp:
        convert(SAMPLE, tmp, splits=("train", "validation", "test"))
        rows = []
        for split, _ in GEO3K_SPLITS:
            rows += pq.read_table(os.path.join(tmp, f"{split}.parquet")).to_pylist()
    return rows


def _variant(row: dict, rng: random.Random, lo: int, hi: int) -> bytes:
    from PIL import Image

    image = Image.open(io.BytesIO(row["images"][0]["bytes"])).convert("RGB")
    image = image.resize((rng.randint(lo, hi), rng.randint(lo, hi)))
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def _write(rows: list[dict], path: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from vlgrpo.data.geo3k import arrow_schema

    with pq.ParquetWriter(path + ".tmp", arrow_schema()) as writer:
        for k in range(0, len(rows), 1024):
            writer.write_table(pa.Table.from_pylist(rows[k : k + 1024], schema=arrow_schema()), row_group_size=1024)
    os.replace(path + ".tmp", path)


def build_geo3k(work: str, sample: list[dict]) -> list[str]:
    out = os.path.join(work, "geo3k")
    os.makedirs(out, exist_ok=True)
    paths, rng, n = [], random.Random(3002), 0
    for split, count in GEO3K_SPLITS:
        path = os.path.join(out, f"{split}.parquet")
        paths.append(path)
        if os.path.isfile(path):
            continue
        rows = []
        for i in range(count):
            row = sample[(n + i) % len(sample)]
            rows.append({**row, "images": [{"bytes": _variant(row, rng, 28, 1000), "path": None}]})
        _write(rows, path)
        n += count
    return paths


def build_100k(work: str, sample: list[dict]) -> list[str]:
    path = os.path.join(work, "synthetic-100k.parquet")
    if not os.path.isfile(path):
        rng = random.Random(100000)
        pool = [_variant(sample[i % len(sample)], rng, 48, 640) for i in range(2000)]
        rows = []
        for i in range(100_000):
            row = sample[i % len(sample)]
            text = row["prompt"][0]["content"] + f" (Problem {i}.)"
            rows.append(
                {
                    **row,
                    "prompt": [{"role": "user", "content": text}],
                    "images": [{"bytes": pool[i % len(pool)], "path": None}],
                }
            )
        _write(rows, path)
    return [path]


def _work_config(files: list[str], cache_dir: str):
    from omegaconf import OmegaConf

    return OmegaConf.create(
        {
            "data": {
                "train_files": files,
                "val_files": [],
                "prompt_key": "prompt",
                "image_key": "images",
                "max_prompt_length": 2048,
                "filter_overlong_prompts": True,
                "image_patch_size": 16,
            },
            "actor_rollout_ref": {"rollout": {"prompt_length": 2048}},
            "trainer": {"default_local_dir": os.path.dirname(cache_dir)},
        }
    )


def check(files: list[str], cache_dir: str, counter) -> tuple[float, dict]:
    from vlgrpo.preflight.dataset import check_data
    from vlgrpo.preflight.report import Report
    from vlgrpo.preflight.rules import Locator

    report = Report()
    t0 = time.perf_counter()
    summary = check_data(
        _work_config(files, cache_dir),
        report,
        Locator(),
        counter,
        progress=True,
        custom_reward=True,
        cache_dir=cache_dir,
        model_path=MODEL,
    )
    return time.perf_counter() - t0, summary


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", default="/tmp/vlgrpo-bench-datacheck", help="folder for the synthetic files")
    p.add_argument("--sets", default="geo3k,100k", help="comma-separated: geo3k, 100k")
    p.add_argument("--warm-runs", type=int, default=3)
    p.add_argument("--verify", action="store_true", help="check every geo3k record against the decoding path")
    p.add_argument("--baseline-rows", type=int, default=0, help="time the decoding path on this many geo3k rows")
    args = p.parse_args()
    from vlgrpo.preflight.dataset import PromptCounter

    os.makedirs(args.work, exist_ok=True)
    t0 = time.perf_counter()
    sample = _sample_rows()
    builders = {"geo3k": build_geo3k, "100k": build_100k}
    sets = {name: builders[name](args.work, sample) for name in args.sets.split(",")}
    print(f"built/reused the data sets in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    print(
        f"{os.cpu_count()} CPUs, free for this process: {len(os.sched_getaffinity(0))}; load average (1 min) "
        f"{os.getloadavg()[0]:.2f} at start\n"
    )
    print(
        "| set | rows | MB | pass | wall s | rows/s | rows counted | rows reused | files from cache | "
        "largest prompt (tokens) | load (1 min) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, files in sets.items():
        cache_dir = os.path.join(args.work, f"cache-{name}", ".vlgrpo-preflight-cache")
        shutil.rmtree(os.path.dirname(cache_dir), ignore_errors=True)
        os.makedirs(os.path.dirname(cache_dir), mode=0o700)
        mb = sum(os.path.getsize(f) for f in files) / 1e6
        for label in ["cold"] + [f"warm {i + 1}" for i in range(args.warm_runs)]:
            counter = PromptCounter(MODEL, filter_patch_size=16)  # a fresh one: no size memo carried over
            wall, summary = check(files, cache_dir, counter)
            info, cc = summary["train"], summary["count_cache"]
            print(
                f"| {name} | {info['rows']} | {mb:.0f} | {label} | {wall:.2f} | {info['rows'] / wall:.0f} | "
                f"{cc['rows_counted']} | {cc['rows_reused']} | {cc['files_from_cache']} | "
                f"{info['largest_prompt']['tokens']} | {os.getloadavg()[0]:.2f} |",
                flush=True,
            )
        if name == "geo3k" and (args.verify or args.baseline_rows):
            verify(files, cache_dir, counter, args.verify, args.baseline_rows)
    return 0


def verify(files: list[str], cache_dir: str, counter, every_row: bool, baseline_rows: int) -> None:
    import pyarrow.parquet as pq

    from vlgrpo.preflight.count_cache import file_sha256, open_cache_dir
    from vlgrpo.preflight.dataset import RowCounts, count_row

    cache = open_cache_dir(cache_dir)
    counts = RowCounts(counter, "prompt", "images", True, cache, model_path=MODEL)
    if baseline_rows:
        rows = pq.read_table(files[0]).slice(0, baseline_rows).to_pylist()
        t0 = time.perf_counter()
        for row in rows:
            count_row(counter, row, "prompt", "images", True, ".", True, fast=False)
        wall = time.perf_counter() - t0
        print(
            f"\ndecoding path (the count before this change), {len(rows)} rows: {wall:.1f} s, "
            f"{len(rows) / wall:.1f} rows/s, {1000 * wall / len(rows):.1f} ms/row"
        )
    if every_row:
        n = 0
        for path in files:
            entry = cache.get(counts.namespace, file_sha256(path))
            rows = pq.read_table(path, columns=["prompt", "images", "data_source"]).to_pylist()
            assert entry is not None and len(entry["records"]) == len(rows)
            for row, rec in zip(rows, entry["records"]):
                assert count_row(counter, row, "prompt", "images", True, ".", True, fast=False) == rec, (path, row)
                n += 1
        print(f"\nverified: all {n} cached records equal the decoding path's (PromptCounter.count)")


if __name__ == "__main__":
    sys.exit(main())
