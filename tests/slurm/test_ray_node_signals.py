"""entrypoints/ray-node.sh gives `ray start --block` exactly one SIGTERM, under Slurm as elsewhere.

Slurm delivers a step's signals (scancel, the job's end, --signal) to every process of the step, so `ray start`
gets SIGTERM from Slurm itself; Ray 2.48.0's SIGTERM handler deadlocks on a second one (ray/_private/node.py:
``sigterm_handler`` -> ``kill_all_processes`` under ``removal_lock``, a non-reentrant lock, re-entered by the
second signal while the first handler waits for a child), and `ray start` then hangs until ray-node.sh's SIGKILL
after VLGRPO_RAY_STOP_GRACE. Seen in tests/slurm/test_sbatch_cluster.py with real Ray (and reproduced with two
SIGTERMs 50 ms apart to a plain `ray start --block` worker: hung for minutes; one SIGTERM: gone in 1-2 s).

A stand-in for `ray` plays that handler: the first SIGTERM starts a 2 s shutdown, a second one during it is
recorded as DEADLOCK and hangs. ray-node.sh runs for real (test device count, no accelerator).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_harness import REPO

RAY_NODE = REPO / "entrypoints" / "ray-node.sh"

STUB = """#!/bin/bash
# ray stand-in: `ray start --block` with Ray 2.48.0's SIGTERM handling (see the test module)
log={log}
echo "start $$" >>"$log"
stopping=0
on_term() {{
  echo TERM >>"$log"
  if ((stopping)); then
    echo DEADLOCK >>"$log"
    while :; do sleep 1; done
  fi
  stopping=1
}}
trap on_term TERM
while :; do
  sleep 0.1
  if ((stopping)); then
    for _ in $(seq 20); do sleep 0.1; done
    echo exit >>"$log"
    exit 1
  fi
done
"""


def start_node(tmp: Path, **env: str) -> tuple[subprocess.Popen, Path, int]:
    """ray-node.sh head with the stand-in `ray` first on PATH; returns (process, log, stand-in pid)."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    log = tmp / "ray.log"
    (bin_dir / "ray").write_text(STUB.format(log=log))
    (bin_dir / "ray").chmod(0o755)
    base = {
        "PATH": f"{bin_dir}:{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(tmp),
        "VLGRPO_PLATFORM": "npu",
        "VLGRPO_TEST_DEVICE_COUNT": "8",
        "VLGRPO_RAY_NODE_IP": "127.0.0.2",
        "VLGRPO_RAY_CARDS_WAIT": "0",
        "VLGRPO_RAY_DASHBOARD": "false",
        "VLGRPO_RAY_STOP_GRACE": "8",
        "HCCL_SOCKET_IFNAME": "lo",
        "GLOO_SOCKET_IFNAME": "lo",
        **env,
    }
    proc = subprocess.Popen(
        ["bash", str(RAY_NODE), "head"],
        env=base,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while not (log.exists() and log.read_text().startswith("start ")):
        assert proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < deadline, "ray-node.sh did not start the stand-in"
        time.sleep(0.1)
    return proc, log, int(log.read_text().split()[1])


def stop(proc: subprocess.Popen, *pids: int) -> tuple[str, float]:
    """SIGTERM to each PID in turn, 0.3 s apart (two signals at the same instant merge into one), then wait."""
    t0 = time.monotonic()
    for i, pid in enumerate(pids):
        if i:
            time.sleep(0.3)
        os.kill(pid, signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=40)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return out, time.monotonic() - t0


@pytest.fixture
def cleanup():
    procs = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_under_slurm_ray_start_gets_only_slurms_sigterm(tmp_path, cleanup):
    proc, log, ray_pid = start_node(tmp_path, SLURM_JOB_ID="7", SLURM_STEP_ID="1")
    cleanup.append(proc)
    out, took = stop(proc, ray_pid, proc.pid)  # what slurmstepd does: every process of the step
    assert proc.returncode == 128 + signal.SIGTERM, out
    assert log.read_text().split("\n")[1:] == ["TERM", "exit", ""], log.read_text()
    assert "ray-node: stopped (ray start exit 1)" in out
    assert took < 6, f"{took:.1f}s"


def test_elsewhere_ray_node_forwards_its_sigterm(tmp_path, cleanup):
    # docker stop, Kubernetes: the signal reaches ray-node.sh (PID 1) alone
    proc, log, _ = start_node(tmp_path)
    cleanup.append(proc)
    out, took = stop(proc, proc.pid)
    assert proc.returncode == 128 + signal.SIGTERM, out
    assert log.read_text().split("\n")[1:] == ["TERM", "exit", ""], log.read_text()
    assert "ray-node: stopping ray start" in out and took < 6


def test_under_slurm_a_sigterm_to_ray_node_alone_still_stops_ray(tmp_path, cleanup):
    # not through Slurm (someone kills ray-node.sh's PID in a job): forwarded once ray start is still there 10 s on
    proc, log, _ = start_node(tmp_path, SLURM_JOB_ID="7", SLURM_STEP_ID="1", VLGRPO_RAY_STOP_GRACE="30")
    cleanup.append(proc)
    out, took = stop(proc, proc.pid)
    assert proc.returncode == 128 + signal.SIGTERM, out
    assert log.read_text().split("\n")[1:] == ["TERM", "exit", ""], log.read_text()
    assert 9 < took < 20, f"{took:.1f}s"


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1])
def test_the_other_stop_signals_reach_ray_start_as_one_sigterm(tmp_path, cleanup, sig):
    """SIGHUP (a closed terminal, a supervisor's reload) and the other signals that end a process: before, they ended
    ray-node.sh alone (exit 128+signal) and left `ray start --block` and its Ray processes running."""
    proc, log, ray_pid = start_node(tmp_path)
    cleanup.append(proc)
    t0 = time.monotonic()
    os.kill(proc.pid, sig)
    out, _ = proc.communicate(timeout=40)
    took = time.monotonic() - t0
    assert proc.returncode == 128 + sig, out
    assert log.read_text().split("\n")[1:] == ["TERM", "exit", ""], log.read_text()
    with pytest.raises(ProcessLookupError):
        os.kill(ray_pid, 0)
    assert "ray-node: stopping ray start" in out and took < 6, f"{took:.1f}s"
