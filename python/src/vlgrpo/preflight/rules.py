"""Cross-field rules on the composed (resolved) config that verl checks late, clamps silently, or never.

Each rule names its upstream source. Inputs are the resolved config ``work`` (see
:func:`vlgrpo.preflight.verl_checks.prepare_runtime_config`) and a map from Hydra key to the override that
set it, so findings can point at an argv position.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from .report import ERROR, WARNING, Finding, Report, Where

IMAGE_TRUNCATIONS = ("left", "right", "middle")


class Locator:
    """Map a Hydra key to the argv position/override that set it (last one wins, as in Hydra)."""

    def __init__(self, parsed: list[Any] | None = None):
        self._by_key: dict[str, Any] = {}
        for po in parsed or []:
            self._by_key[po.key] = po

    def where(self, key: str, **extra: Any) -> Where:
        po = self._by_key.get(key)
        if po is None:
            return Where(key=key, **extra)
        return Where(position=po.position, override=po.text, key=key, **extra)

    def given(self, key: str) -> bool:
        return key in self._by_key


#: Keys the rules, the data check and verl read as whole numbers: (key, minimum, None allowed). Hydra composes
#: any value for them (null, '', a list, a word); verl then fails or mis-sizes tensors after Ray start.
INT_KEYS = (
    ("data.max_prompt_length", 1, False),
    ("data.max_response_length", 1, False),
    ("data.image_patch_size", 1, True),
    ("trainer.nnodes", 1, False),
    ("trainer.n_gpus_per_node", 1, False),
    ("rollout.nnodes", 1, False),  # fully async only (absent from ppo_trainer)
    ("rollout.n_gpus_per_node", 1, False),
    ("actor_rollout_ref.rollout.n", 1, False),
    ("actor_rollout_ref.rollout.max_model_len", 1, True),
    ("actor_rollout_ref.rollout.prompt_length", 1, False),
    ("actor_rollout_ref.rollout.response_length", 1, False),
)
#: Keys verl reads as a non-empty string (a path, a column name, an engine name).
STR_KEYS = ("actor_rollout_ref.rollout.name", "actor_rollout_ref.model.path", "data.prompt_key", "data.image_key")
#: Keys verl reads as one file or a list of files.
FILES_KEYS = ("data.train_files", "data.val_files")
_ABSENT = object()


def _describe(value: Any) -> str:
    from omegaconf import OmegaConf

    if OmegaConf.is_config(value):
        value = OmegaConf.to_container(value, resolve=False)
    return "null" if value is None else f"{value!r} ({type(value).__name__})"


def check_value_types(work: Any, report: Report, loc: Locator) -> bool:
    """Values of the wrong type for the keys in :data:`INT_KEYS`, :data:`STR_KEYS` and :data:`FILES_KEYS`
    (and the VeOmni parallel sizes of a veomni role), on the resolved config. Hydra composes ``key=null``,
    ``key=``, ``key=[1,2]`` or ``key=abc`` for any of them; verl fails on them only after Ray start (or, for
    ``data.image_key=null``, silently trains without images). Returns True when every value is usable; the
    later rules read these keys as numbers/strings and are skipped otherwise. A key already reported by the
    schema pass (e.g. ``schema.number-as-string``) is not reported twice."""
    from omegaconf import OmegaConf

    reported = {f.where.key for f in report.findings if f.code.startswith("schema.")}
    ok = True

    def bad(key: str, value: Any, expected: str, fix: str) -> None:
        nonlocal ok
        ok = False
        if key in reported:
            return
        report.add(
            Finding(
                "schema.value-type",
                ERROR,
                f"{key} is {_describe(value)}; verl needs {expected}",
                loc.where(key),
                "Hydra composes any value here; verl fails on it (or silently misbehaves) after Ray placed the workers",
                fix,
            )
        )

    int_keys = list(INT_KEYS)
    rollout = OmegaConf.select(work, "actor_rollout_ref.rollout", default=None)
    name = rollout.get("name") if rollout is not None else None
    if (
        isinstance(name, str)
        and name
        and OmegaConf.select(work, f"actor_rollout_ref.rollout.engine_kwargs.{name}.max_model_len", default=_ABSENT)
        is not _ABSENT
    ):
        int_keys.append((f"actor_rollout_ref.rollout.engine_kwargs.{name}.max_model_len", 1, True))
    for role in ("actor", "ref"):
        node = OmegaConf.select(work, f"actor_rollout_ref.{role}", default=None)
        if node is not None and node.get("strategy") == "veomni" and node.get("veomni") is not None:
            base = f"actor_rollout_ref.{role}.veomni"
            int_keys += [
                (f"{base}.fsdp_size", -1, False),
                (f"{base}.ulysses_parallel_size", 1, False),
                (f"{base}.expert_parallel_size", 1, False),
            ]
    #: rollout lengths default to the data.* values (${oc.select:data.max_...}): a bad value there is the
    #: data key's, reported once at that key
    follows = {
        "actor_rollout_ref.rollout.prompt_length": "data.max_prompt_length",
        "actor_rollout_ref.rollout.response_length": "data.max_response_length",
    }
    for key, minimum, nullable in int_keys:
        value = OmegaConf.select(work, key, default=_ABSENT)
        if value is _ABSENT or (value is None and nullable):
            continue
        if key in follows and value == OmegaConf.select(work, follows[key], default=_ABSENT):
            reported.add(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum or (minimum == -1 and value == 0):
            expected = f"a whole number >= {minimum}" + (" (or null)" if nullable else "")
            if minimum == -1:
                expected = "a positive whole number or -1"
            bad(
                key,
                value,
                expected,
                f"{key}=<whole number>, no quotes"
                + (" (or drop the override to keep verl's default)" if nullable else ""),
            )
    for key in STR_KEYS:
        value = OmegaConf.select(work, key, default=_ABSENT)
        if value is _ABSENT:
            continue
        if not isinstance(value, str) or not value.strip():
            bad(key, value, "a non-empty string", f"{key}=<value> (or drop the override to keep verl's default)")
    for key in FILES_KEYS:
        value = OmegaConf.select(work, key, default=_ABSENT)
        if value is _ABSENT:
            continue
        items = (
            [value]
            if isinstance(value, str)
            else (list(value) if OmegaConf.is_list(value) or isinstance(value, list) else None)
        )
        if not items or not all(isinstance(v, str) and v.strip() for v in items):
            bad(
                key,
                value,
                "a parquet file path or a list of them",
                f"{key}=/path/train.parquet or {key}=[a.parquet,b.parquet]",
            )
    return ok


def check_logger(work: Any, report: Report, loc: Locator) -> None:
    """``trainer.logger`` must be a list of backends verl's ``Tracking.supported_backend`` knows."""
    from omegaconf import ListConfig

    from verl.utils.tracking import Tracking

    key = "trainer.logger"
    value = work.trainer.logger
    known = list(Tracking.supported_backend)
    if isinstance(value, str):
        if any(f.code == "schema.list-as-string" and f.where.key == key for f in report.findings):
            return  # already reported at its override
        report.add(
            Finding(
                "rules.logger",
                ERROR,
                f"trainer.logger is the string {value!r}, not a list",
                loc.where(key),
                "verl's Tracking iterates it and asserts each backend is supported",
                "trainer.logger=[console] (Hydra list syntax)",
            )
        )
        return
    if not isinstance(value, (list, ListConfig)):
        report.add(
            Finding(
                "rules.logger",
                ERROR,
                f"trainer.logger has type {type(value).__name__}",
                loc.where(key),
                "verl's Tracking expects a list of backend names",
                "trainer.logger=[console]",
            )
        )
        return
    unknown = [v for v in value if v not in known]
    if unknown:
        report.add(
            Finding(
                "rules.logger",
                ERROR,
                f"trainer.logger names unknown backend(s) {unknown}; verl knows {known}",
                loc.where(key),
                "verl.utils.tracking.Tracking asserts '<backend> is not supported' at trainer start",
                "use only: " + ", ".join(known),
            )
        )


def check_lengths(
    work: Any, report: Report, loc: Locator, max_position_embeddings: int | None, mpe_source: str = ""
) -> dict[str, Any]:
    """B09: max_model_len vs prompt + response, vs the model's max_position_embeddings, and vs
    ``engine_kwargs.<engine>.max_model_len`` (verl 0.8.0 ``vllm_async_server.py`` builds vLLM's args with
    ``max_model_len`` first and the engine_kwargs dict spread after it, so the latter wins for vLLM while verl
    keeps using ``rollout.max_model_len`` for its own headroom; ``_validate_configs`` raises only when
    max_model_len exceeds max_position_embeddings, and a None max_model_len becomes max_position_embeddings).
    Returns the token-budget summary."""
    rollout = work.actor_rollout_ref.rollout
    prompt = int(work.data.max_prompt_length)
    response = int(work.data.max_response_length)
    # verl's rollout sizes requests from rollout.prompt_length/response_length (defaults: the data.* values,
    # through ${oc.select:...}); vllm_async_server.py caps max_tokens by response_length and the agent loop pads to
    # both, so a larger override of either needs the room too.
    r_prompt, r_response = rollout.get("prompt_length"), rollout.get("response_length")
    prompt_eff = max(prompt, r_prompt) if isinstance(r_prompt, int) and not isinstance(r_prompt, bool) else prompt
    response_eff = (
        max(response, r_response) if isinstance(r_response, int) and not isinstance(r_response, bool) else response
    )
    needed = prompt_eff + response_eff
    if (prompt_eff, response_eff) == (prompt, response):
        parts = f"max_prompt_length {prompt} + max_response_length {response}"
    else:
        parts = (
            f"prompt {prompt_eff} + response {response_eff} (actor_rollout_ref.rollout.prompt_length={r_prompt}, "
            f"response_length={r_response} override data.max_prompt_length={prompt}, "
            f"data.max_response_length={response} for the rollout)"
        )
    mml = rollout.get("max_model_len")
    engine = rollout.get("name")
    ek = ((rollout.get("engine_kwargs") or {}).get(engine) or {}) if isinstance(engine, str) else {}
    ek_mml = ek.get("max_model_len") if hasattr(ek, "get") else None
    key_mml = "actor_rollout_ref.rollout.max_model_len"
    key_ek = f"actor_rollout_ref.rollout.engine_kwargs.{engine}.max_model_len"
    effective = mml if mml is not None else max_position_embeddings
    effective_engine: int | None
    if ek_mml is not None:
        effective_engine = int(ek_mml)
    else:
        effective_engine = effective
    budget = {
        "max_prompt_length": prompt,
        "max_response_length": response,
        "needed": needed,
        "max_model_len": effective,
        "engine_max_model_len": effective_engine,
        "max_position_embeddings": max_position_embeddings,
        "max_position_embeddings_source": mpe_source,
    }
    if mml is not None and int(mml) < needed:
        report.add(
            Finding(
                "rules.max-model-len",
                ERROR,
                f"max_model_len {mml} < {parts} = {needed}",
                loc.where(key_mml),
                "verl does not fail: it clamps each request's max_tokens to the room left, so long "
                "answers are cut and overlong penalties misfire (verl issue #673)",
                f"{key_mml}={needed} (or lower the lengths)",
            )
        )
    if ek_mml is not None and mml is not None and int(ek_mml) != int(mml):
        report.add(
            Finding(
                "rules.max-model-len-mismatch",
                ERROR,
                f"{key_ek}={ek_mml} differs from {key_mml}={mml}; vLLM uses {ek_mml}",
                loc.where(key_ek),
                "verl spreads engine_kwargs after max_model_len when it builds vLLM's arguments, so "
                "vLLM silently takes the engine_kwargs value while verl computes headroom from rollout.max_model_len",
                f"set both to the same value (>= {needed}) or drop {key_ek}",
            )
        )
    if ek_mml is not None and int(ek_mml) < needed:
        report.add(
            Finding(
                "rules.max-model-len",
                ERROR,
                f"vLLM's effective max_model_len {ek_mml} (from {key_ek}) < prompt + response = {needed}",
                loc.where(key_ek),
                "requests are clamped or rejected by vLLM",
                f"{key_ek}={needed}",
            )
        )
    if max_position_embeddings is not None:
        for k, v in ((key_mml, mml), (key_ek, ek_mml)):
            if v is not None and int(v) > int(max_position_embeddings):
                report.add(
                    Finding(
                        "rules.max-position-embeddings",
                        ERROR,
                        f"{k}={v} exceeds the model's max_position_embeddings {max_position_embeddings} ({mpe_source})",
                        loc.where(k),
                        "verl's vLLM server raises 'max_model_len ... should be less than or equal to "
                        "max_position_embeddings' after the weights are loaded",
                        f"{k}<={max_position_embeddings}",
                    )
                )
        if mml is None and int(max_position_embeddings) < needed:
            report.add(
                Finding(
                    "rules.max-model-len",
                    ERROR,
                    f"max_model_len is unset, so verl uses max_position_embeddings {max_position_embeddings}, "
                    f"which is < prompt + response = {needed}",
                    loc.where(key_mml),
                    "responses are clamped to the room left",
                    "lower max_prompt_length/max_response_length",
                )
            )
    return budget


def world_size(work: Any) -> int:
    return int(work.trainer.nnodes) * int(work.trainer.n_gpus_per_node)


def check_veomni(work: Any, report: Report, loc: Locator) -> None:
    """B19: VeOmni ``fsdp_size x ulysses_parallel_size`` must equal the trainer world size (or fsdp_size -1),
    and ``expert_parallel_size`` must divide it. verl 0.8.0 ``workers/engine/veomni/transformer_impl.py``
    silently treats any ``fsdp_size >= world/ulysses`` as full sharding, so a leftover fsdp_size=16 on one
    8-device node runs with a different layout than the script states."""
    world = world_size(work)
    for role in ("actor", "ref"):
        node = work.actor_rollout_ref.get(role)
        if node is None or node.get("strategy") != "veomni" or node.get("veomni") is None:
            continue
        v = node.veomni
        base = f"actor_rollout_ref.{role}.veomni"
        fsdp = int(v.get("fsdp_size", -1))
        usp = int(v.get("ulysses_parallel_size", 1) or 1)
        ep = int(v.get("expert_parallel_size", 1) or 1)
        if world % usp != 0:
            report.add(
                Finding(
                    "rules.veomni-layout",
                    ERROR,
                    f"{base}.ulysses_parallel_size={usp} does not divide the world size "
                    f"{world} (trainer.nnodes x trainer.n_gpus_per_node)",
                    loc.where(f"{base}.ulysses_parallel_size"),
                    "VeOmni's parallel state needs world = dp x ulysses",
                    f"a ulysses size dividing {world}",
                )
            )
            continue
        if fsdp != -1 and fsdp * usp != world:
            report.add(
                Finding(
                    "rules.veomni-layout",
                    ERROR,
                    f"{base}.fsdp_size={fsdp} x ulysses_parallel_size={usp} = {fsdp * usp} != world size {world} "
                    f"(trainer.nnodes={work.trainer.nnodes} x trainer.n_gpus_per_node={work.trainer.n_gpus_per_node})",
                    loc.where(f"{base}.fsdp_size"),
                    "verl's VeOmni engine silently falls back to full sharding or a replicated layout instead of the "
                    "stated one (verl issue #6146 thread; run_qwen3_vl_30b_moe_veomni.sh sets fsdp_size=dp_size)",
                    f"{base}.fsdp_size={world // usp} or {base}.fsdp_size=-1",
                )
            )
        if ep > 1 and world % ep != 0:
            report.add(
                Finding(
                    "rules.veomni-layout",
                    ERROR,
                    f"{base}.expert_parallel_size={ep} does not divide world size {world}",
                    loc.where(f"{base}.expert_parallel_size"),
                    "VeOmni's expert-parallel mesh cannot be built",
                    f"an expert_parallel_size dividing {world}",
                )
            )


#: VeOmni version the images pin (docs: notes/pins.md -- 0.1.10+ ship a transformers>=5.2 Qwen3-VL-MoE only).
PINNED_VEOMNI = "0.1.9a5"


def check_veomni_install(work: Any, report: Report) -> dict[str, Any]:
    """B19: the VeOmni recipe needs the pinned VeOmni in this interpreter (the image)."""
    from importlib.metadata import PackageNotFoundError, version

    from .report import WARNING

    engine = work.get("model_engine")
    if engine != "veomni":
        return {}
    try:
        installed = version("veomni")
    except PackageNotFoundError:
        report.add(
            Finding(
                "rules.veomni-version",
                WARNING,
                f"VeOmni is not installed here (the images pin {PINNED_VEOMNI})",
                Where(key="model_engine"),
                "model_engine=veomni imports VeOmni in every training worker",
                "run preflight inside the training image",
            )
        )
        return {"veomni": None}
    if installed != PINNED_VEOMNI:
        report.add(
            Finding(
                "rules.veomni-version",
                ERROR,
                f"VeOmni {installed} is installed; this stack pins {PINNED_VEOMNI}",
                Where(key="model_engine"),
                "VeOmni 0.1.10+ only ship a Qwen3-VL-MoE model for transformers>=5.2; on "
                "transformers 4.57 the first forward with images fails (verl issue #6146)",
                f"pip install --no-deps veomni=={PINNED_VEOMNI}",
            )
        )
    return {"veomni": installed}


def detect_devices_per_node() -> tuple[int | None, str]:
    """Accelerators this process may use on this node, by the one device counter (:func:`vlgrpo.devices.count`).
    (None, why) when none can be seen (a CPU build host)."""
    from vlgrpo import devices

    node = devices.count()
    if node.devices:
        return node.devices, node.source
    return None, node.source if not node.platform else f"no {node.platform} device visible here ({node.source})"


#: RAY_ADDRESS values with which ``ray.init()`` (Ray 2.48.0 ``_private/worker.py`` init) starts a Ray of its own on
#: this node instead of joining a cluster: unset/empty, or ``local`` (what the entrypoints export without
#: VLGRPO_RAY_ADDRESS).
LOCAL_RAY_ADDRESSES = ("", "local")


def check_topology(
    work: Any,
    report: Report,
    loc: Locator,
    fully_async: bool,
    devices_per_node: int | None,
    source: str,
    devices_source: str = "node",
    ray_address: str | None = None,
) -> dict[str, Any]:
    """B12: per-node device counts must not exceed what the node has (Ray would leave the placement group
    pending forever); with no Ray address (``ray_address`` unset or ``local``: Ray runs on this node alone) the
    whole layout, the sum of ``nnodes x n_gpus_per_node`` over the resource pools, must fit this node.

    ``devices_source``: ``"node"`` (counted on this node, or given by the caller for it) or ``"plan"`` (the
    entrypoint's planning override VLGRPO_PLAN_DEVICES_PER_NODE: a plan for another machine): a layout larger than
    one node is then a warning saying which Ray cluster it needs, else ``rules.layout-local`` is an error."""
    info: dict[str, Any] = {
        "devices_per_node": devices_per_node,
        "devices_source": source,
        "trainer": f"{work.trainer.nnodes} x {work.trainer.n_gpus_per_node}",
    }
    pools = [("trainer", work.trainer)]
    if fully_async:
        pools.append(("rollout", work.rollout))
        info["rollout"] = f"{work.rollout.nnodes} x {work.rollout.n_gpus_per_node}"
    if devices_per_node is None:
        return info
    _check_local_layout(pools, report, loc, devices_per_node, source, devices_source, ray_address, info)
    for name, node in pools:
        n = int(node.n_gpus_per_node)
        if n > devices_per_node:
            report.add(
                Finding(
                    "rules.devices-per-node",
                    ERROR,
                    f"{name}.n_gpus_per_node={n} but this node has {devices_per_node} accelerators ({source})",
                    loc.where(f"{name}.n_gpus_per_node"),
                    "Ray cannot place a bundle larger than a node: the placement group stays pending forever",
                    f"{name}.n_gpus_per_node={devices_per_node} (and raise {name}.nnodes to keep the total)",
                )
            )
        elif n < devices_per_node:
            from .report import WARNING

            report.add(
                Finding(
                    "rules.devices-unused",
                    WARNING,
                    f"{name}.n_gpus_per_node={n} uses {n} of the {devices_per_node} accelerators of a node ({source})",
                    loc.where(f"{name}.n_gpus_per_node"),
                    "verl places n_gpus_per_node workers per node; the rest stay idle (B19: the VeOmni example fixes 8 "
                    "per node, an Atlas A3 node has 16)",
                    f"{name}.n_gpus_per_node={devices_per_node} (and lower {name}.nnodes to keep the total) if the node "
                    "is not shared",
                )
            )
    return info


def _check_local_layout(
    pools: list[tuple[str, Any]],
    report: Report,
    loc: Locator,
    devices_per_node: int,
    source: str,
    devices_source: str,
    ray_address: str | None,
    info: dict[str, Any],
) -> None:
    """The local-Ray part of :func:`check_topology` (``rules.layout-local``)."""
    from .report import WARNING

    address = (ray_address or "").strip()
    nodes = sum(int(node.nnodes) for _, node in pools)
    total = sum(int(node.nnodes) * int(node.n_gpus_per_node) for _, node in pools)
    per_node = max(int(node.n_gpus_per_node) for _, node in pools)
    info.update(planned_nodes=nodes, planned_devices=total)
    if address not in LOCAL_RAY_ADDRESSES:
        info["ray"] = "cluster (RAY_ADDRESS set)"
        return
    info["ray"] = "local (one node)"
    if total <= devices_per_node:
        return
    layout = " + ".join(f"{name} {int(node.nnodes)} node(s) x {int(node.n_gpus_per_node)}" for name, node in pools)
    info["cluster_needed"] = {"nodes": nodes, "devices_per_node": per_node}
    fix = (
        f"start a Ray cluster of {nodes} node(s) with {per_node} devices each (entrypoints/ray-node.sh) and set "
        f"VLGRPO_RAY_ADDRESS=HOST:PORT, or plan fewer nodes or devices (VLGRPO_TRAINER_NNODES, "
        f"VLGRPO_*_DEVICES_PER_NODE) to fit {devices_per_node}"
    )
    if devices_source == "plan":
        report.add(
            Finding(
                "rules.layout-local",
                WARNING,
                f"this plan needs a Ray cluster of {nodes} node(s) x {per_node} devices ({layout} = {total} devices); "
                f"planned for {devices_per_node} devices per node ({source}) and no Ray address",
                loc.where("trainer.nnodes"),
                "a planning dry run describes other machines; launched without VLGRPO_RAY_ADDRESS it runs on one node "
                "and is refused there",
                fix,
            )
        )
        return
    report.add(
        Finding(
            "rules.layout-local",
            ERROR,
            f"the layout needs {total} devices on {nodes} node(s) ({layout}), but with no Ray address Ray runs on this "
            f"node alone, which has {devices_per_node} ({source})",
            loc.where("trainer.nnodes"),
            "Ray's placement groups for the rest never fit: verl waits for them forever",
            fix,
        )
    )


def check_image_patch_size(
    work: Any, report: Report, loc: Locator, image_processor: Any, model_path: str
) -> dict[str, Any]:
    """B06 (verl issue #6592, fix PR #6595): ``data.image_patch_size`` must be the processor's patch size.

    verl 0.8.0 pre-resizes images with ``data.image_patch_size`` (default 14) in its overlong filter
    (``verl/utils/dataset/rl_dataset.py::maybe_filter_out_long_prompts`` -> qwen-vl-utils ``process_vision_info``)
    but with ``processor.image_processor.patch_size`` in the rollout (``verl/experimental/agent_loop/agent_loop.py::
    process_multi_modal_info``); Qwen3-VL's is 16 (merge 2: a 32-px grid). With 14 the filter under-counts the image
    tokens, keeps rows the rollout then refuses, and drops rows that would fit. A null value makes the filter fail
    on every image row (verl counts a failing row as too long and drops it). Returns ``{"data": value, "processor":
    patch}``."""
    from .dataset import rollout_patch_size

    key = "data.image_patch_size"
    value = work.data.get("image_patch_size", 14)
    patch = rollout_patch_size(image_processor)
    if value != patch:
        where = loc.where(key)
        source = os.path.join(model_path, "preprocessor_config.json")
        report.add(
            Finding(
                "rules.image-patch-size",
                ERROR,
                f"{key}={value}{' (verl default)' if not loc.given(key) else ''} but the model's processor uses patch size "
                f"{patch} ({type(image_processor).__name__}, {source})",
                where,
                "verl's overlong filter pre-resizes images with data.image_patch_size, the rollout with the "
                "processor's patch size: the filter's token counts are wrong, so it keeps rows the rollout refuses and "
                "drops rows that fit (verl issue #6592)"
                + (" -- null fails on every image row, which verl then drops" if value is None else ""),
                f"{key}={patch}",
            )
        )
    return {"data": value, "processor": patch}


def check_truncation(work: Any, report: Report, loc: Locator, has_images: bool) -> None:
    """B07: image prompts cannot be truncated by token (verl issue #4975: the agent loop raises at rollout;
    vLLM PR #7998: cut placeholders no longer match the image features)."""
    trunc = work.data.get("truncation", "error")
    if has_images and trunc in IMAGE_TRUNCATIONS:
        report.add(
            Finding(
                "rules.image-truncation",
                ERROR,
                f"data.truncation={trunc} on a dataset with images",
                loc.where("data.truncation"),
                "truncating an image prompt cuts <|image_pad|> tokens while the pixels stay whole; verl raises at "
                "rollout (verl issue #4975)",
                "data.truncation=error and data.filter_overlong_prompts=True (or raise max_prompt_length)",
            )
        )


#: Keys whose value makes verl import or execute a user file or module (field case B17; verl 0.8.0 config and
#: verl main of 2026-08). A vlgrpo launch runs no user code: the entrypoints cannot set them; preflight refuses
#: them too, so an argv checked on its own (``--argv-file``) gets the same answer.
CODE_LOADING_KEYS = (
    "data.custom_cls.path",
    "custom_reward_function.path",
    "reward.custom_reward_function.path",
    "reward.reward_manager.module.path",
    "reward_model.reward_loop_module_path",
    "actor_rollout_ref.model.external_lib",
    "actor_rollout_ref.rollout.agent.agent_loop_config_path",
    "actor_rollout_ref.rollout.agent.custom_async_server.path",
    "actor_rollout_ref.rollout.checkpoint_engine.custom_backend_module",
    "actor_rollout_ref.rollout.multi_turn.function_tool_path",
    "trainer.v1.sampler.custom_sampler.path",
)


def interpolations(text: str) -> list[tuple[str, str]]:
    """``(kind, name)`` for every ``${...}`` in ``text`` as OmegaConf 2.3's own grammar parses a config value
    (``omegaconf.grammar_parser.parse(text, "configValue")``): kind ``resolver`` (``${oc.env:X}``, ``${now:...}``;
    name the resolver) or ``node`` (``${data.max_prompt_length}``; name the text), nested ones included; an
    escaped ``\\${`` is none. ``[]`` for text the grammar rejects (Hydra's compose reports that)."""
    if "${" not in text:
        return []
    from omegaconf import grammar_parser
    from omegaconf.errors import GrammarParseError
    from omegaconf.grammar.gen.OmegaConfGrammarParser import OmegaConfGrammarParser as G

    try:
        tree = grammar_parser.parse(text, "configValue")
    except GrammarParseError:
        return []
    out: list[tuple[str, str]] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, G.InterpolationResolverContext):
            out.append(("resolver", node.resolverName().getText()))
        elif isinstance(node, G.InterpolationNodeContext):
            out.append(("node", node.getText()))
        stack += (
            [node.getChild(i) for i in range(node.getChildCount() - 1, -1, -1)]
            if hasattr(node, "getChildCount")
            else []
        )
    return out


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in _strings(k) + _strings(v)]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _strings(v)]
    return []


def check_interpolations(report: Report, overrides: list[Any]) -> None:
    """No override value computed at run time: a resolver (``${oc.env:SECRET}`` -- an environment secret lands in
    tracker names and checkpoint paths; ``${oc.decode:...}``, Hydra's ``${now:...}``, any registered resolver) is
    ``security.resolver`` (error); another key's value (``${data.max_prompt_length}``) ``security.interpolation``
    (warning). The entrypoints never write either; this guards argv files given to the preflight by hand."""
    for po in overrides:
        try:
            value = po.parsed.value()
        except Exception:  # a value Hydra cannot evaluate is schema.syntax's
            continue
        found = [k for text in _strings(value) for k in interpolations(text)]
        resolvers = sorted({name for kind, name in found if kind == "resolver"})
        nodes = sorted({name for kind, name in found if kind == "node"})
        where = Where(position=po.position, override=po.text, key=po.key)
        if resolvers:
            report.add(
                Finding(
                    "security.resolver",
                    ERROR,
                    f"{po.key} is computed at run time by the resolver(s) " + ", ".join(resolvers),
                    where,
                    "OmegaConf calls the resolver when verl reads the key (oc.env copies an environment variable, a secret "
                    "too, into the value; others decode or run registered functions): the checked value is not the run's",
                    f"write the value itself: {po.key}=<value>",
                )
            )
        elif nodes:
            report.add(
                Finding(
                    "security.interpolation",
                    WARNING,
                    f"{po.key} takes another key's value: " + ", ".join(nodes),
                    where,
                    "the value is resolved when verl reads it, not checked here as written",
                    "write the value itself",
                )
            )


def check_code_loading(cfg: Any, report: Report, loc: Locator, overrides: list[Any]) -> None:
    """No remote or user code (B17): every ``trust_remote_code`` in the composed config is False, none of
    :data:`CODE_LOADING_KEYS` is set, and no override names a ``_target_`` (verl's own YAMLs carry ``_target_``
    keys for its dataclasses; an override of one swaps in any importable callable).

    Args:
        cfg: the composed, unresolved config (``omegaconf.DictConfig``).
        overrides: the parsed overrides (:class:`vlgrpo.preflight.schema.ParsedOverride`), for ``_target_``.
    """
    from omegaconf import OmegaConf

    tree = OmegaConf.to_container(cfg, resolve=False)

    def walk(node: Any, path: str) -> Iterator[tuple[str, Any]]:
        if isinstance(node, dict):
            for k, v in node.items():
                yield from walk(v, f"{path}.{k}" if path else str(k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                yield from walk(v, f"{path}[{i}]")
        else:
            yield path, node

    for path, value in walk(tree, ""):
        if path.rsplit(".", 1)[-1] == "trust_remote_code" and value not in (False, None, "False", "false"):
            report.add(
                Finding(
                    "security.trust-remote-code",
                    ERROR,
                    f"{path} is {value!r}",
                    loc.where(path),
                    "with trust_remote_code on, transformers runs Python files from the model folder or the hub",
                    f"{path}=False (Qwen3-VL needs no remote code on transformers 4.57)",
                )
            )
    for key in CODE_LOADING_KEYS:
        value = OmegaConf.select(cfg, key, default=None, throw_on_missing=False)
        if value not in (None, ""):
            report.add(
                Finding(
                    "security.code-loading",
                    ERROR,
                    f"{key} is set ({value!r})",
                    loc.where(key),
                    "verl imports or executes the file/module it names inside every worker",
                    f"remove the {key} override; the recipes need no custom code",
                )
            )
    for po in overrides:
        if "_target_" in po.key.split("."):
            report.add(
                Finding(
                    "security.target",
                    ERROR,
                    f"override of {po.key}",
                    Where(position=po.position, override=po.text, key=po.key),
                    "Hydra/verl instantiate whatever callable a _target_ names",
                    "remove the override; _target_ keys are verl's own and must keep their defaults",
                )
            )
