"""``python -m vlgrpo preflight``: check a launch argv before Ray starts.

Usage::

    python -m vlgrpo preflight --argv-file FILE [--json] [--no-data] [--model-path P] [--devices-per-node N]
    python -m vlgrpo preflight [--module M] [options] -- override1 override2 ...

``FILE`` holds the complete final argv, one element per line (``python3``, ``-m``, the module, then every
Hydra argument). Without ``--argv-file`` the overrides after ``--`` are checked as
``python3 -m <--module, default fully-async> <overrides>``.

Output: one line per finding (``SEVERITY [code] where: what -- why: ... -- fix: ...``) and a short summary;
``--json`` prints the report as one JSON document instead. Exit status: 0 clean (warnings allowed),
2 findings or invalid input, 1 internal error.
"""

from __future__ import annotations

import argparse
import sys

from .launch import FULLY_ASYNC_MODULE, KNOWN_MODULES, LaunchError, read_argv_file


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return value


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m vlgrpo preflight", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--argv-file", help="file with the complete launch argv, one element per line")
    p.add_argument("--module", default=FULLY_ASYNC_MODULE, choices=sorted(KNOWN_MODULES),
                   help="verl module for overrides given after -- (default: fully async)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--no-data", action="store_true", help="skip reading the parquet files and counting tokens")
    p.add_argument("--model-path", help="check this model folder instead of actor_rollout_ref.model.path")
    p.add_argument("--devices-per-node", type=_positive_int,
                   help="accelerators per node (default: detect on this machine)")
    p.add_argument("--progress", choices=("auto", "on", "off"), default="auto",
                   help="progress bar on stderr while counting tokens (auto: when stderr is a terminal)")
    p.add_argument("overrides", nargs="*", help="Hydra overrides (after --) when no --argv-file is given")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    if args.argv_file:
        if args.overrides:
            print("preflight: give either --argv-file or overrides after --, not both", file=sys.stderr)
            return 2
        try:
            launch = read_argv_file(args.argv_file)
        except (OSError, LaunchError) as exc:
            print(f"preflight: cannot read --argv-file: {exc}", file=sys.stderr)
            return 2
    else:
        launch = ["python3", "-m", args.module, *args.overrides]
    progress = {"on": True, "off": False}.get(args.progress, sys.stderr.isatty() and not args.json)
    from .api import run_preflight

    report = run_preflight(launch, check_data=not args.no_data, model_path=args.model_path,
                           devices_per_node=args.devices_per_node, progress=progress)
    if args.json:
        print(report.to_json())
    else:
        print(report.to_text())
        if report.internal_error:
            print(report.internal_error, file=sys.stderr)
    return report.exit_code


if __name__ == "__main__":
    sys.exit(main())
