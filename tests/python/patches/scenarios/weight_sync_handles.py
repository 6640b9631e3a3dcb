"""verl issue #6615 on verl v0.8.0's real code: the weight-sync ZMQ names of the trainer side (``ServerAdapter.__init__``,
``verl/workers/rollout/vllm_rollout/vllm_rollout.py``) and of the vLLM worker side
(``vLLMColocateWorkerExtension._get_zmq_handle``, ``verl/workers/rollout/vllm_rollout/utils.py``), per device.

vLLM itself is a stand-in (scenarios/stub_modules.py); what vLLM 0.13.0 gives each worker of a DP engine is set here
as vLLM sets it: the engine's ``parallel_config.data_parallel_rank`` / ``data_parallel_rank_local``
(``vllm/v1/engine/core.py`` ``run_engine_core``), the worker's ``local_rank`` in ``range(local_world_size)``
(``vllm/v1/executor/multiproc_executor.py``), offset by ``data_parallel_rank_local * world_size`` on CUDA only
(``vllm/v1/worker/gpu_worker.py`` ``init_device``); elsewhere the engine sees only its own devices
(``vllm/v1/engine/utils.py`` ``get_device_indices``: ``local_dp_rank * world_size + i``) and the worker keeps the
engine-local ``local_rank`` (vllm-ascend 0.13.0 ``NPUWorker._init_device``). The trainer's rank ``r`` holds device
``r % devices_per_node`` of node ``r // devices_per_node`` (verl's placement-group bundles).

``VLGRPO_TEST_CASES``: a JSON list of cases ``{"name", "tp", "dp", "nodes", "devices", "platform": "npu"|"cuda", "dp_local_none"}``.
Prints one JSON line: the patch status and, per case, ``{"senders": {device: name}, "receivers": {device: [names]}}``
with ``device`` = ``"<node>:<index>"``.
"""

import json
import os
import sys
import traceback
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stub_modules import StubFinder, vllm_distribution

JOB = "02000000"


def _vllm(mod):
    if mod.__name__ == "vllm":
        mod.__version__ = "0.13.0"


def senders(rollout_mod, config_cls, case):
    tp, dp, nodes, per_node = case["tp"], case["dp"], case["nodes"], case["devices"]
    rollout_mod.ray = types.SimpleNamespace(get_runtime_context=lambda: types.SimpleNamespace(get_job_id=lambda: JOB))
    rollout_mod.get_device_uuid = lambda device_id: f"uuid-{device_id}"
    rollout_mod.get_device_id = lambda: 0
    rollout_mod.is_support_ipc = lambda: True
    config = config_cls(
        name="vllm", tensor_model_parallel_size=tp, data_parallel_size=dp, pipeline_model_parallel_size=1
    )
    out = {}
    for rank in range(nodes * per_node):
        os.environ.update(RANK=str(rank), RAY_LOCAL_WORLD_SIZE=str(per_node))
        adapter = rollout_mod.ServerAdapter(config, None, None)
        out[f"{rank // per_node}:{rank % per_node}"] = adapter.zmq_handle
    return out


def receivers(utils_mod, case):
    tp, dp, nodes, per_node = case["tp"], case["dp"], case["nodes"], case["devices"]
    world = tp  # PP = 1
    # verl: a replica's servers get gpus_per_replica_node = min(gpus_per_node, replica world size) devices of a node,
    # data_parallel_size_local = that // TP, data_parallel_start_rank = node_rank * data_parallel_size_local
    # (verl/workers/rollout/replica.py, vllm_async_server.py)
    dp_local_size = min(per_node, tp * dp) // tp
    replicas = nodes * per_node // (tp * dp)
    out = {}
    os.environ["VERL_RAY_JOB_ID"] = JOB
    for replica in range(replicas):
        os.environ["VERL_REPLICA_RANK"] = str(replica)
        first = replica * tp * dp  # the replica's first device, counted over the whole cluster
        for dp_rank in range(dp):
            start = first + dp_rank * world
            node = start // per_node
            dp_local = dp_rank % dp_local_size
            pc = types.SimpleNamespace(
                data_parallel_size=dp,
                data_parallel_size_local=dp_local_size,
                data_parallel_rank=dp_rank,
                data_parallel_rank_local=None if case.get("dp_local_none") else dp_local,
                tensor_parallel_size=tp,
                pipeline_parallel_size=1,
                world_size=world,
                nnodes_within_dp=1,
            )
            for local_rank in range(world):
                worker = object.__new__(utils_mod.vLLMColocateWorkerExtension)
                offset = case["platform"] == "cuda" and dp > 1
                worker.local_rank = local_rank + (dp_local * world if offset else 0)
                worker.vllm_config = types.SimpleNamespace(parallel_config=pc)
                worker.model_runner = types.SimpleNamespace(vllm_config=worker.vllm_config)
                device = f"{node}:{start % per_node + local_rank}"
                out.setdefault(device, []).append(worker._get_zmq_handle())
    return out


def main():
    out = {}
    try:
        vllm_distribution(os.environ.get("VLGRPO_TEST_TMP", "/tmp"))
        sys.meta_path.append(
            StubFinder(
                ("vllm", "zmq", "msgspec", "uvicorn", "fastapi", "cachetools", "peft", "accelerate", "tensordict"),
                _vllm,
            )
        )
        from verl.workers.config import RolloutConfig
        from verl.workers.rollout.vllm_rollout import utils as utils_mod
        from verl.workers.rollout.vllm_rollout import vllm_rollout as rollout_mod

        import vlgrpo.patches

        rows = {r["id"]: r for r in vlgrpo.patches.status(import_targets=False)}
        row = rows["rollout.weight_sync_dp_rank"]
        out["status"] = [row["status"], row["reason"]]
        out["cases"] = {}
        for case in json.loads(os.environ["VLGRPO_TEST_CASES"]):
            out["cases"][case["name"]] = {
                "senders": senders(rollout_mod, RolloutConfig, case),
                "receivers": receivers(utils_mod, case),
            }
    except BaseException:
        out["crash"] = traceback.format_exc()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
