"""``python -m vlgrpo <command> ...``: dispatch to a sub-command module, imported only when asked for.

Each sub-command module exposes ``main(argv: list[str]) -> int``. Exit codes: 0 success, 2 findings or
invalid input, 1 any other failure.
"""

from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "patches": ("vlgrpo.patches.cli", "runtime patch status and self-test"),
    "preflight": ("vlgrpo.preflight.cli", "check a launch argv against the pinned verl, the model and the data"),
    "checkpoint": ("vlgrpo.checkpoint.cli", "trust/verify checkpoint folders (manifests of sha256 sums)"),
    "data": ("vlgrpo.data.cli", "dataset converters (geo3k -> verl parquet)"),
    "doctor": ("vlgrpo.doctor", "check this node/image: versions, devices, mounts, patches"),
    "cluster": ("vlgrpo.cluster", "Ray cluster readiness wait and per-node device-visibility probe"),
    "devices": ("vlgrpo.devices", "count this node's accelerators and those this process may use"),
}


def _usage() -> str:
    lines = ["usage: python -m vlgrpo <command> [options]", "", "commands:"]
    lines += [f"  {name:<10} {help_}" for name, (_, help_) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"vlgrpo: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
