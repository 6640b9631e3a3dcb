"""Shared helpers for the patch tests: run Python in fresh interpreters with the sitecustomize shim."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SHIM = REPO / "python" / "sitecustomize.py"
NPU_STUB = REPO / "tests" / "python" / "npu_stub"
VERL_071 = REPO / ".cache" / "verl-0.7.1"
VEOMNI = REPO / ".cache" / "veomni-0.1.9a5"
SCENARIOS = Path(__file__).resolve().parent / "scenarios"
MODEL_CONFIG = REPO / "assets" / "models" / "qwen3-vl-30b-a3b-instruct" / "config.json"


def make_shim_dir(d: Path) -> Path:
    """``d`` (created) holding only the real sitecustomize shim (put first on PYTHONPATH = loaded at start-up)."""
    d.mkdir(exist_ok=True)
    shutil.copy(SHIM, d / "sitecustomize.py")
    return d


@pytest.fixture
def shim_dir(tmp_path):
    """A directory holding only the real sitecustomize shim (put first on PYTHONPATH = loaded at start-up)."""
    return make_shim_dir(tmp_path / "shim")


@pytest.fixture(scope="session")
def verl_071():
    if not (VERL_071 / "verl" / "models" / "transformers" / "npu_patch.py").is_file():
        pytest.fail(f"verl 0.7.1 is not installed in {VERL_071}; run `make verl-0.7.1` (make test-python does)")
    return VERL_071


def run_py(code_or_file, *, path=(), env=None, timeout=240, check=True):
    """Run Python in a fresh interpreter of this venv with ``path`` prepended to PYTHONPATH.

    Returns the CompletedProcess; ``.json`` holds the last stdout line parsed as JSON when it is JSON.
    The VLGRPO_* variables of the calling process are dropped so each test sets exactly what it needs.
    """
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("VLGRPO_") and k != "PYTHONPATH"}
    full_env["PYTHONPATH"] = os.pathsep.join(str(p) for p in path)
    full_env.update(env or {})
    args = (
        [sys.executable, str(code_or_file)] if isinstance(code_or_file, Path) else [sys.executable, "-c", code_or_file]
    )
    proc = subprocess.run(args, env=full_env, capture_output=True, text=True, timeout=timeout, cwd=REPO)
    proc.json = None
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    if lines:
        try:
            proc.json = json.loads(lines[-1])
        except ValueError:
            pass
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}\nstdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}")
    return proc
