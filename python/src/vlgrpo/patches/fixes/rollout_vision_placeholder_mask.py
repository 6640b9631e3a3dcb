"""Patch ``rollout.vision_placeholder_mask``: mask an agent-loop sample whose generated response holds a vision
placeholder token (field case B05, second half).

The first half (:mod:`vlgrpo.patches.fixes.rollout_vision_placeholder_ban`) bans ``<|image_pad|>``/``<|video_pad|>``
in vLLM sampling; this half makes a placeholder that still reaches a response (a rollout backend without the ban, sglang/trtllm, a ban
that is switched off) cost one sample instead of the job. Upstream has no such guard: verl v0.8.0's
``AgentLoopWorker._agent_loop_postprocess`` (``verl/experimental/agent_loop/agent_loop.py``; the path of both
recipes: ``main_ppo``'s and the fully-async rollouter's ``AgentLoopManager`` run it per sample in their agent-loop
workers) pads the response ids, concatenates them to the prompt and runs ``processor.get_rope_index`` over the
result. On the pinned stack (transformers 4.57.6, whose ``Qwen3VLModel.get_rope_index`` verl binds to the
processor) that breaks as follows (tests/python/patches/test_rollout_mask.py runs each case on the real code):

- ``<|vision_start|><|video_pad|>`` in a response: ``get_rope_index`` indexes ``video_grid_thw=None``
  (``TypeError: 'NoneType' object is not subscriptable``) in the rollout worker;
- ``<|vision_start|><|image_pad|>``: the second image span indexes past ``image_grid_thw=[[1,16,16]]``
  (``IndexError``; transformers 5.x raises ``StopIteration`` from its grid iterator at the same point);
- a lone ``<|image_pad|>``: position ids are computed, then verl's actor forward
  (``verl/models/transformers/qwen3_vl.py`` ``_get_input_embeds``) raises ``ValueError: Image features and image
  tokens do not match: tokens: 65, features 64``;
- a lone ``<|video_pad|>``: nothing raises on this path; the sample trains on a video placeholder without video;
- ``<|vision_start|>`` as the response's last token (e.g. cut there by ``response_length``): ``get_rope_index`` reads
  the token after every ``<|vision_start|>`` and indexes one past the end of the sequence (``IndexError``).

The wrapper installed over ``_agent_loop_postprocess`` looks at the ids the policy generated (positions where the
agent loop's ``response_mask`` is 1; tool-response tokens, mask 0, may legitimately hold the placeholders of a
tool-returned image and are left alone). When they hold a placeholder id (the model config's ``image_token_id`` /
``video_token_id``, read as :func:`~vlgrpo.patches.fixes.rollout_vision_placeholder_ban.placeholder_ids` does, else
the processor's), or when the response's last token is a generated ``vision_start_token_id`` (a ``<|vision_start|>`` elsewhere is harmless and
left alone), it hands verl a copy of the output in which those ids are replaced by the tokenizer's ``pad_token_id``
and the whole ``response_mask`` is 0, and logs one WARNING naming the sample, the ids and their counts. Why the pad id: it is the
id verl itself fills every response's padding with (``tokenizer.pad`` in ``_pad_token_ids``), so the actor already
sees it after every response; it is a special token that verl's reward decoding skips and that is neither a vision
token (no grid is looked up) nor an end-of-turn marker (``<|im_end|>``, the eos id, would split the response for
reward parsers). Zeroing ``response_mask`` removes the sample from the policy loss (verl's ``agg_loss`` weights
every token by it; the fully-async path copies it to ``loss_mask``). Nothing else changes: prompt, attention mask,
length, log-probs, reward and every other sample are as verl computes them. Mirrors no upstream fix (verl PR #7038
only bans the ids in vLLM sampling).

Standard library only; imported with the registry (the engine, the preflight, ``patches status``).
"""

import ast
import inspect
import sys

from vlgrpo.patches import state
from vlgrpo.patches.source import find_function, function_node, mentions
from vlgrpo.patches.fixes.rollout_vision_placeholder_ban import placeholder_ids

PATCH_ID = "rollout.vision_placeholder_mask"

RECORD = {
    "id": PATCH_ID,
    "title": "a generated placeholder token crashes the batch: that sample is masked instead (B05)",
    "summary": (
        "a `<|image_pad|>`/`<|video_pad|>` the policy still generated (no ban: sglang/trtllm, ban switched off) "
        "crashes verl's agent-loop postprocess or the actor forward (get_rope_index on a missing video grid / an "
        "extra image span, 'Image features and image tokens do not match'); the sample's generated placeholder "
        "ids are replaced by the pad id and its response_mask zeroed (masked, one warning), not a job crash."
    ),
    "upstream": "verl-project/verl#5817 (no upstream guard; the vLLM-only ban of verl PR #7038 is the other half)",
    "applies_when": (
        "verl's `AgentLoopWorker._agent_loop_postprocess` (and the methods it calls) never checks the response "
        "ids against image_token_id/video_token_id (verl v0.8.0; both recipes' agent-loop workers)"
    ),
    "targets": (("verl.experimental.agent_loop.agent_loop", "AgentLoopWorker._agent_loop_postprocess"),),
    "detector": __name__ + ":is_faulty",
    "replacement": __name__ + ":make_agent_loop_postprocess",
    "wraps": True,
    "verify": __name__ + ":verify",
    "recheck_after": (),
}
_PLACEHOLDER_NAMES = ("image_token_id", "video_token_id", "image_token", "video_token")
_SAMPLE_KEYS = ("uid", "index", "session_id", "request_id")


def vision_ids(worker) -> list:
    """The vision placeholder ids of an ``AgentLoopWorker``: ``worker.model_config.hf_config``'s
    ``image_token_id``/``video_token_id`` (151655/151656 for Qwen3-VL), else the processor's attributes of the same
    names. Empty for a text-only model."""
    ids = placeholder_ids(getattr(worker, "model_config", None))
    if not ids:
        processor = getattr(worker, "processor", None)
        for key in ("image_token_id", "video_token_id"):
            value = getattr(processor, key, None)
            if isinstance(value, int) and value >= 0:
                ids.append(value)
    return ids


def vision_start_id(worker):
    """The ``<|vision_start|>`` id of an ``AgentLoopWorker`` (``model_config.hf_config.vision_start_token_id``, the
    attribute transformers' Qwen2/2.5/3-VL ``get_rope_index`` reads; 151652 for Qwen3-VL), else the processor's;
    ``None`` when neither has one."""
    hf = getattr(getattr(worker, "model_config", None), "hf_config", None)
    for owner in (hf, getattr(worker, "processor", None)):
        value = getattr(owner, "vision_start_token_id", None)
        if isinstance(value, int) and value >= 0:
            return value
    return None


def _hits(response_ids, response_mask, ids, trailing):
    """Positions of ``response_ids`` to replace: generated (mask 1, or past the mask's end) and one of ``ids``, or
    the last position holding one of ``trailing``."""
    wanted = {int(t) for t in ids}
    at_end = {int(t) for t in trailing}
    mask = [] if response_mask is None else [int(m) for m in response_mask]
    last = len(response_ids) - 1
    hits = []
    for pos, tok in enumerate(response_ids):
        tok = int(tok)
        if (tok in wanted or (pos == last and tok in at_end)) and (pos >= len(mask) or mask[pos]):
            hits.append(pos)
    return hits


def generated_placeholders(response_ids, response_mask, ids, trailing=()) -> dict:
    """``{token id: count}`` of ``ids`` among the policy-generated positions of ``response_ids`` (plus a generated
    id of ``trailing`` in the last position).

    Args:
        response_ids: list of int (the agent loop's unpadded response, length R).
        response_mask: list of int, length R (1 = generated by the policy, 0 = tool/observation token); a
            position past its end counts as generated; ``None``: all generated.
        ids: the placeholder ids to look for (anywhere).
        trailing: ids that count only as the response's last token (``<|vision_start|>``: ``get_rope_index`` reads
            the token after it).
    Returns an empty dict when none is there. ``TypeError``/``ValueError`` when an id is not an integer.
    """
    found: dict = {}
    for pos in _hits(response_ids, response_mask, ids, trailing):
        tok = int(response_ids[pos])
        found[tok] = found.get(tok, 0) + 1
    return found


def replacement_id(tokenizer) -> int:
    """The id that stands in for a placeholder: ``tokenizer.pad_token_id`` (Qwen3-VL: 151643 ``<|endoftext|>``),
    else ``eos_token_id`` (what verl's ``set_pad_token_id`` makes the pad id), else 0."""
    for key in ("pad_token_id", "eos_token_id"):
        value = getattr(tokenizer, key, None)
        if isinstance(value, int) and value >= 0:
            return value
    return 0


def neutralized(output, ids, pad_id, trailing=()):
    """A copy of the agent-loop ``output`` whose generated placeholder ids (and a generated ``trailing`` id in the
    last position, see :func:`generated_placeholders`) are ``pad_id`` and whose ``response_mask`` is all 0, as long
    as the mask was (at least as long as the response: verl pads a shorter mask with the tokenizer's pad id, which
    would weight the tail positions by it); the response ids come back as a list of int. ``output`` itself is not
    modified; pydantic models (verl's ``AgentLoopOutput``) are copied with ``model_copy``."""
    hits = set(_hits(output.response_ids, output.response_mask, ids, trailing))
    mask = [] if output.response_mask is None else list(output.response_mask)
    new_ids = [pad_id if i in hits else int(t) for i, t in enumerate(output.response_ids)]
    update = {"response_ids": new_ids, "response_mask": [0] * max(len(mask), len(new_ids))}
    if hasattr(output, "model_copy"):
        return output.model_copy(update=update)
    import copy

    new = copy.copy(output)
    for key, value in update.items():
        setattr(new, key, value)
    return new


def sample_name(kwargs) -> str:
    """``uid=…, index=…`` from the sample's batch row (the agent loop's kwargs) or its ``extra_info``; for the
    warning."""
    parts = []
    for key in _SAMPLE_KEYS:
        if key in kwargs:
            value = kwargs[key]
            parts.append(f"{key}={value.item() if hasattr(value, 'item') else value}")
    extra = kwargs.get("extra_info")
    if "index" not in kwargs and isinstance(extra, dict) and "index" in extra:
        parts.append(f"extra_info.index={extra['index']}")
    return ", ".join(parts) if parts else "(its batch row has no uid/index)"


def warning_text(name, found, tokenizer, pad_id) -> str:
    """The one WARNING logged per masked sample."""

    def token(tok):
        try:
            return f"{tok} {tokenizer.convert_ids_to_tokens(tok)}"
        except Exception:  # noqa: BLE001 - the text is only a label
            return str(tok)

    listed = ", ".join(f"{token(tok)} x{count}" for tok, count in sorted(found.items()))
    return (
        f"vlgrpo.patches: {PATCH_ID}: sample {name}: the policy generated vision token(s) {listed} "
        f"({sum(found.values())} in all) in its response; replaced them by pad id {pad_id} and set the sample's "
        f"response_mask to 0 (sample masked: no policy loss from it) so position ids and the actor forward do "
        f"not crash (verl issue #5817)"
    )


def _log_warning(message: str) -> None:
    from vlgrpo.patches import log

    log.logger().warning(message)


def _prepare(worker, output, kwargs):
    """``output`` unchanged, or its neutralized copy (after logging the warning). An error in this check is logged
    once and the output goes to verl unchanged (the patch must not add a crash), unless ``VLGRPO_PATCHES_STRICT=1``."""
    try:
        return _neutralize_if_needed(worker, output, kwargs)
    except Exception as exc:
        state.log_once(
            ("run-error", PATCH_ID, type(exc).__name__),
            40,
            f"{PATCH_ID}: checking a response failed ({type(exc).__name__}: {exc}); the sample goes to verl unchanged",
        )
        if state.strict():
            raise
        return output


def _neutralize_if_needed(worker, output, kwargs):
    ids = vision_ids(worker)
    response_ids = getattr(output, "response_ids", None)
    if not ids or response_ids is None:
        return output
    start = vision_start_id(worker)
    trailing = () if start is None else (start,)
    found = generated_placeholders(response_ids, getattr(output, "response_mask", None), ids, trailing)
    if not found:
        return output
    tokenizer = getattr(worker, "tokenizer", None)
    pad_id = replacement_id(tokenizer)
    new = neutralized(output, ids, pad_id, trailing)
    _log_warning(warning_text(sample_name(kwargs), found, tokenizer, pad_id))
    return new


def _async_postprocess(original):
    async def _agent_loop_postprocess(self, output, *args, **kwargs):
        return await original(self, _prepare(self, output, kwargs), *args, **kwargs)

    return _agent_loop_postprocess


def _sync_postprocess(original):
    def _agent_loop_postprocess(self, output, *args, **kwargs):
        return original(self, _prepare(self, output, kwargs), *args, **kwargs)

    return _agent_loop_postprocess


def make_agent_loop_postprocess(original):
    """Wrap ``AgentLoopWorker._agent_loop_postprocess(self, output, validate, **kwargs)`` (verl v0.8.0; v0.7.1 has
    ``(self, output, **kwargs)``): the original gets the sample's output, neutralized when the policy generated a
    vision placeholder (see the module docstring). Returns a coroutine function when the original is one."""
    wrap = _async_postprocess if original is None or inspect.iscoroutinefunction(original) else _sync_postprocess
    return wrap(original)


make_agent_loop_postprocess.__vlgrpo_code__ = (_async_postprocess(None).__code__, _sync_postprocess(None).__code__)


# --------------------------------------------------------------------------------------------------- detection
def _mentions(node, names) -> bool:
    """True when ``node`` uses one of ``names`` as a variable or an attribute."""
    return mentions(node, attrs=names, names=names)


def _mentions_response(node) -> bool:
    return any(
        (isinstance(n, ast.Name) and "response" in n.id) or (isinstance(n, ast.Attribute) and "response" in n.attr)
        for n in ast.walk(node)
    )


def _guard(fn):
    """The first comparison or call in ``fn`` that relates response ids to a vision placeholder id (or a name
    assigned from one, e.g. ``get_processor_token_id(processor, "image")``), else ``None``."""
    placeholder = set(_PLACEHOLDER_NAMES)
    nodes = sorted((n for n in ast.walk(fn) if hasattr(n, "lineno")), key=lambda n: (n.lineno, n.col_offset))
    for node in nodes:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            getter = "get_processor_token_id"
            calls_getter = any(
                isinstance(c, ast.Call) and getter in (getattr(c.func, "id", None), getattr(c.func, "attr", None))
                for c in ast.walk(node.value)
            )
            if calls_getter or _mentions(node.value, placeholder):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    placeholder.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    for node in nodes:
        if isinstance(node, (ast.Compare, ast.Call)) and _mentions(node, placeholder) and _mentions_response(node):
            return node
    return None


def _class_methods(tree, qualname) -> dict:
    """``{name: FunctionDef}`` of the class that ``qualname`` (``"Class.method"``) names in the parsed module
    ``tree``; empty for a plain function or a class not found."""
    parts = qualname.split(".")
    body = tree.body
    for part in parts[:-1]:
        match = [n for n in body if isinstance(n, ast.ClassDef) and n.name == part]
        if not match:
            return {}
        body = match[-1].body
    return {n.name: n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _check(fn, methods):
    params = [a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs]
    if "output" not in params:
        return False, f"{fn.name} takes no `output` (not verl's agent-loop postprocess)"
    queue, seen = [fn], set()
    while queue:
        node = queue.pop(0)
        if node.name in seen:
            continue
        seen.add(node.name)
        hit = _guard(node)
        if hit is not None:
            return False, (
                f"line {hit.lineno} of {node.name}: response ids are checked against the vision "
                f"placeholder ids (`{ast.unparse(hit)[:80]}`)"
            )
        for call in ast.walk(node):
            if (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and isinstance(call.func.value, ast.Name)
                and call.func.value.id == "self"
                and call.func.attr in methods
            ):
                queue.append(methods[call.func.attr])
    checked = ", ".join(sorted(seen))
    return True, (
        f"{fn.name} turns the response ids into the batch and computes position ids over them without "
        f"checking them for image/video placeholder ids (checked: {checked}; verl issue #5817)"
    )


def is_faulty(obj):
    """``(faulty, reason)``: faulty when verl's agent-loop postprocess (``obj``: the function, or its parsed
    ``ast.FunctionDef``) never relates the response ids to the vision placeholder ids, neither in its own body nor
    in the methods of its class that it calls (``self.<name>(...)``, followed transitively, read from the source of
    the function's module; with a bare ``FunctionDef`` only its body). A comparison of the *prompt+response*
    ``input_ids`` with the ids (verl 0.8.0's ``_compute_position_ids`` builds ``mm_token_type_ids`` so) is not a
    guard. Raises ``TypeError``/``OSError`` when no source is available."""
    fn = function_node(obj)
    methods = {}
    module = sys.modules.get(getattr(obj, "__module__", None) or "")
    if not isinstance(obj, (ast.FunctionDef, ast.AsyncFunctionDef)) and module is not None:
        try:
            methods = _class_methods(ast.parse(inspect.getsource(module)), obj.__qualname__)
        except (OSError, TypeError):
            methods = {}
    return _check(fn, methods)


def is_faulty_in_source(source: str, qualname: str = "AgentLoopWorker._agent_loop_postprocess"):
    """:func:`is_faulty` on a module's source text (e.g. ``verl/experimental/agent_loop/agent_loop.py`` read out
    of another release's wheel), callees included. ``KeyError`` when ``qualname`` is not defined there."""
    return _check(find_function(source, qualname), _class_methods(ast.parse(source), qualname))


def _drive(coro):
    """Run a coroutine that never suspends (the self-test's) without an event loop, so :func:`verify` also works
    where one is already running (a notebook, an async Ray actor)."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise AssertionError("the wrapped postprocess suspended on a stand-in that never awaits")


def verify() -> None:
    """On a tiny stand-in output: a generated 151656 and 151655 become the pad id and the mask becomes all 0 (same
    length, the caller's object untouched), so does a response-final 151652 ``<|vision_start|>``; a placeholder in a
    tool-response position (mask 0), a ``<|vision_start|>`` inside the response and a clean response reach the
    original as the very same object, and a text-only model is left alone. Raises ``AssertionError``.
    (The real verl path is exercised by tests/python/patches/test_rollout_mask.py.)"""
    import logging
    from types import SimpleNamespace

    seen = []

    async def original(self, output, validate, **kwargs):
        seen.append(output)
        return "out"

    wrapped = make_agent_loop_postprocess(original)
    worker = SimpleNamespace(
        model_config=SimpleNamespace(
            hf_config=SimpleNamespace(image_token_id=151655, video_token_id=151656, vision_start_token_id=151652)
        ),
        tokenizer=SimpleNamespace(pad_token_id=151643, eos_token_id=151645),
        processor=None,
    )
    bad = SimpleNamespace(response_ids=[10, 151656, 11, 151655, 151656, 151645], response_mask=[1] * 6)
    cut = SimpleNamespace(response_ids=[10, 151652, 11, 151652], response_mask=[1] * 4)
    log = logging.getLogger("vlgrpo.patches")
    was_disabled, log.disabled = log.disabled, True  # the self-test must not print the warning
    try:
        assert _drive(wrapped(worker, bad, False, uid="u1")) == "out"
        assert seen[-1].response_ids == [10, 151643, 11, 151643, 151643, 151645], seen[-1].response_ids
        assert seen[-1].response_mask == [0] * 6
        _drive(wrapped(worker, cut, False))
        assert seen[-1].response_ids == [10, 151652, 11, 151643] and seen[-1].response_mask == [0] * 4, seen[-1]
    finally:
        log.disabled = was_disabled
    assert bad.response_ids[1] == 151656 and bad.response_mask == [1] * 6, "caller's output was modified"
    tool = SimpleNamespace(response_ids=[10, 151655, 11], response_mask=[1, 0, 1])
    clean = SimpleNamespace(response_ids=[10, 11, 151645], response_mask=[1, 1, 1])
    inner = SimpleNamespace(response_ids=[10, 151652, 11], response_mask=[1, 1, 1])
    for out in (tool, clean, inner):
        _drive(wrapped(worker, out, False))
        assert seen[-1] is out
    text_only = SimpleNamespace(
        model_config=SimpleNamespace(hf_config=SimpleNamespace()), processor=None, tokenizer=worker.tokenizer
    )
    _drive(wrapped(text_only, bad, False))
    assert seen[-1] is bad
    assert generated_placeholders([1, 151656, 151656, 151655], [1, 1, 1, 1], [151655, 151656]) == {151656: 2, 151655: 1}
