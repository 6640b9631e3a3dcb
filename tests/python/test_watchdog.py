"""The progress watchdog (vlgrpo.watchdog), each case in a fresh interpreter: what a user sees when a stage stalls.

- a stage whose heartbeat stops ends its process with exit code 75 within the bound plus the monitor's tick and
  the report's time, prints one stderr line naming the stage, and leaves ``stacks-<host>-<pid>.txt`` naming the
  blocked function (a thread's stack; a coroutine's ``await`` chain for an async stage);
- a stage that runs three times the bound but beats is not ended, nor a blocked stage with the bound 0 (off);
- a stacks folder in a folder every user can write is refused: the stacks go to stderr, the line says why;
- a hang that holds the GIL (the monitor thread cannot run) is ended by faulthandler's C-thread backstop at bound
  + grace, with every thread's stack on stderr and exit code 1;
- ``VLGRPO_STALL_TIMEOUT`` values outside ``0..604800`` raise naming the variable;
- a process forked while another thread holds the watchdog's lock (a DataLoader worker forked while the monitor
  ticks) can still beat and open stages, and does not inherit the parent's open stages;
- a child forked while the parent's faulthandler backstop is armed does not hang on it, and its own stall still
  ends it with exit code 75.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from vlgrpo import watchdog

PRELUDE = textwrap.dedent("""
    import asyncio, os, re, sys, threading, time
    from vlgrpo import watchdog

    def stalled_on_purpose():
        threading.Event().wait()

    def wait_child(pid, seconds, beat=False):
        # the forked child's exit code; None after killing it when it has not ended within `seconds`
        for _ in range(int(seconds * 10)):
            if beat:
                watchdog.beat()  # the parent makes progress while it waits
            got, status = os.waitpid(pid, os.WNOHANG)
            if got:
                return os.waitstatus_to_exitcode(status)
            time.sleep(0.1)
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        return None
""")


def run(code: str, folder, bound="1", timeout=60, **env):
    full = {k: v for k, v in os.environ.items() if not k.startswith("VLGRPO_")}
    full.update(VLGRPO_STALL_TIMEOUT=bound, **env)
    prog = PRELUDE + f"watchdog.configure({str(folder)!r})\n" + textwrap.dedent(code)
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", prog], env=full, capture_output=True, text=True, timeout=timeout)
    done.seconds = time.monotonic() - start
    return done


def stall_files(folder):
    events = sorted(p for p in folder.iterdir() if p.name.startswith("stall-")) if folder.exists() else []
    return events, {p.name: p.read_text() for e in events for p in e.iterdir()}


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "ckpt").mkdir(mode=0o700)
    return tmp_path / "ckpt" / "stalls"


def test_a_stalled_stage_ends_the_process_with_75_and_names_the_function(folder):
    done = run(
        """
        with watchdog.watch("checkpoint save (unit)"):
            watchdog.beat()
            stalled_on_purpose()
        """,
        folder,
    )
    # the bound (1 s) plus one tick of the monitor (0.1 s) plus the report; interpreter start is in the wall time
    assert done.returncode == watchdog.EXIT_CODE, done.stderr
    assert 1.0 <= done.seconds < 1.0 + 10, done.seconds
    lines = [ln for ln in done.stderr.splitlines() if "vlgrpo watchdog: STALL" in ln]
    assert len(lines) == 1 and "'checkpoint save (unit)'" in lines[0] and "exit code 75" in lines[0], done.stderr
    events, files = stall_files(folder)
    assert len(events) == 1 and events[0].stat().st_mode & 0o777 == 0o700
    (name,) = [n for n in files if n.startswith("stacks-")]
    assert name.startswith(f"stacks-{socket.gethostname()}-")
    assert "in stalled_on_purpose" in files[name] and "'checkpoint save (unit)'" in files[name]
    assert str(events[0]) in lines[0]
    assert "not connected to Ray" in files["stall.txt"]


def test_an_async_stage_shows_the_await_chain(folder):
    done = run(
        """
        async def peer_that_never_answers():
            await asyncio.Event().wait()

        async def weight_sync():
            with watchdog.watch("weight sync (unit)"):
                await peer_that_never_answers()

        asyncio.run(weight_sync())
        """,
        folder,
    )
    assert done.returncode == watchdog.EXIT_CODE, done.stderr
    _, files = stall_files(folder)
    (text,) = [t for n, t in files.items() if n.startswith("stacks-")]
    chain = text[text.index("asyncio:") :]
    assert chain.index("in weight_sync") < chain.index("in peer_that_never_answers"), text


def test_a_slow_stage_that_beats_is_not_ended(folder):
    done = run(
        """
        with watchdog.watch("rollout (unit)"):
            for _ in range(12):
                time.sleep(0.25)
                watchdog.beat()
        print("finished")
        """,
        folder,
    )
    assert done.returncode == 0 and done.stdout.strip() == "finished", done.stderr
    assert done.seconds >= 3.0  # three times the bound
    assert stall_files(folder) == ([], {})


def test_bound_zero_is_off(folder):
    done = run(
        """
        with watchdog.watch("anything"):
            time.sleep(2.5)
        print("finished")
        """,
        folder,
        bound="0",
    )
    assert done.returncode == 0 and done.stdout.strip() == "finished", done.stderr
    assert stall_files(folder) == ([], {})


def test_a_world_writable_parent_is_refused_and_the_stacks_go_to_stderr(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # no sticky bit: anyone could swap the stacks folder
    done = run(
        """
        with watchdog.watch("validation (unit)"):
            stalled_on_purpose()
        """,
        shared / "stalls",
    )
    assert done.returncode == watchdog.EXIT_CODE
    (line,) = [ln for ln in done.stderr.splitlines() if "vlgrpo watchdog: STALL" in ln]
    assert f"its parent {shared} is writable by every user" in line, line
    assert "in stalled_on_purpose" in done.stderr
    assert not (shared / "stalls").exists()


def test_a_hang_holding_the_gil_is_ended_by_the_faulthandler_backstop(folder):
    # catastrophic backtracking: re holds the GIL for minutes, so the monitor thread never runs
    done = run(
        """
        watchdog.GRACE_S = 2.0

        def backtracking_regex():
            re.match(r"(a+)+$", "a" * 34 + "b")

        with watchdog.watch("reward (unit)"):
            backtracking_regex()
        """,
        folder,
    )
    assert done.returncode == 1, (done.returncode, done.stderr[-2000:])
    assert 3.0 <= done.seconds < 3.0 + 10, done.seconds
    assert "Timeout (0:00:03)!" in done.stderr and "in backtracking_regex" in done.stderr, done.stderr[-2000:]
    assert "vlgrpo watchdog: STALL" not in done.stderr


@pytest.mark.parametrize("value", ["-1", "604801", "off", "1.5", "30s"])
def test_bad_values_name_the_setting(value):
    with pytest.raises(ValueError, match=r"VLGRPO_STALL_TIMEOUT=.*0\.\.604800"):
        watchdog.timeout_s({"VLGRPO_STALL_TIMEOUT": value})


def test_values_and_default():
    assert watchdog.timeout_s({}) == watchdog.DEFAULT_S == 1800
    assert watchdog.timeout_s({"VLGRPO_STALL_TIMEOUT": " 0 "}) == 0
    assert watchdog.timeout_s({"VLGRPO_STALL_TIMEOUT": "604800"}) == 604800


def test_a_child_forked_while_the_lock_is_held_runs_on(folder):
    done = run(
        """
        held, release = threading.Event(), threading.Event()

        def holder():  # what the monitor thread does every tick: take the lock
            with watchdog._LOCK:
                held.set()
                release.wait()

        with watchdog.watch("rollout (parent)"):
            threading.Thread(target=holder, daemon=True).start()
            held.wait()
            pid = os.fork()
            if pid == 0:
                inherited = watchdog.current_stage()
                watchdog.beat()
                with watchdog.watch("dataloader worker (child)"):
                    mine = watchdog.current_stage()
                print(f"child: inherited={inherited!r} mine={mine!r}", flush=True)
                os._exit(0)
            release.set()
            code = wait_child(pid, 10)
            if code is None:
                print("child: blocked on the lock for 10 s", flush=True)
                sys.exit(3)
            print("parent stage:", watchdog.current_stage(), "child exit:", code, flush=True)
        """,
        folder,
        bound="60",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "child: inherited=None mine='dataloader worker (child)'" in done.stdout
    assert "parent stage: rollout (parent) child exit: 0" in done.stdout


def test_a_child_forked_while_the_backstop_is_armed_is_still_ended_when_it_stalls(folder):
    # the parent's faulthandler timer is armed (a stage is open) at the fork: the child must neither hang on it
    # (CPython's cancel waits for the parent's timer thread) nor lose the watchdog: its monitor ends its stall
    done = run(
        """
        with watchdog.watch("rollout (parent)"):
            pid = os.fork()
            if pid == 0:
                with watchdog.watch("dataloader worker (child)"):
                    stalled_on_purpose()
                os._exit(0)
            code = wait_child(pid, 15, beat=True)
            if code is None:
                print("child: not ended within 15 s", flush=True)
                sys.exit(3)
            print("child exit:", code, flush=True)
        """,
        folder,
        bound="1",
    )
    assert done.returncode == 0 and "child exit: 75" in done.stdout, done.stdout + done.stderr
    lines = [ln for ln in done.stderr.splitlines() if "vlgrpo watchdog: STALL" in ln]
    assert len(lines) == 1 and "'dataloader worker (child)'" in lines[0], done.stderr
