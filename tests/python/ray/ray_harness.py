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

MODEL_30B = REPO / "assets" / "models" / "qwen3-vl-30b-a3b-instruct"
GEO3K_SAMPLE = REPO / "assets" / "geo3k-sample" / "hiyouga-geometry3k-format"


def geo3k_parquet(root: Path) -> tuple[Path, Path]:
    """The shipped Geometry3K sample in verl's format (``python -m vlgrpo data geo3k``), made once under root."""
    out = root / "geo3k"
    if not (out / "train.parquet").exists():
        done = subprocess.run(
            [PY, "-m", "vlgrpo", "data", "geo3k", str(GEO3K_SAMPLE), str(out)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stdout + done.stderr
    return out / "train.parquet", out / "test.parquet"


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
    """One ``entrypoints/ray-node.sh head|worker`` child process (or ``argv``, e.g. a plain ``ray start``)."""

    def __init__(self, role: str, ip: str, env: dict[str, str], log: Path, argv: list[str] | None = None):
        self.role, self.ip, self.log = role, ip, log
        self._log_f = open(log, "wb")
        self.proc = subprocess.Popen(
            argv or ["bash", str(RAY_NODE), role], env=env, stdout=self._log_f, stderr=subprocess.STDOUT, cwd=REPO
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
            # ray-node.sh builds ray start's environment from the registry: these two are named to pass
            VLGRPO_PASS_ENV="PYTHONPATH,STANDIN_PHYSICAL_NPUS",
        )
        env.update(extra)
        return env

    def start_head(self, devices: int = 8, physical: int = 8, dashboard: bool = False, **extra: str) -> RayNode:
        """``ray-node.sh head``; with ``dashboard`` its job server listens on ``self.dashboard`` (``ray job submit``)."""
        self.dashboard_port = free_port()
        env = self.env(
            "127.0.0.2",
            devices,
            physical,
            VLGRPO_RAY_PORT=str(self.port),
            VLGRPO_RAY_TEMP_DIR=str(self.temp_dir),
            VLGRPO_RAY_DASHBOARD="1" if dashboard else "0",
            VLGRPO_RAY_DASHBOARD_HOST="127.0.0.2",
            VLGRPO_RAY_DASHBOARD_PORT=str(self.dashboard_port),
            VLGRPO_RAY_CLIENT_PORT=str(free_port()),
            **extra,
        )
        node = RayNode("head", "127.0.0.2", env, self.root / "head.log")
        self.nodes.append(node)
        self._wait_listening(node, "127.0.0.2", self.port)
        self.wait_sockets()
        if dashboard:
            self._wait_listening(node, "127.0.0.2", self.dashboard_port, timeout=180)
        return node

    @property
    def dashboard(self) -> str:
        return f"http://127.0.0.2:{self.dashboard_port}"

    def start_worker(self, ip: str = "127.0.0.3", devices: int = 8, physical: int = 8, **extra: str) -> RayNode:
        env = self.env(ip, devices, physical, VLGRPO_RAY_HEAD=self.address, VLGRPO_RAY_HEAD_WAIT="30", **extra)
        self.wait_sockets()
        node = RayNode("worker", ip, env, self.root / f"worker-{ip}.log")
        self.nodes.append(node)
        self.wait_sockets()
        return node

    def wait_sockets(self, nodes: int | None = None, timeout: float = 180) -> None:
        """Wait until ``nodes`` (default: every node started so far) raylets have their sockets in the session.

        Every node of this one-host cluster lives in the head's session folder (Ray's workers take the head's
        temp dir), and Ray 2.48.0 names a node's sockets by the first free name there (``plasma_store``,
        ``plasma_store.1``, ...: ray/_private/node.py ``_make_inc_temp``, checked but not created). Two nodes
        that start at once can pick the same name, and the second bind fails ("bind: Address already in use"
        in raylet.err): the node never registers. One node per host, as on a real cluster, never meets it;
        here each node starts only when the previous ones have bound theirs.
        """
        want = len(self.nodes) if nodes is None else nodes
        sockets = self.temp_dir / "session_latest" / "sockets"
        deadline = time.monotonic() + timeout
        while True:
            names = os.listdir(sockets) if sockets.is_dir() else []
            if (
                sum(n.startswith("plasma_store") for n in names) >= want
                and sum(n.startswith("raylet") for n in names) >= want
            ):
                return
            dead = [n for n in self.nodes if n.proc.poll() is not None]
            if dead or time.monotonic() > deadline:
                why = "exited" if dead else f"has not bound its sockets after {timeout:.0f}s"
                raise AssertionError(
                    f"ray-node.sh {(dead or self.nodes)[-1].role} {why} ({sorted(names)}):\n"
                    + "".join(n.output()[-2000:] for n in self.nodes)
                    + self._raylet_errors()
                )
            time.sleep(0.3)

    def _raylet_errors(self) -> str:
        """The last lines of each raylet's error log in the session (why a node did not register)."""
        logs = self.temp_dir / "session_latest" / "logs"
        out = []
        for path in sorted(logs.glob("raylet*.err")) if logs.is_dir() else []:
            lines = [
                l for l in path.read_text(errors="replace").splitlines() if "Unhandled exception" in l or " F " in l
            ]
            out += [f"{path.name}: {l[:300]}" for l in lines[-3:]]
        return "\n".join(out)

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
            # ray-node.sh ends with 128+15 when SIGTERM stops it (the launch's signal rule), 0 when ray start ended
            if rc not in (0, 128 + signal.SIGTERM) or survivors:
                problems.append(f"{node.role} {node.ip}: exit {rc}, survivors {survivors}")
        shutil.rmtree(self.temp_dir, ignore_errors=True)
        return problems


# The Ascend runtime's view of a process, for Ray workers and job drivers of a node: a CPU stand-in for
# torch_npu's device count (standin/torch_npu: the node's NPUs filtered by ASCEND_RT_VISIBLE_DEVICES,
# npu_standin.py's rule), copied next to a file with the node's count.
STANDIN_TORCH_NPU = HERE / "standin"


def standin_site(root: Path, physical: int) -> str:
    """A PYTHONPATH (stand-in torch_npu for ``physical`` NPUs, then npu_standin) for a node's processes."""
    site = root / "standin"
    if not site.exists():
        shutil.copytree(STANDIN_TORCH_NPU, site)
    (site / "torch_npu" / "physical").write_text(f"{physical}\n")
    return f"{site}{os.pathsep}{HERE}"


PATIENT_RAY = """\
import sys
import time
import types

import ray._private.services as services

# Ray 2.48.0's `ray start` polls 200 x 0.1 s for the dashboard (ray/_private/services.py start_api_server) and
# gives up; on the shared 2-core CI machine the dashboard's 9 module processes can take longer to start. Only
# that poll waits longer here (5x); the Ray processes themselves are Ray's own.
services.time = types.SimpleNamespace(**{k: getattr(time, k) for k in dir(time) if not k.startswith("_")})
services.time.sleep = lambda s: time.sleep(s * 5)
from ray.scripts.scripts import main

sys.exit(main())
"""


def patient_ray(root: Path) -> Path:
    """A folder with a ``ray`` command for this machine's load (see PATIENT_RAY); put it first on PATH."""
    bin_dir = root / "patient-bin"
    if not bin_dir.exists():
        bin_dir.mkdir()
        (bin_dir / "ray").write_text(f"#!{PY}\n{PATIENT_RAY}")
        (bin_dir / "ray").chmod(0o755)
    return bin_dir


class PlainHead:
    """A one-node cluster started the way Ray's own documentation does it, without ray-node.sh:
    ``ray start --head --block --resources='{"NPU": N}' [--num-gpus=G]`` with the dashboard (the job server of
    ``ray job submit``) on 127.0.0.2. ``env_extra`` goes into the environment of ``ray start`` (what every
    Ray process of the node inherits). Ray 2.48.0's ``ray start`` gives the dashboard about 20 s to come up
    (ray/_private/services.py start_api_server) and fails otherwise; on this shared 2-core machine that
    can happen, so the start is tried up to 3 times.
    """

    def __init__(self, root: Path, npus: int = 4, gpus: int = 0, physical: int = 4, **env_extra: str):
        self.root = root
        self.node: RayNode | None = None
        self.npus, self.gpus = npus, gpus
        self.env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("VLGRPO_", "RAY_")) and k not in ("CUDA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES")
        }
        self.env.update(
            PATH=f"{patient_ray(root)}:{VENV_BIN}:/usr/local/bin:/usr/bin:/bin",
            RAY_USAGE_STATS_ENABLED="0",
            PYTHONPATH=standin_site(root, physical),
            **env_extra,
        )

    def start(self, attempts: int = 3) -> "PlainHead":
        for attempt in range(1, attempts + 1):
            self.temp_dir = Path(tempfile.mkdtemp(prefix="r", dir="/tmp"))
            self.port, self.dashboard_port = free_port(), free_port()
            argv = [
                str(patient_ray(self.root) / "ray"),
                "start",
                "--head",
                "--block",
                "--disable-usage-stats",
                f"--port={self.port}",
                "--node-ip-address=127.0.0.2",
                "--num-cpus=2",
                "--memory=400000000",
                "--object-store-memory=80000000",
                f'--resources={{"NPU": {self.npus}}}',
                "--include-dashboard=true",
                "--dashboard-host=127.0.0.2",
                f"--dashboard-port={self.dashboard_port}",
                f"--dashboard-agent-listen-port={free_port()}",
                f"--ray-client-server-port={free_port()}",
                f"--temp-dir={self.temp_dir}",
            ] + ([f"--num-gpus={self.gpus}"] if self.gpus else [])
            self.node = RayNode("head", "127.0.0.2", self.env, self.root / f"plain-head-{attempt}.log", argv)
            try:
                Cluster._wait_listening(self.node, "127.0.0.2", self.dashboard_port, timeout=180)
                return self
            except RuntimeError:
                failed = self.node.output()
                self.stop()
                if attempt == attempts or "Failed to start the dashboard" not in failed:
                    raise
        raise AssertionError("unreachable")

    @property
    def address(self) -> str:
        return f"127.0.0.2:{self.port}"

    @property
    def dashboard(self) -> str:
        return f"http://127.0.0.2:{self.dashboard_port}"

    def stop(self) -> list[str]:
        problems = []
        if self.node is not None:
            rc, survivors = self.node.stop()
            if survivors:
                problems.append(f"plain head: survivors {survivors}")
            self.node = None
        shutil.rmtree(self.temp_dir, ignore_errors=True)
        return problems


def submit(
    dashboard: str, command: list[str], *submit_args: str, runtime_env: dict | None = None, timeout: float = 400
) -> subprocess.CompletedProcess:
    """``ray job submit --address DASHBOARD [ARGS] -- COMMAND``: waits for the job and returns the CLI's result
    (exit 1 when the job failed; stdout carries the job's log)."""
    import json as _json

    argv = [str(Path(VENV_BIN) / "ray"), "job", "submit", "--address", dashboard, *submit_args]
    if runtime_env is not None:
        argv += ["--runtime-env-json", _json.dumps(runtime_env)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLGRPO_", "RAY_"))}
    env.update(RAY_USAGE_STATS_ENABLED="0", PATH=f"{VENV_BIN}:{env.get('PATH', '/usr/bin:/bin')}")
    return subprocess.run([*argv, "--", *command], env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO)


def run_cli(*args: str, timeout: float = 120, **env_extra: str) -> subprocess.CompletedProcess:
    """``python -m vlgrpo <args>`` in a subprocess (its own Ray driver), with the stand-in importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLGRPO_")}
    env["PYTHONPATH"] = str(HERE) + os.pathsep + env.get("PYTHONPATH", "")
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    env.update(env_extra)
    return subprocess.run(
        [PY, "-m", "vlgrpo", *args], env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO
    )
