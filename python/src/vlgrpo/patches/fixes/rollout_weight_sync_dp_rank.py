"""Patch ``rollout.weight_sync_dp_rank``: with rollout data parallelism (DP > 1) the vLLM worker names its weight-sync
socket with the rank the trainer side uses (verl issue #6615).

In colocated mode every trainer rank sends its weight buckets over a ZMQ IPC socket whose name ends in
``-rank-<r>.sock``, ``r = rollout_rank % RAY_LOCAL_WORLD_SIZE`` (verl v0.8.0
``verl/workers/rollout/vllm_rollout/vllm_rollout.py``, ``ServerAdapter.__init__``): 0..7 on an 8-device node. The
vLLM worker on the same device binds ``-rank-<self.local_rank>.sock`` (``vLLMColocateWorkerExtension._get_zmq_handle``,
``verl/workers/rollout/vllm_rollout/utils.py``). With DP > 1 on one node vLLM runs one engine per DP rank; on CUDA it
keeps every GPU visible and offsets the worker's ``local_rank`` by ``data_parallel_rank_local * world_size``
(vLLM 0.13.0 ``vllm/v1/worker/gpu_worker.py`` ``init_device``), but on every other platform it narrows the device
variable per engine instead (``vllm/v1/engine/utils.py`` ``set_device_control_env_var``) and vllm-ascend 0.13.0's
``NPUWorker`` keeps the engine-local ``local_rank``. On Ascend with TP=4, DP=2 both engines' workers bind
``rank-0..3``: two receivers per name, none for senders 4..7, and the first weight sync hangs or loads another
rank's buckets.

The replacement gives the original the receiver rank the sender computes,
``data_parallel_rank_local * local_world_size + local_rank % local_world_size`` (``local_world_size``: the engine's
workers on this node, ``tensor_parallel_size * pipeline_parallel_size`` on one node), which is the same number
whether or not vLLM already offset ``local_rank`` (so CUDA is unchanged) and is ``local_rank`` itself for DP = 1.
The worker's ``local_rank`` (its device index) is left alone. Mirrors the intent of verl PR #6620 (back-port #6980),
not in the v0.8.0 tag.

Standard library only; imported with the registry (the engine, the preflight, ``patches status``).
"""

RECORD = {
    "id": "rollout.weight_sync_dp_rank",
    "title": "rollout DP > 1 on Ascend: vLLM workers share a weight-sync socket, the first sync hangs (verl #6615)",
    "summary": (
        "with rollout DP > 1 on Ascend (and any platform where vLLM does not offset the worker's local_rank) two "
        "vLLM workers bind the same weight-sync ZMQ socket and trainer ranks past the first engine find none, so "
        "the first weight sync hangs or loads the wrong buckets; the worker's socket gets the rank the trainer uses "
        "(data_parallel_rank_local * TP + TP rank)"
    ),
    "upstream": "verl-project/verl#6615 (fix: verl PR #6620, back-port #6980)",
    "applies_when": (
        "vLLMColocateWorkerExtension._get_zmq_handle names the socket from self.local_rank and never reads the "
        "data-parallel rank (verl v0.8.0)"
    ),
    "targets": (("verl.workers.rollout.vllm_rollout.utils", "vLLMColocateWorkerExtension._get_zmq_handle"),),
    "detector": __name__ + ":is_faulty",
    "replacement": __name__ + ":make_get_zmq_handle",
    "wraps": True,
    "verify": __name__ + ":verify",
    "recheck_after": (),
}

#: identifiers whose presence in the handle code means the data-parallel rank is already taken into account
_DP_NAMES = ("data_parallel_rank_local", "data_parallel_rank", "data_parallel_index", "data_parallel_size_local")


def _parallel_config(worker):
    """vLLM's ``ParallelConfig`` of a worker (``worker.vllm_config``, else ``worker.model_runner.vllm_config``)."""
    config = getattr(worker, "vllm_config", None)
    if config is None:
        config = getattr(getattr(worker, "model_runner", None), "vllm_config", None)
    return getattr(config, "parallel_config", None)


def receiver_rank(local_rank: int, parallel_config) -> int:
    """The rank the trainer's sender uses for the vLLM worker with ``local_rank`` under ``parallel_config``.

    ``parallel_config``: vLLM's ``ParallelConfig`` (``data_parallel_size``, ``data_parallel_rank_local``, falling
    back to ``data_parallel_rank % data_parallel_size_local``, ``world_size``/``nnodes_within_dp`` or
    ``tensor_parallel_size * pipeline_parallel_size``). Returns ``local_rank`` for DP = 1 or when the DP rank is
    unknown; otherwise ``dp_local * n + local_rank % n`` with ``n`` the engine's workers on this node. Ints only.
    """
    local_rank = int(local_rank)
    if parallel_config is None or int(getattr(parallel_config, "data_parallel_size", 1) or 1) <= 1:
        return local_rank
    tp = int(getattr(parallel_config, "tensor_parallel_size", 1) or 1)
    pp = int(getattr(parallel_config, "pipeline_parallel_size", 1) or 1)
    world = int(getattr(parallel_config, "world_size", 0) or tp * pp)
    per_node = max(1, world // max(1, int(getattr(parallel_config, "nnodes_within_dp", 1) or 1)))
    dp_local = getattr(parallel_config, "data_parallel_rank_local", None)
    if dp_local is None:
        dp_rank = getattr(parallel_config, "data_parallel_rank", None)
        size_local = int(getattr(parallel_config, "data_parallel_size_local", 0) or 0)
        if dp_rank is None or size_local <= 0:
            return local_rank
        dp_local = int(dp_rank) % size_local
    return int(dp_local) * per_node + local_rank % per_node


class _AsSender:
    """The worker as the original ``_get_zmq_handle`` reads it, with ``local_rank`` replaced by the sender's rank."""

    __slots__ = ("_worker", "local_rank")

    def __init__(self, worker, rank: int):
        object.__setattr__(self, "_worker", worker)
        object.__setattr__(self, "local_rank", rank)

    def __getattr__(self, name):
        return getattr(object.__getattribute__(self, "_worker"), name)


def make_get_zmq_handle(original):
    """Wrap ``vLLMColocateWorkerExtension._get_zmq_handle(self) -> str`` (verl v0.8.0): the original's handle, built
    with :func:`receiver_rank` in place of ``self.local_rank``."""

    def _get_zmq_handle(self):
        rank = receiver_rank(self.local_rank, _parallel_config(self))
        if rank == self.local_rank:
            return original(self)
        return original(_AsSender(self, rank))

    return _get_zmq_handle


make_get_zmq_handle.__vlgrpo_code__ = make_get_zmq_handle(None).__code__


def is_faulty(func: object, module_source: str | None = None) -> tuple[bool, str]:
    """``(faulty, reason)``: faulty when ``_get_zmq_handle`` (``func``, or ``vLLMColocateWorkerExtension._get_zmq_handle``
    in ``module_source``) reads ``self.local_rank`` and neither it nor a module-level function it calls by name reads
    a data-parallel rank (:data:`_DP_NAMES`), i.e. verl without PR #6620's kind of fix."""
    import ast
    import inspect
    import sys

    from vlgrpo.patches import source

    if module_source is None:
        fn = source.function_node(func)
        module = sys.modules.get(getattr(func, "__module__", ""), None)
        module_source = inspect.getsource(module) if module is not None else ""
    else:
        fn = source.find_function(module_source, "vLLMColocateWorkerExtension._get_zmq_handle")
    helpers = {
        n.name: n
        for n in (ast.parse(module_source).body if module_source else ())
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    reads_local = any(
        isinstance(n, ast.Attribute) and n.attr == "local_rank" and source.name_of(n.value) == "self"
        for n in ast.walk(fn)
    )
    if not reads_local:
        return False, "_get_zmq_handle does not name the socket from self.local_rank"
    called = [helpers[n.func.id] for n in ast.walk(fn) if isinstance(n, ast.Call) and source.name_of(n.func) in helpers]
    for node in (fn, *called):
        if source.mentions(node, attrs=_DP_NAMES, names=_DP_NAMES) or any(
            isinstance(n, ast.Constant) and n.value in _DP_NAMES for n in ast.walk(node)
        ):
            return False, f"{node.name} already takes the data-parallel rank into account"
    return True, (
        f"_get_zmq_handle (line {fn.lineno}) names the weight-sync socket from self.local_rank only: with "
        "rollout DP > 1 on Ascend two vLLM workers share a name (verl issue #6615)"
    )


def verify() -> None:
    """For TP=4, DP=2 on one node of 8 devices, the 8 receiver names equal the 8 sender names (``rank % 8``) whether
    the worker's ``local_rank`` is engine-local (Ascend) or offset (CUDA); DP = 1 and other attributes are unchanged;
    the detector flags verl v0.8.0's shape and not a DP-aware one. Raises ``AssertionError``."""
    from types import SimpleNamespace

    def original(self):
        return f"ipc:///tmp/rl-colocate-zmq-j-replica-{self.replica}-rank-{self.local_rank}.sock"

    wrapped = make_get_zmq_handle(original)

    def worker(dp_local, tp_rank, offset, dp=2, tp=4):
        pc = SimpleNamespace(
            data_parallel_size=dp,
            data_parallel_rank_local=dp_local,
            tensor_parallel_size=tp,
            pipeline_parallel_size=1,
            world_size=tp,
            nnodes_within_dp=1,
        )
        return SimpleNamespace(
            local_rank=tp_rank + (dp_local * tp if offset else 0),
            replica=0,
            vllm_config=SimpleNamespace(parallel_config=pc),
        )

    senders = sorted(original(SimpleNamespace(replica=0, local_rank=r % 8)) for r in range(8))
    for offset in (False, True):
        got = sorted(wrapped(worker(d, t, offset)) for d in range(2) for t in range(4))
        assert got == senders, (offset, got)
    single = worker(0, 3, False, dp=1)
    assert wrapped(single) == original(single) and single.local_rank == 3
    faulty = (
        "class vLLMColocateWorkerExtension:\n    def _get_zmq_handle(self):\n"
        "        return f'ipc:///tmp/x-rank-{self.local_rank}.sock'\n"
    )
    assert is_faulty(None, faulty)[0]
    fixed = (
        "def rank_of(local_rank, pc):\n    return pc.data_parallel_rank_local * pc.tensor_parallel_size + local_rank\n"
        + faulty.replace("{self.local_rank}", "{rank_of(self.local_rank, self.vllm_config.parallel_config)}")
    )
    assert not is_faulty(None, fixed)[0]
