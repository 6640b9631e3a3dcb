"""The stall watchdog (vlgrpo.watchdog) on real Ray 2.48.0: an actor whose stage stalls on purpose ends the job.

A driver of the test's own starts a local Ray instance (``ray.init``; 2 CPUs, no dashboard, a private temp dir)
with ``VLGRPO_STALL_TIMEOUT=3`` in its environment, so every Ray worker inherits it. A peer actor is busy in a
call that never returns (``wait_here``), then a ``Stalling`` actor opens a stage and blocks in
``stall_on_purpose``. What a user would check: the driver's ``ray.get`` fails (the actor died) within the bound plus
the report's time, the one stderr line naming the stage reaches the driver's output, the stalled actor's stacks
file names ``stall_on_purpose``, and the peer's stacks file (py-spy, when this machine has it and may attach)
names ``wait_here``. Then verl 0.8.0's own ``FullyAsyncTaskRunner._run_training_loop`` (the loop the job's driver
waits in) with such a stalling trainer and a rollouter that never finishes: it raises within the same bound, so the
job fails and can be restarted. Every process left under the temp dir is killed by PID afterwards (never
``ray stop``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from ray_harness import PY, REPO, cmdline
from vlgrpo import watchdog

pytestmark = pytest.mark.ray

BOUND_S = 3
STAGE = "test stage: stall_on_purpose"

DRIVER = textwrap.dedent("""
    import json, os, sys, threading, time
    import ray

    def stall_on_purpose():
        threading.Event().wait()

    @ray.remote(num_cpus=0)
    class Peer:
        def pid(self):
            return os.getpid()

        def wait_here(self):
            threading.Event().wait()

    @ray.remote(num_cpus=0)
    class Stalling:
        def pid(self):
            return os.getpid()

        def run(self, folder, stage):
            from vlgrpo import watchdog

            watchdog.configure(folder)
            with watchdog.watch(stage):
                stall_on_purpose()

    ray.init(num_cpus=2, include_dashboard=False, _temp_dir=sys.argv[1], logging_level="ERROR")
    try:
        peer = Peer.remote()
        out = {"peer": ray.get(peer.pid.remote())}
        peer.wait_here.remote()
        actor = Stalling.remote()
        out["stalling"] = ray.get(actor.pid.remote())
        start = time.monotonic()
        try:
            ray.get(actor.run.remote(sys.argv[2], sys.argv[3]))
            out["returned"] = True
        except ray.exceptions.RayActorError as exc:
            out["error"] = type(exc).__name__
            out["message"] = str(exc)[:3000]
        out["seconds"] = time.monotonic() - start
        time.sleep(2)  # let Ray's log monitor forward the actor's stderr
        print("RESULT " + json.dumps(out), flush=True)
    finally:
        ray.shutdown()
    sys.exit(1 if "error" in out else 0)
""")


# verl 0.8.0's FullyAsyncTaskRunner._run_training_loop (what the job's driver waits in) with a trainer actor that
# stalls in its watched fit and a rollouter whose fit never returns: the loop must raise, not wait forever
TASK_RUNNER = textwrap.dedent("""
    import json, os, sys, threading, time, types
    sys.path.insert(0, sys.argv[4])
    from stub_modules import StubFinder
    sys.meta_path.append(StubFinder(("vllm", "zmq", "msgspec", "uvicorn", "fastapi", "cachetools", "peft",
                                     "accelerate", "tensordict")))
    import ray
    from verl.experimental.fully_async_policy import fully_async_main as fm

    @ray.remote(num_cpus=0)
    class Rollouter:
        def fit(self):
            threading.Event().wait()

    @ray.remote(num_cpus=0)
    class Trainer:
        def fit(self, folder, stage):
            from vlgrpo import watchdog

            watchdog.configure(folder)
            with watchdog.watch(stage):
                threading.Event().wait()

    class Queue:
        async def clear_queue(self):
            return None

    ray.init(num_cpus=2, include_dashboard=False, _temp_dir=sys.argv[1], logging_level="ERROR")
    try:
        trainer = Trainer.remote()
        fit = trainer.fit
        trainer_stub = types.SimpleNamespace(fit=types.SimpleNamespace(remote=lambda: fit.remote(sys.argv[2], sys.argv[3])))
        runner = types.SimpleNamespace(components={"rollouter": Rollouter.remote(), "trainer": trainer_stub,
                                                   "message_queue_client": Queue()}, running=False)
        loop = fm.FullyAsyncTaskRunner.__ray_metadata__.modified_class._run_training_loop
        start = time.monotonic()
        out = {}
        try:
            loop(runner)
            out["returned"] = True
        except Exception as exc:
            out["error"] = type(exc).__name__
        out["seconds"] = time.monotonic() - start
        print("RESULT " + json.dumps(out), flush=True)
    finally:
        ray.shutdown()
""")


def _may_attach() -> bool:
    """Whether py-spy may read a process of this user that is not its descendant: CAP_SYS_PTRACE (bit 19 of
    CapEff), or Yama's ptrace scope 0 (or no Yama)."""
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            scope = int(f.read().strip())
    except OSError:
        scope = 0
    with open("/proc/self/status") as f:
        caps = next(int(ln.split()[1], 16) for ln in f if ln.startswith("CapEff:"))
    return bool(caps >> 19 & 1) or scope == 0


def _kill_left(temp_dir: Path) -> list[int]:
    """PIDs of processes still naming ``temp_dir`` on their command line (Ray's own), each killed by PID."""
    left = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and str(temp_dir) in cmdline(int(entry)):
            left.append(int(entry))
            try:
                os.kill(int(entry), signal.SIGKILL)
            except OSError:
                pass
    return left


def test_a_stalled_actor_ends_the_job_within_the_bound_with_its_stacks(tmp_path):
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    folder = tmp_path / "ckpt" / "stalls"
    folder.parent.mkdir(mode=0o700)
    temp_dir = Path(tempfile.mkdtemp(prefix="r", dir="/tmp"))  # short: Ray's socket paths are long
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLGRPO_", "RAY_"))}
    env.update(VLGRPO_STALL_TIMEOUT=str(BOUND_S), RAY_USAGE_STATS_ENABLED="0", PYTHONPATH=str(REPO / "python" / "src"))
    start = time.monotonic()
    try:
        done = subprocess.run(
            [PY, str(script), str(temp_dir), str(folder), STAGE],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
        )
    finally:
        wall = time.monotonic() - start
        left = _kill_left(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)
    text = done.stdout + done.stderr
    (line,) = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    out = json.loads(line[len("RESULT ") :])
    assert not left, f"Ray processes left after the driver's ray.shutdown(): {left}"
    # the job failed, the actor is gone, and it took the bound plus the report, not forever
    assert done.returncode == 1 and out.get("error") in ("ActorDiedError", "RayActorError"), text[-3000:]
    assert BOUND_S <= out["seconds"] <= BOUND_S + watchdog.GRACE_S / 2 + 15, out["seconds"]
    # the one line on stderr, forwarded by Ray to the driver
    stall_lines = [ln for ln in text.splitlines() if "vlgrpo watchdog: STALL in stage" in ln]
    assert len(stall_lines) == 1 and f"'{STAGE}'" in stall_lines[0] and "exit code 75" in stall_lines[0], text[-3000:]
    # the stacks: one event folder; the stalled actor's file names the blocked function
    (event,) = list(folder.iterdir())
    own = event / f"stacks-{os.uname().nodename}-{out['stalling']}.txt"
    assert "in stall_on_purpose" in own.read_text(), own.read_text()
    notes = (event / "stall.txt").read_text()
    assert f"'{STAGE}'" in notes and "alive actors on 1 node(s)" in notes, notes
    peer = event / f"stacks-{os.uname().nodename}-{out['peer']}.txt"
    if watchdog.py_spy() is None:
        assert "py-spy not found" in notes, notes
    elif _may_attach():
        assert peer.exists(), (notes, sorted(p.name for p in event.iterdir()))
        assert "wait_here" in peer.read_text(), peer.read_text()
    else:  # py-spy is there but the kernel refuses the attach: the reason is listed for that pid
        assert f"pid {out['peer']} " in notes and "py-spy:" in notes, notes
    print(f"bound {BOUND_S} s; driver's ray.get failed after {out['seconds']:.1f} s; driver ran {wall:.1f} s")


def test_verls_task_runner_loop_raises_when_the_trainer_stalls(tmp_path):
    """The loop the job's driver waits in (verl 0.8.0 ``FullyAsyncTaskRunner._run_training_loop``) ends with the
    trainer's death: the job fails, the scheduler can restart it."""
    script = tmp_path / "runner.py"
    script.write_text(TASK_RUNNER)
    folder = tmp_path / "ckpt" / "stalls"
    folder.parent.mkdir(mode=0o700)
    temp_dir = Path(tempfile.mkdtemp(prefix="r", dir="/tmp"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLGRPO_", "RAY_"))}
    env.update(VLGRPO_STALL_TIMEOUT=str(BOUND_S), RAY_USAGE_STATS_ENABLED="0", PYTHONPATH=str(REPO / "python" / "src"))
    stubs = REPO / "tests" / "python" / "patches" / "scenarios"
    try:
        done = subprocess.run(
            [PY, str(script), str(temp_dir), str(folder), STAGE, str(stubs)],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
        )
    finally:
        left = _kill_left(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)
    text = done.stdout + done.stderr
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, text[-3000:]
    out = json.loads(lines[0][len("RESULT ") :])
    assert not left, left
    assert out.get("error") in ("ActorDiedError", "RayActorError"), (out, text[-3000:])
    assert BOUND_S <= out["seconds"] <= BOUND_S + watchdog.GRACE_S / 2 + 15, out["seconds"]
    assert "[ASYNC MAIN] Component failed with error" in text and "[ASYNC MAIN] Training failed" in text
    (event,) = list(folder.iterdir())
    assert any(p.name.startswith("stacks-") for p in event.iterdir())
    print(f"verl's task-runner loop raised {out['error']} after {out['seconds']:.1f} s (bound {BOUND_S} s)")
