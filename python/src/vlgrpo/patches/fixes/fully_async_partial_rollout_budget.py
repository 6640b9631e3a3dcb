"""Patch ``fully_async.partial_rollout_budget``: a resumed partial rollout gets the response budget that is left,
not a fresh one (field case C05, verl PR #7207).

verl v0.8.0's ``FullyAsyncLLMServerClient.generate`` (``verl/experimental/fully_async_policy/fully_async_rollouter.py``)
resends ``prompt + generated`` after an abort for a weight sync, but tracks the budget only when the caller passed
``max_tokens``; the agent loops pass none, so the server caps each attempt by
``min(response_length, prompt_length + response_length - len(prompt_ids))`` -- the unused *prompt* budget. A
400-token prompt aborted after 6,000 tokens then decodes 9,840 in all (1,648 past ``max_response_length`` 8,192,
cut off again by the agent loop). With the patch, when partial rollout is on and the caller set no limit, the
client's own loop gets ``max_tokens = actor_rollout_ref.rollout.response_length``: the first attempt's limit is
what the server computed anyway, each resume gets ``response_length - generated`` and the loop stops at 0. With
``async_training.partial_rollout`` off nothing changes. The caller's dict is never modified.

Standard library at import (the registry imports this module at interpreter start).
"""

import sys

RECORD = {
    "id": "fully_async.partial_rollout_budget",
    "title": "partial-rollout resumes ignore the remaining response budget (C05)",
    "summary": (
        "after an abort for a weight sync, verl's fully-async client resends prompt + generated tokens with no "
        "max_tokens, so the server grants the unused prompt budget again (a 400-token prompt aborted at 6,000 "
        "tokens decodes 9,840, 1,648 past max_response_length, thrown away); the client now passes "
        "max_tokens = response_length - already generated on every resume and stops at 0"
    ),
    "upstream": "verl-project/verl PR #7207 (in verl 0.9.0 and 0.9.1, not in v0.8.0)",
    "applies_when": (
        "the fully-async client's generate resends generated tokens but never takes a budget from the rollout's "
        "response_length (verl v0.8.0); only with async_training.partial_rollout on"
    ),
    "targets": (
        ("verl.experimental.fully_async_policy.fully_async_rollouter", "FullyAsyncLLMServerClient.generate"),
        ("verl.workers.rollout.llm_server", "FullyAsyncLLMServerClient.generate"),  # where verl 0.9 moved it
    ),
    "detector": __name__ + ":is_faulty",
    "replacement": __name__ + ":make_generate",
    "wraps": True,
    "verify": __name__ + ":verify",
    "recheck_after": (),
}


def is_faulty(obj):
    """``(faulty, reason)``: faulty when ``generate`` (under verl's ``rollout_trace_op`` wrapper; a function or an
    ``ast.FunctionDef``) resends its generated ``token_ids`` after the prompt and nothing in it refers to a
    ``response_length``."""
    import ast

    from vlgrpo.patches.source import function_node, unwrap_named

    obj = unwrap_named(obj, "async_wrapper")  # verl's rollout_trace_op
    fn = function_node(obj)
    resends = any(
        isinstance(n, ast.BinOp)
        and isinstance(n.op, ast.Add)
        and isinstance(n.right, ast.Attribute)
        and n.right.attr == "token_ids"
        for n in ast.walk(fn)
    )
    if not resends:
        return False, f"{fn.name} does not resend generated tokens (no partial-rollout resume here)"
    names = {getattr(n, "attr", None) or getattr(n, "id", None) for n in ast.walk(fn)}
    if any(name and "response_length" in name for name in names):
        return False, f"{fn.name} already takes the resume budget from the response length (verl PR #7207)"
    return True, (
        f"{fn.name} resends prompt + generated tokens without a max_tokens budget unless the caller gave "
        "one: each resume gets the unused prompt budget (verl PR #7207)"
    )


def _response_length(config):
    rollout = getattr(getattr(config, "actor_rollout_ref", None), "rollout", None)
    value = getattr(rollout, "response_length", None)
    return value if isinstance(value, int) and value > 0 else None


def _partial_rollout(config):
    return bool(getattr(getattr(config, "async_training", None), "partial_rollout", False))


def make_generate(original):
    """Wrap ``FullyAsyncLLMServerClient.generate(self, request_id, *, prompt_ids, sampling_params, ...)``."""

    async def generate(self, request_id, *args, sampling_params, **kwargs):
        config = getattr(self, "config", None)
        budget = _response_length(config)
        if (
            budget is not None
            and _partial_rollout(config)
            and isinstance(sampling_params, dict)
            and "max_tokens" not in sampling_params
            and "max_new_tokens" not in sampling_params
        ):
            sampling_params = dict(sampling_params, max_tokens=budget)
        return await original(self, request_id, *args, sampling_params=sampling_params, **kwargs)

    return generate


make_generate.__vlgrpo_code__ = make_generate(None).__code__


def verify() -> None:
    """The wrapper hands the original a copy with ``max_tokens = response_length`` when partial rollout is on and
    the caller set no limit; it leaves a caller's own limit, and everything when partial rollout is off. Raises
    ``AssertionError``."""
    import asyncio
    from types import SimpleNamespace

    seen = []

    async def original(self, request_id, *, prompt_ids, sampling_params):
        seen.append(dict(sampling_params))
        return len(prompt_ids)

    gen = make_generate(original)

    def client(partial):
        return SimpleNamespace(
            config=SimpleNamespace(
                actor_rollout_ref=SimpleNamespace(rollout=SimpleNamespace(response_length=8192)),
                async_training=SimpleNamespace(partial_rollout=partial),
            )
        )

    params = {"temperature": 1.0}
    assert asyncio.run(gen(client(True), "r", prompt_ids=[1, 2], sampling_params=params)) == 2
    assert seen[-1] == {"temperature": 1.0, "max_tokens": 8192} and params == {"temperature": 1.0}, seen
    asyncio.run(gen(client(True), "r", prompt_ids=[1], sampling_params={"max_tokens": 5}))
    assert seen[-1] == {"max_tokens": 5}
    asyncio.run(gen(client(False), "r", prompt_ids=[1], sampling_params={"temperature": 0.5}))
    assert seen[-1] == {"temperature": 0.5}
    assert "asyncio" in sys.modules
