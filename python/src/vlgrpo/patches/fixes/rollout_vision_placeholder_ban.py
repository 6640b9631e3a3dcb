"""Patch ``rollout.vision_placeholder_ban``: ban the vision placeholder tokens in vLLM rollout sampling (field case
B05).

Nothing in verl v0.8.0's vLLM server (``verl/workers/rollout/vllm_rollout/vllm_async_server.py``,
``vLLMHttpServer.generate``) keeps the policy from sampling ``<|image_pad|>`` (151655) / ``<|video_pad|>``
(151656). When it does, the next consumer breaks hours into a run (``get_rope_index`` StopIteration, a missing
video grid, vLLM's masked-scatter AICPU crash on Ascend; verl issue #5817, fixed for vLLM in verl PR #7038).
The wrapper adds a ``logit_bias`` of :data:`BAN_BIAS` for the model's ``image_token_id`` and ``video_token_id``
(read from the model's ``config.json``) to the sampling-params dict verl passes to ``vllm.SamplingParams``;
other sampling settings and biases the caller set are kept. Text-only models (no such ids) are left alone.
sglang/trtllm rollouts are not covered (as upstream).

Standard library only; imported with the registry (the engine, the preflight, ``patches status``).
"""

import ast
import inspect
import sys

RECORD = {
    "id": "rollout.vision_placeholder_ban",
    "title": "the policy can sample image/video placeholder tokens: banned in every vLLM request (B05)",
    "summary": (
        "verl's vLLM rollout lets the policy sample `<|image_pad|>`/`<|video_pad|>` (151655/151656); the next "
        "consumer then crashes hours into training (get_rope_index StopIteration, vLLM masked-scatter AICPU "
        "crash on Ascend); a logit bias bans the model's image/video placeholder ids in every request."
    ),
    "upstream": "verl-project/verl#5817 (fix for vLLM: verl PR #7038; related PR #6656)",
    "applies_when": (
        "verl's vLLM server module never ties image_token_id/video_token_id to a sampling ban "
        "(verl v0.8.0); vLLM rollouts only"
    ),
    "targets": (("verl.workers.rollout.vllm_rollout.vllm_async_server", "vLLMHttpServer.generate"),),
    "detector": __name__ + ":is_faulty",
    "replacement": __name__ + ":make_generate",
    "wraps": True,
    "verify": __name__ + ":verify",
    "recheck_after": (),
}

#: logit bias that removes a token from sampling (exp(-1e4) == 0 in float32) without -inf arithmetic
BAN_BIAS = -1.0e4
_ID_KEYS = ("image_token_id", "video_token_id")
_BAN_NAMES = ("logit_bias", "bad_words", "allowed_token_ids", "bad_words_ids")


def placeholder_ids(model_config) -> list:
    """Vision placeholder token ids of verl's ``HFModelConfig`` (``.hf_config.image_token_id`` / ``video_token_id``;
    151655 / 151656 for Qwen3-VL). Empty for a model without them."""
    hf = getattr(model_config, "hf_config", None)
    ids = []
    for key in _ID_KEYS:
        value = getattr(hf, key, None)
        if isinstance(value, int) and value >= 0:
            ids.append(value)
    return ids


def with_ban(sampling_params: dict, token_ids) -> dict:
    """A copy of ``sampling_params`` whose ``logit_bias`` also gives each of ``token_ids`` :data:`BAN_BIAS`."""
    out = dict(sampling_params)
    bias = dict(out.get("logit_bias") or {})
    for tok in token_ids:
        bias[int(tok)] = BAN_BIAS
    out["logit_bias"] = bias
    return out


def make_generate(original):
    """Wrap ``vLLMHttpServer.generate(self, prompt_ids, sampling_params, request_id, ...)`` (verl v0.8.0)."""

    async def generate(self, prompt_ids, sampling_params, *args, **kwargs):
        ids = placeholder_ids(getattr(self, "model_config", None))
        if ids and isinstance(sampling_params, dict):
            sampling_params = with_ban(sampling_params, ids)
        return await original(self, prompt_ids, sampling_params, *args, **kwargs)

    return generate


make_generate.__vlgrpo_code__ = make_generate(None).__code__


def is_faulty(func):
    """``(faulty, reason)``: faulty when the module defining ``func`` never ties ``image_token_id``/``video_token_id``
    to a sampling ban (``logit_bias``/``bad_words``/``allowed_token_ids``), i.e. verl without PR #7038's kind of
    fix. Parses the module's source with :mod:`ast` (names and attributes, not comments)."""
    code = getattr(func, "__code__", None)
    if code is None:
        raise TypeError(f"cannot inspect {func!r}: not a Python function")
    params = list(inspect.signature(func).parameters)
    if "sampling_params" not in params:
        return False, f"{func.__qualname__} takes no sampling_params (not verl's vLLM server generate)"
    module = sys.modules.get(func.__module__)
    tree = ast.parse(inspect.getsource(module) if module is not None else open(code.co_filename).read())
    idents = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            idents.add(node.attr)
        elif isinstance(node, ast.Name):
            idents.add(node.id)
        elif isinstance(node, ast.keyword) and node.arg:
            idents.add(node.arg)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            idents.add(node.value)
    if idents & set(_ID_KEYS) and idents & set(_BAN_NAMES):
        return False, f"{func.__module__} already bans the vision placeholder ids in sampling"
    return True, (
        f"{func.__module__} passes sampling params to vLLM without banning image/video placeholder "
        f"tokens (verl issue #5817)"
    )


def verify() -> None:
    """The wrapper hands the original a copy of the sampling params with both Qwen3-VL placeholder ids banned,
    keeps the caller's other settings and biases, leaves the caller's dict untouched, and changes nothing for a
    model without placeholder ids. Raises ``AssertionError``."""
    import asyncio
    from types import SimpleNamespace

    seen = []

    async def original(self, prompt_ids, sampling_params, request_id, **kwargs):
        seen.append(sampling_params)
        return "out"

    generate = make_generate(original)
    server = SimpleNamespace(
        model_config=SimpleNamespace(hf_config=SimpleNamespace(image_token_id=151655, video_token_id=151656))
    )
    params = {"temperature": 1.0, "logit_bias": {7: 2.5}}
    assert asyncio.run(generate(server, [1, 2], params, "r1")) == "out"
    assert seen[-1] == {"temperature": 1.0, "logit_bias": {7: 2.5, 151655: BAN_BIAS, 151656: BAN_BIAS}}, seen[-1]
    assert params == {"temperature": 1.0, "logit_bias": {7: 2.5}}, "caller's dict was modified"
    text_only = SimpleNamespace(model_config=SimpleNamespace(hf_config=SimpleNamespace()))
    asyncio.run(generate(text_only, [1], {"temperature": 0.5}, "r2"))
    assert seen[-1] == {"temperature": 0.5}
