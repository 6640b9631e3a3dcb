"""The rehearsal before the model loads (``python -m vlgrpo cluster probe [--rehearse]``; field cases C06, C12).

verl's worker groups are rehearsed with verl's own code, small and early: the placement groups, actors and
runtime_env come from verl 0.8.0's ``RayResourcePool`` / ``RayClassWithInitArgs`` / ``RayWorkerGroup``
(``verl/single_controller/ray/base.py``), the actor is a subclass of verl's ``Worker`` (device selection and
``set_device`` in ``Worker.__init__``), the process group is verl's ``initialize_global_process_group_ray``; see
:mod:`vlgrpo.rehearse_worker`. Stages, each with its own deadline (``stage_timeout``):

1. **placement**: the placement groups of each worker group, as verl builds them for the recipe
   (:func:`layout`): bundles ``{"CPU": max_colocate_count, <NPU|GPU>: 1}``, ``STRICT_PACK`` for the trainer
   (``bin_pack=True``), ``PACK`` for verl's standalone rollout replicas (``bin_pack=False``,
   ``max_colocate_count=2``, ``verl/workers/rollout/replica.py`` ``init_standalone``);
2. **device selection / set_device**: one actor per bundle, resourced by verl (``resources={"NPU": 1 /
   max_colocate_count}`` or ``num_gpus``), with verl's runtime_env (``WORLD_SIZE``, ``RANK``, ``MASTER_ADDR``,
   ``MASTER_PORT``, ...) and the node's NOSET flags; two workers of a node on one device are refused too;
3. **process group**: one ``all_reduce`` over each worker group with the job's backend (``gloo`` in tests;
   verl's ``cpu:gloo,npu:hccl`` / ``cpu:gloo,cuda:nccl`` on hardware: the same code path);
4. **weight-sync rendezvous** (trainer and rollout in separate pools, the fully-async recipe): trainer rank 0 and
   every rollout worker in one group of R + 1 whose master is trainer rank 0's node, as verl 0.8.0's NCCL
   checkpoint engine forms it (``build_topology``, mirrored by :func:`sync_topology`, because importing that
   module needs fastapi, zmq and cupy; tests/python/ray/test_rehearsal_unit.py runs verl's own function against it).

Every problem names the node, the stage, the device id where there is one, and the fix.

Layout (:func:`layout`): from the recipe's argv (``--argv-file``: the final argv, one element per line, as the
entrypoint writes it for the preflight) -- ``verl.experimental.fully_async_policy.fully_async_main``: a trainer
pool ``[trainer.n_gpus_per_node] * trainer.nnodes`` and ``rollout.nnodes * rollout.n_gpus_per_node /
(tp * dp * pp)`` rollout replicas; ``verl.trainer.main_ppo`` (hybrid engine): one pool
``[trainer.n_gpus_per_node] * trainer.nnodes``. Without an argv: one pool of ``--nodes`` x ``--per-node``
(the recipe entrypoints pass their argv).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Callable, Iterable

from vlgrpo import devices

FULLY_ASYNC = "verl.experimental.fully_async_policy.fully_async_main"
MAIN_PPO = "verl.trainer.main_ppo"
PREFIX = "vlgrpo_rehearsal_"


class LayoutError(ValueError):
    """The argv does not give a layout (exit 2, naming the setting)."""


@dataclasses.dataclass(frozen=True)
class Group:
    """One verl worker group: ``process_on_nodes`` as ``RayResourcePool`` takes it, its ``max_colocate_count``
    and ``bin_pack`` (``STRICT_PACK`` when True, else ``PACK``); ``role``: "trainer" or "rollout"."""

    name: str
    role: str
    process_on_nodes: tuple[int, ...]
    max_colocate_count: int
    bin_pack: bool

    @property
    def world_size(self) -> int:
        return sum(self.process_on_nodes)


def _overrides(argv: Iterable[str]) -> tuple[str, dict[str, str]]:
    argv = [a for a in argv if a != ""]
    module = argv[argv.index("-m") + 1] if "-m" in argv[:-1] else ""
    keys = {}
    for item in argv:
        key, sep, value = item.partition("=")
        if sep and not key.startswith("-"):
            keys[key.lstrip("+")] = value
    return module, keys


def _int(keys: dict[str, str], key: str, default: int) -> int:
    text = keys.get(key)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise LayoutError(f"{key}={text!r} in the argv is not an integer") from None
    if value < 1:
        raise LayoutError(f"{key}={text!r} in the argv must be >= 1")
    return value


def layout(argv: list[str] | None, nodes: int, per_node: int) -> tuple[list[Group], bool]:
    """The worker groups verl 0.8.0 builds for this argv, and whether a weight-sync rendezvous joins them.

    Defaults are verl 0.8.0's config defaults (trainer 1 node x 8, rollout tp 2, dp 1, pp 1). Raises
    :class:`LayoutError` for a non-integer count or a rollout size that does not divide into replicas.
    """
    if not argv:
        return [Group("workers", "trainer", (per_node,) * nodes, 3, True)], False
    module, keys = _overrides(argv)
    tn, td = _int(keys, "trainer.nnodes", 1), _int(keys, "trainer.n_gpus_per_node", 8)
    trainer = Group("trainer", "trainer", (td,) * tn, 3, True)
    if module != FULLY_ASYNC:
        return [trainer], False
    rn, rd = _int(keys, "rollout.nnodes", 1), _int(keys, "rollout.n_gpus_per_node", 8)
    r = "actor_rollout_ref.rollout."
    world = (
        _int(keys, r + "tensor_model_parallel_size", 2)
        * _int(keys, r + "data_parallel_size", 1)
        * _int(keys, r + "pipeline_model_parallel_size", 1)
    )
    per_replica_node = min(rd, world)
    if world % per_replica_node or (rn * rd) % world:
        raise LayoutError(f"rollout {rn} node(s) x {rd} devices do not split into replicas of tp x dp x pp = {world}")
    replicas = [
        Group(f"rollout{i}", "rollout", (per_replica_node,) * (world // per_replica_node), 2, False)
        for i in range((rn * rd) // world)
    ]
    return [trainer, *replicas], True


def sync_topology(trainer_world_size: int, rollout_world_size: int) -> tuple[list[int], list[int], int]:
    """Ranks of the weight-sync group: (trainer ranks by trainer rank, rollout ranks by rollout worker, world).

    Mirrors verl 0.8.0 ``checkpoint_engine/nccl_checkpoint_engine.py`` ``NCCLCheckpointEngine.build_topology``:
    trainer rank 0 is rank 0, the other trainer ranks take no part (-1), rollout worker i is rank i + 1, world
    ``rollout_world_size + 1``.
    """
    return [0] + [-1] * (trainer_world_size - 1), list(range(1, rollout_world_size + 1)), rollout_world_size + 1


@dataclasses.dataclass
class Result:
    """What the rehearsal saw: ``lines`` (progress, one per stage and group), ``problems`` (each names node,
    stage, device and fix), ``timings`` (seconds per stage name)."""

    lines: list[str] = dataclasses.field(default_factory=list)
    problems: list[str] = dataclasses.field(default_factory=list)
    timings: dict[str, float] = dataclasses.field(default_factory=dict)


_IF_FIX = (
    "check that GLOO_SOCKET_IFNAME / HCCL_SOCKET_IFNAME / NCCL_SOCKET_IFNAME on that node name an interface "
    "that reaches the other nodes (entrypoints/ray-node.sh checks them at node start), and that TCP ports "
    "from the ephemeral range are open between the nodes"
)


def _device_fix(platform: str, info: dict) -> str:
    var, noset = devices.VISIBILITY_VAR[platform], devices.NOSET_VAR[platform]
    env = info.get("env", {})
    problem, fix = devices.shrink_problem(platform, env.get(var), max(0, info.get("visible", 0)))
    if fix:
        return f"{problem} -- {fix}"
    _, fix = devices.list_problem(platform, env.get(var), 0, bool(env.get(noset)))
    if fix:
        return fix
    return (
        f"map every device into the container, and list in {var} only devices the runtime enumerates "
        f"(0..N-1), or leave it unset"
    )


def _placement(pool, strategy: str, device_name: str, timeout_s: float) -> str:
    """verl's ``RayResourcePool.get_placement_groups`` with a deadline: "" when placed, else the reason (the
    groups are then removed, which ends verl's wait in its thread)."""
    box: dict = {}

    def run():
        try:
            box["pgs"] = pool.get_placement_groups(strategy=strategy, device_name=device_name)
        except Exception as exc:
            box["error"] = f"{type(exc).__name__}: {exc}"

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive() or "error" in box:
        _remove_pgs(pool.name_prefix)
        thread.join(10)
        return box.get("error", f"not placed within {timeout_s:g}s")
    return ""


def _rank_nodes(pool) -> dict[int, str]:
    """``{rank: node IP}`` of a placed pool: verl numbers ranks through its placement groups sorted by node IP
    (``sort_placement_group_by_node_ip``), bundle by bundle."""
    import ray
    from ray.util import placement_group_table

    ips = {n["NodeID"]: n.get("NodeManagerAddress", "?") for n in ray.nodes()}
    out: dict[int, str] = {}
    try:
        rank = 0
        for pg in pool.pgs or []:
            table = placement_group_table(pg).get("bundles_to_node_id", {})
            for bundle in range(pool.store[0]):
                out[rank] = ips.get(table.get(bundle), "?")
                rank += 1
    except Exception:  # naming only
        pass
    return out


def _remove_pgs(prefix: str) -> None:
    """Remove this rehearsal's placement groups (named ``prefix...``, as verl names a pool's groups)."""
    from ray.util import placement_group_table, remove_placement_group
    from ray.util.placement_group import get_placement_group

    for entry in (placement_group_table() or {}).values():
        if str(entry.get("name", "")).startswith(prefix) and entry.get("state") != "REMOVED":
            try:
                remove_placement_group(get_placement_group(entry["name"]))
            except Exception:  # best effort: the driver's exit removes them too
                pass


def rehearse(
    groups: list[Group],
    weight_sync: bool,
    platform: str,
    gloo: bool,
    stage_timeout: float,
    log: Callable[[str], None],
    start_timeout: float = 180.0,
) -> Result:
    """Run the four stages on the connected Ray cluster (``ray.init`` done by the caller). See the module doc.

    ``platform``: "npu" or "gpu"; ``gloo``: gloo over CPU tensors (tests) instead of verl's device backend.
    ``stage_timeout``: deadline (s) of the placement and of each collective stage; ``start_timeout``: deadline of
    the worker start (the actors of every group start together; each imports torch and verl).
    Never raises for a failed stage: every failure is a line of :attr:`Result.problems`. Everything it started
    (actors, placement groups) is removed before it returns.
    """
    import ray
    from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup

    from vlgrpo.rehearse_worker import RehearsalWorker

    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    # the job-level runtime_env verl's main passes to ray.init (HCCL port ranges, NCCL_DEBUG, ...), given to the
    # rehearsal's workers through RayWorkerGroup's worker_env (this driver's own job has none)
    job_env = dict(get_ppo_ray_runtime_env().get("env_vars", {}))
    res, device_name = devices.RESOURCE[platform], ("npu" if platform == "npu" else "cuda")
    out, made = Result(), []
    actor_cls = ray.remote(RehearsalWorker)
    ok_groups: list[tuple[Group, object, list[dict]]] = []
    started: list[tuple[Group, object, object, list]] = []
    try:
        for g in groups:
            prefix = f"{PREFIX}{g.name}_{int(time.time() * 1000) % 10**8}_"
            pool = RayResourcePool(
                process_on_nodes=list(g.process_on_nodes),
                use_gpu=True,
                max_colocate_count=g.max_colocate_count,
                name_prefix=prefix,
            )
            made.append((prefix, None))
            t0 = time.monotonic()
            bundle = {"CPU": g.max_colocate_count, res: 1}
            why = _placement(pool, "STRICT_PACK" if g.bin_pack else "PACK", device_name, stage_timeout)
            out.timings[f"placement {g.name}"] = round(time.monotonic() - t0, 3)
            if why:
                free = {
                    n["NodeManagerAddress"]: {k: n["Resources"].get(k, 0) for k in ("CPU", res)}
                    for n in ray.nodes()
                    if n.get("Alive")
                }
                out.problems.append(
                    f"{g.name}: stage placement: verl's placement groups ({list(g.process_on_nodes)} bundles of "
                    f"{bundle}, {'STRICT_PACK' if g.bin_pack else 'PACK'}) {why}; nodes declare {free} -- fix: every "
                    f"node of the group must declare {g.max_colocate_count} CPU per device (ray start --num-cpus) "
                    f"besides its {res}s, and nothing else may hold them"
                )
                continue
            log(f"rehearsal: {g.name}: placement ok ({g.world_size} bundle(s) of {bundle})")
            wg = RayWorkerGroup(
                resource_pool=pool,
                ray_cls_with_init=RayClassWithInitArgs(actor_cls, resource=res, role=g.role),
                bin_pack=g.bin_pack,
                name_prefix=prefix,
                device_name=device_name,
                worker_env=job_env,
            )
            made[-1] = (prefix, wg)
            started.append((g, pool, wg, [w.info.remote() for w in wg.workers]))

        t0 = time.monotonic()
        pending = [ref for *_, refs in started for ref in refs]
        _, late = ray.wait(pending, num_returns=len(pending), timeout=start_timeout)
        out.timings["worker start, device selection"] = round(time.monotonic() - t0, 3)
        for g, pool, wg, refs in started:
            nodes = _rank_nodes(pool)
            infos = []
            for rank, ref in enumerate(refs):
                where = f"{nodes.get(rank, '?')}: {g.name} rank {rank}"
                if ref in late:
                    out.problems.append(
                        f"{where}: stage worker start: no answer within {start_timeout:g}s (the actor "
                        f"imports torch and verl, then runs verl's Worker.__init__) -- fix: see that "
                        f"node's Ray logs (raylet.out, python-core-worker-*.log), or raise "
                        f"--start-timeout on a slow machine"
                    )
                    continue
                try:
                    infos.append(ray.get(ref))
                except Exception as exc:  # the actor died
                    out.problems.append(
                        f"{where}: stage worker start: {type(exc).__name__}: {' '.join(str(exc).split())[:400]}"
                    )
            bad = _judge_devices(g, infos, platform, out)
            if bad or len(infos) < len(refs):
                continue
            log(
                f"rehearsal: {g.name}: device selection ok ("
                + ", ".join(
                    f"{i['ip']} rank {i['rank']}: {res} {','.join(i['accelerator_ids'])} -> device {i['device']}"
                    for i in infos
                )
                + ")"
            )
            ok_groups.append((g, wg, infos))

        for g, wg, infos in ok_groups:
            t0 = time.monotonic()
            results = _collect([w.group_allreduce.remote(stage_timeout, gloo) for w in wg.workers], stage_timeout + 30)
            out.timings[f"process group {g.name}"] = round(time.monotonic() - t0, 3)
            if _judge_collective(f"{g.name}: stage process group", infos, results, g.world_size, out):
                log(
                    f"rehearsal: {g.name}: process group ok ({g.world_size} rank(s), all_reduce = {g.world_size}, "
                    f"master {results[0]['master']}, backend {_backend_word(results)})"
                )

        trainer = [x for x in ok_groups if x[0].role == "trainer"]
        rollouts = [x for x in ok_groups if x[0].role == "rollout"]
        if weight_sync and trainer and len(rollouts) == len([g for g in groups if g.role == "rollout"]):
            t0 = time.monotonic()
            tg, twg, tinfos = trainer[0]
            rollout_workers = [(w, i) for _, rwg, rinfos in rollouts for w, i in zip(rwg.workers, rinfos)]
            t_ranks, r_ranks, world = sync_topology(tg.world_size, len(rollout_workers))
            addr, port = ray.get(twg.workers[0].sync_master.remote(), timeout=stage_timeout)
            parts = [(twg.workers[0], tinfos[0], t_ranks[0])] + [
                (w, i, r) for (w, i), r in zip(rollout_workers, r_ranks)
            ]
            results = _collect(
                [w.sync_rendezvous.remote(addr, port, r, world, stage_timeout, gloo) for w, _, r in parts],
                stage_timeout + 30,
            )
            out.timings["weight-sync rendezvous"] = round(time.monotonic() - t0, 3)
            if _judge_collective(
                "weight sync: stage trainer <-> rollout rendezvous", [i for _, i, _ in parts], results, world, out
            ):
                log(
                    f"rehearsal: weight sync: rendezvous ok (trainer rank 0 at {addr}:{port} + {world - 1} rollout "
                    f"worker(s), all_reduce = {world}, backend {_backend_word(results)})"
                )
        elif weight_sync:
            out.lines.append("rehearsal: weight sync: not rehearsed (a worker group above failed)")
    finally:
        for prefix, wg in made:
            for w in getattr(wg, "workers", []) if wg is not None else []:
                try:
                    ray.kill(w)
                except Exception:
                    pass
            _remove_pgs(prefix)
    return out


def _backend_word(results: list[dict]) -> str:
    if all(r.get("gloo") for r in results):
        return "gloo on CPU tensors (asked, or no device type for the device in this torch: a CPU test cluster)"
    return "verl's device backend (cpu:gloo,npu:hccl / cpu:gloo,cuda:nccl; hccl / nccl for the weight sync)"


def _collect(refs: list, timeout_s: float) -> list:
    """ray.get each ref within one deadline; a late or failed one becomes ``{"error": ...}``."""
    import ray

    _, late = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
    results = []
    for ref in refs:
        if ref in late:
            results.append({"error": f"no answer within {timeout_s:g}s", "late": True})
            continue
        try:
            results.append(ray.get(ref))
        except Exception as exc:
            results.append({"error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:400]}"})
    return results


def _judge_devices(g: Group, infos: list[dict], platform: str, out: Result) -> bool:
    """Problems of the device stage (failed selection, two workers on one device); True when any."""
    bad = False
    seen: dict[tuple[str, object], int] = {}
    for i in infos:
        where = f"{i['ip']} ({i['hostname']}): {g.name} rank {i['rank']}"
        ids = ",".join(i["accelerator_ids"]) or "none"
        if i["error"]:
            bad = True
            out.problems.append(
                f"{where}: stage {i['stage']}: Ray gave it {devices.RESOURCE[platform]} id {ids}, verl selected device "
                f"{i['device']} and the process sees {i['visible']} device(s) (env {i['env']}): {i['error']} -- fix: "
                + _device_fix(platform, i)
            )
            continue
        key = (i["node_id"], i["accelerator_ids"][0] if i["accelerator_ids"] else i["device"])
        if key in seen and i["env"].get(devices.NOSET_VAR[platform]):
            bad = True
            out.problems.append(
                f"{where}: stage device selection: Ray gave it {devices.RESOURCE[platform]} id {ids}, the same device as "
                f"rank {seen[key]} on this node (env {i['env']}) -- fix: " + _device_fix(platform, i)
            )
        seen.setdefault(key, i["rank"])
    return bad


#: the words of a collective's error that a healthy rank gets when another rank failed (gloo / torch.distributed)
_CONSEQUENCES = ("imeout", "Connection was likely closed", "Connection reset by peer", "Broken pipe")


def _judge_collective(stage: str, infos: list[dict], results: list[dict], world: int, out: Result) -> bool:
    """Problems of a collective stage, naming each rank's node; True when every rank reduced to ``world``."""
    ok = True
    # a timeout, or a connection the other side closed (gloo's "Failed to recv, got 0 bytes ... Connection was likely
    # closed" when the store's master gave up), is what a healthy rank sees of another rank's fault: not a cause
    failed_fast = [
        r for r in results if r.get("error") and not any(c in r["error"] for c in _CONSEQUENCES) and not r.get("late")
    ]
    for info, r in zip(infos, results):
        if not r.get("error") and r.get("value") == float(world):
            continue
        ok = False
        where = f"{info['ip']} ({info['hostname']}): {info.get('role', '?')} rank {info['rank']}"
        ifs = {k: v for k, v in info["env"].items() if k.endswith("SOCKET_IFNAME")}
        if r.get("error"):
            waited = "; it waited for the rank(s) that failed" if failed_fast and r not in failed_fast else ""
            out.problems.append(
                f"{where}: {stage} (master {r.get('master', '?')}, world {world}, interfaces {ifs}): "
                f"{r['error']}{waited} -- fix: " + _IF_FIX
            )
        else:
            out.problems.append(
                f"{where}: {stage}: all_reduce gave {r.get('value')}, expected {world} -- fix: " + _IF_FIX
            )
    return ok
