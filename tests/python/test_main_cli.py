"""``python -m vlgrpo`` itself: a missing command is an error (exit 2), ``--version`` reports the pinned stack.

The reference for the pinned versions is docker/pins.env read here with a regular expression, and for the
installed ones importlib.metadata of the interpreter running the command.
"""

from __future__ import annotations

import importlib.metadata as md
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vlgrpo", *args], capture_output=True, text=True, timeout=60)


def test_no_command_is_a_usage_error():
    r = _run()
    assert r.returncode == 2
    assert "no command given" in r.stderr and "usage: python -m vlgrpo" in r.stderr
    assert r.stdout == ""


def test_help_still_exits_0():
    r = _run("--help")
    assert r.returncode == 0 and "commands:" in r.stdout


def test_version_names_the_pins_and_what_is_installed():
    r = _run("--version")
    assert r.returncode == 0, r.stderr
    first, *rest = r.stdout.splitlines()
    pyproject = (ROOT / "python" / "pyproject.toml").read_text()
    assert first.startswith("vlgrpo " + re.search(r'^version = "([^"]+)"', pyproject, re.M).group(1) + " ")
    pins = dict(re.findall(r"^([A-Z0-9_]+)=(\S+)$", (ROOT / "docker" / "pins.env").read_text(), re.M))
    text = "\n".join(rest)
    for label, key in (
        ("verl", "VERL_VERSION"),
        ("transformers", "TRANSFORMERS_VERSION"),
        ("Ray", "RAY_VERSION"),
        ("torch (NVIDIA image)", "GPU_TORCH"),
        ("CANN (Ascend image)", "NPU_CANN"),
    ):
        line = next(ln for ln in rest if ln.strip().startswith(label + " "))
        assert f"pinned {pins[key]} " in line, (label, line)
    line = next(ln for ln in rest if ln.strip().startswith("transformers "))
    assert line.rstrip().endswith("installed here " + md.version("transformers")), line
    assert "docker/pins.env" in text or "build-manifest.json" in text


def test_unknown_command_exits_2():
    r = _run("launch-everything")
    assert r.returncode == 2 and "unknown command" in r.stderr
