"""``python3 -I -m vlgrpo.launch entry ray-node``: this node's part of a Ray cluster, top to bottom.

``entrypoints/ray-node.sh head|worker`` is a bash shim (``entrypoints/lib/shim.sh``) over this module, as the
recipes are. It starts ``ray start --block`` in the foreground (compose, Kubernetes, Slurm) with the node's
accelerators declared the way Ray and verl expect (field case B15), in the order :meth:`RayNodeLaunch.run` reads:

1. the one word, ``head`` or ``worker`` (or ``--help``: :func:`vlgrpo.launch.help.node_markdown`);
2. the stop signals (:class:`~vlgrpo.launch.entry.Children`: a signal stops the running check with its process
   group and ends the launch with 128+signal, nothing started);
3. the settings of owner ``node`` (the recipes' settings accepted and ignored), the children's environment built
   from the registry (:mod:`.childenv`), the roles' rules, the experiment trackers (:func:`vlgrpo.trackers.plan`:
   verl's loggers may run in an actor on this node); the image's CANN environment file;
4. this node's accelerators (the one device counter, ``python3 -m vlgrpo devices``, a child; the test-only
   ``VLGRPO_TEST_DEVICE_COUNT`` is refused on a node with real ones), declared as ``--resources={"NPU": N}`` on
   Ascend (never ``--num-gpus`` there) and ``--num-gpus=N`` on NVIDIA;
5. the socket interfaces (``HCCL_SOCKET_IFNAME`` or ``NCCL_SOCKET_IFNAME``, and ``GLOO_SOCKET_IFNAME``), checked
   against this node's; exported ``TP_SOCKET_IFNAME``, ``VLLM_HOST_IP`` and, on Ascend,
   ``RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES=1`` (Ray 2.48.0 would hide the NPUs from processes that hold
   none: the ``ray job submit`` driver, verl's TaskRunner);
6. the dry-run plan (``VLGRPO_DRY_RUN``), or: the cards-free check (npu-smi's process table, -8005/-8020 = held by
   another container; nvidia-smi's compute apps; waiting ``VLGRPO_RAY_CARDS_WAIT`` seconds), a worker's TCP wait
   for the head (``VLGRPO_RAY_HEAD_WAIT``), then ``ray start --block`` as a child (:meth:`RayNodeLaunch.ray`).

Once ``ray start`` runs, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 or SIGPIPE stop it by PID with one
SIGTERM (``ray start --block`` then stops the Ray processes it started; SIGKILL after ``VLGRPO_RAY_STOP_GRACE``)
and the launch exits 128+signal. Under Slurm (``SLURM_STEP_ID`` set) the step's signal reaches ``ray start`` too and
Ray 2.48.0's SIGTERM handler deadlocks on a second one (``ray/_private/node.py``: ``kill_all_processes`` under a
non-reentrant lock): there it is sent one only if it still runs 10 s later. Never ``ray stop`` (it kills every Ray
process on the machine), never pkill.

Exit status: 0 planned (or ``ray start`` ended by itself with 0), 2 refused, 128+signal stopped, else ``ray
start``'s status or 1 (a failed check, a bug: ``internal error``).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

from vlgrpo.launch import help as helptext
from vlgrpo.launch import settings
from vlgrpo.launch.entry import STOP_SIGNALS, Exit, Hooks, Launch, _alive

EXIT_CONFIG = 2
#: the interface list NCCL, HCCL and Gloo read: an optional ``^`` (exclude) or ``=`` (exact names), then names
_IFLIST = re.compile(r"[=^]?[A-Za-z0-9_.:-]{1,15}(,[A-Za-z0-9_.:-]{1,15})*")
_IPV4 = re.compile(r"[0-9]{1,3}(\.[0-9]{1,3}){3}")
_DIGITS = re.compile(r"[0-9]+")
#: where this node's network interfaces are listed
SYS_NET = "/sys/class/net"
#: seconds a worker's TCP probe of the head and the pause between two attempts (of either wait) take
PROBE_S, NAP_S = 2.0, 2.0
#: seconds under Slurm before ray start is sent the SIGTERM Slurm should have given it
SLURM_FORWARD_S = 10.0


def _say(text: str) -> None:
    """``ray-node: TEXT`` on stdout (progress)."""
    sys.stdout.write(f"ray-node: {text}\n")
    sys.stdout.flush()


def _err(text: str) -> None:
    """``ray-node: TEXT`` on stderr (a runtime refusal; configuration problems are collected instead)."""
    sys.stdout.flush()
    sys.stderr.write(f"ray-node: {text}\n")
    sys.stderr.flush()


def _awk_words(text: str) -> list[str]:
    """``text`` split as awk's default field splitting does (runs of blanks, tabs and newlines)."""
    return [w for w in re.split("[ \t\n]+", text) if w]


def npu_holders(out: str) -> list[str]:
    """``NPU <id> chip <chip>: pid <pid> <name>`` for each row of the process table of ``npu-smi info`` output
    ``out`` (the rows after the header that names "Process id"; a busy row looks like ``| 2       0   | 1333928  |
    python3  | 37709  |``)."""
    got, table = [], False
    for line in out.split("\n"):
        if "Process id" in line:
            table = True
            continue
        f = line.split("|")
        if not table or len(f) < 5:
            continue
        ids, pid, name = _awk_words(f[1]), f[2].replace(" ", ""), f[3].strip(" ")
        if ids and _DIGITS.fullmatch(ids[0]) and _DIGITS.fullmatch(pid):
            got.append(f"NPU {ids[0]} chip {ids[1] if len(ids) > 1 else ''}: pid {pid} {name}")
    return got


def gpu_holders(out: str) -> list[str]:
    """``GPU <uuid>: pid <pid> <name>`` for each compute process of ``nvidia-smi --query-compute-apps=gpu_uuid,pid,
    process_name --format=csv,noheader`` output ``out``."""
    got = []
    for line in out.split("\n"):
        f = re.split(", *", line)
        if len(f) >= 3 and _DIGITS.fullmatch(f[1]):
            got.append(f"GPU {f[0]}: pid {f[1]} {f[2]}")
    return got


def ifname_problem(var: str, value: str, exact: bool, interfaces: list[str]) -> str | None:
    """The problem of interface list ``value`` of ``var`` as NCCL/HCCL/Gloo read it (names are prefixes unless
    ``exact`` or the list starts with ``=``; a ``^`` list excludes and is not checked) on a node with
    ``interfaces``, or None."""
    if not _IFLIST.fullmatch(value):
        return settings.problem(
            var,
            f"{settings.show(value)} is not a network interface list",
            f"set it to the interface of the cluster network, e.g. {var}=eth0",
        )
    if value.startswith("^"):
        return None
    exact = exact or value.startswith("=")
    for name in value.removeprefix("=").split(","):
        if not any(ifc == name or (not exact and ifc.startswith(name)) for ifc in interfaces):
            return settings.problem(
                var,
                f"no network interface {settings.show(name)} on this node (it has: {' '.join(interfaces)})",
                f"set {var} to one of them",
            )
    return None


def _which(name: str, path: str) -> bool:
    """``name`` is a program on ``path`` (``command -v``: an empty entry is the working folder)."""
    return any(os.access(os.path.join(d or ".", name), os.X_OK) for d in path.split(":"))


def _resolve(host: str, port: int, limit: float) -> list[tuple[int, tuple[str, int]]]:
    """The addresses of ``host:port`` (TCP), looked up in a thread the launch waits ``limit`` seconds for (a lookup
    cannot be interrupted; the wait for it can, so a stop signal meanwhile ends the launch at once)."""
    import socket
    import threading

    got: list[tuple[int, tuple[str, int]]] = []

    def lookup() -> None:
        try:
            for fam, _t, _p, _c, addr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
                got.append((int(fam), (str(addr[0]), int(addr[1]))))
        except OSError:
            pass

    t = threading.Thread(target=lookup, daemon=True)
    t.start()
    t.join(limit)
    return list(got) if not t.is_alive() else []


def tcp_open(hostport: str, limit: float = PROBE_S) -> bool:
    """``hostport`` (HOST:PORT) accepts a TCP connection within ``limit`` seconds."""
    import socket

    host, _, port = hostport.rpartition(":")
    start = time.monotonic()
    for fam, addr in _resolve(host, int(port), limit):
        left = limit - (time.monotonic() - start)
        if left <= 0:
            break
        try:
            with socket.socket(fam, socket.SOCK_STREAM) as s:
                s.settimeout(left)
                s.connect(addr)
                return True
        except OSError:
            continue
    return False


class RayNodeLaunch(Launch):
    """``ray-node.sh head|worker``: one Ray node (see the module docstring)."""

    def __init__(
        self, owner: str, entries: list[tuple[str, str]], environ_path: str, readable: bool, hooks: Hooks
    ) -> None:
        super().__init__(owner, entries, environ_path, readable, hooks)
        self.platform, self.count = "", 0
        self.child = 0  # ray start's PID

    # ---- the word -----------------------------------------------------------------------------------------------

    def role(self, words: list[str]) -> str:
        """The one word: ``head``, ``worker`` or ``help``; anything else is refused (exit 2)."""
        if len(words) != 1:
            _err(
                "expected exactly one argument, head or worker (settings come from VLGRPO_* variables; --help lists "
                "them)"
            )
            raise Exit(EXIT_CONFIG)
        word = words[0]
        if word in ("-h", "--help"):
            return "help"
        if word not in ("head", "worker"):
            _err(
                f"unknown argument {settings.show(word)} (expected head or worker; settings come from VLGRPO_* "
                "variables, see --help)"
            )
            raise Exit(EXIT_CONFIG)
        return word

    # ---- the checks ---------------------------------------------------------------------------------------------

    def role_rules(self, role: str) -> None:
        """``VLGRPO_RAY_HEAD`` is a worker's (required there), ``VLGRPO_RAY_TEMP_DIR`` the head's."""
        raw = self.st.raw
        if role == "worker" and not self.st.values.get("RAY_HEAD") and not raw.get("RAY_HEAD"):
            self.problems.append(
                settings.problem(
                    "VLGRPO_RAY_HEAD",
                    "required for a worker",
                    "set it to the head's HOST:PORT, e.g. VLGRPO_RAY_HEAD=10.0.0.1:6379",
                )
            )
        if role == "head" and raw.get("RAY_HEAD"):
            self.problems.append(
                settings.problem(
                    "VLGRPO_RAY_HEAD", "only for workers", "unset it on the head (the head's port is VLGRPO_RAY_PORT)"
                )
            )
        if role == "worker" and raw.get("RAY_TEMP_DIR"):
            self.problems.append(
                settings.problem(
                    "VLGRPO_RAY_TEMP_DIR",
                    "only for the head (Ray workers use the head's temp folder)",
                    "unset it on workers",
                )
            )

    def platform_and_count(self) -> None:
        """The platform and the accelerators this node declares: all of its own (the node's count, not the
        visibility-limited one), or the test-only ``VLGRPO_TEST_DEVICE_COUNT`` on a node without any."""
        v = self.st.values
        override, self.platform = v.get("TEST_DEVICE_COUNT", ""), v.get("PLATFORM", "")
        if not self.platform and override:
            self.problems.append(
                settings.problem(
                    "VLGRPO_PLATFORM",
                    "must be set (npu or gpu) when VLGRPO_TEST_DEVICE_COUNT is used",
                    "set VLGRPO_PLATFORM=npu or gpu",
                )
            )
            return
        dev = self.count_devices(self.platform, driver=False)
        if dev is None:
            return
        self.platform = dev.get("platform", "")
        if not self.platform:
            self.problems.append(
                settings.problem(
                    "VLGRPO_PLATFORM",
                    "no Ascend NPU (/dev/davinci*, npu-smi) or NVIDIA GPU (nvidia-smi) on this node",
                    "map the devices into the container (see docs/cluster.md) or set VLGRPO_PLATFORM",
                )
            )
            return
        real, src = int(dev["node_devices"]), dev.get("node_source", "")
        if override:
            if real > 0:
                self.problems.append(
                    settings.problem(
                        "VLGRPO_TEST_DEVICE_COUNT",
                        f"test-only override refused: this node has {real} real {self.platform} device(s) ({src})",
                        "unset it; a real node declares what it has",
                    )
                )
                return
            self.count = int(override)
            _say(f"TEST MODE: declaring {self.count} {self.platform} device(s) from VLGRPO_TEST_DEVICE_COUNT")
            return
        self.count = real
        if real == 0 and self.platform == "npu":
            self.problems.append(
                settings.problem(
                    "VLGRPO_PLATFORM",
                    f"npu, but no Ascend NPU found ({src})",
                    "map /dev/davinciN, /dev/davinci_manager, /dev/devmm_svm, /dev/hisi_hdc, /usr/local/Ascend/driver "
                    "and npu-smi into the container",
                )
            )
        elif real == 0:
            self.problems.append(
                settings.problem(
                    "VLGRPO_PLATFORM",
                    f"gpu, but no NVIDIA GPU found ({src})",
                    "run the container with the NVIDIA runtime (--gpus all)",
                )
            )

    def interfaces(self) -> None:
        """The socket interfaces NCCL/HCCL/Gloo use: required, and checked against this node's (an inherited
        ``TP_SOCKET_IFNAME``, which is exported as given, too)."""
        need = ["GLOO_SOCKET_IFNAME", "HCCL_SOCKET_IFNAME" if self.platform == "npu" else "NCCL_SOCKET_IFNAME"]
        try:
            have = sorted(os.listdir(SYS_NET), key=lambda n: n.encode("utf-8", "surrogateescape"))
        except OSError:
            have = []
        for var in need:
            value = self.env.get(var, "")
            if not value:
                self.problems.append(
                    settings.problem(
                        var,
                        f"required on {self.platform} nodes (Gloo and {need[1].partition('_')[0]} pick a wrong "
                        "interface otherwise)",
                        f"set it to the interface of the cluster network, e.g. {var}=eth0 (list them with "
                        "`ip -br addr`)",
                    )
                )
                continue
            line = ifname_problem(var, value, var == "GLOO_SOCKET_IFNAME", have)
            if line:
                self.problems.append(line)
        tp = self.held.get("TP_SOCKET_IFNAME", "")  # a set row: the inherited value is checked, then exported
        if tp:
            line = ifname_problem("TP_SOCKET_IFNAME", tp, True, have)
            if line:
                self.problems.append(line)

    def exports(self) -> None:
        """What verl, vLLM and HCCL/NCCL read, exported for ``ray start`` and every Ray process (each printed); the
        node IP from ``GLOO_SOCKET_IFNAME``'s IPv4 address when ``VLGRPO_RAY_NODE_IP`` is not set."""
        env, v = self.env, self.st.values
        gloo = env["GLOO_SOCKET_IFNAME"]
        out = [
            ("GLOO_SOCKET_IFNAME", gloo),
            ("TP_SOCKET_IFNAME", self.held.get("TP_SOCKET_IFNAME") or gloo),
            ("RAY_USAGE_STATS_ENABLED", "0"),
        ]
        if self.platform == "npu":
            out += [
                ("HCCL_SOCKET_IFNAME", env["HCCL_SOCKET_IFNAME"]),
                ("RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES", "1"),
            ]
        else:
            out.append(("NCCL_SOCKET_IFNAME", env["NCCL_SOCKET_IFNAME"]))
        if not v.get("RAY_NODE_IP") and gloo[:1] not in ("=", "^") and _which("ip", env.get("PATH", "")):
            rc, text = self.children.run(
                ["ip", "-4", "-o", "addr", "show", "dev", gloo], env, capture=True, stderr=subprocess.DEVNULL
            )
            lines = text.decode("utf-8", "surrogateescape").split("\n")
            words = _awk_words(lines[0]) if lines else []
            addr = words[3].partition("/")[0] if len(words) > 3 else ""
            if _IPV4.fullmatch(addr):
                v["RAY_NODE_IP"] = addr
                _say(f"node IP {addr} (from GLOO_SOCKET_IFNAME={gloo})")
        if v.get("RAY_NODE_IP"):
            out.append(("VLLM_HOST_IP", v["RAY_NODE_IP"]))
        for name, value in out:
            env[name] = value
            _say(f"environment {name}={value}")

    def build_argv(self, role: str) -> list[str]:
        """``ray start --block`` for ``role`` with this node's accelerators."""
        v = self.st.values
        argv = ["ray", "start", "--block", "--disable-usage-stats"]
        if role == "head":
            argv += ["--head", f"--port={v.get('RAY_PORT', '')}"]
            if v.get("RAY_DASHBOARD") == "True":
                argv += ["--include-dashboard=true", f"--dashboard-host={v.get('RAY_DASHBOARD_HOST', '')}"]
            else:
                argv.append("--include-dashboard=false")
            argv += [f"--dashboard-port={v.get('RAY_DASHBOARD_PORT', '')}"]
            argv += [f"--ray-client-server-port={v.get('RAY_CLIENT_PORT', '')}"]
            if v.get("RAY_TEMP_DIR"):
                argv.append(f"--temp-dir={v['RAY_TEMP_DIR']}")
        else:
            argv.append(f"--address={v.get('RAY_HEAD', '')}")
        if v.get("RAY_NODE_IP"):
            argv.append(f"--node-ip-address={v['RAY_NODE_IP']}")
        argv.append(f"--dashboard-agent-listen-port={v.get('RAY_AGENT_PORT', '')}")
        if v.get("RAY_NUM_CPUS"):
            argv.append(f"--num-cpus={v['RAY_NUM_CPUS']}")
        if v.get("RAY_MEMORY_MB"):
            argv.append(f"--memory={int(v['RAY_MEMORY_MB']) * 1048576}")
        if v.get("RAY_OBJECT_STORE_MB"):
            argv.append(f"--object-store-memory={int(v['RAY_OBJECT_STORE_MB']) * 1048576}")
        if self.platform == "npu":
            argv.append(f'--resources={{"NPU": {self.count}}}')
        else:
            argv.append(f"--num-gpus={self.count}")
        return argv

    def cards_free(self) -> None:
        """Refuse (after waiting ``VLGRPO_RAY_CARDS_WAIT`` seconds) while another process holds this node's cards;
        this launch never kills a process it did not start."""
        npu = self.platform == "npu"
        tool = "npu-smi" if npu else "nvidia-smi"
        limit = int(self.st.values.get("RAY_CARDS_WAIT") or 0)
        if not _which(tool, self.env.get("PATH", "")):
            if self.st.values.get("TEST_DEVICE_COUNT"):
                _say(f"{tool} not found; card-holder check skipped (VLGRPO_TEST_DEVICE_COUNT test mode)")
                return
            _err(
                f"{tool} not found: cannot check whether another process holds the cards; mount it into the "
                "container (Ascend: /usr/local/bin/npu-smi and /usr/local/dcmi; NVIDIA: the nvidia container runtime)"
            )
            raise Exit(EXIT_CONFIG)
        start = time.monotonic()
        while True:
            if npu:
                rc, raw = self.children.run(["npu-smi", "info"], self.env, capture=True, stderr=subprocess.STDOUT)
            else:
                cmd = ["nvidia-smi", "--query-compute-apps=gpu_uuid,pid,process_name", "--format=csv,noheader"]
                rc, raw = self.children.run(cmd, self.env, capture=True, stderr=subprocess.STDOUT)
            out = raw.decode("utf-8", "surrogateescape")
            if npu and ("-8005" in out or "-8020" in out):
                holders = ["npu-smi reports -8005/-8020: the cards are in use by another container"]
            elif rc != 0:
                _err(
                    f"{tool} failed (exit {rc}): cannot tell whether the cards are free; run `{tool} info` on the host "
                    "and fix the driver mounts"
                )
                raise Exit(EXIT_CONFIG)
            else:
                holders = npu_holders(out) if npu else gpu_holders(out)
            if not holders:
                return
            waited = int(time.monotonic() - start)
            if waited >= limit:
                _err(f"the cards are held by other processes (after waiting {limit}s, VLGRPO_RAY_CARDS_WAIT):")
                sys.stderr.write("  " + "\n".join(holders) + "\n")
                _err("stop that run (or its container) first; this script never kills processes it did not start")
                raise Exit(EXIT_CONFIG)
            _say(f"cards busy, waiting ({waited}s of {limit}s): {holders[0]}")
            time.sleep(NAP_S)  # a stop signal meanwhile ends the launch at once (Children)

    def wait_head(self) -> None:
        """A worker: wait up to ``VLGRPO_RAY_HEAD_WAIT`` seconds for the head to accept TCP connections."""
        v = self.st.values
        head, limit = v.get("RAY_HEAD", ""), int(v.get("RAY_HEAD_WAIT") or 0)
        start = time.monotonic()
        while not tcp_open(head):
            waited = int(time.monotonic() - start)
            if waited >= limit:
                _err(
                    f"VLGRPO_RAY_HEAD={head}: head not reachable after {limit}s (VLGRPO_RAY_HEAD_WAIT); start the "
                    "head first or fix the address"
                )
                raise Exit(EXIT_CONFIG)
            _say(f"waiting for the head {head} ({waited}s of {limit}s)")
            time.sleep(NAP_S)

    # ---- ray start ----------------------------------------------------------------------------------------------

    def ray(self, argv: list[str]) -> int:
        """Run ``argv`` as a child (this process group, stdin from /dev/null, SIGINT and SIGQUIT ignored, as a
        shell's background command has them: a Ctrl-C reaches it as the one SIGTERM below) and wait; on a stop
        signal stop it by PID (see the module docstring) and return 128+signal, else its exit status."""
        stops = {num for _n, num in STOP_SIGNALS}
        waited = stops | {int(signal.SIGCHLD)}
        # synchronous from here: the stop signals and the child's end are taken by sigtimedwait, none is lost
        signal.pthread_sigmask(signal.SIG_BLOCK, waited)

        def child_setup() -> None:
            signal.pthread_sigmask(signal.SIG_SETMASK, set())
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGQUIT, signal.SIG_IGN)

        try:
            proc = subprocess.Popen(argv, env=self.child_env(), stdin=subprocess.DEVNULL, preexec_fn=child_setup)
        except OSError as exc:
            _err(f"cannot start {argv[0]}: {exc.strerror or exc}")
            return 127
        self.child = proc.pid
        _say(f"ray start running as pid {proc.pid}")
        first = 0  # the first stop signal (exit 128+it)
        forward_at = deadline = 0.0  # when a held-back SIGTERM goes to ray start (Slurm) / SIGKILL follows
        grace = int(self.st.values.get("RAY_STOP_GRACE") or 30)
        slurm = bool(self.held.get("SLURM_STEP_ID"))
        rc: int | None = None
        while rc is None:
            now = time.monotonic()
            if forward_at and now >= forward_at:
                forward_at = 0.0
                self.forward()
            if deadline and now >= deadline:
                _err(f"ray start (pid {proc.pid}) still running {grace}s after SIGTERM; sending SIGKILL")
                self._kill(signal.SIGKILL)
                deadline = now + 3600  # once
            rc = proc.poll()
            if rc is not None:
                break
            timeouts = [t - now for t in (forward_at, deadline) if t]
            info = signal.sigtimedwait(waited, max(min(timeouts), 0.01)) if timeouts else signal.sigwaitinfo(waited)
            if info is None or info.si_signo not in stops:
                continue
            if not first:
                first = info.si_signo
                deadline = time.monotonic() + grace
                if slurm:
                    _say(f"stopping (Slurm signalled ray start, pid {proc.pid}, itself)")
                    forward_at = time.monotonic() + SLURM_FORWARD_S
                else:
                    self.forward()
            elif not slurm:
                self.forward()
        code = 128 - rc if rc < 0 else rc  # (the signals stay blocked: a later one does not change the exit status)
        if first:
            _say(f"stopped (ray start exit {code})")
            return 128 + first
        _err(f"ray start exited with status {code}")
        return code

    def forward(self) -> None:
        """SIGTERM to ray start, by PID."""
        if self.child and _alive(self.child):
            _say(f"stopping ray start (pid {self.child})")
            self._kill(signal.SIGTERM)

    def _kill(self, sig: int) -> None:
        try:
            os.kill(self.child, sig)
        except OSError:
            pass

    # ---- the whole launch ---------------------------------------------------------------------------------------

    def dry_plan(self, argv: list[str]) -> str:
        out = self.env_plan("ray-node: ", "ray start and the Ray processes it starts") + self.wandb_plan("ray-node: ")
        out.append(
            f"ray-node: dry run: configuration valid, nothing started; command ({len(argv)} arguments, one per line):"
        )
        return "\n".join(out + argv) + "\n"

    def run(self, words: list[str]) -> int:
        role = self.role(words)
        if role == "help":
            return self.show_help(helptext.node_markdown())
        self.children.install()
        self.read_settings()
        self.build_environment()
        self.role_rules(role)
        self.trackers(dry=False)
        self.flush()
        self.image_env()
        self.platform_and_count()
        self.flush()
        self.interfaces()
        self.flush()
        self.exports()
        argv = self.build_argv(role)
        if self.dry_run:
            sys.stdout.write(self.dry_plan(argv))
            sys.stdout.flush()
            return 0
        self.cards_free()
        if role == "worker":
            self.wait_head()
        _say(f"{role} on {self.platform} with {self.count} device(s): " + " ".join(argv))
        return self.ray(argv)
