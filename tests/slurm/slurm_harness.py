"""A private Slurm 22.05 cluster of two nodes on loopback, for tests/slurm.

Debian 12's slurm-wlm and munge (scripts/install-test-tools.sh installs them); nothing of the machine's own
configuration is read or changed: a munge key made here (``mungekey``) in a 0700 folder, ``munged`` on its own
socket, a ``slurm.conf`` of its own that every client command reads through ``SLURM_CONF``. ``slurmctld`` and two
``slurmd`` (``-N n1``, ``-N n2``: ``NodeAddr=127.0.0.x`` / ``127.0.0.y``, distinct ports) run in the foreground,
each below its own ``reaper.py`` (a child subreaper), so every process a job leaves on a node -- slurmstepd,
the Ray daemons -- is a descendant of that node's reaper: that is how the tests tell the processes of n1 from
those of n2 and show that none is left. ``ProctrackType=proctrack/linuxproc`` and ``TaskPlugin=task/none``
(no cgroups needed). The daemons live in /usr/sbin, which a non-root PATH lacks: they are called by absolute
path. Everything is stopped by PID (never ``pkill``), and the folder is removed.

The per-node environment of a real cluster (``TaskProlog`` in slurm.conf: its ``export NAME=value`` lines are
added to every task's environment on that node) gives each node its own ``VLGRPO_RAY_NODE_IP`` and
``VLGRPO_RAY_AGENT_PORT`` (two Ray nodes on one host need distinct ones). ``KillWait=120``, so a Ray process that
is gone within 30 s of ``scancel`` was stopped by the SIGTERM handling of the example and of ray-node.sh, not by
Slurm's SIGKILL.

Each node has 8 NPUs as a generic resource (``GresTypes=npu``, ``Gres=npu:8``; a ``gres.conf`` of counts without
device files), so the example's ``--gres=npu:8`` on every device step is granted or refused by Slurm itself.
``node_own_folder`` gives one node a folder of its own in place of a shared one (a bind mount in that slurmd's
mount namespace only): a node whose checkpoint folder is not the shared storage.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from reaper import descendants  # live processes below a PID (the reaper's own walk of /proc)

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SBIN = Path("/usr/sbin")
DAEMONS = {name: SBIN / name for name in ("munged", "mungekey", "slurmctld", "slurmd", "slurmstepd")}
CLIENTS = {name: Path("/usr/bin") / name for name in ("sbatch", "squeue", "scontrol", "scancel", "sinfo", "srun")}


def missing_tools() -> list[str]:
    """The Slurm/munge programs of this harness that are not installed (empty: the cluster can run)."""
    return [str(p) for p in {**DAEMONS, **CLIENTS}.values() if not os.access(p, os.X_OK)]


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def alive(pid: int) -> bool:
    fields = _stat_fields(pid)
    return fields is not None and fields[0] != "Z"


_SIZES = {"G": 1 << 30, "T": 1 << 40}


class Daemon:
    """One daemon below its reaper (``reaper.py LOG -- COMMAND``)."""

    def __init__(self, name: str, command: list[str], log: Path, binds: list[Path] = (), new_mount_ns: bool = False):
        self.name, self.log = name, log
        argv = [sys.executable, str(HERE / "reaper.py")]
        for d in binds:
            argv += ["--bind", str(d)]
        argv += [str(log), "--", *command]
        if new_mount_ns:
            argv = ["unshare", "--mount", "--propagation", "private", "--", *argv]
        # its own session: a Ctrl-C of the test run reaches the test, which stops the daemons in order
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=open(str(log) + ".reaper", "wb"),
            start_new_session=True,
        )

    @property
    def reaper_pid(self) -> int:
        """The reaper's PID (``unshare`` execs it, so it is the PID of the process started here)."""
        return self.proc.pid

    def processes(self) -> list[int]:
        """Every live process below the reaper."""
        return descendants(self.reaper_pid)

    def output(self) -> str:
        texts = []
        for p in (self.log, Path(str(self.log) + ".reaper")):
            if p.exists():
                texts.append(p.read_text(errors="replace"))
        return "\n".join(texts)

    def stop(self, timeout: float = 40) -> list[str]:
        """SIGTERM to the reaper (it stops the daemon and what is left below it); returns what survived."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
        left = [f"{p} {cmdline(p)}" for p in self.processes()]
        if self.proc.poll() is None:
            for p in self.processes():
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.proc.kill()
            self.proc.wait(timeout=10)
            left.append(f"{self.proc.pid} reaper of {self.name} did not exit")
        return left


class SlurmCluster:
    """slurmctld + slurmd n1 + slurmd n2 + munged, all private to ``self.root``."""

    def __init__(self):
        self.root = Path(tempfile.mkdtemp(prefix="vs", dir="/tmp"))  # short: Ray's socket paths are long
        os.chmod(self.root, 0o755)  # munged wants the socket's folders searchable by everyone
        base = 10 + (os.getpid() % 60) * 4  # loopback addresses of their own, away from tests/python/ray's .2/.3
        self.node_ip = {"n1": f"127.0.0.{base}", "n2": f"127.0.0.{base + 1}"}
        self.hostname = socket.gethostname().split(".")[0]
        self.ctld_port = free_port()
        self.node_port = {n: free_port() for n in self.node_ip}
        self.task_prolog_lines: dict[str, list[str]] = {n: [] for n in self.node_ip}
        self.daemons: dict[str, Daemon] = {}
        for d in ("munge", "run", "log", "state", "spool", "etc", "ckpt", "work"):
            (self.root / d).mkdir()
        os.chmod(self.root / "munge", 0o700)
        for n in self.node_ip:
            (self.root / "spool" / n).mkdir()
        self.conf = self.root / "etc" / "slurm.conf"
        self.socket = self.root / "run" / "munge.sock"
        self.ckpt = self.root / "ckpt"
        self.bind_ckpt = False
        self.ckpt_volume = ""
        self.npus = 8  # generic resource npu per node

    # ---- configuration --------------------------------------------------------------------------
    def write_task_prolog(self) -> Path:
        """The nodes' TaskProlog: per node (SLURMD_NODENAME) the shell lines of self.task_prolog_lines; what they
        print as ``export NAME=value`` is added to the environment of every task on that node."""
        path = self.root / "etc" / "task-prolog.sh"
        lines = [
            "#!/bin/sh",
            "# per-node environment of the test's nodes (slurm.conf TaskProlog)",
            'case "$SLURMD_NODENAME" in',
        ]
        for node, extra in self.task_prolog_lines.items():
            lines.append(f"  {node})")
            lines += [f"    {line}" for line in extra]
            lines.append("    ;;")
        lines.append("esac")
        path.write_text("\n".join(lines) + "\n")
        path.chmod(0o755)
        return path

    def write_conf(self) -> None:
        r = self.root
        nodes = "\n".join(
            f"NodeName={n} NodeAddr={ip} NodeHostname={self.hostname} Port={self.node_port[n]} CPUs=1 "
            f"Gres=npu:{self.npus} State=UNKNOWN"
            for n, ip in self.node_ip.items()
        )
        # slurmd reads gres.conf beside slurm.conf: counts only (NPUs have no GRES plugin, the stand-ins no devices)
        (self.conf.parent / "gres.conf").write_text(f"Name=npu Count={self.npus}\n")
        self.conf.write_text(f"""\
# private test cluster (tests/slurm/slurm_harness.py)
ClusterName=vlgrpo{os.getpid()}
SlurmctldHost={self.hostname}(127.0.0.1)
SlurmctldPort={self.ctld_port}
AuthType=auth/munge
AuthInfo=socket={self.socket}
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool/%n
SlurmctldPidFile={r}/run/slurmctld.pid
SlurmdPidFile={r}/run/slurmd-%n.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd-%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
TaskProlog={self.write_task_prolog()}
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
ReturnToService=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
MailProg=/bin/true
GresTypes=npu
KillWait=120
InactiveLimit=0
MinJobAge=600
SlurmctldTimeout=60
SlurmdTimeout=120
MessageTimeout=30
{nodes}
PartitionName=test Nodes={",".join(self.node_ip)} Default=YES MaxTime=INFINITE State=UP
""")

    # ---- life cycle -------------------------------------------------------------------------------
    def env(self, **extra: str) -> dict[str, str]:
        """Environment for the client commands (sbatch, squeue, ...): only what they need, plus ``extra``."""
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": os.environ.get("HOME", "/root"),
            "SLURM_CONF": str(self.conf),
            "LANG": "C.UTF-8",
        }
        env.update(extra)
        return env

    def run(self, *argv: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess:
        out = subprocess.run(list(argv), env=self.env(), capture_output=True, text=True, timeout=timeout)
        if check and out.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: exit {out.returncode}\n{out.stdout}{out.stderr}\n{self.logs()}")
        return out

    def start(self, timeout: float = 90) -> None:
        r = self.root
        subprocess.run(
            [str(DAEMONS["mungekey"]), "--create", "--keyfile", str(r / "munge" / "munge.key")],
            check=True,
            capture_output=True,
        )
        self.daemons["munged"] = Daemon(
            "munged",
            [
                str(DAEMONS["munged"]),
                "--foreground",
                f"--key-file={r}/munge/munge.key",
                f"--socket={self.socket}",
                f"--pid-file={r}/run/munged.pid",
                f"--seed-file={r}/munge/munged.seed",
                f"--log-file={r}/log/munged.log",
            ],
            r / "log" / "munged.out",
        )
        self._until(
            lambda: stat.S_ISSOCK(os.stat(self.socket).st_mode) if self.socket.exists() else False,
            timeout,
            "munged socket",
        )
        self.write_conf()
        self.daemons["slurmctld"] = Daemon(
            "slurmctld", [str(DAEMONS["slurmctld"]), "-D", "-i", "-f", str(self.conf)], r / "log" / "slurmctld.out"
        )
        self._until(lambda: self._accepts("127.0.0.1", self.ctld_port), timeout, "slurmctld port")
        # each slurmd in a mount namespace of its own, where the checkpoint folder is a mount (shared storage on a
        # real cluster; the recipe refuses a checkpoint folder on a container's own file system)
        self.bind_ckpt = subprocess.run(["unshare", "--mount", "true"], capture_output=True).returncode == 0
        self.ckpt_volume = self.mount_checkpoint_volume() if self.bind_ckpt else ""
        for n in self.node_ip:
            self.daemons[n] = Daemon(
                n,
                [str(DAEMONS["slurmd"]), "-D", "-N", n, "-f", str(self.conf)],
                r / "log" / f"slurmd-{n}.out",
                binds=[self.ckpt] if self.bind_ckpt else [],
                new_mount_ns=self.bind_ckpt,
            )
        self._until(self._nodes_idle, timeout, "both nodes idle in sinfo")

    def mount_checkpoint_volume(self, size: str = "1T") -> str:
        """A volume of ``size`` at the checkpoint folder, shared by both nodes: a sparse ext4 image (about 16 MB on
        disk) on a loop device, mounted here before the slurmds copy this mount namespace. The recipe's preflight
        refuses a launch whose checkpoint volume holds less than one checkpoint (Qwen3-VL-30B-A3B: 373 GB) and its
        mount check refuses tmpfs, so the launch job needs a real file system that large. Returns its device, or ""
        where loop devices or mkfs.ext4 are missing (the folder is then bound onto itself, as before). mkfs.ext4 is
        called in /usr/sbin, which the CI's PATH (env -i: /usr/local/bin:/usr/bin:/bin) lacks."""
        image = self.root / "ckpt.img"
        try:
            with open(image, "wb") as f:
                f.truncate(_SIZES[size[-1]] * int(size[:-1]))
            mkfs = subprocess.run(
                [
                    str(SBIN / "mkfs.ext4"),
                    "-q",
                    "-F",
                    "-m",
                    "0",
                    "-O",
                    "^has_journal",
                    "-E",
                    "lazy_itable_init=1,nodiscard",
                    str(image),
                ],
                capture_output=True,
                timeout=60,
            )
            if mkfs.returncode != 0:
                return ""
            if (
                subprocess.run(
                    ["mount", "-o", "loop", str(image), str(self.ckpt)], capture_output=True, timeout=60
                ).returncode
                != 0
            ):
                return ""
        except (OSError, subprocess.TimeoutExpired):
            image.unlink(missing_ok=True)
            return ""
        self.ckpt.chmod(0o755)
        return str(image)

    @contextmanager
    def node_own_folder(self, node: str, folder: Path):
        """While in the block, ``node`` sees an empty folder of its own at ``folder`` (a bind mount of
        ``ROOT/own-NODE`` there, made in that slurmd's mount namespace: the other node and this process still see
        the shared one), as a node without the shared storage mounted at that path would. Needs the nodes' own
        mount namespaces (``self.bind_ckpt``); yields the node's folder."""
        if not self.bind_ckpt:
            raise RuntimeError("the nodes share this process's mount namespace (unshare --mount failed)")
        own = self.root / f"own-{node}"
        own.mkdir(exist_ok=True)
        enter = ["nsenter", f"--target={self.daemons[node].reaper_pid}", "--mount", "--"]
        subprocess.run([*enter, "mount", "--bind", str(own), str(folder)], check=True, capture_output=True, timeout=60)
        try:
            yield own
        finally:
            subprocess.run([*enter, "umount", str(folder)], check=True, capture_output=True, timeout=60)

    def _nodes_idle(self) -> bool:
        out = self.run(str(CLIENTS["sinfo"]), "-h", "-N", "-o", "%N %t", check=False)
        states = dict(line.split() for line in out.stdout.splitlines() if line.strip())
        return all(states.get(n) == "idle" for n in self.node_ip)

    @staticmethod
    def _accepts(host: str, port: int) -> bool:
        try:
            with socket.create_connection((host, port), timeout=1):
                return True
        except OSError:
            return False

    def _until(self, predicate, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for d in self.daemons.values():
                if d.proc.poll() is not None:
                    raise RuntimeError(f"{d.name} exited ({d.proc.returncode}) waiting for {what}:\n{self.logs()}")
            try:
                if predicate():
                    return
            except OSError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"timed out after {timeout}s waiting for {what}:\n{self.logs()}")

    def logs(self, tail: int = 40) -> str:
        out = []
        for f in sorted((self.root / "log").glob("*")):
            lines = f.read_text(errors="replace").splitlines()[-tail:]
            out.append(f"--- {f.name}\n" + "\n".join(lines))
        return "\n".join(out)

    # ---- jobs --------------------------------------------------------------------------------------
    def sbatch(self, script: Path, env: dict[str, str], *args: str) -> str:
        """Submit ``script`` with exactly ``env`` (plus SLURM_CONF) as the submitting environment; returns the job id."""
        out = subprocess.run(
            [
                str(CLIENTS["sbatch"]),
                "--parsable",
                f"--output={self.root}/log/job-%j.out",
                f"--chdir={self.root}/work",
                *args,
                str(script),
            ],
            env={**env, "SLURM_CONF": str(self.conf)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        if out.returncode != 0:
            raise RuntimeError(f"sbatch: exit {out.returncode}: {out.stdout}{out.stderr}")
        return out.stdout.strip().split(";")[0]

    def job_output(self, job: str) -> str:
        f = self.root / "log" / f"job-{job}.out"
        return f.read_text(errors="replace") if f.exists() else ""

    def job(self, job: str) -> dict[str, str]:
        """``scontrol show job -o`` as a dict (JobState, ExitCode, NodeList, ...)."""
        out = self.run(str(CLIENTS["scontrol"]), "show", "job", "-o", job, check=False)
        return dict(re.findall(r"(\w+)=(\S*)", out.stdout))

    def wait_job(self, job: str, timeout: float, states=("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL")):
        """Wait until the job is in one of ``states``; returns its record. Raises with the job log on time-out."""
        deadline = time.monotonic() + timeout
        info: dict[str, str] = {}
        while time.monotonic() < deadline:
            info = self.job(job)
            if info.get("JobState") in states:
                return info
            time.sleep(0.5)
        raise AssertionError(
            f"job {job} still {info.get('JobState')} after {timeout}s:\n{self.job_output(job)}\n{self.logs()}"
        )

    def node_processes(self, node: str) -> dict[int, str]:
        """Every live process of ``node`` except its slurmd (all below that node's reaper), pid -> command line."""
        slurmd = self.daemons[node]
        procs = {p: cmdline(p) for p in slurmd.processes()}
        return {p: c for p, c in procs.items() if not c.startswith(str(DAEMONS["slurmd"]) + " ")}

    # ---- teardown -----------------------------------------------------------------------------------
    def stop(self) -> list[str]:
        """Cancel what still runs, stop the daemons by PID (nodes first) and remove the folder; returns leftovers."""
        problems = []
        if "slurmctld" in self.daemons and self.daemons["slurmctld"].proc.poll() is None:
            self.run(str(CLIENTS["scancel"]), "--user", "root", check=False)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                q = self.run(str(CLIENTS["squeue"]), "-h", "-o", "%i", check=False)
                if q.returncode != 0 or not q.stdout.strip():
                    break
                time.sleep(0.5)
        for name in ("n2", "n1", "slurmctld", "munged"):
            if name in self.daemons:
                problems += [f"{name}: {p}" for p in self.daemons[name].stop()]
        if self.ckpt_volume:
            out = subprocess.run(["umount", str(self.ckpt)], capture_output=True, text=True, timeout=60)
            if out.returncode != 0:
                problems.append(f"umount {self.ckpt}: {out.stderr.strip()}")
                subprocess.run(["umount", "-l", str(self.ckpt)], capture_output=True, timeout=60)
        shutil.rmtree(self.root, ignore_errors=True)
        return problems
