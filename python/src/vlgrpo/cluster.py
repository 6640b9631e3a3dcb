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
    One Ray task per ready node, pinned to the node with ``NodeAffinitySchedulingStrategy(soft=False)``
    and holding one unit of the resource. It imports torch (and torch_npu on Ascend) and reports how many
    devices it sees. Exit 2 if any node sees fewer than ``--per-node``.

Device visibility. Ray 2.48.0 restricts each worker process to the accelerator ids it was assigned by
setting ``ASCEND_RT_VISIBLE_DEVICES`` / ``CUDA_VISIBLE_DEVICES`` (``ray/_private/utils.py``
``set_visible_accelerator_ids``, ``ray/_private/accelerators/npu.py``); a task that holds no NPU gets
``ASCEND_RT_VISIBLE_DEVICES=""``, and ``ray job submit`` starts the driver in such a task (the job manager
only exempts CUDA: ``ray/dashboard/modules/job/job_manager.py`` sets
``RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES`` for the supervisor, nothing for Ascend). The probe runs
with ``RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES=1`` and ``RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES=1``
in its runtime_env, as verl 0.8.0 does for its vLLM servers
(``verl/workers/rollout/vllm_rollout/vllm_async_server.py``), so it counts what the node's container
really exposes, not the one id Ray assigned to the probe.

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


def _say(line: str) -> None:
    """Progress line on stdout, flushed at once (the recipe's output is usually a pipe: docker, Slurm)."""
    print(line, flush=True)


NOSET_ENV = {
    "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES": "1",
    "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1",
}
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
                raise TimeoutError(f"Ray head {address} accepts connections, but ray.init kept failing until the "
                                   f"time-out ({why})") from exc
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


@dataclasses.dataclass(frozen=True)
class ProbeResult:
    """What one probe task saw on its node."""

    node_id: str
    ip: str
    hostname: str
    visible: int
    source: str
    env: dict[str, str]
    error: str = ""


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


def probe(
    address: str,
    resource: str,
    nnodes: int,
    per_node: int,
    timeout: float = 300.0,
    count_fn: Callable[[], int] | None = None,
    log: Callable[[str], None] = _say,
) -> tuple[list[ProbeResult], list[str]]:
    """Run one device-count task on each of the first ``nnodes`` ready nodes.

    Each task is pinned with ``NodeAffinitySchedulingStrategy(node_id, soft=False)``, requests one unit
    of ``resource`` (``num_gpus=1`` for GPU, ``resources={"NPU": 1}`` for NPU) and no CPU, and runs with
    the NOSET variables above. Returns (results, problems); ``problems`` is empty when every node sees
    at least ``per_node`` devices. Raises ``TimeoutError`` if tasks do not finish within ``timeout``.
    """
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    deadline = time.monotonic() + timeout
    _connect(address, deadline, log)
    verdict = evaluate(nodes_from_ray(ray.nodes(), resource), resource, nnodes, per_node)
    if not verdict.ok:
        return [], [f"cluster not ready: {verdict.describe()} (run `python -m vlgrpo cluster wait` first)"]

    def task(res: str, fn):
        import socket as _s

        import ray as _ray

        seen = devices.torch_count(_platform(res), fn)
        ctx = _ray.get_runtime_context()
        return {
            "node_id": ctx.get_node_id(),
            "hostname": _s.gethostname(),
            "visible": seen.visible,
            "source": seen.source,
            "env": seen.env,
            "error": seen.error,
        }

    remote = ray.remote(task)
    refs = {}
    for node in verdict.ready_nodes[:nnodes]:
        opts: dict[str, Any] = {
            "num_cpus": 0,
            "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=node.node_id, soft=False),
            "runtime_env": {"env_vars": dict(NOSET_ENV)},
            "max_retries": 0,
        }
        if resource == "GPU":
            opts["num_gpus"] = 1
        else:
            opts["resources"] = {resource: 1}
        refs[node] = remote.options(**opts).remote(resource, count_fn)
    results, problems = [], []
    pending = list(refs.values())
    ready, not_ready = ray.wait(pending, num_returns=len(pending), timeout=max(0.0, deadline - time.monotonic()))
    if not_ready:
        late = [n.ip for n, r in refs.items() if r in not_ready]
        for r in not_ready:
            ray.cancel(r, force=True)
        raise TimeoutError(f"probe tasks did not finish within {timeout:g}s on: {', '.join(late)}")
    for node, ref in refs.items():
        out = ray.get(ref)
        res = ProbeResult(node.node_id, node.ip, out["hostname"], out["visible"], out["source"], out["env"], out["error"])
        results.append(res)
        if out["node_id"] != node.node_id:
            problems.append(f"{node.ip}: probe ran on node {out['node_id']} instead of {node.node_id}")
        if res.error:
            problems.append(f"{node.ip}: device import failed: {res.error}")
        elif res.visible < per_node:
            problems.append(
                f"{node.ip}: a process sees {res.visible} {resource} device(s), the launch needs {per_node} per node "
                f"(Ray declares {_num(node.count)}); map every device into the container "
                + ("(/dev/davinciN, davinci_manager, devmm_svm, hisi_hdc)" if resource == "NPU" else "(--gpus all)")
                + " or lower the per-node count"
            )
    return results, problems


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
    for name, help_ in (("wait", "bounded wait for N nodes x M devices"), ("probe", "per-node device-visibility probe")):
        s = sub.add_parser(name, help=help_)
        s.add_argument("--address", required=True, help="HOST:PORT of the Ray head (GCS), e.g. 10.0.0.1:6379")
        s.add_argument("--resource", required=True, choices=RESOURCES, help="NPU on Ascend, GPU on NVIDIA")
        s.add_argument("--nodes", required=True, type=_positive_int, help="number of nodes the launch needs")
        s.add_argument("--per-node", required=True, type=_positive_int, help="devices each node must have")
        default = 600.0 if name == "wait" else 300.0
        s.add_argument("--timeout", type=_positive_float, default=default, help=f"seconds (default {default:g})")
        if name == "wait":
            s.add_argument("--interval", type=_positive_float, default=2.0, help="poll interval in seconds")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        _parser().print_help()
        return 0 if argv else 2
    try:
        args = _parser().parse_args(argv)
        parse_address(args.address)
        count_fn = load_probe_hook(args.resource) if args.cmd == "probe" else None
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
        results, problems = probe(args.address, args.resource, args.nodes, args.per_node, args.timeout, count_fn)
        for r in results:
            _say(f"cluster: probe {r.ip} ({r.hostname}): sees {r.visible} {args.resource} [{r.source}] env={r.env}")
        for p in problems:
            print(f"cluster: FAIL {p}", file=sys.stderr)
        if problems:
            return 2
        _say(f"cluster: probe ok on {len(results)} node(s), each sees >= {args.per_node} {args.resource}")
        return 0
    except TimeoutError as exc:
        print(f"cluster: {exc}", file=sys.stderr)
        return 2
    except ConnectionError as exc:
        print(f"cluster: cannot connect to Ray at {args.address}: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - Ray's own failures (version mismatch, GCS errors): exit 1, named
        print(f"cluster: {args.cmd} failed against {args.address}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        if "ray" in sys.modules:
            import ray

            if ray.is_initialized():
                ray.shutdown()


if __name__ == "__main__":
    sys.exit(main())
