"""``python -m vlgrpo <command> ...``: dispatch to a sub-command module, imported only when asked for.

Each sub-command module exposes ``main(argv: list[str]) -> int``. Exit codes: 0 success, 2 findings or
invalid input (a missing or unknown command too), 1 any other failure. ``--version`` prints vlgrpo's version,
the stack it was pinned for (the image's build manifest ``/opt/vlgrpo/build-manifest.json``, else the checkout's
``docker/pins.env``) and what this interpreter has installed of it.
"""

from __future__ import annotations

import importlib
import json
import os
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
    lines = ["usage: python -m vlgrpo <command> [options]   (or --help, --version)", "", "commands:"]
    lines += [f"  {name:<10} {help_}" for name, (_, help_) in COMMANDS.items()]
    return "\n".join(lines)


# The pinned components --version reports: (label, distribution name, docker/pins.env key of the pinned version).
STACK = (
    ("verl", "verl", "VERL_VERSION"),
    ("VeOmni", "veomni", "VEOMNI_VERSION"),
    ("transformers", "transformers", "TRANSFORMERS_VERSION"),
    ("Ray", "ray", "RAY_VERSION"),
    ("hydra-core", "hydra-core", "HYDRA_VERSION"),
    ("omegaconf", "omegaconf", "OMEGACONF_VERSION"),
    ("tensordict", "tensordict", "TENSORDICT_VERSION"),
    ("torch (NVIDIA image)", "torch", "GPU_TORCH"),
    ("vLLM (NVIDIA image)", "vllm", "GPU_VLLM"),
    ("torch (Ascend image)", "torch", "NPU_TORCH"),
    ("torch-npu (Ascend image)", "torch-npu", "NPU_TORCH_NPU"),
    ("CANN (Ascend image)", None, "NPU_CANN"),
)
MANIFEST = "/opt/vlgrpo/build-manifest.json"


def _read_pins(path: str) -> dict[str, str]:
    """KEY=VALUE lines of a pins file (docker/pins.env's format: no quotes, '#' comments) as a dict."""
    pins: dict[str, str] = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                key, value = line.split("=", 1)
                pins[key] = value
    return pins


def _pins() -> tuple[dict[str, str], str]:
    """The pinned versions and where they were read: the image's build manifest (its ``pins``), else the
    checkout's docker/pins.env next to this package's source tree; ``({}, reason)`` when neither exists."""
    try:
        with open(MANIFEST, encoding="utf-8") as fh:
            pins = json.load(fh).get("pins")
        if isinstance(pins, dict):
            return {str(k): str(v) for k, v in pins.items()}, MANIFEST
    except (OSError, ValueError, AttributeError):
        pass
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.normpath(os.path.join(here, "..", "..", "..", "docker", "pins.env"))
    try:
        return _read_pins(path), path
    except OSError:
        return {}, f"no {MANIFEST} and no docker/pins.env beside this package"


def version_text() -> str:
    """What ``python -m vlgrpo --version`` prints: one line for vlgrpo, then one per pinned component with
    the pinned version and the version installed in this interpreter (``-`` when not installed)."""
    import importlib.metadata as md

    from vlgrpo import __version__

    pins, source = _pins()
    lines = [f"vlgrpo {__version__} (python {sys.version.split()[0]}, {sys.executable})", f"pinned stack ({source}):"]
    for label, dist, key in STACK:
        installed = "-"
        if dist is not None:
            try:
                installed = md.version(dist)
            except md.PackageNotFoundError:
                pass
        lines.append(f"  {label:<26} pinned {pins.get(key, '?'):<12} installed here {installed}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    if argv and argv[0] in ("-V", "--version"):
        print(version_text())
        return 0
    if not argv:
        print(f"vlgrpo: no command given\n\n{_usage()}", file=sys.stderr)
        return 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"vlgrpo: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
