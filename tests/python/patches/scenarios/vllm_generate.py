"""verl v0.8.0's real vLLM server ``generate`` up to ``vllm.SamplingParams``, with vllm replaced by an automatic
stand-in (every ``vllm.*`` module and attribute exists; ``SamplingParams`` records its arguments, then stops the
request). Run by test_rollout_ban.py in a fresh interpreter; prints one JSON line. VLGRPO_PATCHES decides
whether the ban is active. argv[1]: a temp dir for the stand-in's ``vllm-0.13.0.dist-info``."""

import asyncio
import json
import os
import sys
import traceback
import types
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # run through runpy: the folder is not on sys.path
from stub_modules import StubFinder

REPO = Path(__file__).resolve().parents[4]
out = {}


STUBBED = (
    "vllm",
    "zmq",
    "msgspec",
    "uvicorn",
    "fastapi",
)  # not in the CPU test environment (they come with vLLM in the images)


class Stop(Exception):
    pass


class RecordingSamplingParams:
    calls = []

    def __init__(self, **kwargs):
        RecordingSamplingParams.calls.append(kwargs)
        raise Stop


def _vllm_attributes(mod):
    if mod.__name__ == "vllm":
        mod.__version__ = "0.13.0"
        mod.SamplingParams = RecordingSamplingParams


try:
    meta = Path(sys.argv[1]) / "vllm-0.13.0.dist-info"
    meta.mkdir(parents=True, exist_ok=True)
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.13.0\n")
    sys.path.append(str(meta.parent))
    sys.meta_path.append(StubFinder(STUBBED, _vllm_attributes))

    from transformers import AutoConfig
    from verl.workers.rollout.vllm_rollout import vllm_async_server as srv

    import vlgrpo.patches

    rows = {r["id"]: r for r in vlgrpo.patches.status(import_targets=False)}
    out["status"] = [rows["rollout.vision_placeholder_ban"]["status"], rows["rollout.vision_placeholder_ban"]["reason"]]
    server = object.__new__(srv.vLLMHttpServer)
    hf = AutoConfig.from_pretrained(str(REPO / "assets/models/qwen3-vl-30b-a3b-instruct"))
    server.model_config = types.SimpleNamespace(hf_config=hf, processor=None)
    server.config = types.SimpleNamespace(
        max_model_len=4096, response_length=1024, prompt_length=2048, get=lambda key, default=None: default
    )
    params = {"temperature": 1.0, "top_p": 1.0, "logprobs": True, "logit_bias": {42: 1.5}}
    try:
        asyncio.run(server.generate([1, 2, 3], params, "req-1"))
    except Stop:
        pass
    out["sampling_params"] = {
        k: ({str(t): b for t, b in v.items()} if isinstance(v, dict) else v)
        for k, v in RecordingSamplingParams.calls[-1].items()
    }
    out["caller_params"] = {
        k: ({str(t): b for t, b in v.items()} if isinstance(v, dict) else v) for k, v in params.items()
    }
except Exception:
    out["crash"] = traceback.format_exc()
print(json.dumps(out))
