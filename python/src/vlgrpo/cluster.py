"""``python -m vlgrpo cluster wait|probe``: is the Ray cluster ready for this launch?

Field case B15 (multi-node Ascend start): a launch before every worker joined leaves verl's placement
groups pending forever, and a node whose NPUs are not declared as the ``NPU`` resource (or declared but
not visible to the job) makes vLLM find no NPU. Two sub-commands guard a launch:

``wait``
    Bounded wait, with one progress line per change, until the cluster at ``--address`` reports
    ``--nodes`` alive nodes that each declare at least ``--per-node`` units of ``--resource`` (``NPU``
    on Ascend, ``GPU`` on NVIDIA). On time-out, exit 2 with the nodes that are short (IP and count) and
    how many are missing.

``probe``
    Probes the devices the job's own processes see, started the way the job starts them (field case B14):
    this process -- the launching process, i.e. the recipe entrypoint or a ``ray job submit`` driver --
    and, on each of the first ``--nodes`` ready nodes, one actor holding no accelerator (as verl's
    TaskRunner) and one holding one unit (as verl's workers), pinned with
    ``NodeAffinitySchedulingStrategy(soft=False)`` and started with no runtime_env of the probe's own, so the
    node's environment and the job's runtime_env decide what they see, as for verl. Each imports torch (and
    torch_npu on Ascend) and counts devices; see :func:`need` for what each must see. The cluster must also
    have ``--nodes x --per-node`` units free. Exit 2 naming every process that sees too few, the cause and
    the fix. Each process's visibility list is checked too (repeated, unordered, out of range, not ``0..N-1``
    under NOSET, fewer devices exposed than listed: field cases C06, C12; :func:`vlgrpo.devices.list_problem`).
    Then the rehearsal of verl's worker groups (:mod:`vlgrpo.rehearse`: placement, verl's device selection and
    ``set_device``, a process group with one all-reduce per group, the trainer <-> rollout rendezvous), each
    stage with a deadline (``--stage-timeout``); layout from ``--argv-file`` (the recipe's final argv), else
    one group of ``--nodes`` x ``--per-node``. ``--rehearse``: the rehearsal alone; ``--no-rehearse``: the
    probe alone; ``--backend gloo``: gloo on CPU tensors (CPU test clusters). ``--loggers console,wandb,...``
    (verl's ``trainer.logger``; the recipes pass theirs): every probed actor must also see what those loggers read
    -- the W&B key, ``TENSORBOARD_DIR``, ``MLFLOW_TRACKING_URI``, the SwanLab key (:mod:`vlgrpo.trackers`; names
    only, a secret never leaves its actor), since verl's ``Tracking`` lives in a Ray actor that may run on any
    node; a node that lacks one is named (exit 2).

Device visibility (Ray 2.48.0). Ray restricts each worker process to the accelerator ids it holds by setting
``ASCEND_RT_VISIBLE_DEVICES`` / ``CUDA_VISIBLE_DEVICES`` (``ray/_private/utils.py``
``set_visible_accelerator_ids``, ``ray/_private/accelerators/npu.py``): a worker holding none gets ``""``,
unless ``RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES=1`` (``..._CUDA_...``) is in its environment. The
driver of a ``ray job submit`` job is a child of the job supervisor actor, which holds nothing; the job
manager exempts CUDA (``ray/dashboard/modules/job/job_manager.py`` sets the CUDA NOSET switch for the
supervisor) but not Ascend, so the driver gets ``ASCEND_RT_VISIBLE_DEVICES=""`` (ray issue #59063, fixed by PR
#59163 after 2.48.0). ``entrypoints/ray-node.sh`` exports the Ascend switch on every node; the probe shows
whether the nodes were started that way (tests/python/ray/test_b14_plain_ray.py).

Test hook (documented, CPU only). ``VLGRPO_PROBE_DEVICE_MODULE=<module>`` names an importable module
with ``device_count() -> int`` that stands in for ``torch_npu``/CUDA in the probe task. It is refused
(exit 2) when the real backend is present in the driver's environment (``torch_npu`` importable for
``NPU``; a CUDA build of torch for ``GPU``), so it cannot weaken a run on a real image. Python callers
can pass ``count_fn`` to :func:`probe` instead.

Exit codes: 0 ready, 2 not ready or invalid input, 1 other failure (Ray not installed, cannot connect).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import ipaddress
import os
import socket
import sys
import time
from typing import Any, Callable, Iterable

from vlgrpo import devices

RESOURCES = ("NPU", "GPU")
REHEARSAL_STAGE_TIMEOUT = 60.0
REHEARSAL_START_TIMEOUT = 180.0


def _say(line: str) -> None:
    """Progress line on stdout, flushed at once (the recipe's output is usually a pipe: docker, Slurm)."""
    print(line, flush=True)


PROBE_HOOK_ENV = devices.STANDIN_ENV


class UsageError(ValueError):
    """Invalid command-line input (exit 2)."""


# --------------------------------------------------------------------------------------------------
# readiness: a pure function of the node list Ray reports
# --------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class NodeInfo:
    """One alive Ray node: ``node_id`` (hex), ``ip`` (NodeManagerAddress), ``count`` of the resource."""

    node_id: str
    ip: str
    count: float


@dataclasses.dataclass(frozen=True)
class Readiness:
    """Verdict of :func:`evaluate`.

    ``ready`` nodes have at least ``per_node`` units; ``short`` nodes are alive with 0 < count < per_node;
    ``missing`` = how many more qualifying nodes are needed (0 when ready).
    """

    resource: str
    nnodes: int
    per_node: int
    ready_nodes: tuple[NodeInfo, ...]
    short_nodes: tuple[NodeInfo, ...]
    missing: int

    @property
    def ok(self) -> bool:
        return self.missing == 0

    def describe(self) -> str:
        """One line: what is there, what is short, what is missing."""

        def fmt(nodes: Iterable[NodeInfo]) -> str:
            return ", ".join(f"{n.ip}: {_num(n.count)} {self.resource}" for n in nodes) or "none"

        total = sum(n.count for n in self.ready_nodes)
        line = (
            f"need {self.nnodes} node(s) x {self.per_node} {self.resource} "
            f"(= {self.nnodes * self.per_node}); ready {len(self.ready_nodes)} [{fmt(self.ready_nodes)}] "
            f"({_num(total)} {self.resource})"
        )
        if self.short_nodes:
            line += f"; short [{fmt(self.short_nodes)}] (each needs {self.per_node})"
        if self.missing:
            line += f"; missing {self.missing} node(s)"
        return line


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def nodes_from_ray(raw: Iterable[dict[str, Any]], resource: str) -> list[NodeInfo]:
    """Convert ``ray.nodes()`` entries to :class:`NodeInfo` for the alive nodes, sorted by IP.

    Mirrors the dict layout of ``ray.nodes()`` in Ray 2.48.0 (keys ``Alive``, ``NodeID``,
    ``NodeManagerAddress``, ``Resources``).
    """
    out = []
    for node in raw:
        if not node.get("Alive"):
            continue
        res = node.get("Resources") or {}
        out.append(NodeInfo(node["NodeID"], node.get("NodeManagerAddress", "?"), float(res.get(resource, 0.0))))
    return sorted(out, key=lambda n: (_ip_key(n.ip), n.node_id))


def _ip_key(ip: str) -> tuple:
    try:
        return (0, int(ipaddress.ip_address(ip)))
    except ValueError:
        return (1, ip)


def evaluate(nodes: Iterable[NodeInfo], resource: str, nnodes: int, per_node: int) -> Readiness:
    """Decide whether ``nodes`` satisfy ``nnodes`` x ``per_node`` of ``resource``.

    A node counts when it declares at least ``per_node`` units; more qualifying nodes than asked is fine
    (the first ``nnodes`` by IP are the ones the probe visits). Nodes without the resource (a CPU-only
    head, say) are ignored; nodes with some but too few are reported as short.
    """
    nodes = list(nodes)
    ready = tuple(n for n in nodes if n.count >= per_node)
    short = tuple(n for n in nodes if 0 < n.count < per_node)
    return Readiness(resource, nnodes, per_node, ready, short, max(0, nnodes - len(ready)))


# --------------------------------------------------------------------------------------------------
# Ray plumbing
# --------------------------------------------------------------------------------------------------


def parse_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` -> (host, port); raises :class:`UsageError` naming ``--address``."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--address {address!r}: expected HOST:PORT of the Ray head's GCS, e.g. 10.0.0.1:6379")
    return host.strip("[]"), int(port)


def _tcp_reachable(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _connect(address: str, deadline: float, log: Callable[[str], None]) -> None:
    """Wait (until ``deadline``, monotonic) for the GCS port, then ``ray.init`` as a driver.

    A head started at the same moment as this driver (a Slurm job's steps, compose services) opens its GCS port
    before it can serve a driver; Ray 2.48.0's ``ray.init`` then raises a bare ``ConnectionError`` whose
    ``__context__`` is the cause ("RPC Error message: Deadline Exceeded" while the raylet registers;
    ``ray/_private/worker.py``, ``connect_only=True``). That is retried every 2 s until ``deadline``, then
    ``TimeoutError`` names the last cause.
    """
    import ray

    host, port = parse_address(address)
    said = False
    while not _tcp_reachable(host, port):
        if time.monotonic() >= deadline:
            raise TimeoutError(f"Ray head {address} not reachable (nothing listens on TCP {host}:{port})")
        if not said:
            log(f"cluster: waiting for the Ray head at {address} to accept connections")
            said = True
        time.sleep(1.0)
    said = False
    while not ray.is_initialized():
        try:
            ray.init(address=address, logging_level="ERROR", log_to_driver=False, configure_logging=False)
        except ConnectionError as exc:
            cause = exc.__context__ or exc
            why = f"{type(cause).__name__}: {cause}"
            ray.shutdown()  # whatever the failed attempt left set up
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"Ray head {address} accepts connections, but ray.init kept failing until the time-out ({why})"
                ) from exc
            if not said:
                log(f"cluster: the Ray head at {address} is not ready yet ({why}); retrying")
                said = True
            time.sleep(2.0)


def wait(
    address: str,
    resource: str,
    nnodes: int,
    per_node: int,
    timeout: float,
    interval: float = 2.0,
    log: Callable[[str], None] = _say,
) -> Readiness:
    """Poll ``ray.nodes()`` until :func:`evaluate` is ok or ``timeout`` seconds pass.

    Prints a progress line whenever the picture changes and at least every 30 s. Returns the last
    :class:`Readiness` (``ok`` False on time-out). Raises ``TimeoutError`` if the head itself never
    became reachable.
    """
    import ray

    deadline = time.monotonic() + timeout
    _connect(address, deadline, log)
    last_line, last_time = None, 0.0
    while True:
        verdict = evaluate(nodes_from_ray(ray.nodes(), resource), resource, nnodes, per_node)
        line = verdict.describe()
        now = time.monotonic()
        if verdict.ok:
            log(f"cluster: ready: {line}")
            return verdict
        if now >= deadline:
            return verdict
        if line != last_line or now - last_time >= 30:
            left = int(deadline - now)
            log(f"cluster: waiting ({left}s left): {line}")
            last_line, last_time = line, now
        time.sleep(min(interval, max(0.0, deadline - now)))


def _platform(resource: str) -> str:
    return "npu" if resource == "NPU" else "gpu"


def load_probe_hook(resource: str, environ: dict[str, str] | None = None) -> Callable[[], int] | None:
    """Resolve ``VLGRPO_PROBE_DEVICE_MODULE`` (test hook, :func:`vlgrpo.devices.load_standin`) to its
    ``device_count``, or None if unset, and ship the module to the probe's workers by value.

    Raises :class:`UsageError` if the real backend is installed (the hook would mask a real fault) or
    the module has no callable ``device_count``.
    """
    try:
        fn = devices.load_standin(_platform(resource), environ)
    except devices.UsageError as exc:
        raise UsageError(str(exc)) from None
    if fn is None:
        return None
    try:  # ship the stand-in by value (Ray's vendored cloudpickle) so workers need not import it
        from ray import cloudpickle

        cloudpickle.register_pickle_by_value(sys.modules[fn.__module__])
    except (ImportError, KeyError):
        pass
    return fn


@dataclasses.dataclass(frozen=True)
class View:
    """What one process of the job sees: ``kind`` is "driver" (the launching process, this one), "cpu" (an
    actor holding no accelerator, as verl's TaskRunner) or "device" (an actor holding one unit of the
    resource, as verl's workers). ``visible``: the torch-level device count in that process; ``source``:
    which backend counted; ``env``: its visibility and NOSET variables; ``node_devices``/``node_source``: the
    node's own count from the device counter in that process's container; ``job_driver``: the process is a
    ``ray job submit`` driver; ``error``: the device import failed; ``trackers``: what the process sees of the variables
    verl's loggers read (:func:`vlgrpo.trackers.node_view`: secrets as presence only), when the probe was given
    loggers."""

    kind: str
    ip: str
    node_id: str
    hostname: str
    visible: int
    source: str
    env: dict
    node_devices: int
    node_source: str
    job_driver: bool = False
    error: str = ""
    trackers: dict = dataclasses.field(default_factory=dict)

    def who(self, resource: str) -> str:
        return {
            "driver": "the job driver",
            "cpu": f"an actor holding no {resource}",
            "device": f"an actor holding 1 {resource}",
        }[self.kind]


def process_view(kind: str, platform: str, standin: Callable[[], int] | None, loggers: str = "") -> dict:
    """Runs inside each probed process (and in the driver): its view as a dict of :class:`View` fields."""
    import socket as _socket

    import ray as _ray

    from vlgrpo import trackers

    seen = devices.torch_count(platform, standin)
    node = devices.count(platform)
    env = {k: os.environ[k] for k in (devices.VISIBILITY_VAR[platform], devices.NOSET_VAR[platform]) if k in os.environ}
    return {
        "kind": kind,
        "ip": _ray.util.get_node_ip_address(),
        "node_id": _ray.get_runtime_context().get_node_id(),
        "hostname": _socket.gethostname(),
        "visible": seen.visible,
        "source": seen.source,
        "env": env,
        "node_devices": node.node_devices,
        "node_source": node.node_source,
        "job_driver": devices.RAY_JOB_CONFIG_VAR in os.environ,
        "error": seen.error,
        "trackers": trackers.node_view() if trackers.node_needs(loggers) else {},
    }


def need(view: View, platform: str, per_node: int) -> int:
    """Devices the process must see.

    Ascend: every process of the job must see the node's NPUs -- verl 0.8.0 sets ``trainer.device`` from what
    the driver sees (verl/utils/device.py ``auto_set_device``: no NPU there means "cuda" and placement groups
    asking for GPUs), picks the device of a process holding no NPU from what that process sees
    (``get_device_name``, the TaskRunner's placement groups), and its vLLM servers count the node's NPUs; so
    ``per_node`` for the actors and, for the driver, ``per_node`` capped by its own node's count (1 where the
    device counter finds none there). NVIDIA: Ray gives a process the GPUs it holds, which verl expects; the
    driver must see its node's GPUs (ray job submit leaves them visible), a 1-GPU actor its one GPU.
    """
    if view.kind == "driver":
        if view.node_devices:
            return min(per_node, view.node_devices)
        return 1 if platform == "npu" else 0
    if platform == "npu":
        return per_node
    return 1 if view.kind == "device" else 0


def judge(view: View, platform: str, per_node: int) -> str:
    """The problem with one process's view, "" when it sees what it needs: what it sees, what the launch needs,
    the cause (Ray's visibility variable, a container that exposes too few devices) and the fix."""
    res = devices.RESOURCE[platform]
    where = f"{view.ip}: {view.who(res)}"
    if view.error:
        return f"{where}: device import failed: {view.error}"
    # field cases C06, C12: the visibility list itself (repeated, unordered, out of range, not 0..N-1 under NOSET,
    # or fewer devices exposed than listed) before the counts, so that the list is named, not the mapping
    value = view.env.get(devices.VISIBILITY_VAR[platform])
    # (the runtime exposing fewer devices than listed first: that is the root cause, C12, even under NOSET; only
    # for a list the process inherited -- the launching process, or under NOSET -- not one Ray set to its ids)
    inherited = view.kind == "driver" or bool(view.env.get(devices.NOSET_VAR[platform]))
    problem, fix = devices.shrink_problem(platform, value, view.visible) if inherited else ("", "")
    if not problem:
        problem, fix = devices.list_problem(
            platform, value, view.node_devices, bool(view.env.get(devices.NOSET_VAR[platform]))
        )
    if problem:
        return f"{where}: {problem} -- fix: {fix}"
    want = need(view, platform, per_node)
    exposed = view.node_devices
    if view.kind == "device" and exposed and exposed < per_node:
        return (
            f"{view.ip}: the container exposes {exposed} {res} ({view.node_source}), the launch needs {per_node} per "
            f"node -- fix: map every device into the container " + _MAP_FIX[platform] + " or lower the per-node count"
        )
    if view.visible >= want:
        return ""
    var, noset = devices.VISIBILITY_VAR[platform], devices.NOSET_VAR[platform]
    value = view.env.get(var)
    line = f"{where} sees {view.visible} {res}, the launch needs {want}"
    if value is not None and not view.env.get(noset):
        if view.kind == "driver":
            cause = devices.hidden_cause(platform, value, view.visible, max(exposed, want), view.job_driver, False)
        else:
            cause = f"Ray set {var}={value!r} for it (the ids it holds) because the node was started without {noset}=1"
        return f"{line}: {cause} -- fix: {devices.ray_fix(platform)}"
    if view.kind == "driver" and not exposed:
        return (
            f"{line}: this node has no {res} this process can use; verl 0.8.0 chooses the device type from what the "
            f"launching process sees (verl/utils/device.py auto_set_device) -- fix: launch from a node with its "
            f"{res}s mapped into the container"
        )
    return f"{line} -- fix: map every device into the container " + _MAP_FIX[platform] + " or lower the per-node count"


_MAP_FIX = {"npu": "(/dev/davinciN, davinci_manager, devmm_svm, hisi_hdc)", "gpu": "(--gpus all)"}


def _in_use(resource: str, want: float, driver: View, platform: str, settle_s: float = 15.0) -> str:
    """ "" when the cluster has ``want`` units of ``resource`` free, else the problem (resources held before the
    launch: by this job's driver when submitted with entrypoint resources, or by another job). Freed
    resources of a just-finished driver appear within seconds, so the check waits up to ``settle_s``."""
    import ray

    deadline = time.monotonic() + settle_s
    while True:
        free = float(ray.available_resources().get(resource, 0.0))
        total = float(ray.cluster_resources().get(resource, 0.0))
        if free >= want or time.monotonic() >= deadline:
            break
        time.sleep(1.0)
    if free >= want:
        return ""
    line = (
        f"{_num(total - free)} of the {_num(total)} {resource} the cluster declares are in use before the launch "
        f"(ray.available_resources(): {_num(free)} free, the launch needs {_num(want)}); verl's placement groups "
        f"would wait for them forever"
    )
    var, noset = devices.VISIBILITY_VAR[platform], devices.NOSET_VAR[platform]
    value = driver.env.get(var)
    if driver.job_driver and value and not driver.env.get(noset):
        line += (
            f"; this job's driver holds {var}={value} (Ray gives a driver devices when the job is submitted with them)"
        )
    return (
        line + " -- fix: submit the job without --entrypoint-num-gpus / --entrypoint-resources (the driver needs no "
        "device; verl places its own workers), or wait until the other job that holds them ends"
    )


def tracker_problems(views: list[View], loggers: str, launch: dict | None = None) -> list[str]:
    """One line per node and variable that verl's ``loggers`` need and that node's Ray processes lack (or have
    with another value than the launch's: ``launch``, default this process's environment), from the actors' views
    (:func:`vlgrpo.trackers.node_problems`); names only, never a value."""
    from vlgrpo import trackers

    out, seen = [], set()
    for view in views:
        if view.kind == "driver":
            continue
        for var, why in trackers.node_problems(loggers, view.trackers, launch):
            if (view.node_id, var) in seen:
                continue
            seen.add((view.node_id, var))
            out.append(f"node {view.ip} ({view.hostname}): {why}")
    return out


def probe(
    address: str,
    resource: str,
    nnodes: int,
    per_node: int,
    timeout: float = 300.0,
    count_fn: Callable[[], int] | None = None,
    log: Callable[[str], None] = _say,
    loggers: str = "",
) -> tuple[list[View], list[str]]:
    """Probe the devices the job's processes see, started the way the job starts them.

    This process (the launching process: the recipe's driver, or a ``ray job submit`` driver) counts what it
    sees; then, on each of the first ``nnodes`` ready nodes, pinned with
    ``NodeAffinitySchedulingStrategy(node_id, soft=False)`` and with no runtime_env of the probe's own (so the
    job's runtime_env and the node's environment decide, as for verl's actors), one actor holding no
    accelerator (as verl's TaskRunner) and one holding one unit (``resources={"NPU": 1}`` / ``num_gpus=1``)
    count theirs. ``loggers`` (``trainer.logger``, e.g. ``console,wandb``): each actor also reports which of the
    variables verl's loggers read it sees (names; secrets never leave the actor), and a node whose processes lack
    one (:func:`vlgrpo.trackers.node_problems`: the W&B key, TENSORBOARD_DIR, ...) is a problem naming the node --
    verl creates its ``Tracking`` in a Ray actor, which may run on any node. Before the actors start, the cluster
    must have ``nnodes * per_node`` units free. Returns
    (views, problems); ``problems`` is empty when every process sees what :func:`need` asks. Raises
    ``TimeoutError`` if the actors do not answer within ``timeout``.
    """
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    platform = _platform(resource)
    deadline = time.monotonic() + timeout
    _connect(address, deadline, log)
    verdict = evaluate(nodes_from_ray(ray.nodes(), resource), resource, nnodes, per_node)
    if not verdict.ok:
        return [], [f"cluster not ready: {verdict.describe()} (run `python -m vlgrpo cluster wait` first)"]
    driver = View(**process_view("driver", platform, count_fn))
    views, problems = [driver], [p for p in (judge(driver, platform, per_node),) if p]
    held = _in_use(resource, nnodes * per_node, driver, platform)
    if held:
        problems.append(held)

    @ray.remote(num_cpus=0, max_restarts=0)
    class _DeviceView:
        def view(self, kind, plat, fn, logs):
            return process_view(kind, plat, fn, logs)

    actors, refs = [], []
    for node in verdict.ready_nodes[:nnodes]:
        pin = NodeAffinitySchedulingStrategy(node_id=node.node_id, soft=False)
        holding: dict[str, Any] = {"num_gpus": 1} if resource == "GPU" else {"resources": {resource: 1}}
        for kind, opts in (("cpu", {}), ("device", holding)):
            actor = _DeviceView.options(scheduling_strategy=pin, **opts).remote()
            actors.append(actor)
            refs.append((node, kind, actor.view.remote(kind, platform, count_fn, loggers)))
    try:
        pending = [r for _, _, r in refs]
        _, not_ready = ray.wait(pending, num_returns=len(pending), timeout=max(0.0, deadline - time.monotonic()))
        if not_ready:
            late = sorted({f"{n.ip} ({k})" for n, k, r in refs if r in not_ready})
            raise TimeoutError(f"probe actors did not answer within {timeout:g}s on: {', '.join(late)}")
        for node, kind, ref in refs:
            view = View(**ray.get(ref))
            views.append(view)
            if view.node_id != node.node_id:
                problems.append(
                    f"{node.ip}: the probe's {kind} actor ran on node {view.node_id} instead of {node.node_id}"
                )
            problem = judge(view, platform, per_node)
            if problem:
                problems.append(problem)
        problems += tracker_problems(views, loggers)
    finally:
        for actor in actors:
            ray.kill(actor)
    return views, problems


# --------------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------------


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 1")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be > 0")
    return value


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # exit 2 with the usage, as argparse does, but through our code path
        raise UsageError(f"{self.prog}: {message}")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m vlgrpo cluster", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    for name, help_ in (
        ("wait", "bounded wait for N nodes x M devices"),
        ("probe", "per-node device-visibility probe"),
    ):
        s = sub.add_parser(name, help=help_)
        s.add_argument("--address", required=True, help="HOST:PORT of the Ray head (GCS), e.g. 10.0.0.1:6379")
        s.add_argument("--resource", required=True, choices=RESOURCES, help="NPU on Ascend, GPU on NVIDIA")
        s.add_argument("--nodes", required=True, type=_positive_int, help="number of nodes the launch needs")
        s.add_argument("--per-node", required=True, type=_positive_int, help="devices each node must have")
        default = 600.0 if name == "wait" else 300.0
        s.add_argument("--timeout", type=_positive_float, default=default, help=f"seconds (default {default:g})")
        if name == "wait":
            s.add_argument("--interval", type=_positive_float, default=2.0, help="poll interval in seconds")
        else:
            s.add_argument(
                "--rehearse",
                action="store_true",
                help="run only the rehearsal of verl's worker groups (vlgrpo.rehearse), not the visibility probe",
            )
            s.add_argument("--no-rehearse", action="store_true", help="run only the visibility probe")
            s.add_argument(
                "--loggers",
                default="",
                help="verl's trainer.logger list (e.g. console,wandb): each node's "
                "Ray processes must see what those loggers read (the W&B key, TENSORBOARD_DIR, ...)",
            )
            s.add_argument(
                "--argv-file",
                help="the recipe's final argv, one element per line (the worker groups' "
                "layout); default: one group of --nodes x --per-node",
            )
            s.add_argument(
                "--stage-timeout",
                type=_positive_float,
                default=REHEARSAL_STAGE_TIMEOUT,
                help=f"deadline of each rehearsal stage in seconds (default {REHEARSAL_STAGE_TIMEOUT:g})",
            )
            s.add_argument(
                "--start-timeout",
                type=_positive_float,
                default=REHEARSAL_START_TIMEOUT,
                help="deadline of the rehearsal's worker start in seconds (the actors import torch and "
                f"verl; default {REHEARSAL_START_TIMEOUT:g})",
            )
            s.add_argument(
                "--backend",
                choices=("auto", "gloo"),
                default="auto",
                help="collective backend of the rehearsal: auto = verl's (HCCL/NCCL on the device), "
                "gloo = gloo on CPU tensors (CPU test clusters)",
            )
    return p


def _rehearsal_layout(args) -> tuple[list, bool]:
    """The worker groups to rehearse (:func:`vlgrpo.rehearse.layout`) from ``--argv-file``; UsageError naming it."""
    from vlgrpo import rehearse

    if args.rehearse and args.no_rehearse:
        raise UsageError("--rehearse and --no-rehearse exclude each other")
    argv = None
    if args.argv_file:
        try:
            with open(args.argv_file, encoding="utf-8") as f:
                argv = f.read().splitlines()
        except OSError as exc:
            raise UsageError(f"--argv-file {args.argv_file!r}: {exc.strerror}") from None
    try:
        return rehearse.layout(argv, args.nodes, args.per_node)
    except rehearse.LayoutError as exc:
        raise UsageError(f"--argv-file {args.argv_file!r}: {exc}") from None


def _rehearse_main(args, groups: list, sync: bool) -> int:
    """Run :func:`vlgrpo.rehearse.rehearse` on the cluster at ``args.address`` and report it; exit status."""
    from vlgrpo import rehearse

    if importlib.util.find_spec("verl") is None:
        print(
            "cluster: rehearsal: verl is not installed in this interpreter (the rehearsal runs verl's own worker "
            "code); run the probe with the image's python3, or pass --no-rehearse",
            file=sys.stderr,
        )
        return 1
    platform = _platform(args.resource)
    deadline = time.monotonic() + args.timeout
    _connect(args.address, deadline, _say)
    verdict = evaluate(
        nodes_from_ray(__import__("ray").nodes(), args.resource), args.resource, args.nodes, args.per_node
    )
    if not verdict.ok:
        print(
            f"cluster: FAIL cluster not ready: {verdict.describe()} (run `python -m vlgrpo cluster wait` first)",
            file=sys.stderr,
        )
        return 2
    shape = "; ".join(f"{g.name}: {list(g.process_on_nodes)}" for g in groups)
    _say(
        f"cluster: rehearsal of verl's worker groups ({shape}{'; weight-sync rendezvous' if sync else ''}), "
        f"{args.stage_timeout:g}s per stage"
    )
    t0 = time.monotonic()
    result = rehearse.rehearse(
        groups, sync, platform, args.backend == "gloo", args.stage_timeout, _say, args.start_timeout
    )
    took = time.monotonic() - t0
    for line in result.lines:
        _say(f"cluster: {line}")
    for p in result.problems:
        print(f"cluster: FAIL rehearsal: {p}", file=sys.stderr)
    stages = ", ".join(f"{k} {v:.1f}s" for k, v in result.timings.items())
    if result.problems:
        print(f"cluster: rehearsal failed after {took:.1f}s ({stages})", file=sys.stderr)
        return 2
    _say(f"cluster: rehearsal ok in {took:.1f}s ({stages})")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        _parser().print_help()
        return 0 if argv else 2
    try:
        args = _parser().parse_args(argv)
        parse_address(args.address)
        count_fn = load_probe_hook(args.resource) if args.cmd == "probe" else None
        groups, sync = _rehearsal_layout(args) if args.cmd == "probe" else ([], False)
    except UsageError as exc:
        print(f"cluster: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help of a sub-command
        return int(exc.code or 0)
    if importlib.util.find_spec("ray") is None:
        print("cluster: Ray is not installed in this interpreter (pip install 'ray[default]==2.48.0')", file=sys.stderr)
        return 1
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        if args.cmd == "wait":
            verdict = wait(args.address, args.resource, args.nodes, args.per_node, args.timeout, args.interval)
            if verdict.ok:
                return 0
            print(f"cluster: timed out after {args.timeout:g}s: {verdict.describe()}", file=sys.stderr)
            print(
                "cluster: fix: start `entrypoints/ray-node.sh worker` on the missing node(s) with "
                f"VLGRPO_RAY_HEAD={args.address}, or check that each node declares its {args.resource}s",
                file=sys.stderr,
            )
            return 2
        if args.rehearse:
            return _rehearse_main(args, groups, sync)
        views, problems = probe(
            args.address, args.resource, args.nodes, args.per_node, args.timeout, count_fn, loggers=args.loggers
        )
        for v in views:
            seen = (
                f" trackers={sorted(k for k, x in v.trackers.items() if x)}"
                if v.kind != "driver" and v.trackers
                else ""
            )
            _say(
                f"cluster: probe {v.ip} ({v.hostname}): {v.who(args.resource)} sees {v.visible} {args.resource} "
                f"[{v.source}] env={v.env} node={v.node_devices} ({v.node_source or '-'}){seen}"
            )
        for p in problems:
            print(f"cluster: FAIL {p}", file=sys.stderr)
        if problems:
            return 2
        nodes = len({v.node_id for v in views if v.kind != "driver"})
        _say(
            f"cluster: probe ok on {nodes} node(s), each sees >= {args.per_node} {args.resource} (the job driver, "
            f"an actor holding no {args.resource} and one holding 1 on each node)"
        )
        if args.no_rehearse:
            return 0
        return _rehearse_main(args, groups, sync)
    except TimeoutError as exc:
        print(f"cluster: {exc}", file=sys.stderr)
        return 2
    except ConnectionError as exc:
        print(f"cluster: cannot connect to Ray at {args.address}: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # Ray's own failures (version mismatch, GCS errors): exit 1, named
        print(f"cluster: {args.cmd} failed against {args.address}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        if "ray" in sys.modules:
            import ray

            if ray.is_initialized():
                ray.shutdown()


if __name__ == "__main__":
    sys.exit(main())
