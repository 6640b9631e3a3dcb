"""Checks that need the vlgrpo patch registry: does the installed verl have a fault a vlgrpo patch covers, and is
that patch switched on in this environment (``VLGRPO_PATCHES`` / ``VLGRPO_PATCHES_DISABLED``, read as
:func:`vlgrpo.patches.state.read_switches` reads them)?

- B05 (verl issue #5817): vision placeholder tokens banned in vLLM sampling (verl PR #7038, first in v0.9.0;
  patch ``rollout.vision_placeholder_ban``) and masked in the agent-loop postprocess (patch
  ``rollout.vision_placeholder_mask``).
- verl issue #6615: rollout DP > 1 on Ascend shares a weight-sync socket (patch ``rollout.weight_sync_dp_rank``).

The installed verl is read from source (``launch.verl_package_dir``); nothing here imports verl.
"""

from __future__ import annotations

import os
from typing import Any

from .launch import verl_package_dir
from .report import ERROR, WARNING, Finding, Report, Where
from .schema import verl_version

_BAN_PATCH = "rollout.vision_placeholder_ban"
_MASK_PATCH = "rollout.vision_placeholder_mask"


def _patch_switched_off(patch_id: str) -> bool:
    """True when the patch switches of vlgrpo.patches.state (``VLGRPO_PATCHES=off``,
    ``VLGRPO_PATCHES_DISABLED=<id>,<id>``), read as it reads them, leave ``patch_id`` out in this environment."""
    from vlgrpo.patches.state import read_switches

    _, all_off, disabled = read_switches()
    return all_off or patch_id in disabled


def check_safety_patches(report: Report, launch: bool = True) -> dict[str, Any]:
    """Safety patches stay on for a launch: every patch whose registry record has a ``safety`` field
    (:func:`vlgrpo.patches.registry.safety_ids`: code execution, exposure) must stay on for a launch.
    Switched off by ``VLGRPO_PATCHES=off`` or ``VLGRPO_PATCHES_DISABLED=<id>`` (read as
    :func:`vlgrpo.patches.state.read_switches` reads them; other values keep them on): ``patches.safety-off``, an
    error for a launch (declared ``runs_code``: VLGRPO_PREFLIGHT=warn cannot waive it) and a warning in a dry run
    (``launch`` False). Returns ``{"off": [ids]}``."""
    try:
        from vlgrpo.patches import registry
    except Exception:  # no patch package: nothing to switch off
        return {"off": []}
    from vlgrpo.patches.state import read_switches

    switch, all_off, disabled = read_switches()
    off = [(pid, why) for pid, why in registry.safety_ids().items() if all_off or pid in disabled]
    for pid, why in off:
        how = "VLGRPO_PATCHES=off" if all_off else f"VLGRPO_PATCHES_DISABLED names {pid}"
        fix = "unset VLGRPO_PATCHES" if all_off else f"remove {pid} from VLGRPO_PATCHES_DISABLED"
        report.add(
            Finding(
                "patches.safety-off",
                ERROR if launch else WARNING,
                f"the safety patch {pid} is switched off ({how})",
                Where(key="VLGRPO_PATCHES"),
                why + (" (a dry run: refused when launched)" if not launch else ""),
                fix + "; safety patches stay on for a launch (docs/patches.md)",
            )
        )
    return {"off": [pid for pid, _ in off]}


def safety_patch_off(patch_id: str) -> bool:
    """True when ``patch_id`` is a registered patch switched off in this environment (the switches as
    :func:`vlgrpo.patches.state.read_switches` reads them)."""
    return _registered(patch_id) and _patch_switched_off(patch_id)


def _registered(patch_id: str) -> bool:
    try:
        from vlgrpo.patches import registry
    except Exception:  # the patch package is optional here
        return False
    return patch_id in registry.IDS


def check_vision_token_mask(report: Report) -> dict[str, Any]:
    """B05, second half: does the installed verl's agent-loop postprocess guard against a response that still holds
    a vision placeholder (``AgentLoopWorker._agent_loop_postprocess`` in ``verl/experimental/agent_loop/
    agent_loop.py``, read by
    :func:`vlgrpo.patches.fixes.rollout_vision_placeholder_mask.is_faulty_in_source`)? If not and the patch
    ``rollout.vision_placeholder_mask`` is switched off, a warning ``rules.vision-token-mask`` says so. Any
    rollout backend (the ban covers vLLM only).

    Returns ``{"verl_masks_vision_placeholders": bool | None, "mask_patch_active": bool}`` (None: the file or
    method was not found, nothing reported)."""
    info: dict[str, Any] = {"verl_masks_vision_placeholders": None, "mask_patch_active": False}
    path = os.path.join(verl_package_dir(), "experimental", "agent_loop", "agent_loop.py")
    try:
        from vlgrpo.patches.fixes import rollout_vision_placeholder_mask as rollout_mask

        with open(path, encoding="utf-8") as fh:
            source = fh.read()
        faulty = None
        for qualname in ("AgentLoopWorker._agent_loop_postprocess", "AgentLoopWorkerBase._agent_loop_postprocess"):
            try:
                faulty, _ = rollout_mask.is_faulty_in_source(source, qualname)
                break
            except KeyError:
                continue
    except Exception:  # no such file/patch package: nothing to say
        return info
    if faulty is None:
        return info
    info["verl_masks_vision_placeholders"] = not faulty
    info["mask_patch_active"] = _registered(_MASK_PATCH) and not _patch_switched_off(_MASK_PATCH)
    if faulty and not info["mask_patch_active"]:
        report.add(
            Finding(
                "rules.vision-token-mask",
                WARNING,
                f"verl {verl_version()} does not check generated responses for vision placeholder tokens "
                f"before computing position ids, and the vlgrpo patch {_MASK_PATCH} that masks such a sample is switched "
                f"off here (VLGRPO_PATCHES / VLGRPO_PATCHES_DISABLED)",
                Where(key="actor_rollout_ref.rollout.name"),
                "a placeholder that still reaches a response (no ban: sglang/trtllm, or the ban switched off) crashes "
                "get_rope_index or the actor forward (verl issue #5817)",
                f"keep the vlgrpo patch {_MASK_PATCH} enabled",
            )
        )
    return info


def check_vision_token_ban(work: Any, report: Report, tokenizer: Any = None) -> dict[str, Any]:
    """B05: does the installed verl ban <|image_pad|>/<|video_pad|> at vLLM engine setup (PR #7038)?

    Detected from source: PR #7038 adds ``get_vision_placeholder_token_ids`` to
    ``verl/workers/rollout/utils.py`` and calls it from the vLLM server. If absent, the patch
    ``rollout.vision_placeholder_ban`` of ``vlgrpo.patches.registry`` counts as the ban unless switched off.
    """
    verl_dir = verl_package_dir()
    utils = os.path.join(verl_dir, "workers", "rollout", "utils.py")
    server_dir = os.path.join(verl_dir, "workers", "rollout", "vllm_rollout")
    defined = os.path.isfile(utils) and "def get_vision_placeholder_token_ids" in open(utils, encoding="utf-8").read()
    used = False
    if os.path.isdir(server_dir):
        for fn in os.listdir(server_dir):
            if fn.endswith(".py"):
                with open(os.path.join(server_dir, fn), encoding="utf-8") as fh:
                    used = used or "get_vision_placeholder_token_ids" in fh.read()
    ids = {}
    if tokenizer is not None:
        for tok in ("<|image_pad|>", "<|video_pad|>"):
            ids[tok] = tokenizer.convert_tokens_to_ids(tok)
    info = {"verl_bans_vision_placeholders": bool(defined and used), "placeholder_ids": ids}
    if info["verl_bans_vision_placeholders"] or work.actor_rollout_ref.rollout.name != "vllm":
        return info
    patch_id = _BAN_PATCH if _registered(_BAN_PATCH) else None
    patched = patch_id is not None and not _patch_switched_off(patch_id)
    info["patch_id"] = patch_id
    if not patched:
        id_text = ", ".join(f"{k} = {v}" for k, v in ids.items()) or "<|image_pad|> = 151655, <|video_pad|> = 151656"
        state = (
            "and the vlgrpo patch that bans them is switched off here "
            f"(VLGRPO_PATCHES / VLGRPO_PATCHES_DISABLED names {patch_id})"
            if patch_id
            else "and no vlgrpo patch bans them"
        )
        report.add(
            Finding(
                "rules.vision-token-ban",
                WARNING,
                f"verl {verl_version()} does not ban the vision placeholder tokens ({id_text}) in vLLM "
                f"sampling (verl PR #7038 adds it; first released in v0.9.0), {state}",
                Where(key="actor_rollout_ref.rollout.name"),
                "a sampled placeholder crashes get_rope_index or vLLM's masked scatter hours into training "
                "(verl issue #5817)",
                f"keep the vlgrpo patch {patch_id or '(vision placeholder ban)'} enabled, or use a verl with PR #7038",
            )
        )
    info["covered_by_patch"] = patched
    return info


_DP_PATCH = "rollout.weight_sync_dp_rank"


def check_weight_sync_dp_rank(work: Any, report: Report, platform: str | None = None) -> dict[str, Any]:
    """verl issue #6615: with rollout data parallelism (``actor_rollout_ref.rollout.data_parallel_size`` > 1) the
    installed verl's ``vLLMColocateWorkerExtension._get_zmq_handle`` (``verl/workers/rollout/vllm_rollout/
    utils.py``, read from source by :func:`vlgrpo.patches.fixes.rollout_weight_sync_dp_rank.is_faulty`) names the
    weight-sync socket from the worker's engine-local rank; on Ascend (vllm-ascend keeps that rank) two workers bind
    one name and the first weight sync hangs. When the patch ``rollout.weight_sync_dp_rank`` is switched off:
    ``rules.weight-sync-dp-rank``, an error on an NPU node, a warning where no accelerator is seen here (a CPU
    head node), nothing on a GPU node (vLLM offsets the rank on CUDA).

    ``platform``: "npu", "gpu" or "" (none seen); None: counted here by :func:`vlgrpo.devices.count`.
    Returns ``{"rollout_dp": int, "verl_faulty": bool | None, "patch_active": bool}``."""
    rollout = work.actor_rollout_ref.rollout
    dp = int(rollout.get("data_parallel_size") or 1)
    info: dict[str, Any] = {"rollout_dp": dp, "verl_faulty": None, "patch_active": False}
    if dp <= 1 or rollout.name != "vllm":
        return info
    path = os.path.join(verl_package_dir(), "workers", "rollout", "vllm_rollout", "utils.py")
    try:
        from vlgrpo.patches.fixes import rollout_weight_sync_dp_rank as fix

        with open(path, encoding="utf-8") as fh:
            faulty, _ = fix.is_faulty(None, module_source=fh.read())
    except Exception:  # no such file/function or no patch package: nothing to say
        return info
    info["verl_faulty"] = faulty
    info["patch_active"] = _registered(_DP_PATCH) and not _patch_switched_off(_DP_PATCH)
    if not faulty or info["patch_active"]:
        return info
    if platform is None:
        from vlgrpo import devices

        platform = devices.count().platform
    info["platform"] = platform
    if platform == "gpu":
        return info
    severity = ERROR if platform == "npu" else WARNING
    where = "on this NPU node" if platform == "npu" else "if the rollout runs on Ascend NPUs (no accelerator seen here)"
    report.add(
        Finding(
            "rules.weight-sync-dp-rank",
            severity,
            f"rollout data_parallel_size {dp}: verl {verl_version()} names each vLLM worker's weight-sync socket from "
            f"its engine-local rank, and the vlgrpo patch {_DP_PATCH} that fixes it is switched off here "
            f"(VLGRPO_PATCHES / VLGRPO_PATCHES_DISABLED); {where} two workers bind one socket",
            Where(key="actor_rollout_ref.rollout.data_parallel_size"),
            "the first weight sync hangs or loads another rank's buckets (verl issue #6615; vllm-ascend keeps the "
            "engine-local rank, CUDA vLLM offsets it)",
            f"keep the vlgrpo patch {_DP_PATCH} enabled, or set the rollout's data_parallel_size to 1",
        )
    )
    return info
