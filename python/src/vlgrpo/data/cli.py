"""``python -m vlgrpo data <converter> ...``.

    python -m vlgrpo data geo3k SRC OUT [--splits train,test] [--layout auto|hiyouga|original]

Writes ``OUT/<split>.parquet`` in verl's RL format (see :mod:`vlgrpo.data.geo3k`). Exit status: 0 written,
2 invalid input (unrecognised SRC, unknown split), 1 other failure.
"""

from __future__ import annotations

import argparse
import sys


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m vlgrpo data", description="dataset converters")
    sub = p.add_subparsers(dest="converter", required=True)
    g = sub.add_parser("geo3k", help="Geometry3K (hiyouga/geometry3k parquet or original folders) -> verl parquet")
    g.add_argument("src", help="hiyouga/geometry3k folder (data/*.parquet) or original train/val/test folders")
    g.add_argument("out", help="output folder for <split>.parquet")
    g.add_argument(
        "--splits",
        default="train,test",
        help="comma-separated splits to write (train, validation, test); verl's script writes train,test",
    )
    g.add_argument("--layout", default="auto", choices=("auto", "hiyouga", "original"))
    g.add_argument(
        "--data-source",
        default=None,
        help="data_source value (default hiyouga/geometry3k, which "
        "verl's default reward function maps to its geo3k scorer)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    try:
        args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as exc:
        return 0 if exc.code == 0 else 2
    from . import geo3k

    splits = tuple(s.strip() for s in args.splits.split(",") if s.strip())
    try:
        counts = geo3k.convert(
            args.src, args.out, splits=splits, layout=args.layout, data_source=args.data_source or geo3k.DATA_SOURCE
        )
    except (geo3k.SourceError, ValueError) as exc:
        print(f"data geo3k: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"data geo3k: {exc}", file=sys.stderr)
        return 1
    for split, n in counts.items():
        print(f"[{split}] wrote {n} rows to {args.out}/{split}.parquet")
    return 0


if __name__ == "__main__":
    sys.exit(main())
