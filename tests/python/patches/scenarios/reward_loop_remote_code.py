"""Field case B17 on verl's real ``RewardLoopWorker._init_reward_fn`` (``verl/experimental/reward_loop/reward_loop.py``)
and the real transformers ``AutoTokenizer``: the worker loads the tokenizer of a model folder whose
``tokenizer_config.json`` has an ``auto_map`` naming the folder's ``tokenization_planted.py``, which writes a canary
file when it is imported. The worker's config is what verl hands it (``actor_rollout_ref.model.path``, no
``tokenizer_path``, ``reward.reward_model.enable`` false); ``load_reward_manager`` after the tokenizer is not reached
or not needed. Prints one JSON line: the patch status, whether the canary was written, the error the worker raised.
Run by test_reward_tokenizer_remote_code.py with the sitecustomize shim; ``VLGRPO_TEST_TMP`` is a fresh folder;
``VLGRPO_TEST_MODEL``, when set, is a model folder to load instead (no folder is planted then)."""

import json
import os
import sys
import traceback

tmp = os.environ["VLGRPO_TEST_TMP"]
os.environ["HF_HOME"] = os.path.join(tmp, "hf")  # transformers copies remote code to HF_MODULES_CACHE under it
model = os.path.join(tmp, "model")
canary = os.path.join(tmp, "canary")
out = {}


def plant(folder):
    """A tokenizer folder whose auto_map names its own module, which writes the canary when imported."""
    os.makedirs(folder)
    with open(os.path.join(folder, "tokenization_planted.py"), "w") as fh:
        fh.write(
            "from transformers import PreTrainedTokenizerFast\n"
            f"open({canary!r}, 'w').write('ran')\n"
            "class PlantedTokenizer(PreTrainedTokenizerFast):\n    pass\n"
        )
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as fh:
        json.dump(
            {
                "tokenizer_class": "PlantedTokenizer",
                "auto_map": {"AutoTokenizer": [None, "tokenization_planted.PlantedTokenizer"]},
            },
            fh,
        )
    with open(os.path.join(folder, "config.json"), "w") as fh:
        json.dump({"model_type": "qwen2"}, fh)


try:
    if os.environ.get("VLGRPO_TEST_MODEL"):
        model = os.environ["VLGRPO_TEST_MODEL"]
    else:
        plant(model)
    from omegaconf import OmegaConf

    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

    import vlgrpo.patches

    rows = {r["id"]: r for r in vlgrpo.patches.status(import_targets=False)}
    out["status"] = rows["reward.tokenizer_remote_code"]["status"]
    config = OmegaConf.create(
        {
            "actor_rollout_ref": {"model": {"path": model, "tokenizer_path": None, "trust_remote_code": False}},
            "reward": {"reward_model": {"enable": False}},
        }
    )
    worker = object.__new__(RewardLoopWorker)
    worker.config, worker.reward_router_address = config, None
    try:
        worker._init_reward_fn()
        out["error"] = ""
    except Exception as exc:  # noqa: BLE001 - what the worker raises is the result
        out["error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
    out["tokenizer_loaded"] = getattr(worker, "input_tokenizer", None) is not None
    out["canary"] = os.path.exists(canary)
except Exception:  # noqa: BLE001
    out["crash"] = traceback.format_exc()[-2000:]
print(json.dumps(out))
sys.stdout.flush()
