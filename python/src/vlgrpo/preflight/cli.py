"""``python -m vlgrpo preflight``: check a launch argv before Ray starts.

Usage::

    python -m vlgrpo preflight --argv-file FILE [--purpose launch|plan] [--json] [--no-data] [--model-path P]
                               [--devices-per-node N [--devices-source node|plan]] [--cache-dir DIR]
    python -m vlgrpo preflight [--module M] [options] -- override1 override2 ...
    python -m vlgrpo preflight codes [--json]    # every check and finding code it can report

``FILE`` holds the complete final argv, one element per line (``python3``, ``-m``, the module, then every
Hydra argument). Without ``--argv-file`` the overrides after ``--`` are checked as
``python3 -m <--module, default fully-async> <overrides>``.

Output: one line per finding (``SEVERITY [code] where: what -- why: ... -- fix: ...``) and a short summary;
``--json`` prints the report as one JSON document instead. Exit status: 0 clean (warnings allowed),
2 findings or invalid input, 1 internal error. With ``--waive`` (the entrypoints pass it for
``VLGRPO_PREFLIGHT=warn``): 3 when every error finding is one that cannot run code (reported, waived), 2 when one
is about code the launch would run (its code is declared ``runs_code``, or not declared at all) or when a check
that looks for such code did not run; no switch waives those.

``codes`` prints the checks in the order they run (inputs, what each checks) and every finding code with its
severity, what it means and the checks that can give it; nothing is checked.
"""

from __future__ import annotations

import argparse
import sys

from .api import PURPOSES
from .report import Report
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
    p = argparse.ArgumentParser(
        prog="python -m vlgrpo preflight",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="`python -m vlgrpo preflight codes` lists every check and finding code.",
    )
    p.add_argument("--argv-file", help="file with the complete launch argv, one element per line")
    p.add_argument(
        "--module",
        default=FULLY_ASYNC_MODULE,
        choices=sorted(KNOWN_MODULES),
        help="verl module for overrides given after -- (default: fully async)",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--no-data", action="store_true", help="skip reading the parquet files and counting tokens")
    p.add_argument("--model-path", help="check this model folder instead of actor_rollout_ref.model.path")
    p.add_argument(
        "--devices-per-node", type=_positive_int, help="accelerators per node (default: detect on this machine)"
    )
    p.add_argument(
        "--devices-source",
        choices=("node", "plan"),
        default="node",
        help="node (default): --devices-per-node is this node's count; plan: a planning count for other "
        "machines (a layout larger than one node without a Ray address is then a warning)",
    )
    p.add_argument(
        "--purpose",
        choices=PURPOSES,
        default="launch",
        help="launch (default: the argv is exec'd next) or plan (a dry run): less free space than one "
        "checkpoint is an error for a launch, a warning for a plan",
    )
    p.add_argument(
        "--waive",
        action="store_true",
        help="exit 3 instead of 2 when no error finding is about code the launch would run",
    )
    p.add_argument(
        "--progress",
        choices=("auto", "on", "off"),
        default="auto",
        help="progress bar on stderr while counting tokens (auto: when stderr is a terminal)",
    )
    p.add_argument(
        "--vllm-rules",
        choices=("mirror", "vllm"),
        default="mirror",
        help="vLLM engine-config rules: as mirrored by vlgrpo (default, no vLLM import) or by vLLM's own "
        "config classes (needs vLLM installed)",
    )
    p.add_argument(
        "--cache-dir",
        metavar="DIR",
        help="folder of the token-count cache (default: <trainer.default_local_dir>/.vlgrpo-preflight-cache; "
        "'' for none). Refused unless it is yours or root's, not a symlink, not group/other-writable",
    )
    p.add_argument("overrides", nargs="*", help="Hydra overrides (after --) when no --argv-file is given")
    return p


def print_codes(as_json: bool = False) -> int:
    """The ``codes`` subcommand: the checks and the finding-code table, from their declarations."""
    import json

    from .checks import CHECKS, code_rows

    rows = code_rows()
    checks = [
        {"check": c.name, "needs": list(c.needs), "gives": list(c.gives), "codes": list(c.codes), "doc": c.doc}
        for c in CHECKS
    ]
    if as_json:
        print(json.dumps({"checks": checks, "codes": rows}, indent=2))
        return 0
    print("checks, in order (a check whose inputs are missing is skipped with the reason):")
    for i, c in enumerate(checks, 1):
        print(f"  {i:2d}. {c['check']:<20} {c['doc']}")
        print(f"      needs: {', '.join(c['needs'])}" + (f"; gives: {', '.join(c['gives'])}" if c["gives"] else ""))
    print("\nfinding codes (severity; what; given by):")
    width = max(len(r["code"]) for r in rows)
    for r in rows:
        flag = " [code loading]" if r["runs_code"] else ""
        print(f"  {r['code']:<{width}}  {r['severity']:<13} {r['summary']}{flag} ({', '.join(r['checks'])})")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["codes"]:
        extra = [a for a in argv[1:] if a != "--json"]
        if extra:
            print(f"preflight codes: unknown argument(s) {' '.join(extra)} (allowed: --json)", file=sys.stderr)
            return 2
        return print_codes("--json" in argv[1:])
    args = _parser().parse_args(argv)
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

    report = run_preflight(
        launch,
        check_data=not args.no_data,
        model_path=args.model_path,
        devices_per_node=args.devices_per_node,
        progress=progress,
        purpose=args.purpose,
        vllm_rules=args.vllm_rules,
        cache_dir=args.cache_dir,
        devices_source=args.devices_source,
    )
    if args.json:
        print(report.to_json())
    else:
        print(report.to_text())
        if report.internal_error:
            print(report.internal_error, file=sys.stderr)
    if args.waive and report.exit_code == 2:
        keep = unwaivable(report)
        for why in keep:
            print(f"preflight: not waivable: {why}", file=sys.stderr)
        return 2 if keep else 3
    return report.exit_code


def unwaivable(report: Report) -> list[str]:
    """Why the error findings of ``report`` cannot be waived (empty when they can): each error whose code is
    declared ``runs_code`` or that says so itself (``Finding.runs_code``) (or is not declared, so nothing says it
    cannot run code), and each skipped or crashed
    check that can report a ``runs_code`` finding (it did not look)."""
    from .checks import CHECKS, CODES

    out = [
        f"[{f.code}] {f.what}" for f in report.errors if f.runs_code or f.code not in CODES or CODES[f.code].runs_code
    ]
    by_name = {c.name: c for c in CHECKS}
    for entry in report.summary.get("checks") or []:
        check = by_name.get(entry.get("check"))
        if entry.get("status") != "ran" and check and any(CODES[c].runs_code for c in check.codes if c in CODES):
            out.append(
                f"the check {check.name} did not run ({entry.get('reason') or entry.get('status')}), so the "
                f"launch's code-loading settings or files were not checked"
            )
    return out


if __name__ == "__main__":
    sys.exit(main())
