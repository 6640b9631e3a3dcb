"""Patch ``rollout.encoder_cache_reset``: vision-encoder outputs computed with the previous weights are dropped when
the rollout resets its prefix cache for a weight update (field case C07).

vLLM 0.13.0's scheduler (``vllm/v1/core/sched/scheduler.py``) shares encoder outputs across requests by the
multimodal identifier (``mm_hash``) through ``EncoderCacheManager`` (``vllm/v1/core/encoder_cache_manager.py``),
and keeps an entry no request references (``freeable``) until its space is needed. verl v0.8.0 resets the prefix
cache around every weight update (``pause_generation(clear_cache=True)`` of the fully-async sync, ``wake_up``,
``clear_kv_cache``; vLLM 0.13.0's ``pause_generation`` adds ``reset_mm_cache``, which clears the multimodal
*processor* caches only). Nothing clears the encoder cache: a partial rollout resumed after the sync re-sends the
same image, ``check_and_update_cache`` hits the old entry and the request decodes with vision features computed by
the old vision tower (verl issue #6523; verl PR #6522 calls ``reset_encoder_cache()`` only for vLLM >= 0.16, which
vLLM PR #33452 added after 0.13.0).

The replacement wraps ``Scheduler.reset_prefix_cache``: when the prefix reset succeeds (no request holds KV blocks
any more), every encoder-cache entry no request references is evicted exactly as ``can_allocate`` evicts one
(removed from ``cached`` and ``freeable``, its slots returned, its hash appended to ``freed``). The next
``SchedulerOutput.free_encoder_mm_hashes`` carries those hashes to the workers, whose model runner pops the tensors
(``gpu_model_runner.py`` ``_update_states``) before running the encoder for any new request. A request sending an
image seen before the reset therefore runs the encoder again. Entries still referenced by a live request are left
(dropping them under that request would break its scheduling) and counted in the log. A scheduler whose
``reset_prefix_cache`` already resets the encoder cache is left alone.

Standard library only; imported with the registry (the engine, the preflight, ``patches status``).
"""

import logging

RECORD = {
    "id": "rollout.encoder_cache_reset",
    "title": "vision-encoder outputs of the old weights are reused after a weight sync: dropped at the reset (C07)",
    "summary": (
        "vLLM 0.13.0 keeps encoder outputs by image hash after the prefix-cache reset verl runs around each weight "
        "update, so a resumed partial rollout decodes with vision features of the previous weights; the reset now "
        "also evicts every unreferenced encoder-cache entry and tells the workers to drop the tensors."
    ),
    "upstream": "verl-project/verl#6523 (fix: verl PR #6522 for vLLM >= 0.16; vLLM PR #33452, after 0.13.0)",
    "applies_when": (
        "vLLM's Scheduler.reset_prefix_cache never touches the encoder cache manager (vLLM 0.13.0, V1 engine)"
    ),
    "targets": (("vllm.v1.core.sched.scheduler", "Scheduler.reset_prefix_cache"),),
    "detector": __name__ + ":is_faulty",
    "replacement": __name__ + ":make_reset_prefix_cache",
    "wraps": True,
    "verify": __name__ + ":verify",
    "recheck_after": (),
}

_log = logging.getLogger("vlgrpo.patches")


def evict_unreferenced(manager) -> tuple:
    """Evict every entry of a vLLM ``EncoderCacheManager`` that no request references, as its ``can_allocate`` evicts
    one: ``(evicted mm_hashes, number of entries still referenced)``. A manager without ``freeable`` (vLLM's
    ``EncoderDecoderCacheManager``, which shares nothing across requests) is left alone: ``((), 0)``."""
    freeable = getattr(manager, "freeable", None)
    cached = getattr(manager, "cached", None)
    if freeable is None or cached is None:
        return (), 0
    evicted = []
    while freeable:
        mm_hash, num_embeds = freeable.popitem(last=False) if hasattr(freeable, "move_to_end") else freeable.popitem()
        cached.pop(mm_hash, None)
        manager.freed.append(mm_hash)
        manager.num_free_slots += num_embeds
        evicted.append(mm_hash)
    return tuple(evicted), sum(1 for refs in cached.values() if refs)


def make_reset_prefix_cache(original):
    """Wrap ``Scheduler.reset_prefix_cache(self, reset_running_requests=False, reset_connector=False) -> bool``
    (vLLM 0.13.0): after a successful reset, :func:`evict_unreferenced` on ``self.encoder_cache_manager``."""

    def reset_prefix_cache(self, *args, **kwargs):
        ok = original(self, *args, **kwargs)
        manager = getattr(self, "encoder_cache_manager", None)
        if ok and manager is not None:
            evicted, referenced = evict_unreferenced(manager)
            if evicted or referenced:
                _log.info(
                    "rollout.encoder_cache_reset: dropped %d encoder output(s) computed before the reset%s",
                    len(evicted),
                    f"; {referenced} still referenced by live requests" if referenced else "",
                )
        return ok

    return reset_prefix_cache


make_reset_prefix_cache.__vlgrpo_code__ = make_reset_prefix_cache(None).__code__


def is_faulty(func):
    """``(faulty, reason)``: faulty when ``func`` (vLLM's ``Scheduler.reset_prefix_cache``) never mentions the
    encoder cache (``encoder_cache_manager``, ``reset_encoder_cache``, ``encoder_cache``) while its module keeps one
    (``encoder_cache_manager``). Parses the sources with :mod:`ast`."""
    import ast
    import inspect
    import sys

    from vlgrpo.patches.source import function_node

    fn = function_node(func)
    own = {n.attr for n in ast.walk(fn) if isinstance(n, ast.Attribute)} | {
        n.id for n in ast.walk(fn) if isinstance(n, ast.Name)
    }
    if any("encoder_cache" in name for name in own):
        return False, f"{fn.name} already resets the encoder cache"
    module = sys.modules.get(getattr(func, "__module__", ""), None) if not isinstance(func, ast.AST) else None
    if module is not None:
        tree = ast.parse(inspect.getsource(module))
        if not any(isinstance(n, ast.Attribute) and n.attr == "encoder_cache_manager" for n in ast.walk(tree)):
            return False, f"{module.__name__} keeps no encoder cache manager"
    return True, (
        f"{fn.name} resets the KV prefix cache but keeps encoder outputs computed with the previous "
        "weights, reused by image hash after a weight update (verl issue #6523)"
    )


def verify() -> None:
    """On a stand-in manager holding vLLM's fields (``cached``, ordered ``freeable``, ``freed``, slot counts): after a
    successful reset the unreferenced entry is evicted (hash in ``freed``, slots returned), the referenced one kept;
    after a failed reset nothing changes. Raises ``AssertionError``."""
    from collections import OrderedDict
    from types import SimpleNamespace

    def manager():
        return SimpleNamespace(
            cache_size=10,
            num_free_slots=3,
            num_freeable_slots=7,
            cached={"old": set(), "live": {"r1"}},
            freeable=OrderedDict(old=4),
            freed=[],
        )

    sched = SimpleNamespace(encoder_cache_manager=manager())
    assert make_reset_prefix_cache(lambda self, *a, **k: True)(sched, True) is True
    m = sched.encoder_cache_manager
    assert m.cached == {"live": {"r1"}} and not m.freeable and m.freed == ["old"], vars(m)
    assert m.num_free_slots == 7 and m.num_freeable_slots == 7, vars(m)
    sched = SimpleNamespace(encoder_cache_manager=manager())
    assert make_reset_prefix_cache(lambda self, *a, **k: False)(sched) is False
    assert sched.encoder_cache_manager.cached == {"old": set(), "live": {"r1"}}
    assert sched.encoder_cache_manager.freed == []
