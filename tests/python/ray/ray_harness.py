"""Real Ray 2.48.0 nodes on loopback, started through entrypoints/ray-node.sh.

Head on 127.0.0.2 and worker on 127.0.0.3 (127.0.0.1 would be replaced by the machine's address, see
../shared/notes/ci-containers.md), 1 CPU, 300 MB memory, 80 MB object store, a private temp dir, free
ports, RAY_USAGE_STATS_ENABLED=0. Each node is a child process (ray-node.sh -> ray start --block); it is
stopped with SIGTERM to that PID, and every process that descended from it is checked and, if still
alive after the grace period, killed by PID. Never `ray stop`.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
RAY_NODE = REPO / "entrypoints" / "ray-node.sh"
HERE = Path(__file__).resolve().parent
PY = sys.executable
VENV_BIN = str(Path(PY).parent)

def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _ppid_map() -> dict[int, int]:
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            out[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            pass
    return out


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` in the process tree (from /proc)."""
    children: dict[int, list[int]] = {}
    for child, parent in _ppid_map().items():
        children.setdefault(parent, []).append(child)
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class RayNode:
    """One ``entrypoints/ray-node.sh head|worker`` child process."""

    def __init__(self, role: str, ip: str, env: dict[str, str], log: Path):
        self.role, self.ip, self.log = role, ip, log
        self._log_f = open(log, "wb")
        self.proc = subprocess.Popen(
            ["bash", str(RAY_NODE), role], env=env, stdout=self._log_f, stderr=subprocess.STDOUT, cwd=REPO
        )
        self.tree: set[int] = set()

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def remember_tree(self) -> None:
        self.tree |= descendants(self.proc.pid)

    def stop(self, grace: float = 40.0) -> tuple[int | None, list[int]]:
        """SIGTERM the ray-node.sh PID; return (its exit status, PIDs of its tree still alive after grace).

        Survivors are then SIGKILLed by PID so a failing test leaves nothing behind.
        """
        self.remember_tree()
        rc = self.proc.poll()
        if rc is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                rc = None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(alive(p) for p in self.tree):
            time.sleep(0.2)
        survivors = sorted(p for p in self.tree if alive(p))
        for p in survivors + ([self.proc.pid] if rc is None else []):
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if rc is None:
            self.proc.wait(timeout=10)
        self._log_f.close()
        return rc, survivors


class Cluster:
    """Ports, temp dir and environment shared by a head and its workers."""

    def __init__(self, root: Path):
        self.root = root
        self.temp_dir = Path(tempfile.mkdtemp(prefix="r", dir="/tmp"))  # short: Ray's socket paths are long
        self.port = free_port()
        self.address = f"127.0.0.2:{self.port}"
        self.nodes: list[RayNode] = []
        # vlgrpo's sitecustomize shim, installed by the real installer, first on every node's PYTHONPATH:
        # Ray workers inherit the raylet's environment, so the doctor can check the shim in their actors
        from vlgrpo.patches.cli import install_sitecustomize

        self.shim_dir = root / "shim"
        self.shim_dir.mkdir()
        install_sitecustomize(str(self.shim_dir), pth=False)

    def env(self, ip: str, devices: int, physical: int, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("VLGRPO_") and not k.startswith("RAY_")}
        env.update(
            PATH=f"{VENV_BIN}:{env.get('PATH', '/usr/bin:/bin')}",
            RAY_USAGE_STATS_ENABLED="0",
            VLGRPO_PLATFORM="npu",
            VLGRPO_TEST_DEVICE_COUNT=str(devices),
            VLGRPO_RAY_NODE_IP=ip,
            VLGRPO_RAY_NUM_CPUS="1",
            VLGRPO_RAY_MEMORY_MB="300",
            VLGRPO_RAY_OBJECT_STORE_MB="80",
            VLGRPO_RAY_AGENT_PORT=str(free_port()),
            VLGRPO_RAY_CARDS_WAIT="0",
            VLGRPO_RAY_STOP_GRACE="30",
            HCCL_SOCKET_IFNAME="lo",
            GLOO_SOCKET_IFNAME="lo",
            STANDIN_PHYSICAL_NPUS=str(physical),
            PYTHONPATH=str(self.shim_dir),
        )
        env.update(extra)
        return env

    def start_head(self, devices: int = 8, physical: int = 8) -> RayNode:
        env = self.env(
            "127.0.0.2",
            devices,
            physical,
            VLGRPO_RAY_PORT=str(self.port),
            VLGRPO_RAY_TEMP_DIR=str(self.temp_dir),
            VLGRPO_RAY_DASHBOARD="0",
            VLGRPO_RAY_DASHBOARD_PORT=str(free_port()),
            VLGRPO_RAY_CLIENT_PORT=str(free_port()),
        )
        node = RayNode("head", "127.0.0.2", env, self.root / "head.log")
        self.nodes.append(node)
        self._wait_listening(node, "127.0.0.2", self.port)
        return node

    def start_worker(self, ip: str = "127.0.0.3", devices: int = 8, physical: int = 8) -> RayNode:
        env = self.env(ip, devices, physical, VLGRPO_RAY_HEAD=self.address, VLGRPO_RAY_HEAD_WAIT="30")
        node = RayNode("worker", ip, env, self.root / f"worker-{ip}.log")
        self.nodes.append(node)
        return node

    @staticmethod
    def _wait_listening(node: RayNode, host: str, port: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if node.proc.poll() is not None:
                raise RuntimeError(f"ray-node.sh {node.role} exited {node.proc.returncode}:\n{node.output()}")
            try:
                with socket.create_connection((host, port), timeout=1):
                    return
            except OSError:
                time.sleep(0.3)
        raise RuntimeError(f"ray-node.sh {node.role}: GCS not listening after {timeout}s:\n{node.output()}")

    def close(self) -> list[str]:
        problems = []
        for node in reversed(self.nodes):
            rc, survivors = node.stop()
            if rc != 0 or survivors:
                problems.append(f"{node.role} {node.ip}: exit {rc}, survivors {survivors}")
        shutil.rmtree(self.temp_dir, ignore_errors=True)
        return problems


def run_cli(*args: str, timeout: float = 120, **env_extra: str) -> subprocess.CompletedProcess:
    """``python -m vlgrpo <args>`` in a subprocess (its own Ray driver), with the stand-in importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLGRPO_")}
    env["PYTHONPATH"] = str(HERE) + os.pathsep + env.get("PYTHONPATH", "")
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    env.update(env_extra)
    return subprocess.run(
        [PY, "-m", "vlgrpo", *args], env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO
    )
