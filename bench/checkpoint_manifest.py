"""Cost of the ``checkpoint.manifest`` patch: what hashing adds to a save and a resume, per rank.

Each FSDP rank hashes only its own three files (model, optimizer, extra state) with
:func:`vlgrpo.checkpoint.manifest.write_part` after verl saved them, and before loading with
:func:`vlgrpo.checkpoint.manifest.verify`; both first run the cheap checks (:func:`~vlgrpo.checkpoint.manifest.inventory`:
one ``lstat`` per file and the manifest parts) over the whole ``global_step_N`` folder. Contenders, side by side on
the same files in one run, first pass and steady state (page cache warm after the first read):

- ``read``: plain ``readinto`` of the three files, one after another (the I/O floor; what ``torch.load`` reads anyway);
- ``serial``: :func:`~vlgrpo.checkpoint.manifest.write_part` / :func:`~vlgrpo.checkpoint.manifest.verify` with
  ``workers=1``, the files hashed one after another (before);
- ``thread pool``: the same calls with the default workers (``min(8, CPUs)``), the files hashed at the same time in a
  thread pool (after; what the patch runs: ``hashlib`` releases the GIL while it hashes a buffer);
- ``inventory``: the cheap checks over a folder laid out like the recipe's checkpoint (``--ranks`` ranks x 3 shard
  files, ``fsdp_config.json``, a ``huggingface/`` folder, ``data.pt``), no hashing.

Rank 0's files have the 30B model's proportions: the optimizer shard (two fp32 AdamW moments) twice the model shard
(fp32 weights), the extra state 15 KiB; a thread pool over the files is bounded by the largest, so at best it takes
2/3 of the serial time.

Per-rank sizes of the 30B model: Qwen3-VL-30B-A3B has 31.07e9 parameters (transformers' own class on the meta
device, tests/python/preflight's B19 test); verl's FSDP2 shards hold fp32 weights (4 B/param) and AdamW's two fp32
moments (8 B/param), ~373 GB per checkpoint; per rank that is 373 GB / world size: 11.7 GB on the fully-async
recipe's default 32 trainer devices (2 A3 nodes x 16), 23.3 GB on 16 (2 nodes x 8 GPUs). Seconds added =
per-rank bytes / the measured sha256 x3 rate (save: the files were just written; resume: one extra read when the
files are not in the page cache -- then the read rate of the storage bounds both).

Usage: ``python bench/checkpoint_manifest.py [--mib 512] [--ranks 32] [--dir DIR] [--markdown]`` (``DIR`` on the
storage to measure; default a temporary folder). Prints one table.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "src"))

from vlgrpo.checkpoint import manifest

PARAMS_30B = 31.07e9
BYTES_PER_PARAM = 4 + 8  # fp32 weights + AdamW exp_avg/exp_avg_sq


def _read(path, chunk=manifest.CHUNK):
    buf = bytearray(chunk)
    with open(path, "rb", buffering=0) as fh:
        while fh.readinto(buf):
            pass


def _timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _layout(root, ranks, mib):
    step = os.path.join(root, "global_step_5")
    actor = os.path.join(step, "actor")
    os.makedirs(os.path.join(actor, "huggingface"))
    big = []
    block = os.urandom(1 << 20)
    for r in range(ranks):
        for kind in ("model", "optim", "extra_state"):
            path = os.path.join(actor, f"{kind}_world_size_{ranks}_rank_{r}.pt")
            with open(path, "wb") as fh:
                if r == 0 and kind != "extra_state":  # rank 0's two big files: the 30B model's 1 : 2
                    for _ in range(mib * (2 if kind == "optim" else 1)):
                        fh.write(block)
                elif r == 0:
                    fh.write(block[: 15 << 10])
                else:
                    fh.write(b"x")
            if r == 0:
                big.append(path)
    for name in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        with open(os.path.join(actor, "huggingface", name), "w") as fh:
            fh.write("{}")
    with open(os.path.join(actor, "fsdp_config.json"), "w") as fh:
        fh.write("{}")
    with open(os.path.join(step, "data.pt"), "wb") as fh:
        fh.write(block[:7000])
    return step, big


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=512, help="size of rank 0's model file (MiB; its optimizer file: twice)")
    ap.add_argument("--ranks", type=int, default=32, help="ranks in the folder laid out for the inventory")
    ap.add_argument("--dir", default=None, help="folder on the storage to measure (default: a temporary folder)")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        step, files = _layout(tmp, args.ranks, args.mib)
        mine = list(files)  # rank 0: model, optim, extra_state
        total = sum(os.path.getsize(p) for p in mine)
        part, rel = "actor-rank-00000", [os.path.relpath(p, step) for p in mine]
        rows = []
        for attempt in ("first", "steady"):
            t_read = _timed(lambda: [_read(p) for p in mine])
            t_w1 = _timed(lambda: manifest.write_part(step, mine, part, workers=1))
            t_wn = _timed(lambda: manifest.write_part(step, mine, part))
            rows.append((attempt, t_read, t_w1, t_wn))
        others = [
            os.path.join(step, "actor", n)
            for n in sorted(os.listdir(os.path.join(step, "actor")))
            if os.path.isfile(os.path.join(step, "actor", n)) and os.path.join(step, "actor", n) not in mine
        ]
        others += [
            os.path.join(step, "actor", "huggingface", n)
            for n in os.listdir(os.path.join(step, "actor", "huggingface"))
        ]
        manifest.write_part(step, others, "others")
        manifest.write_part(step, [os.path.join(step, "data.pt")], "rollouter")
        t_inv = min(_timed(lambda: manifest.inventory(step)) for _ in range(5))
        t_v1 = _timed(lambda: manifest.verify(step, rel, workers=1))
        t_vn = _timed(lambda: manifest.verify(step, rel))
    gb = total / 1e9
    steady_rate = gb / rows[-1][3]
    lines = [
        f"machine: {platform.node()} ({os.cpu_count()} CPUs), Python {platform.python_version()}; files on "
        f"{args.dir or tempfile.gettempdir()}; rank 0 hashes {gb:.3f} GB ({len(mine)} files)",
        "",
    ]
    lines += [
        "| pass | read GB/s | write_part serial GB/s (before) | write_part thread pool GB/s (after) |",
        "|---|---|---|---|",
    ]
    for attempt, t_read, t_w1, t_wn in rows:
        lines.append(
            f"| {attempt} | {gb / t_read:.2f} | {gb / t_w1:.2f} ({t_w1:.2f} s) | {gb / t_wn:.2f} ({t_wn:.2f} s) |"
        )
    lines += [
        "",
        f"- verify before load (inventory of {args.ranks} ranks x 3 files + hashes of rank 0's): serial "
        f"{t_v1:.2f} s = {gb / t_v1:.2f} GB/s, thread pool {t_vn:.2f} s = {gb / t_vn:.2f} GB/s",
        f"- inventory alone (cheap checks, {args.ranks * 3 + 7} files): {t_inv * 1e3:.1f} ms",
        "",
    ]
    lines += [
        "| trainer devices | per-rank shard bytes (30B, fp32 + AdamW) | seconds added to a save | to a resume |",
        "|---|---|---|---|",
    ]
    for world in (16, 32, 64):
        per_rank = PARAMS_30B * BYTES_PER_PARAM / world / 1e9
        lines.append(
            f"| {world} | {per_rank:.1f} GB | {per_rank / steady_rate:.1f} | {per_rank / steady_rate + t_inv:.1f} |"
        )
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
