"""The patch registry: the records of every runtime patch, in the order they are checked and reported.

It imports the fix modules of :mod:`vlgrpo.patches.fixes`, whose top level is plain data and definitions (no torch,
transformers, verl, :mod:`ast`, :mod:`inspect` or :mod:`logging`). Everything a record names (detector,
replacement, verify) is a ``"module:attribute"`` string that :mod:`vlgrpo.patches.engine` imports only when a
target module has been imported. Interpreter start does not import this module: :func:`vlgrpo.patches.bootstrap.install`
reads :mod:`vlgrpo.patches.index` (the ids and the hooked module names, generated from here by
:func:`index_source`), so start-up costs the same however many fixes there are.

Record fields
-------------
A fix module declares its record as a plain ``RECORD`` dict with these fields; this module validates each into a
frozen :class:`vlgrpo.patches.contract.FixRecord` (targets as :class:`~vlgrpo.patches.contract.Target`) when it is
imported, and the engine, the report and the preflight read only the typed records. A malformed ``RECORD`` (a
missing or unknown field, a field of the wrong form, an id used twice) raises
:class:`~vlgrpo.patches.contract.RecordError` naming the module and the field.

id            stable patch id (used by ``VLGRPO_PATCHES_DISABLED`` and ``python -m vlgrpo patches status``)
title         one line for the README's patch summary: what goes wrong, and the field case code(s)
summary       what goes wrong without the patch, and what the patch does about it
upstream      upstream references (issues/PRs) for the fault and for the fix it mirrors
applies_when  one line: the code condition under which the patch is applied (never a version number)
targets       ``(module, attribute path[, detector])``. The path is resolved at check time, so
              ``"Qwen3VLMoeTextSparseMoeBlock.forward"`` means "the forward of whatever class that module
              attribute names *now*" (verl's NPU layer rebinds the class name; see field case B04). A third
              element overrides the record's detector for that target.
detector      ``"module:function"``; ``function(obj) -> (faulty: bool, reason: str)`` inspects the installed
              code itself (its source, parsed with :mod:`ast`).
replacement   ``"module:function"``; installed in place of a faulty target by :func:`vlgrpo.patches.contract.wrap`
              (a per-target copy with the original's name, qualified name and docstring, carrying
              ``__wrapped__`` = the original and ``__vlgrpo_patch__`` = the id; a fix module sets none of these
              itself). :func:`vlgrpo.patches.unpatch` puts the original back. With ``"wraps": True`` it is
              a factory ``replacement(original) -> function`` (to call the original, or to pick the variant
              matching the installed code); its ``__vlgrpo_code__`` lists the code objects it can return.
verify        ``"module:function"``; ``function() -> None`` runs the fixed code on tiny CPU inputs against an
              independent reference and raises ``AssertionError`` on mismatch.
safety        optional; set on a patch that guards against code execution or exposure (one line: what happens
              without it). A launch with such a patch switched off is refused by the preflight
              (``patches.safety-off``, not waivable); a dry run warns. :func:`safety_ids` lists them.
recheck_after ``(module, function)`` pairs of upstream functions that may rebind the targets (verl's monkey
              patch); they are wrapped so that every record is re-checked right after they return.

Adding a patch: copy a module of :mod:`vlgrpo.patches.fixes` (see its docstring), add it to :data:`MODULES` below and
run ``make docs-patches`` (regenerates :mod:`vlgrpo.patches.index`, the patch table of ``docs/patches.md`` and the
README's patch summary).
"""

from vlgrpo.patches.contract import FixRecord, RecordError, from_dict
from vlgrpo.patches.fixes import (
    checkpoint_engine_rendezvous_timeout,
    checkpoint_manifest,
    fully_async_partial_rollout_budget,
    fully_async_resume_pending_prompts,
    fully_async_resume_step_label,
    fully_async_stall_watchdog,
    npu_qwen3_vl_moe_train_routing,
    ppo_stall_watchdog,
    qwen3_vl_moe_grouped_experts,
    qwen3_vl_moe_router_dtype,
    qwen3_vl_text_rotary_device,
    qwen3_vl_vision_pos_embed,
    reward_tokenizer_remote_code,
    rollout_encoder_cache_reset,
    rollout_server_loopback,
    rollout_vision_placeholder_ban,
    rollout_vision_placeholder_mask,
    rollout_weight_sync_dp_rank,
)

#: The fix modules, in the order their records are checked and reported.
MODULES = (
    qwen3_vl_vision_pos_embed,
    qwen3_vl_text_rotary_device,
    qwen3_vl_moe_router_dtype,
    qwen3_vl_moe_grouped_experts,
    npu_qwen3_vl_moe_train_routing,
    rollout_vision_placeholder_ban,
    rollout_vision_placeholder_mask,
    rollout_encoder_cache_reset,
    rollout_server_loopback,
    reward_tokenizer_remote_code,
    rollout_weight_sync_dp_rank,
    checkpoint_engine_rendezvous_timeout,
    checkpoint_manifest,
    fully_async_resume_step_label,
    fully_async_partial_rollout_budget,
    fully_async_resume_pending_prompts,
    fully_async_stall_watchdog,
    ppo_stall_watchdog,
)

#: Every record, validated into :class:`~vlgrpo.patches.contract.FixRecord` (a malformed ``RECORD`` raises
#: :class:`~vlgrpo.patches.contract.RecordError` naming its module and field when this module is imported).
PATCHES = tuple(from_dict(m.RECORD, m.__name__) for m in MODULES)

IDS = tuple(p.id for p in PATCHES)
for _p in PATCHES:
    if IDS.count(_p.id) > 1:
        raise RecordError(
            f"{_p.module}: RECORD['id'] {_p.id!r} is also the id of "
            f"{', '.join(q.module for q in PATCHES if q.id == _p.id and q is not _p)}; fix: give each "
            "patch its own id"
        )


def safety_ids() -> dict:
    """``{patch id: what happens without it}`` for every record with a ``safety`` field, in registry order."""
    return {p.id: p.safety for p in PATCHES if p.safety}


def target_modules() -> dict:
    """Map each module name that a patch (or a recheck trigger) targets to the ids interested in it."""
    out: dict = {}
    for p in PATCHES:
        for mod in [t.module for t in p.targets] + [m for m, _ in p.recheck_after]:
            out.setdefault(mod, [])
            if p.id not in out[mod]:
                out[mod].append(p.id)
    return out


def get(patch_id: str) -> FixRecord:
    """Return the record of ``patch_id``; ``KeyError`` naming the known ids otherwise."""
    for p in PATCHES:
        if p.id == patch_id:
            return p
    raise KeyError(f"unknown patch id {patch_id!r}; known: {', '.join(IDS)}")


def index_source() -> str:
    """The text of :mod:`vlgrpo.patches.index` for the records above (``python -m vlgrpo patches index --write``)."""
    lines = [
        '"""Start-up index of the patch registry (generated: ``make docs-patches``; do not edit by hand).',
        "",
        "The patch ids and, for each module a patch targets (or re-checks after), the ids interested in it, as",
        ":mod:`vlgrpo.patches.registry` declares them. Plain data: :func:`vlgrpo.patches.bootstrap.install` reads it",
        "at interpreter start without importing the fix modules. tests/python/patches/test_fix_modules.py fails",
        "when it differs from the registry.",
        '"""',
        "",
        "IDS = (",
        *[f'    "{pid}",' for pid in IDS],
        ")",
        "",
        "TARGET_MODULES = {",
    ]
    for mod, ids in target_modules().items():
        lines += [f'    "{mod}": (', *[f'        "{pid}",' for pid in ids], "    ),"]
    lines.append("}")
    return "\n".join(lines) + "\n"
