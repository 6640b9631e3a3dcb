"""The launch environment against real Ray 2.48.0 on loopback.

Each test first shows the attack working without the entrypoint (the control: a plain driver in the hostile
environment, so the test can fail), then runs fully-async-grpo.sh (through the test harness, with a python3
that stubs the preflight and runs tests/python/environment/verl_standin.py in place of verl, which calls
``ray.init()`` without an address like verl 0.8.0) in the same environment.

- Why 1: ``__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR=antigravity.geohash`` with ``BROWSER='touch CANARY %s'``: a
  Ray worker imports the named module (antigravity opens a "browser", i.e. runs BROWSER). The launch must be
  refused (exit 2) before anything runs, also when the hook comes in a Ray job's runtime_env env_vars.
- Why 5: a ``<TMPDIR>/ray/ray_current_cluster`` naming a running head (127.0.0.2) makes a plain ``ray.init()``
  join it. The launch without VLGRPO_RAY_ADDRESS must start its own local Ray instead.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(REPO / "tests" / "python" / "ray"))
import ray_harness  # the project's loopback Ray helpers: free ports, stop by PID

pytestmark = [pytest.mark.ray, pytest.mark.slow]
PY = sys.executable


def _wrapper(bin_dir: Path) -> None:
    """python3 for the entrypoint: the preflight is stubbed (exit 0), `-m verl...` runs the stand-in."""
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(f"""#!/bin/bash
args=("$@"); i=0
while [[ ${{args[i]-}} == -P || ${{args[i]-}} == -s ]]; do i=$((i + 1)); done
if [[ ${{args[i]-}} == -m && ${{args[i + 1]-}} == vlgrpo && ${{args[i + 2]-}} == preflight ]]; then exit 0; fi
if [[ ${{args[i]-}} == -m && ${{args[i + 1]-}} == verl.* ]]; then exec {PY} {HERE / "verl_standin.py"}; fi
exec {PY} "$@"
""")
    (bin_dir / "python3").chmod(0o755)


def _launch(tmp: Path, extra: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess:
    """fully-async-grpo.sh (real launch, 1 + 1 nodes of 8 NPUs from stand-in /dev/davinci files)."""
    (tmp / "dev").mkdir(exist_ok=True)
    for i in range(8):
        (tmp / "dev" / f"davinci{i}").touch()
    for d in ("model", "data", "ckpt"):
        (tmp / d).mkdir(exist_ok=True)
    (tmp / "model" / "config.json").write_text("{}")
    (tmp / "data" / "train.parquet").touch()
    (tmp / "data" / "test.parquet").touch()
    if not (tmp / "bin").exists():
        _wrapper(tmp / "bin")
    env = {
        "PATH": f"{tmp / 'bin'}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(tmp),
        "LANG": "C.UTF-8",
        "TEST_DEV_DIR": str(tmp / "dev"),
        "WANDB_MODE": "offline",
        "RAY_USAGE_STATS_ENABLED": "0",
        "VLGRPO_PLATFORM": "npu",
        "VLGRPO_TRAINER_NNODES": "1",
        "VLGRPO_ROLLOUT_NNODES": "1",
        "VLGRPO_MODEL_PATH": str(tmp / "model"),
        "VLGRPO_TRAIN_FILE": str(tmp / "data" / "train.parquet"),
        "VLGRPO_VAL_FILE": str(tmp / "data" / "test.parquet"),
        "VLGRPO_CHECKPOINT_DIR": str(tmp / "ckpt"),
        "STANDIN_OUT": str(tmp / "standin.json"),
        "VLGRPO_PASS_ENV": "STANDIN_OUT",
    }
    env.update(extra)
    # launched from a folder of its own that holds a verl/ package (Why 4: it must not be imported anywhere)
    launch_dir = tmp / "launch"
    (launch_dir / "verl").mkdir(parents=True, exist_ok=True)
    (launch_dir / "verl" / "__init__.py").write_text(f"open({str(tmp / 'verl-canary')!r}, 'w').write('ran')\n")
    return subprocess.run(
        ["bash", str(REPO / "tests/bats/helpers/run-entry.sh"), str(REPO / "entrypoints/fully-async-grpo.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=launch_dir,
    )


def _driver(tmp: Path, extra: dict[str, str]) -> subprocess.CompletedProcess:
    """The control: the stand-in driver run directly (no entrypoint) in the given environment."""
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp),
        "RAY_USAGE_STATS_ENABLED": "0",
        "STANDIN_OUT": str(tmp / "control.json"),
    }
    env.update(extra)
    return subprocess.run(
        [PY, str(HERE / "verl_standin.py")], env=env, capture_output=True, text=True, timeout=240, cwd=tmp
    )


def _wait_for(path: Path, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not path.exists():
        time.sleep(0.2)
    return path.exists()


def test_why1_a_worker_setup_hook_from_the_environment_never_runs(tmp_path):
    canary = tmp_path / "canary"
    hostile = {"__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR": "antigravity.geohash", "BROWSER": f"touch {canary} %s"}
    # control: Ray 2.48.0 really runs it in a worker
    _driver(tmp_path, hostile)
    assert _wait_for(canary, 30), "control: the setup hook did not run in a plain Ray driver's worker"
    canary.unlink()
    # the launch: refused before any child, by name
    proc = _launch(tmp_path, hostile)
    assert proc.returncode == 2, proc.stderr
    assert "error: __RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR: " in proc.stderr
    assert "antigravity" not in proc.stderr + proc.stdout
    assert not (tmp_path / "standin.json").exists() and not _wait_for(canary, 3)
    # the same hook in a Ray job's runtime_env env_vars (Ray would set it in every worker) is refused too
    job = {"runtime_env": {"env_vars": {"__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR": "antigravity.geohash"}}}
    proc = _launch(tmp_path, {"RAY_JOB_CONFIG_JSON_ENV_VAR": json.dumps(job), "BROWSER": f"touch {canary} %s"})
    assert proc.returncode == 2, proc.stderr
    assert (
        "error: RAY_JOB_CONFIG_JSON_ENV_VAR: runtime_env env_vars sets __RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR"
        in proc.stderr
    )
    assert not (tmp_path / "standin.json").exists() and not canary.exists()


def test_why5_a_ray_current_cluster_file_does_not_redirect_the_launch(tmp_path):
    (tmp_path / "cluster").mkdir()
    cluster = ray_harness.Cluster(tmp_path / "cluster")
    fake_tmp = tmp_path
    try:
        cluster.start_head(devices=8)
        # short: Ray's socket paths under it must stay below 108 bytes
        fake_tmp = Path(tempfile.mkdtemp(prefix="t", dir="/tmp"))
        (fake_tmp / "ray").mkdir(parents=True)
        (fake_tmp / "ray" / "ray_current_cluster").write_text(cluster.address + "\n")
        # control: a plain ray.init() with TMPDIR pointing there joins the head nobody checked
        proc = _driver(tmp_path, {"TMPDIR": str(fake_tmp)})
        assert proc.returncode == 0, proc.stderr[-2000:]
        control = json.loads((tmp_path / "control.json").read_text())
        assert control["gcs_address"] == cluster.address and "127.0.0.2" in control["nodes"], control
        # the launch (no VLGRPO_RAY_ADDRESS): RAY_ADDRESS=local, so verl's ray.init() starts its own instance
        proc = _launch(tmp_path, {"TMPDIR": str(fake_tmp)})
        assert proc.returncode == 0, proc.stderr[-3000:]
        seen = json.loads((tmp_path / "standin.json").read_text())
        assert seen["gcs_address"] != cluster.address and "127.0.0.2" not in seen["nodes"], seen
        # and the launch's Python is isolated in the worker too: no user site, safe path
        assert {"PYTHONSAFEPATH", "PYTHONNOUSERSITE", "RAY_ADDRESS"} <= set(seen["worker"]["env"])
        assert str(tmp_path / "launch") not in seen["worker"]["sys_path"], "the launch folder is on a worker's sys.path"
        assert not (tmp_path / "verl-canary").exists()
    finally:
        problems = cluster.close()
        shutil.rmtree(fake_tmp, ignore_errors=True)
    assert not problems, problems
