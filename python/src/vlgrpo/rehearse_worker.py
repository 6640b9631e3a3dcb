"""The rehearsal's Ray actor: a subclass of verl 0.8.0's own ``Worker``, started by verl's own ``RayWorkerGroup``.

Imported only inside the rehearsal's actors and by :mod:`vlgrpo.rehearse` after it decided to rehearse: importing
it imports verl (and with it torch, which loads torch_npu through torch's device-extension autoload on Ascend, as
in verl's own workers). Nothing here loads a model.

Stages, each returning a dict and never raising (the driver names node, stage and device from it):

``__init__``
    verl's ``Worker.__init__`` (``verl/single_controller/base/worker.py``, verl 0.8.0): reads ``WORLD_SIZE``,
    ``RANK``, ``MASTER_ADDR``/``MASTER_PORT`` that ``RayWorkerGroup`` put in the actor's runtime_env, and, under
    Ray's NOSET switch, takes ``ray.get_runtime_context().get_accelerator_ids()[<NPU|GPU>][0]`` and calls
    ``get_torch_device().set_device(int(id))`` -- the device selection and set_device of the job's workers, run by
    verl's code. Without the switch verl sets no device there; the device is then the first (only) one Ray left
    visible, selected here with ``set_device(0)`` as verl's engine workers use it.
:meth:`RehearsalWorker.group_allreduce`
    verl's ``initialize_global_process_group_ray(timeout_second, backend)`` (``verl/utils/distributed.py``, what
    ``verl/workers/engine_workers.py`` calls) over the worker group, one ``all_reduce`` of a one-element tensor on
    the selected device (on the CPU for ``gloo``), checked against the world size, then
    ``destroy_global_process_group``.
:meth:`RehearsalWorker.sync_master` / :meth:`RehearsalWorker.sync_rendezvous`
    the trainer <-> rollout rendezvous of the weight sync: verl 0.8.0's NCCL checkpoint engine
    (``checkpoint_engine/nccl_checkpoint_engine.py`` ``build_topology``) puts trainer rank 0 at rank 0 and every
    rollout worker at ranks 1..R of one group of R + 1, whose master is trainer rank 0's node (its zmq publisher
    listens on that node's IP and a free port). Here: a ``torch.distributed`` group with the same ranks, the same
    master node, a free port there and the job's backend, with one ``all_reduce``. verl itself forms that group
    with ``ray.util.collective`` (cupy NCCL / HCCL), which this rehearsal does not call.
"""

from __future__ import annotations

import os
import socket
import time
from datetime import timedelta

import ray
from verl.single_controller.base import Worker
from verl.utils import distributed as verl_distributed
from verl.utils.device import get_device_name, get_torch_device

VISIBILITY = ("ASCEND_RT_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
NOSET = ("RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES", "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES")
IFNAMES = ("GLOO_SOCKET_IFNAME", "HCCL_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")


def _err(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:600]}"


class RehearsalWorker(Worker):
    """One rehearsal process; ``resource`` is "NPU" or "GPU" (the Ray resource the group holds)."""

    def __init__(self, resource: str, role: str) -> None:
        ctx = ray.get_runtime_context()
        ids = ctx.get_accelerator_ids().get(resource, [])
        self._info = {
            "role": role,
            "ip": ray.util.get_node_ip_address(),
            "node_id": ctx.get_node_id(),
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
            "rank": int(os.environ.get("RANK", "-1")),
            "world_size": int(os.environ.get("WORLD_SIZE", "0")),
            "accelerator_ids": [str(i) for i in ids],
            "env": {k: os.environ[k] for k in VISIBILITY + NOSET + IFNAMES if k in os.environ},
            "device_name": get_device_name(),
            "visible": -1,
            "device": None,
            "stage": "",
            "error": "",
        }
        try:
            self._info["visible"] = int(get_torch_device().device_count())
        except Exception as exc:  # reported
            self._info.update(stage="device import", error=_err(exc))
            return
        try:
            super().__init__()  # verl's own device selection (set_device under NOSET)
        except Exception as exc:  # reported with the id verl passed
            self._info.update(stage="set_device", error=_err(exc), device=ids[0] if ids else None)
            return
        try:
            if not any(os.environ.get(k) for k in NOSET):
                get_torch_device().set_device(0)
            self._info["device"] = int(get_torch_device().current_device())
        except Exception as exc:
            self._info.update(stage="set_device", error=_err(exc), device=0)

    def info(self) -> dict:
        """What the constructor found (node, rank, accelerator ids, device, the error of the failed stage)."""
        return dict(self._info)

    def _tensor(self, gloo: bool):
        import torch

        if gloo:
            return torch.ones(1)
        return torch.ones(1, device=f"{get_device_name()}:{get_torch_device().current_device()}")

    @staticmethod
    def device_type_exists() -> bool:
        """False when this process's torch has no device type for verl's device name (a CPU build of torch with a
        stand-in for torch_npu: the CPU test clusters), so that only gloo on CPU tensors can run here."""
        import torch

        try:
            torch.device(f"{get_device_name()}:0")
        except RuntimeError:
            return False
        return get_device_name() != "cpu"

    def group_allreduce(self, timeout_s: float, gloo: bool) -> dict:
        """verl's process-group init over this worker group (``cpu:gloo`` when ``gloo``, else verl's default
        ``cpu:gloo,<device>:<hccl|nccl>``) with a ``timeout_s`` deadline, one all_reduce, destroy."""
        t0 = time.monotonic()
        gloo = gloo or not self.device_type_exists()
        out = {
            "rank": self._info["rank"],
            "ip": self._info["ip"],
            "error": "",
            "value": None,
            "gloo": gloo,
            "master": f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}",
        }
        return self._one_all_reduce(
            out,
            t0,
            gloo,
            lambda: verl_distributed.initialize_global_process_group_ray(
                timeout_second=timeout_s, backend="cpu:gloo" if gloo else None
            ),
            verl_distributed.destroy_global_process_group,
        )

    def _one_all_reduce(self, out: dict, t0: float, gloo: bool, init, destroy) -> dict:
        """``init()`` the process group, one all_reduce of this rank's tensor into ``out["value"]`` (or the error into
        ``out["error"]``), then ``destroy()`` whatever happened; ``out["seconds"]`` since ``t0``."""
        import torch.distributed as dist

        try:
            init()
            t = self._tensor(gloo)
            dist.all_reduce(t)
            out["value"] = float(t.item())
        except Exception as exc:
            out["error"] = _err(exc)
        finally:
            try:
                destroy()
            except Exception:
                pass
        out["seconds"] = round(time.monotonic() - t0, 3)
        return out

    def sync_master(self) -> tuple[str, str]:
        """This node's IP and a free port (verl's ``get_available_master_addr_port``), for the weight-sync group."""
        return self.get_available_master_addr_port()

    def sync_rendezvous(self, addr: str, port: str, rank: int, world: int, timeout_s: float, gloo: bool) -> dict:
        """Join the weight-sync group at ``addr:port`` as ``rank`` of ``world``; one all_reduce; destroy."""
        import torch.distributed as dist

        t0 = time.monotonic()
        gloo = gloo or not self.device_type_exists()
        out = {
            "rank": rank,
            "ip": self._info["ip"],
            "error": "",
            "value": None,
            "gloo": gloo,
            "master": f"{addr}:{port}",
        }
        backend = "gloo" if gloo else ("hccl" if get_device_name() == "npu" else "nccl")
        return self._one_all_reduce(
            out,
            t0,
            gloo,
            lambda: dist.init_process_group(
                backend,
                init_method=f"tcp://{addr}:{port}",
                rank=rank,
                world_size=world,
                timeout=timedelta(seconds=timeout_s),
            ),
            lambda: dist.destroy_process_group() if dist.is_initialized() else None,
        )
