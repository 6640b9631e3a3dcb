"""Helpers of the GPU suite (tests/gpu): start a script with or without the vlgrpo sitecustomize, logs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
#: the directory that holds the vlgrpo sitecustomize.py and the package source (src layout)
SITECUSTOMIZE_DIR = REPO / "python"
PACKAGE_SRC = REPO / "python" / "src"


def script_env(patched: bool) -> dict:
    """Environment for a subprocess: with the vlgrpo sitecustomize active (``patched``) or not.

    Patched: ``python/`` (sitecustomize.py) and ``python/src`` (the package) are put first on
    PYTHONPATH and strict mode is on, as the images do. Unpatched: both are removed from PYTHONPATH
    and ``VLGRPO_PATCHES=off`` is set as a second guard (in case a sitecustomize is installed in
    site-packages). The rest of PYTHONPATH (e.g. /tmp/site holding transformers 4.57.6) is kept.
    """
    env = dict(os.environ)
    keep = [
        p
        for p in env.get("PYTHONPATH", "").split(os.pathsep)
        if p and Path(p).resolve() not in (SITECUSTOMIZE_DIR, PACKAGE_SRC)
    ]
    env.pop("VLGRPO_PATCHES", None)
    env.pop("VLGRPO_PATCHES_DISABLED", None)
    if patched:
        env["PYTHONPATH"] = os.pathsep.join([str(SITECUSTOMIZE_DIR), str(PACKAGE_SRC), *keep])
        env["VLGRPO_PATCHES_STRICT"] = "1"
    else:
        env["PYTHONPATH"] = os.pathsep.join(keep)
        env["VLGRPO_PATCHES"] = "off"
        env.pop("VLGRPO_PATCHES_STRICT", None)
    env["HF_HUB_OFFLINE"] = "1"
    env["TRANSFORMERS_OFFLINE"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    # NVLink multicast stays off (the lent multi-GPU machines require it)
    env.setdefault("NCCL_NVLS_ENABLE", "0")
    env.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    env.setdefault("NVSHMEM_DISABLE_NVLS", "1")
    return env


def log_dir() -> Path:
    d = Path(os.environ.get("VLGRPO_GPU_LOGDIR", REPO / "out" / "gpu"))
    d.mkdir(parents=True, exist_ok=True)
    return d


def run_script(argv: list[str], patched: bool, name: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run ``argv`` (a command list) with :func:`script_env`; log stdout+stderr to log_dir()/name.log."""
    proc = subprocess.run(argv, env=script_env(patched), cwd=str(REPO), capture_output=True, text=True, timeout=timeout)
    (log_dir() / f"{name}.log").write_text(f"$ {' '.join(argv)}\n# patched={patched}\n" + proc.stdout + proc.stderr)
    return proc


def torchrun(nproc: int) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]


def load_json(path: Path, proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return json.loads(path.read_text())
