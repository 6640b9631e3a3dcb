"""Field case C04 (b): a save/resume cycle of verl v0.8.0's real fully-async rollouter on the CPU.

Real: ``FullyAsyncRollouter.__init__`` (verl's ``create_rl_dataset`` / ``RLHFDataset`` on a parquet of text prompts,
``create_rl_sampler``, ``StatefulDataLoader``), ``_feed_samples``, ``_processor_worker``,
``_process_single_sample_streaming``, ``reset_staleness``, ``save_checkpoint``, ``load_checkpoint``, ``fit``; verl's
``MessageQueue`` as a real Ray actor with the real ``MessageQueueClient``; verl's fully-async Hydra config. Stand-ins:
the rollout servers / agent loop (``generate_sequences_single`` returns its input after a random delay, so samples
finish out of order) and the trainer (collects ``required_samples`` per step from the queue, every
``trigger_parameter_sync_step`` steps bumps the parameter version and calls the rollouter's ``reset_staleness``,
every ``save_freq`` versions calls its ``save_checkpoint`` and writes the tracker, as ``FullyAsyncTrainer`` does).

The job is stopped right after ``global_step_<STOP>`` is written (run 1), then started again from it (run 2, fresh
objects, a new queue actor), until the rollouter's end-of-data signal. Every prompt the stand-in trainer trained is
recorded by the ``index`` field of its dataset row (``extra_info.index`` = 1000 + row): what a user would count.

Environment: ``VLGRPO_TEST_TMP`` (a folder), ``VLGRPO_TEST_ROWS``, ``VLGRPO_TEST_EPOCHS``, ``VLGRPO_TEST_STOP``
(parameter version whose save ends run 1), ``VLGRPO_TEST_WORKERS`` (``data.dataloader_num_workers``).
Prints one JSON line."""

import asyncio
import json
import os
import random
import sys
import tempfile
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stub_modules import StubFinder

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 4))
TOKENIZER = os.path.join(REPO, "assets", "models", "qwen3-vl-30b-a3b-instruct")
REQUIRED, T, SAVE_FREQ = 2, 2, 5  # ppo_mini_batch_size x require_batches, trigger_parameter_sync_step, save_freq


def _parquet(path, rows):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(
        pa.table(
            {
                "data_source": ["standin"] * rows,
                "prompt": [[{"role": "user", "content": f"problem {i}"}] for i in range(rows)],
                "reward_model": [{"style": "rule", "ground_truth": str(i)} for i in range(rows)],
                "extra_info": [{"index": 1000 + i, "split": "train"} for i in range(rows)],
            }
        ),
        path,
    )


def _config(data, root, epochs, workers):
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf
    from verl.experimental.fully_async_policy import fully_async_main

    conf_dir = os.path.join(os.path.dirname(fully_async_main.__file__), "config")
    overrides = [
        f"data.train_files=['{data}']",
        f"data.val_files=['{data}']",
        "data.train_batch_size=0",
        "data.gen_batch_size=1",
        f"data.dataloader_num_workers={workers}",
        "data.shuffle=True",
        "+data.seed=7",
        "data.filter_overlong_prompts=False",
        f"actor_rollout_ref.model.path={TOKENIZER}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={REQUIRED}",
        "actor_rollout_ref.rollout.n=1",
        "actor_rollout_ref.hybrid_engine=False",
        "async_training.staleness_threshold=0.5",
        f"async_training.trigger_parameter_sync_step={T}",
        "async_training.require_batches=1",
        f"trainer.total_epochs={epochs}",
        "rollout.total_rollout_steps=null",
        "trainer.resume_mode=auto",
        f"trainer.default_local_dir={root}",
        f"trainer.save_freq={SAVE_FREQ}",
        "trainer.logger=[console]",
    ]
    with initialize_config_dir(config_dir=conf_dir, version_base=None):
        cfg = compose("fully_async_ppo_trainer", overrides=overrides)
    OmegaConf.resolve(cfg)
    return cfg


class StandInServers:
    """``llm_server_manager`` stand-in: one replica (``max_concurrent_samples`` = 16, capped by staleness)."""

    def get_replicas(self):
        return ["replica-0"]


class StandInAgentLoop:
    """``async_rollout_manager`` stand-in: returns the prompt batch after a random delay; records every
    non-tensor key it was handed (nothing of ours may reach the agent loop)."""

    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.keys = set()

    async def generate_sequences_single(self, prompts):
        self.keys.update(prompts.non_tensor_batch.keys())
        await asyncio.sleep(self.rng.uniform(0.0, 0.03))
        return prompts


async def _run(cfg, tokenizer, root, stop, trained, seed):
    import ray
    from verl.experimental.fully_async_policy import fully_async_rollouter as fr
    from verl.experimental.fully_async_policy.message_queue import MessageQueue, MessageQueueClient

    ro = fr.FullyAsyncRollouter.__ray_metadata__.modified_class(cfg, tokenizer, None)
    agent = StandInAgentLoop(seed)
    ro.llm_server_manager, ro.async_rollout_manager = StandInServers(), agent
    ro._init_async_objects()
    await ro.set_max_required_samples()
    queue = MessageQueue.remote(cfg, ro.get_max_queue_size())
    client = MessageQueueClient(queue)
    await ro.set_message_queue_client(client)
    tracker = os.path.join(root, "latest_checkpointed_iteration.txt")
    version = int(open(tracker).read()) if os.path.exists(tracker) else 0  # FullyAsyncTrainer.load_checkpoint
    ro.load_checkpoint()
    start = {"global_steps": ro.global_steps, "version": version}
    await ro.reset_staleness()  # the trainer's _fit_update_weights before fit
    fit = asyncio.ensure_future(ro.fit())
    local, ended, epochs, uids = 0, False, [], []
    while not ended:
        batch = []
        while len(batch) < REQUIRED:
            sample, _ = await client.get_sample()
            if sample is None:
                ended = True
                break
            batch.append(ray.cloudpickle.loads(sample))
        if ended:  # verl's trainer drops a short last batch (none here: rows x epochs is a multiple of 2)
            trained["short_last_batch"] = len(batch)
            break
        for rs in batch:
            trained["indices"].append(int(rs.full_batch.non_tensor_batch["index"][0]) - 1000)
            epochs.append(rs.epoch)
            uids.append(str(rs.full_batch.non_tensor_batch["uid"][0]))
        local += 1
        if local == T:
            version, local = version + 1, 0
            await ro.reset_staleness()
            if version % SAVE_FREQ == 0:
                await ro.save_checkpoint(os.path.join(root, f"global_step_{version}"))
                with open(tracker, "w") as fh:
                    fh.write(str(version))
            if stop is not None and version == stop:
                break
    fit.cancel()
    await asyncio.gather(fit, return_exceptions=True)
    ray.kill(queue)
    return {
        "start": start,
        "version": version,
        "epochs": epochs,
        "uids": uids,
        "agent_keys": sorted(agent.keys),
        "end_global_steps": ro.global_steps,
        "total_generated": ro.total_generated_samples,
        "processed": ro.processed_sample_count,
    }


def main():
    out = {}
    try:
        sys.meta_path.append(
            StubFinder(
                ("vllm", "zmq", "msgspec", "uvicorn", "fastapi", "cachetools", "peft", "accelerate", "tensordict")
            )
        )
        import ray
        from verl.utils import hf_tokenizer

        import vlgrpo.patches

        tmp = os.environ["VLGRPO_TEST_TMP"]
        rows, epochs = int(os.environ["VLGRPO_TEST_ROWS"]), int(os.environ["VLGRPO_TEST_EPOCHS"])
        stop, workers = int(os.environ["VLGRPO_TEST_STOP"]), int(os.environ.get("VLGRPO_TEST_WORKERS", "0"))
        data, root = os.path.join(tmp, "train.parquet"), os.path.join(tmp, "ckpt")
        _parquet(data, rows)
        cfg = _config(data, root, epochs, workers)
        tokenizer = hf_tokenizer(TOKENIZER)
        ray_tmp = tempfile.mkdtemp(prefix="vlr", dir="/tmp")  # short: Ray's socket paths have a length limit
        ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False, _temp_dir=ray_tmp, logging_level="ERROR")
        try:
            trained = {"indices": []}
            first = asyncio.run(_run(cfg, tokenizer, root, stop, trained, seed=1))
            trained_before = len(trained["indices"])
            second = asyncio.run(_run(cfg, tokenizer, root, None, trained, seed=2))
        finally:
            ray.shutdown()
        rows_status = {r["id"]: r for r in vlgrpo.patches.status(import_targets=False)}
        out.update(
            rows=rows,
            epochs=epochs,
            trained=trained["indices"],
            trained_before_stop=trained_before,
            short_last_batch=trained.get("short_last_batch"),
            first=first,
            second=second,
            status={k: v["status"] for k, v in rows_status.items()},
        )
    except Exception:
        out["crash"] = traceback.format_exc()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
