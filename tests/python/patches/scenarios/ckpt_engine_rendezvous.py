"""verl v0.8.0's real ``NCCLCheckpointEngine.init_process_group`` (``verl/checkpoint_engine/nccl_checkpoint_engine.py``)
on the CPU, with ``ray.util.collective`` replaced by a gloo stand-in: ``init_collective_group`` is a real
``torch.distributed`` gloo group over a TCP store at ``127.0.0.1:<port>`` (rank 0 hosts the store) with a one-hour
torch timeout, ``barrier`` is ``torch.distributed.barrier``. cupy, zmq, fastapi and uvicorn (in the GPU images, not here) are
automatic stand-ins (scenarios/stub_modules.py); zmq's socket records nothing.

argv: rank world_size port. Prints one JSON line: the patch status, ``elapsed`` seconds, and ``error`` (the exception
type and message) or ``ok``.
"""

import datetime
import json
import os
import sys
import time
import traceback
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stub_modules import StubFinder

PATCH = "checkpoint_engine.rendezvous_timeout"


class _Constants(types.ModuleType):
    """``cupy.cuda.nccl``'s constants, read by ray.util.collective's nccl_util at import."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return abs(hash(name)) % 1000


def _stand_ins(mod):
    if mod.__name__ == "cupy.cuda":
        mod.nccl = _Constants("cupy.cuda.nccl")
    if mod.__name__ == "zmq":
        sock = types.SimpleNamespace(
            connect=lambda *a: None, setsockopt=lambda *a: None, setsockopt_string=lambda *a: None, bind=lambda *a: None
        )
        mod.Context = lambda: types.SimpleNamespace(socket=lambda kind: sock)


class GlooCollective:
    """The four ``ray.util.collective`` calls the engine makes, over a real torch.distributed gloo group."""

    def __init__(self, port):
        self.port = port

    def is_group_initialized(self, group_name):
        import torch.distributed as dist

        return dist.is_initialized()

    def init_collective_group(self, world_size, rank, backend, group_name):
        import torch.distributed as dist

        dist.init_process_group(
            "gloo",
            init_method=f"tcp://127.0.0.1:{self.port}",
            world_size=world_size,
            rank=rank,
            timeout=datetime.timedelta(hours=1),
        )

    def barrier(self, group_name):
        import torch.distributed as dist

        dist.barrier()


out = {}
try:
    rank, world_size, port = (int(a) for a in sys.argv[1:4])
    sys.meta_path.append(StubFinder(("cupy", "zmq", "fastapi", "uvicorn", "vllm", "msgspec"), _stand_ins))
    from verl.checkpoint_engine import nccl_checkpoint_engine as nce

    import vlgrpo.patches

    rows = {r["id"]: r for r in vlgrpo.patches.status(import_targets=False)}
    out["status"] = [rows[PATCH]["status"], rows[PATCH]["reason"]]
    nce.collective = GlooCollective(port)
    engine = object.__new__(nce.NCCLCheckpointEngine)
    engine.group_name = "ckpt"
    engine.rebuild_group = False
    engine.is_master = rank == 0
    engine.topic = "bucket_metadata"
    meta = nce.MasterMetadata(zmq_ip="127.0.0.1", zmq_port=1)
    start = time.monotonic()
    try:
        engine.init_process_group(rank, world_size, meta)
        out["ok"] = True
    except Exception as exc:  # reported
        out["error"] = [type(exc).__name__, str(exc)]
    out["elapsed"] = time.monotonic() - start
except Exception:
    out["crash"] = traceback.format_exc()
print(json.dumps(out), flush=True)
os._exit(0)  # a rendezvous thread left blocked in the TCP store must not hold the interpreter
