"""``fully_async.stall_watchdog`` on verl v0.8.0's real fully-async trainer methods (the class Ray would pickle, built
with ``object.__new__``; the checkpoint manager, worker group and queue actor are stand-ins). Run by
test_stall_watchdog.py in a fresh interpreter with the sitecustomize shim; ``VLGRPO_STALL_TIMEOUT`` is the bound.

``VLGRPO_TEST_CASE``:

- ``status``: the record's status per target; prints one JSON line.
- ``beating``: ``_get_samples_from_queue`` receives 7 samples 0.5 s apart through verl's real
  ``MessageQueueClient.get_sample``, then the end signal: longer than the bound, but every sample is progress, so
  it returns; prints one JSON line.
- ``weight_sync``: ``_fit_update_weights`` awaits a checkpoint-engine update that never finishes (async stage).
- ``checkpoint_save``: ``_save_checkpoint`` calls a worker-group save that never returns (sync stage).

The two stalls must end the process with exit code 75 and a stacks file under
``<VLGRPO_TEST_TMP>/ckpt/stalls/``."""

import asyncio
import concurrent.futures
import json
import os
import sys
import threading
import time
import traceback
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stub_modules import StubFinder  # noqa: E402

TARGET_ID = "fully_async.stall_watchdog"


class QueueActor:
    """A stand-in for the MessageQueue actor handle: ``get_sample.remote()`` resolves after ``delay`` seconds with
    (sample, queue length), and with (None, 0) once ``count`` samples were given."""

    def __init__(self, count, delay):
        self.left, self.delay = count, delay
        self.get_sample = types.SimpleNamespace(remote=self._remote)

    def _remote(self):
        fut = concurrent.futures.Future()
        value = (b"sample", 1) if self.left > 0 else (None, 0)
        self.left -= 1
        threading.Timer(self.delay, fut.set_result, (value,)).start()
        return types.SimpleNamespace(future=lambda: fut)


def trainer_object(ft, root):
    from omegaconf import OmegaConf

    trainer = object.__new__(ft.FullyAsyncTrainer.__ray_metadata__.modified_class)
    trainer.config = OmegaConf.create(
        {
            "trainer": {"default_local_dir": root, "default_hdfs_dir": None},
            "global_profiler": {"steps": None},
        }
    )
    trainer.global_steps, trainer.current_param_version, trainer.local_trigger_step = 7, 2, 1
    trainer.use_critic, trainer.timing_raw = False, {}
    return trainer


def main():
    out = {}
    try:
        sys.meta_path.append(
            StubFinder(
                ("vllm", "zmq", "msgspec", "uvicorn", "fastapi", "cachetools", "peft", "accelerate", "tensordict")
            )
        )
        from verl.experimental.fully_async_policy import fully_async_rollouter as fr  # noqa: F401
        from verl.experimental.fully_async_policy import fully_async_trainer as ft
        from verl.experimental.fully_async_policy import message_queue as mq

        import vlgrpo.patches

        case = os.environ["VLGRPO_TEST_CASE"]
        root = os.path.join(os.environ["VLGRPO_TEST_TMP"], "ckpt")
        os.makedirs(root, mode=0o700, exist_ok=True)
        trainer = trainer_object(ft, root)
        if case == "status":
            (row,) = [r for r in vlgrpo.patches.status(import_targets=False) if r["id"] == TARGET_ID]
            out["targets"] = {t["target"]: t["status"] for t in row["targets"]}
            out["reasons"] = {t["target"]: t["reason"] for t in row["targets"]}
            # the installed wrapper runs verl's own method: the original bound before the patch
            cls = ft.FullyAsyncTrainer.__ray_metadata__.modified_class
            originals = {
                name: vlgrpo.patches.original(f"{ft.__name__}:FullyAsyncTrainer.__ray_metadata__.modified_class.{name}")
                for name in ("fit", "_fit_update_weights", "_save_checkpoint", "_fit_update_actor")
            }
            out["originals"] = {n: f"{o.__module__}.{o.__qualname__}" for n, o in originals.items()}
            out["wrapped_is_original"] = {n: getattr(cls, n).__wrapped__ is o for n, o in originals.items()}
        elif case == "beating":
            trainer.required_samples = 8
            trainer.message_queue_client = mq.MessageQueueClient(QueueActor(7, 0.5))
            start = time.monotonic()
            result = asyncio.run(trainer._get_samples_from_queue())
            out.update(result=list(result), seconds=time.monotonic() - start)
        elif case == "weight_sync":

            async def update_weights(global_steps):
                await asyncio.Event().wait()  # a peer that never arrives

            trainer.checkpoint_manager = types.SimpleNamespace(update_weights=update_weights)
            print("STARTED", time.monotonic(), flush=True)
            asyncio.run(trainer._fit_update_weights())
            out["returned"] = True
        elif case == "checkpoint_save":

            def save_checkpoint(local_path, hdfs_path, step, max_ckpt_to_keep=None):
                threading.Event().wait()  # a write to a filesystem that stopped answering

            trainer.actor_rollout_wg = types.SimpleNamespace(save_checkpoint=save_checkpoint)
            print("STARTED", time.monotonic(), flush=True)
            trainer._save_checkpoint()
            out["returned"] = True
    except Exception:
        out["crash"] = traceback.format_exc()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
