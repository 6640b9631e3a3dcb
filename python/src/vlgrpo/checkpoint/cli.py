"""``python -m vlgrpo checkpoint <trust|verify|resume-check>``: the checkpoint folder as an input (field case C03).

trust DIR         after you checked a ``global_step_N`` folder written before vlgrpo's checkpoint patch (or copied
                  from elsewhere), record every file not yet listed (sha256, size) in ``vlgrpo-manifest-trusted.json``
                  so that a resume accepts it. Refuses symlinks and files of another owner.
verify DIR        the checks a resume runs (owners, modes, names, sizes), plus the sha256 of every file with
                  ``--hash`` (the job hashes only what each rank reads).
resume-check      the folder a run with ``--checkpoint-dir/--mode/--from`` would resume from, checked without
                  hashing (the entrypoints and the preflight call this before anything starts).

Exit 0 accepted, 2 refused (the message names the file and the fix), 1 anything else.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from vlgrpo.checkpoint import manifest, resume
from vlgrpo.text import one_line


def _say(text: str, err: bool = False) -> None:
    """Print ``text`` as one line (paths escaped by :func:`vlgrpo.text.one_line`: a newline or an escape sequence in
    a folder name cannot split or rewrite the message)."""
    print(one_line(text), file=sys.stderr if err else sys.stdout)


def _verl_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("verl")
    except Exception:
        return None


def _trust(args: argparse.Namespace) -> int:
    path = manifest.trust(args.dir, verl_version=_verl_version())
    listed = manifest.inventory(args.dir)
    _say(f"trusted {args.dir}: {len(listed)} files listed; wrote {path}")
    return 0


def _verify(args: argparse.Namespace) -> int:
    listed = manifest.inventory(args.dir)
    read = sorted(listed) if args.hash else []
    res = manifest.verify(args.dir, read)
    if args.json:
        print(json.dumps(res))
    else:
        _say(
            f"ok: {args.dir}: {res['files']} files listed, {len(res['hashed'])} hashed "
            f"({res['bytes_hashed'] / 1e9:.3f} GB)"
        )
    return 0


def _resume_check(args: argparse.Namespace) -> int:
    folder = resume.resume_folder(args.checkpoint_dir, args.mode, args.resume_from)
    if folder is None:
        _say("fresh start: nothing to resume from")
        return 0
    listed = manifest.inventory(folder)
    _say(f"ok: resumes from {folder} ({len(listed)} files listed in its manifests)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m vlgrpo checkpoint", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("trust", help="record the files of a checked global_step_N folder in a manifest")
    p.add_argument("dir")
    p.set_defaults(func=_trust)
    p = sub.add_parser("verify", help="check a global_step_N folder against its manifests")
    p.add_argument("dir")
    p.add_argument("--hash", action="store_true", help="also compare the sha256 of every file")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_verify)
    p = sub.add_parser("resume-check", help="check the folder a run would resume from (no hashing)")
    p.add_argument("--checkpoint-dir", required=True, help="trainer.default_local_dir")
    p.add_argument("--mode", required=True, choices=("auto", "disable", "resume_path"), help="trainer.resume_mode")
    p.add_argument("--from", dest="resume_from", default=None, help="trainer.resume_from_path")
    p.set_defaults(func=_resume_check)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except manifest.CheckpointRefused as exc:
        _say(str(exc), err=True)
        return 2
    except OSError as exc:
        _say(f"vlgrpo checkpoint: {exc}", err=True)
        return 2 if not os.path.exists(getattr(exc, "filename", "") or "") else 1
