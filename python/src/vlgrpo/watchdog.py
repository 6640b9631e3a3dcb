"""Progress watchdog: a stage that makes no progress for ``VLGRPO_STALL_TIMEOUT`` seconds ends its process.

A silent hang (a collective that never completes, a rollout server that stops answering, a checkpoint write on a
dead filesystem) otherwise leaves a job at 0 % utilisation until someone notices. The fix module
``vlgrpo.patches.fixes.fully_async_stall_watchdog`` opens stages with :func:`watch` around verl's fully-async
trainer steps, its wait for rollout samples, weight syncs, validation and checkpoint saves, and calls :func:`beat`
on each sample received; this module keeps the clock and acts.

The API (standard library only; importable anywhere, costs nothing until a stage opens):

- :func:`watch` ``(stage)``: a context manager (a plain ``with``, also around ``await``). While at least one stage
  is open in this process, the process is watched; the stage named in a report is the most recently opened one
  still open. Entering and leaving count as progress.
- :func:`beat` ``()``: progress now (a sample arrived, a sub-step finished).
- :func:`configure` ``(folder)``: where the stacks go (the fix passes ``<trainer.default_local_dir>/stalls``).

When the open stage has had no progress for the bound, the monitor thread of the process (one daemon thread,
started with the first stage) does, in this order and within :data:`GRACE_S` seconds:

1. prints one line on stderr naming the stage, the seconds without progress, the folder and the exit code;
2. writes ``stacks-<host>-<pid>.txt`` (every thread's Python stack by :func:`faulthandler.dump_traceback`, then
   the awaiting frames of every unfinished task of the asyncio loops stages were opened in: a coroutine suspended
   in ``await`` is on no thread's stack) into a new folder ``<folder>/stall-<UTC time>-<host>-<pid>/``;
3. where this process is connected to Ray, asks every node that runs an alive actor of the same Ray job to write
   ``stacks-<host>-<pid>.txt`` for each of those actors and their child processes (vLLM engine cores) with
   ``py-spy dump`` when py-spy is found on that node and may attach (detected per node, never assumed; what was
   not dumped and why is listed in ``stall.txt``);
4. ends the process with ``os._exit(EXIT_CODE)`` (75, ``EX_TEMPFAIL``: "try again"). In the fully-async recipe
   that process is the trainer actor: Ray reports it dead to verl's task runner, which cancels the rollouter and
   re-raises, so the job's driver exits non-zero and the scheduler restarts it from the last checkpoint.

A backstop that needs no Python thread: while a stage is open, :func:`faulthandler.dump_traceback_later` is armed
at bound + :data:`GRACE_S`; when the monitor cannot run (a C call holding the GIL), faulthandler's own C thread
writes every thread's stack to the process's stderr (Ray's worker log) and exits the process with code 1.
faulthandler has one such timer per process: code that arms its own ``dump_traceback_later`` in a watched
process replaces ours until the next beat (neither verl 0.8.0 nor Ray 2.48.0 does).

Why each process watches only its own stages: a dump request sent through Ray to a blocked actor would queue
behind the blocked call (a threaded actor runs one call at a time), while ``py-spy`` reads another process
without its cooperation; the trainer's stages are the ones every other stage feeds (it waits on the rollout, the
weight sync, the save), so its clock sees a stall wherever it starts.

Errors: :func:`timeout_s` raises ``ValueError`` naming ``VLGRPO_STALL_TIMEOUT`` for a value that is not an integer
in ``0..604800`` (the launch refuses the same value before any process starts).
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

#: the setting: seconds without progress before a stage counts as stalled (0: no watchdog)
ENV = "VLGRPO_STALL_TIMEOUT"
DEFAULT_S = 1800
MAX_S = 604800
#: exit status of a process ended by the watchdog (sysexits.h EX_TEMPFAIL: a temporary failure, retry)
EXIT_CODE = 75
#: seconds the stall report may take (own stacks, peers' stacks) before the process ends anyway
GRACE_S = 120.0
#: seconds one ``py-spy dump`` may take
PY_SPY_TIMEOUT_S = 30.0

_LOCK = threading.RLock()
_STATE: dict[str, Any] = {
    "open": {},  # token -> stage name, in opening order
    "next": 0,
    "last": 0.0,  # time.monotonic() of the last progress
    "thread": None,
    "folder": None,
    "timeout": None,  # seconds, overrides the environment (tests, verify)
    "armed_at": 0.0,  # when the faulthandler backstop was last armed
    "armed": False,  # faulthandler's timer is armed by this process now
    "backstop": True,  # faulthandler may be used (False in a child forked while the parent's timer was armed)
    "exit": os._exit,
    "peers": True,  # ask Ray for the other actors' stacks (verify() turns it off)
    "loops": {},  # id -> weak reference of each asyncio event loop a stage was opened in
}


def _after_fork_in_child() -> None:
    """A forked child (a DataLoader worker, a ``multiprocessing`` fork) starts with a fresh lock and no open stage.

    The child inherits ``_LOCK`` in whatever state the parent's threads left it at the fork: held by the monitor
    thread (which does not exist in the child), every later ``beat()``/``watch()`` there would block forever. The
    parent's open stages are the parent's: its own monitor keeps watching them; the child watches what it opens.

    faulthandler's timer does not survive a fork either: in CPython (Modules/faulthandler.c, 3.11) a child forked
    while the parent's ``dump_traceback_later`` was armed inherits the "running" lock of a thread it does not have,
    so its first ``cancel_dump_traceback_later()`` (also called by every re-arm) waits forever. Such a child never
    touches faulthandler again; its monitor thread still ends a stalled stage."""
    global _LOCK
    _LOCK = threading.RLock()
    inherited = bool(_STATE.get("armed"))
    _STATE.update(open={}, thread=None, loops={}, pid=None, armed_at=0.0, armed=False)
    if inherited:
        _STATE["backstop"] = False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def timeout_s(environ: dict[str, str] | None = None) -> int:
    """The bound in whole seconds from ``VLGRPO_STALL_TIMEOUT`` (unset or empty: :data:`DEFAULT_S`; 0: off).

    Raises:
        ValueError: the value is not an integer in ``0..604800``; the message names the variable and the fix.
    """
    env = os.environ if environ is None else environ
    raw = (env.get(ENV) or "").strip()
    if not raw:
        return DEFAULT_S
    try:
        value = int(raw, 10)
    except ValueError:
        value = -1
    if not 0 <= value <= MAX_S:
        raise ValueError(
            f"{ENV}={raw!r}: not a whole number of seconds in 0..{MAX_S}; fix: set seconds (0 switches the "
            f"watchdog off) or unset it for {DEFAULT_S}"
        )
    return value


def _bound() -> float:
    if _STATE["timeout"] is not None:
        return float(_STATE["timeout"])
    try:
        return float(timeout_s())
    except ValueError as exc:  # an arbitrary interpreter: say so once, watch with the default
        if not _STATE.get("warned"):
            _STATE["warned"] = True
            print(f"vlgrpo watchdog: {exc} (using {DEFAULT_S})", file=sys.stderr, flush=True)
        return float(DEFAULT_S)


def configure(folder: str | None = None, timeout: float | None = None) -> None:
    """Set the stacks folder (created 0700 on the first stall; its parent must exist) and, for tests, the bound in
    seconds (``None``: ``VLGRPO_STALL_TIMEOUT``; 0: off)."""
    with _LOCK:
        if folder is not None:
            _STATE["folder"] = os.path.abspath(folder)
        if timeout is not None:
            _STATE["timeout"] = float(timeout)


@contextlib.contextmanager
def trial(folder: str, timeout: float) -> Iterator[list[int]]:
    """Run the watchdog on a fresh state for a self-test (a fix's ``verify()``): stacks into ``folder``, bound
    ``timeout`` seconds, no Ray peers, and the process not ended: the exit codes it would have used are appended
    to the yielded list. The state before (open stages, monitor thread, folder) is put back afterwards."""
    ended: list[int] = []
    with _LOCK:
        saved = dict(_STATE)
        _STATE.update(open={}, thread=None, folder=None, timeout=None, exit=ended.append, peers=False, loops={})
        configure(folder, timeout=timeout)
    try:
        yield ended
    finally:
        with _LOCK:
            _STATE.clear()
            _STATE.update(saved)
            if _STATE["open"]:
                _arm_backstop(force=True)
            else:
                _cancel_backstop()


def current_stage() -> str | None:
    """The stage a report would name now (the most recently opened one still open), or ``None``."""
    with _LOCK:
        names = list(_STATE["open"].values())
        return names[-1] if names else None


def beat() -> None:
    """Progress now: restart the clock of the open stage (nothing when no stage is open)."""
    with _LOCK:
        if _STATE["open"]:
            _STATE["last"] = time.monotonic()
            _arm_backstop(force=False)


@contextlib.contextmanager
def watch(stage: str) -> Iterator[None]:
    """Open ``stage`` for the ``with`` body (progress on entry and exit); a no-op while the bound is 0."""
    bound = _bound()
    if bound <= 0:
        yield
        return
    with _LOCK:
        token = _STATE["next"]
        _STATE["next"] += 1
        _STATE["open"][token] = stage
        _STATE["last"] = time.monotonic()
        _remember_loop()
        _start_monitor()
        _arm_backstop(force=True)
    try:
        yield
    finally:
        with _LOCK:
            _STATE["open"].pop(token, None)
            _STATE["last"] = time.monotonic()
            if _STATE["open"]:
                _arm_backstop(force=True)
            else:
                _cancel_backstop()


def _remember_loop() -> None:
    """Keep a weak reference to the running asyncio loop, if any: a coroutine waiting in ``await`` is on no
    thread's stack, so the report prints the loop's tasks too."""
    aio = sys.modules.get("asyncio")
    loop = aio._get_running_loop() if aio is not None else None
    if loop is not None and id(loop) not in _STATE["loops"]:
        import weakref

        _STATE["loops"][id(loop)] = weakref.ref(loop)


def _task_stacks() -> str:
    """The stack of every unfinished task of the loops :func:`_remember_loop` saw (``Task.print_stack``)."""
    import io

    aio = sys.modules.get("asyncio")
    out = io.StringIO()
    for ref in list(_STATE["loops"].values()):
        loop = ref()
        if aio is None or loop is None or loop.is_closed():
            continue
        try:
            tasks = list(aio.all_tasks(loop))
        except RuntimeError as exc:
            out.write(f"asyncio tasks of loop {id(loop):#x} not read: {exc}\n")
            continue
        out.write(
            f"\nasyncio: {len(tasks)} unfinished task(s) of loop {id(loop):#x} (awaiting frames, innermost last)\n"
        )
        for task in tasks:
            out.write(f"\ntask {task.get_name()!r}:\n")
            out.writelines(f"  {line}\n" for line in _await_chain(task.get_coro()))
    return out.getvalue()


def _await_chain(coro: Any) -> list[str]:
    """``File "...", line N in NAME`` for ``coro`` and each coroutine / generator it awaits (``cr_await``,
    ``gi_yieldfrom``, ``ag_await``), outermost first; then what the innermost one waits on."""
    lines: list[str] = []
    seen = 0
    while coro is not None and seen < 100:
        seen += 1
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None) or getattr(coro, "ag_frame", None)
        if frame is None:
            lines.append(f"awaiting {type(coro).__name__}: {coro!r:.200}")
            break
        lines.append(f'File "{frame.f_code.co_filename}", line {frame.f_lineno} in {frame.f_code.co_name}')
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None) or getattr(coro, "ag_await", None)
    return lines


def _arm_backstop(force: bool) -> None:
    """(Re-)arm faulthandler's C-thread backstop at bound + GRACE_S; at most once a second unless ``force``."""
    now = time.monotonic()
    if not force and now - _STATE["armed_at"] < 1.0:
        return
    _STATE["armed_at"] = now
    if not _STATE["backstop"]:
        return
    with contextlib.suppress(Exception):  # no usable stderr (a daemon): the monitor thread still acts
        faulthandler.dump_traceback_later(_bound() + GRACE_S, exit=True, file=sys.stderr)
        _STATE["armed"] = True


def _cancel_backstop() -> None:
    """Cancel faulthandler's backstop timer, where this process may touch it (see :func:`_after_fork_in_child`)."""
    if _STATE["backstop"]:
        faulthandler.cancel_dump_traceback_later()
        _STATE["armed"] = False


def _start_monitor() -> None:
    thread = _STATE["thread"]
    if thread is not None and thread.is_alive() and _STATE.get("pid") == os.getpid():
        return
    _STATE["pid"] = os.getpid()
    thread = threading.Thread(target=_monitor, name="vlgrpo-stall-watchdog", daemon=True)
    _STATE["thread"] = thread
    thread.start()


def _monitor() -> None:
    while _STATE["thread"] is threading.current_thread():
        bound = _bound()
        time.sleep(max(0.1, min(5.0, bound / 20.0)))
        with _LOCK:
            stage = current_stage()
            waited = time.monotonic() - _STATE["last"]
        if stage is not None and bound > 0 and waited > bound:
            try:
                stall(stage, waited, bound)
            finally:
                _STATE["exit"](EXIT_CODE)
            return


# ---- the report -------------------------------------------------------------------------------------------------


def _utc() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


def check_folder(folder: str) -> str | None:
    """Why ``folder`` may not hold stacks files (``None`` when it may): it must be a real folder (no symbolic
    link) owned by this user or root, not writable by group or others, in a parent folder that is not writable by
    others (unless sticky). Creates it (mode 0700) when it is missing and its parent exists."""
    import stat

    parent = os.path.dirname(folder.rstrip("/")) or "/"
    try:
        pst = os.stat(parent)
    except OSError as exc:
        return f"its parent {parent} cannot be read ({exc.strerror})"
    if pst.st_mode & stat.S_IWOTH and not pst.st_mode & stat.S_ISVTX:
        return f"its parent {parent} is writable by every user"
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        return f"it cannot be created ({exc.strerror})"
    st = os.lstat(folder)
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a folder (a symbolic link or a file)"
    if st.st_uid not in (0, os.getuid()):
        return f"it is owned by uid {st.st_uid}, not by this user ({os.getuid()}) or root"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"it is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _open_new(path: str) -> int:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    return os.open(path, flags, 0o600)


def _title(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:300]
    except OSError:
        return "?"


def stall(stage: str, waited: float, bound: float) -> str | None:
    """Report a stall of ``stage`` in this process (steps 1-3 of the module docstring); returns the event folder
    (``None`` when no folder was usable: then the stacks go to stderr). Does not end the process."""
    host, pid = socket.gethostname(), os.getpid()
    folder = _STATE["folder"]
    problem = check_folder(folder) if folder else "no folder configured"
    event = None
    if problem is None and folder:
        event = os.path.join(folder, f"stall-{_utc()}-{host}-{pid}")
        try:
            os.mkdir(event, 0o700)
        except OSError as exc:
            problem, event = f"{event} cannot be created ({exc.strerror})", None
    where = event if event else f"stderr of this process (stacks folder {folder}: {problem})"
    print(
        f"vlgrpo watchdog: STALL in stage {stage!r}: no progress for {waited:.0f} s ({ENV}={bound:g}); "
        f"stacks: {where}; ending process {pid} on {host} with exit code {EXIT_CODE} so the job restarts from "
        "its last checkpoint",
        file=sys.stderr,
        flush=True,
    )
    header = (
        f"vlgrpo watchdog: stage {stage!r} made no progress for {waited:.1f} s ({ENV}={bound:g})\n"
        f"host {host} pid {pid} time {_utc()}\nprocess: {_title(pid)}\n\n"
    )
    if event is None:
        sys.stderr.write(header)
        sys.stderr.flush()
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        return None
    fd = _open_new(os.path.join(event, f"stacks-{host}-{pid}.txt"))
    try:
        os.write(fd, header.encode())
        faulthandler.dump_traceback(fd, all_threads=True)
        os.write(fd, _task_stacks().encode())
    finally:
        os.close(fd)
    notes = [f"stage {stage!r}: no progress for {waited:.1f} s (bound {bound:g} s) in pid {pid} on {host}"]
    if _STATE["peers"]:
        notes += _dump_ray_peers(event, time.monotonic() + GRACE_S / 2)
    fd = _open_new(os.path.join(event, "stall.txt"))
    try:
        os.write(fd, ("\n".join(notes) + "\n").encode())
    finally:
        os.close(fd)
    return event


# ---- the other processes of the Ray job -------------------------------------------------------------------------


def py_spy() -> str | None:
    """The ``py-spy`` program of this environment (next to this interpreter, else on ``PATH``), or ``None``."""
    here = os.path.join(os.path.dirname(sys.executable), "py-spy")
    if os.access(here, os.X_OK):
        return here
    return shutil.which("py-spy")


def _children(pids: list[int]) -> list[int]:
    """``pids`` and every process below them (Linux ``/proc/<pid>/task/<tid>/children``), each once."""
    seen: list[int] = []
    todo = list(pids)
    while todo:
        pid = todo.pop(0)
        if pid in seen:
            continue
        seen.append(pid)
        with contextlib.suppress(OSError):
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
    return seen


def dump_pids(event: str, pids: list[int], skip: int = -1) -> list[str]:
    """Write ``stacks-<host>-<pid>.txt`` into ``event`` for each process of ``pids`` and its descendants except
    ``skip``, with ``py-spy dump``; returns one line per process not dumped and why (runs on the node of the
    processes: a Ray task of :func:`_dump_ray_peers`)."""
    from concurrent.futures import ThreadPoolExecutor

    host = socket.gethostname()
    spy = py_spy()
    targets = [p for p in _children(pids) if p not in (skip, os.getpid())]
    if spy is None:
        return [f"{host}: py-spy not found: pids {', '.join(map(str, targets))} not dumped"] if targets else []
    if not os.path.isdir(event):
        with contextlib.suppress(OSError):
            os.makedirs(event, 0o700)

    def one(pid: int) -> str | None:
        try:
            done = subprocess.run(
                [spy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=PY_SPY_TIMEOUT_S
            )
        except subprocess.TimeoutExpired:
            return f"{host}: pid {pid}: py-spy dump took over {PY_SPY_TIMEOUT_S:g} s"
        except OSError as exc:
            return f"{host}: pid {pid}: py-spy could not run ({exc})"
        if done.returncode != 0:
            return f"{host}: pid {pid} ({_title(pid)[:80]}): py-spy: {(done.stderr or done.stdout).strip()[:300]}"
        fd = _open_new(os.path.join(event, f"stacks-{host}-{pid}.txt"))
        try:
            os.write(fd, f"py-spy dump of pid {pid} on {host}: {_title(pid)}\n\n{done.stdout}".encode())
        finally:
            os.close(fd)
        return None

    with ThreadPoolExecutor(max_workers=8) as pool:
        return [r for r in pool.map(one, targets) if r]


def _dump_ray_peers(event: str, deadline: float) -> list[str]:
    """Dump the alive actors of this process's Ray job, one Ray task per node (see :func:`dump_pids`)."""
    ray = sys.modules.get("ray")
    try:
        if ray is None or not ray.is_initialized():
            return ["not connected to Ray: no other process dumped"]
        from ray._private import state  # Ray 2.48.0: the GCS actor table (pid, node) without the dashboard
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        job = ray.JobID.from_hex(ray.get_runtime_context().get_job_id())
        by_node: dict[str, list[int]] = {}
        for info in state.actors(job_id=job, actor_state_name="ALIVE").values():
            pid, node = info.get("Pid"), info.get("Address", {}).get("NodeID")
            if pid and node:
                by_node.setdefault(node, []).append(int(pid))
        task = ray.remote(num_cpus=0, max_retries=0)(dump_pids)
        refs = {
            task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote(
                event, pids, os.getpid()
            ): node
            for node, pids in by_node.items()
        }
        notes = [f"Ray job {job.hex()}: {sum(map(len, by_node.values()))} alive actors on {len(by_node)} node(s)"]
        ready, waiting = ray.wait(list(refs), num_returns=len(refs), timeout=max(1.0, deadline - time.monotonic()))
        for ref in ready:
            try:
                notes += ray.get(ref)
            except Exception as exc:  # noqa: BLE001 - one node's failure must not stop the report
                notes.append(f"node {refs[ref]}: dump task failed: {type(exc).__name__}: {exc}")
        notes += [f"node {refs[ref]}: dump task did not finish in time" for ref in waiting]
        return notes
    except Exception as exc:  # noqa: BLE001 - the report goes on without the peers
        return [f"peers not dumped: {type(exc).__name__}: {exc}"]
