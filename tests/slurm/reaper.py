"""Parent of one test daemon (munged, slurmctld, a slurmd): keeps every process it leaves below this one.

    python reaper.py [--bind DIR]... LOG -- COMMAND [ARG...]

It marks itself a child subreaper (Linux ``prctl(PR_SET_CHILD_SUBREAPER)``), so processes that a job step
double-forks away from slurmd (slurmstepd, Ray's daemons) are re-parented here instead of to PID 1: the test
can list every process of a node as this process's descendants, and they are reaped (this machine's PID 1
leaves zombies). ``--bind DIR`` bind-mounts DIR onto itself first; run the reaper under ``unshare --mount
--propagation private`` so that mount exists only for this daemon and its jobs (a checkpoint folder that is a
mount of its own, as shared storage is on a cluster, without touching the machine's mount table).

COMMAND runs with stdout and stderr in LOG. SIGTERM (or the command's exit) ends the run: SIGTERM to the
command and every other descendant, then after 20 s SIGKILL to every descendant still alive, then exit with the command's status.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36


def descendants(pid: int) -> list[int]:
    """PIDs of every live (non-zombie) process below ``pid``, from /proc/*/stat (parent PID, state)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[0] != "Z":
                children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def main(argv: list[str]) -> int:
    binds = []
    while argv and argv[0] == "--bind":
        binds.append(argv[1])
        argv = argv[2:]
    log, sep, command = argv[0], argv[1], argv[2:]
    if sep != "--" or not command:
        print(__doc__, file=sys.stderr)
        return 2
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        print(f"reaper: prctl(PR_SET_CHILD_SUBREAPER) failed: errno {ctypes.get_errno()}", file=sys.stderr)
        return 1
    for d in binds:
        subprocess.run(["mount", "--bind", d, d], check=True)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    with open(log, "ab", buffering=0) as out:
        main_child = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    status = None
    deadline = None
    while True:
        if stop and deadline is None:
            deadline = time.monotonic() + 20
            for p in descendants(os.getpid()):
                try:
                    os.kill(p, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        if deadline is not None and time.monotonic() > deadline:
            for p in descendants(os.getpid()):
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        try:
            pid, wstatus = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:  # nothing left below us
            return 0 if status is None else status
        if pid == main_child.pid:
            status = os.waitstatus_to_exitcode(wstatus)
            stop.append(1)
        if pid == 0:
            time.sleep(0.2)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
