"""Patch ``checkpoint_engine.rendezvous_timeout``: the checkpoint engine's group rendezvous (the first weight sync of
the fully-async trainer) ends within a bound instead of waiting forever (field case C11).

verl v0.8.0 ``verl/checkpoint_engine/nccl_checkpoint_engine.py``, ``NCCLCheckpointEngine.init_process_group``, calls
``ray.util.collective.init_collective_group(world_size, rank, "nccl", group)`` and then ``collective.barrier(group)``
with no deadline; the recipe's ``nccl_timeout`` reaches torch.distributed groups only. When a peer never arrives
(verl issue #6967: a timing race at the first sync; also a rollout replica that died, a blocked port, a wrong
interface) both sides sit at 0 % utilisation with no traceback, forever. ``HCCLCheckpointEngine.init_process_group``
(``hccl_checkpoint_engine.py``, the Ascend engine) has the same shape: a stateless group init, then a one-element
``all_reduce`` as the barrier, no deadline.

The replacement runs the original call (group registration + first barrier) in a daemon thread on the caller's
accelerator device and waits at most ``VLGRPO_CKPT_ENGINE_INIT_TIMEOUT_S`` seconds (default
:data:`DEFAULT_TIMEOUT_S`); past that it raises :class:`RendezvousTimeout` naming the stage, the rank, the group and
verl issue #6967, so the Ray call that started the sync fails and the job ends non-zero (the scheduler restarts it
from its last checkpoint). An error the original raises is re-raised unchanged. A blocked collective cannot be
interrupted safely, so the thread is left behind (as verl PR #7045, which takes the same approach, does). Trainer
ranks other than 0 (``rank < 0``) join no group and are called directly.

Standard library only; imported with the registry (the engine, the preflight, ``patches status``).
"""

import os
import threading
import time

RECORD = {
    "id": "checkpoint_engine.rendezvous_timeout",
    "title": "fully-async: the first checkpoint-engine rendezvous can wait forever: bounded, stage named (C11)",
    "summary": (
        "the checkpoint engine's init_process_group (group registration + first barrier of the weight sync) has no "
        "deadline: a peer that never arrives hangs the job silently at 0 % utilisation (verl issue #6967); the call "
        "now runs under a deadline (VLGRPO_CKPT_ENGINE_INIT_TIMEOUT_S, default 600 s) and then fails naming the "
        "stage, rank and group."
    ),
    "upstream": "verl-project/verl#6967 (fix: verl PR #7045, open)",
    "applies_when": (
        "the engine's init_process_group initialises a group and runs a barrier/all_reduce with no timeout "
        "anywhere in it (verl v0.8.0 nccl and hccl checkpoint engines)"
    ),
    "targets": (
        ("verl.checkpoint_engine.nccl_checkpoint_engine", "NCCLCheckpointEngine.init_process_group"),
        ("verl.checkpoint_engine.hccl_checkpoint_engine", "HCCLCheckpointEngine.init_process_group"),
    ),
    "detector": __name__ + ":is_faulty",
    "replacement": __name__ + ":make_init_process_group",
    "wraps": True,
    "verify": __name__ + ":verify",
    "recheck_after": (),
}

#: the variable holding the bound, in seconds (a positive number); the registry row passes it to every child
TIMEOUT_ENV = "VLGRPO_CKPT_ENGINE_INIT_TIMEOUT_S"
#: seconds, as verl PR #7045's default: far above a healthy first rendezvous (seconds), far below "forever"
DEFAULT_TIMEOUT_S = 600.0
STAGE = "checkpoint-engine rendezvous (init_process_group: group registration + first barrier)"


class RendezvousTimeout(RuntimeError):
    """The checkpoint engine's rendezvous did not finish within the bound (field case C11, verl issue #6967)."""


def timeout_s(environ=None) -> float:
    """The bound in seconds from ``VLGRPO_CKPT_ENGINE_INIT_TIMEOUT_S`` (default :data:`DEFAULT_TIMEOUT_S`).

    Raises ``ValueError`` naming the variable for a value that is not a positive number (the launch validates the
    same row before any process starts)."""
    env = os.environ if environ is None else environ
    raw = (env.get(TIMEOUT_ENV) or "").strip()
    if not raw:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ValueError(f"{TIMEOUT_ENV}={raw!r}: not a positive number of seconds; unset it for {DEFAULT_TIMEOUT_S:g}")
    return value


def _device_binder():
    """A function that makes the calling thread use the caller's current CUDA/NPU device (per thread in both
    runtimes), or ``None`` when no accelerator runtime is initialised here."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None:
        return None
    for name in ("cuda", "npu"):
        mod = getattr(torch, name, None)
        try:
            if mod is not None and mod.is_available() and mod.is_initialized():
                device = mod.current_device()
                return lambda: mod.set_device(device)
        except Exception:  # noqa: BLE001 - a runtime that cannot tell: leave the thread's default
            continue
    return None


def run_bounded(call, bound_s: float, describe):
    """Run ``call()`` in a daemon thread and return its result, re-raising its exception; when it has not returned
    after ``bound_s`` seconds raise :class:`RendezvousTimeout` with ``describe(elapsed_s)`` as the message."""
    box = {}
    bind = _device_binder()

    def target():
        try:
            if bind is not None:
                bind()
            box["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            box["error"] = exc

    start = time.monotonic()
    thread = threading.Thread(target=target, name="vlgrpo-ckpt-engine-rendezvous", daemon=True)
    thread.start()
    thread.join(bound_s)
    if thread.is_alive():
        raise RendezvousTimeout(describe(time.monotonic() - start))
    if "error" in box:
        raise box["error"]
    return box.get("value")


def make_init_process_group(original):
    """Wrap ``init_process_group(self, rank, world_size, master_metadata)`` (verl v0.8.0 NCCL/HCCL checkpoint engines)."""

    def init_process_group(self, rank, world_size, *args, **kwargs):
        if not isinstance(rank, int) or rank < 0:
            return original(self, rank, world_size, *args, **kwargs)
        bound = timeout_s()
        group = getattr(self, "group_name", None)
        engine = type(self).__name__

        def describe(elapsed):
            return (
                f"{STAGE} of {engine} rank {rank} of {world_size}"
                + (f", group {group!r}" if group else "")
                + f" did not finish within {bound:g} s (waited {elapsed:.1f} s): a peer never joined "
                "(a rollout or trainer worker that died or never reached the sync, a blocked port or a wrong "
                "network interface, or the first-init race of verl issue #6967). Check the other workers' logs "
                f"for the first error; raise {TIMEOUT_ENV} only if the rendezvous is slow but healthy."
            )

        return run_bounded(lambda: original(self, rank, world_size, *args, **kwargs), bound, describe)

    return init_process_group


make_init_process_group.__vlgrpo_code__ = make_init_process_group(None).__code__

_GROUP_INIT = ("init_collective_group", "stateless_init_process_group", "init_process_group", "create_collective_group")
_BARRIER = ("barrier", "all_reduce", "allreduce", "monitored_barrier")


def is_faulty(func):
    """``(faulty, reason)``: faulty when ``func`` calls a group init (``init_collective_group``,
    ``stateless_init_process_group``, ...) and a barrier (``barrier``, ``all_reduce``) while no name, attribute or
    keyword in it mentions a timeout (verl PR #7045 routes the same calls through a ``..._with_timeout`` helper).
    Parses the function's own source with :mod:`ast`."""
    import ast

    from vlgrpo.patches.source import function_node

    fn = function_node(func)
    called, idents = set(), set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            f = node.func
            called.add(f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None))
        if isinstance(node, ast.Attribute):
            idents.add(node.attr)
        elif isinstance(node, ast.Name):
            idents.add(node.id)
        elif isinstance(node, ast.keyword) and node.arg:
            idents.add(node.arg)
    inits = sorted(called & set(_GROUP_INIT))
    barriers = sorted(called & set(_BARRIER))
    if not inits or not barriers:
        return False, f"{fn.name} runs no group init plus barrier (not a checkpoint-engine rendezvous)"
    bounded = sorted(i for i in idents if "timeout" in i.lower() or "deadline" in i.lower())
    if bounded:
        return False, f"{fn.name} already bounds its rendezvous ({', '.join(bounded)})"
    return True, (
        f"{fn.name} calls {', '.join(inits)} then {', '.join(barriers)} with no timeout: a missing peer "
        f"waits forever (verl issue #6967)"
    )


def verify() -> None:
    """A call that returns in time passes its value through; one that raises re-raises the same exception; one that
    blocks past the bound raises :class:`RendezvousTimeout` naming the stage and the rank within the bound plus a
    margin; ``rank < 0`` is called directly. Raises ``AssertionError``."""
    calls = []

    class Engine:
        group_name = "g"

    def ok(self, rank, world_size, meta):
        calls.append((rank, threading.current_thread().name))
        return "done"

    release = threading.Event()

    def blocked(self, rank, world_size, meta):
        release.wait(30)

    def broken(self, rank, world_size, meta):
        raise KeyError("peer")

    env_before = os.environ.get(TIMEOUT_ENV)
    os.environ[TIMEOUT_ENV] = "0.3"
    try:
        assert make_init_process_group(ok)(Engine(), 1, 2, None) == "done"
        assert calls[-1] == (1, "vlgrpo-ckpt-engine-rendezvous"), calls
        assert make_init_process_group(ok)(Engine(), -1, 2, None) == "done"
        assert calls[-1][1] != "vlgrpo-ckpt-engine-rendezvous", "rank < 0 joins no group: called directly"
        try:
            make_init_process_group(broken)(Engine(), 1, 2, None)
            raise AssertionError("the original's error was swallowed")
        except KeyError:
            pass
        start = time.monotonic()
        try:
            make_init_process_group(blocked)(Engine(), 1, 2, None)
            raise AssertionError("a blocked rendezvous returned")
        except RendezvousTimeout as exc:
            elapsed = time.monotonic() - start
            assert 0.3 <= elapsed < 5.0, elapsed
            assert "checkpoint-engine rendezvous" in str(exc) and "rank 1 of 2" in str(exc) and "#6967" in str(exc)
        finally:
            release.set()
    finally:
        if env_before is None:
            os.environ.pop(TIMEOUT_ENV, None)
        else:
            os.environ[TIMEOUT_ENV] = env_before
