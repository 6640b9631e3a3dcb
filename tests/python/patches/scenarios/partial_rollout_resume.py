"""Field case C05 on verl v0.8.0's real code: ``FullyAsyncLLMServerClient.generate`` (the fully-async client with
partial-rollout resume) talking to verl's real ``vLLMHttpServer.generate`` (the server-side ``max_tokens`` rule),
whose vLLM engine is a stand-in: the first attempt is aborted (a weight sync) after ``ABORT_AT`` tokens, later
attempts decode exactly the ``max_tokens`` the server granted. The Ray handles are stand-ins that copy the arguments
(Ray serialises them). Run by test_partial_rollout_budget.py in a fresh interpreter with the sitecustomize shim.

Environment: ``VLGRPO_TEST_PARTIAL`` (``1``/``0``: ``async_training.partial_rollout``), ``VLGRPO_TEST_ABORT_AT``.
Recipe values: max_prompt_length 2048, max_response_length 8192, a 400-token prompt. Prints one JSON line:
``{"calls": [[prompt_len, max_tokens], ...], "generated": n, "stop_reason": ..., "status": ...}``.
"""

import asyncio
import copy
import json
import os
import sys
import traceback
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stub_modules import StubFinder, vllm_distribution

PROMPT, RESPONSE, PROMPT_LEN = 2048, 8192, 400
ABORT_AT = int(os.environ.get("VLGRPO_TEST_ABORT_AT", "6000"))
calls = []


class SamplingParams:
    def __init__(self, max_tokens=None, logprobs=None, prompt_logprobs=None, **kwargs):
        self.max_tokens, self.logprobs, self.prompt_logprobs, self.kwargs = (
            max_tokens,
            logprobs,
            prompt_logprobs,
            kwargs,
        )


def _vllm(mod):
    if mod.__name__ == "vllm":
        mod.__version__ = "0.13.0"
        mod.SamplingParams = SamplingParams
    if mod.__name__ == "vllm.inputs":
        mod.TokensPrompt = dict  # vLLM's TokensPrompt is a TypedDict


class Engine:
    async def _gen(self, prompt, sampling_params, request_id, **kwargs):
        n_prompt = len(prompt["prompt_token_ids"])
        calls.append([n_prompt, sampling_params.max_tokens])
        first = len(calls) == 1
        n = min(ABORT_AT, sampling_params.max_tokens) if first else sampling_params.max_tokens
        reason = "abort" if first and ABORT_AT < sampling_params.max_tokens else "length"
        out = types.SimpleNamespace(token_ids=[7] * n, logprobs=None, finish_reason=reason, routed_experts=None)
        yield types.SimpleNamespace(outputs=[out], prompt_logprobs=None, metrics=None)

    def generate(self, **kwargs):
        return self._gen(**kwargs)


class Remote:
    def __init__(self, fn):
        self.fn = fn

    def remote(self, *args, **kwargs):
        return self.fn(*copy.deepcopy(args), **copy.deepcopy(kwargs))


def main():
    out = {}
    try:
        vllm_distribution(os.environ["VLGRPO_TEST_TMP"])
        sys.meta_path.append(
            StubFinder(
                ("vllm", "zmq", "msgspec", "uvicorn", "fastapi", "cachetools", "peft", "accelerate", "tensordict"),
                _vllm,
            )
        )
        from omegaconf import OmegaConf
        from verl.experimental.fully_async_policy.fully_async_rollouter import FullyAsyncLLMServerClient
        from verl.workers.rollout.vllm_rollout.vllm_async_server import vLLMHttpServer

        import vlgrpo.patches

        server = object.__new__(vLLMHttpServer)
        server.config = OmegaConf.create(
            {
                "max_model_len": PROMPT + RESPONSE,
                "response_length": RESPONSE,
                "prompt_length": PROMPT,
                "enable_rollout_routing_replay": False,
                "mtp": None,
            }
        )
        server.model_config = types.SimpleNamespace(
            processor=None, lora_rank=0, lora={}, hf_config=types.SimpleNamespace()
        )
        server.engine, server.global_steps = Engine(), 3

        async def srv_generate(**kwargs):
            return await vLLMHttpServer.generate(server, **kwargs)

        async def acquire(request_id):
            return "s0", types.SimpleNamespace(generate=Remote(srv_generate))

        balancer = types.SimpleNamespace(acquire_server=Remote(acquire), release_server=Remote(lambda **k: None))
        config = OmegaConf.create(
            {
                "async_training": {"partial_rollout": os.environ["VLGRPO_TEST_PARTIAL"] == "1"},
                "actor_rollout_ref": {"rollout": {"response_length": RESPONSE, "prompt_length": PROMPT}},
            }
        )
        client = FullyAsyncLLMServerClient(config, load_balancer_handle=balancer)
        caller_params = {"temperature": 1.0, "top_p": 1.0, "logprobs": False}
        res = asyncio.run(client.generate("req", prompt_ids=list(range(PROMPT_LEN)), sampling_params=caller_params))
        rows = {r["id"]: r for r in vlgrpo.patches.status(import_targets=False)}
        out.update(
            calls=calls,
            generated=len(res.token_ids),
            stop_reason=res.stop_reason,
            caller_params=caller_params,
            status=rows["fully_async.partial_rollout_budget"]["status"],
        )
    except Exception:
        out["crash"] = traceback.format_exc()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
