"""C01 follow-up: a reward model reached over HTTP cannot run while the rollout servers listen on loopback only.

verl v0.8.0's reward loop (``verl/experimental/reward_loop/reward_model.py`` ``RewardModelManager``) starts the reward
model as rollout replicas (``get_rollout_replica_class(rollout.name)``: for vLLM the same ``vLLMHttpServer`` as the
policy's), collects ``server._server_address`` (the node IP and port) into ``worker_urls = ["http://..."]`` and starts
a router on the node IP (``router/naive_router.py`` ``launch_router_process``); ``RewardLoopWorker._post_request``
then POSTs every discriminative score (``/classify``) and a custom GenRM function's requests through that router. The
patch ``rollout.server_loopback`` binds every ``vLLMHttpServer`` to 127.0.0.1, so the router's requests to the node IP
are refused (from another host, and on the same host too: nothing listens on the node IP) -- after the accelerators
were allocated. The preflight refuses the combination instead (exit 2).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from .launch import verl_package_dir
from .report import ERROR, Finding, Report

if TYPE_CHECKING:
    from .rules import Locator

PATCH = "rollout.server_loopback"


def loopback_patch_active() -> bool:
    """True when the patch :data:`PATCH` is registered, switched on in this environment (``VLGRPO_PATCHES``,
    ``VLGRPO_PATCHES_DISABLED``, read by :func:`vlgrpo.patches.state.read_switches`) and its detector finds the fault
    in the installed verl's ``vllm_async_server.py`` (read from source; nothing imports verl)."""
    try:
        from vlgrpo.patches import registry
        from vlgrpo.patches.fixes import rollout_server_loopback as fix
        from vlgrpo.patches.state import read_switches
    except Exception:  # the patch package is optional here
        return False
    _, all_off, disabled = read_switches()
    if all_off or PATCH in disabled or PATCH not in registry.IDS:
        return False
    path = os.path.join(verl_package_dir(), "workers", "rollout", "vllm_rollout", "vllm_async_server.py")
    try:
        with open(path, encoding="utf-8") as fh:
            return bool(fix.is_faulty(None, server_source=fh.read())[0])
    except OSError:
        return False


def check_reward_http(work: Any, report: Report, loc: Locator) -> dict[str, bool]:
    """Add ``rules.reward-http-loopback`` (error) when ``reward.reward_model.enable`` (after verl's migration of the
    legacy ``reward_model.*`` keys) is on with a vLLM reward rollout while :func:`loopback_patch_active`. Returns
    ``{"reward_model": bool, "loopback_patch": bool}``."""
    reward_model = (work.get("reward") or {}).get("reward_model") or {}
    legacy = work.get("reward_model") or {}
    enabled = bool(reward_model.get("enable") or legacy.get("enable"))
    # name the override the user wrote (verl copies the legacy key into reward.reward_model)
    key = next(
        (k for k in ("reward.reward_model.enable", "reward_model.enable") if loc.given(k)), "reward.reward_model.enable"
    )
    engine = (reward_model.get("rollout") or {}).get("name") or (legacy.get("rollout") or {}).get("name") or "vllm"
    active = loopback_patch_active()
    if enabled and active and str(engine) == "vllm":
        report.add(
            Finding(
                "rules.reward-http-loopback",
                ERROR,
                "a reward model is enabled; verl reaches its vLLM replicas over HTTP (a router on the node IP)",
                loc.where(key),
                f"the patch {PATCH} binds every vLLM replica's HTTP server to 127.0.0.1 (no unauthenticated request "
                "from another host), so each reward request to the node IP is refused after the accelerators are "
                "allocated",
                f"score with a rule-based reward (reward.reward_model.enable=False), or switch the loopback bind off "
                f"with VLGRPO_PATCHES_DISABLED={PATCH} and firewall the node ports to the cluster (docs/runtime-surfaces.md)",
            )
        )
    return {"reward_model": enabled, "loopback_patch": active}
