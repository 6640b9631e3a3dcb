"""Field case C04 (a) on verl v0.8.0's real ``FullyAsyncTrainer.load_checkpoint`` and ``fit`` (the class Ray would
pickle, built with ``object.__new__``; worker groups, queue and rollouter are stand-ins). Resumes from
``<tmp>/global_step_5`` with ``trigger_parameter_sync_step`` 16 (the recipe default) and records the
``global_steps`` value the first ``fit_step`` starts with -- what it logs as ``training/global_step``. Run by
test_resume_step_label.py in a fresh interpreter with the sitecustomize shim. Env: ``VLGRPO_TEST_TMP``,
``VLGRPO_TEST_RESUME`` (``auto`` or ``disable``). Prints one JSON line."""

import asyncio
import json
import os
import sys
import traceback
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stub_modules import StubFinder


def main():
    out = {}
    try:
        sys.meta_path.append(
            StubFinder(
                ("vllm", "zmq", "msgspec", "uvicorn", "fastapi", "cachetools", "peft", "accelerate", "tensordict")
            )
        )
        from omegaconf import OmegaConf
        from verl.experimental.fully_async_policy import fully_async_trainer as ft

        import vlgrpo.patches

        root = os.path.join(os.environ["VLGRPO_TEST_TMP"], "ckpt")
        os.makedirs(os.path.join(root, "global_step_5", "actor"), exist_ok=True)
        with open(os.path.join(root, "latest_checkpointed_iteration.txt"), "w") as fh:
            fh.write("5")
        trainer = object.__new__(ft.FullyAsyncTrainer.__ray_metadata__.modified_class)
        trainer.config = OmegaConf.create(
            {
                "trainer": {
                    "resume_mode": os.environ["VLGRPO_TEST_RESUME"],
                    "default_local_dir": root,
                    "default_hdfs_dir": None,
                    "resume_from_path": None,
                    "del_local_ckpt_after_load": False,
                    "test_freq": 5,
                }
            }
        )
        trainer.global_steps, trainer.current_param_version, trainer.local_trigger_step = 0, 0, 1
        trainer.trigger_parameter_sync_step, trainer.use_critic = 16, False
        loaded = []
        trainer.actor_rollout_wg = types.SimpleNamespace(load_checkpoint=lambda path, **kw: loaded.append(path))
        trainer.message_queue_client, trainer.rollouter = object(), object()
        trainer.progress_bar = types.SimpleNamespace(close=lambda: None)
        labels = []

        async def fit_step(batch_dict=None):
            labels.append(trainer.global_steps)  # what verl's fit_step logs as training/global_step
            raise ft.TrainingStopException("stand-in queue: done")

        trainer.fit_step = fit_step
        trainer._fit_save_checkpoint = lambda force=False: None
        version = asyncio.run(trainer.load_checkpoint())
        asyncio.run(trainer.fit())
        rows = {r["id"]: r for r in vlgrpo.patches.status(import_targets=False)}
        out.update(
            version=version,
            first_label=labels[0],
            loaded=loaded,
            status=rows["fully_async.resume_step_label"]["status"],
        )
    except Exception:
        out["crash"] = traceback.format_exc()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
