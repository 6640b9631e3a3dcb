"""B19: can the installed VeOmni build this model folder's Qwen3-VL-MoE model on this transformers?

verl 0.8.0's VeOmni engine (``verl/workers/engine/veomni/transformer_impl.py``,
``VeOmniEngine._build_model_optimizer``) builds the actor through VeOmni's own
``veomni.models.auto.build_foundation_model`` (VeOmni 0.1.9a5, ``veomni/models/auto.py``), which picks the model
class from ``veomni.models.loader.MODELING_REGISTRY[config.model_type]``. A VeOmni without a Qwen3-VL-MoE entry,
one whose entry needs another transformers (VeOmni 0.1.10+ ship a transformers>=5.2 model only), or one that only
takes text inputs (verl issue #6146: "currently supports text-only inputs ... pixel_values ... not supported yet")
fails in every training worker after Ray start. This check builds the model the same way, on the ``meta`` device
(no memory, no weights), in a child interpreter, then runs one forward with one synthetic image through a 1-layer
copy of the config on the CPU, and turns a failure into a finding.

What is built: ``build_foundation_model(<folder>, init_device="meta", torch_dtype=<as verl>,
attn_implementation=<the recipe's>, ops_implementation=OpsImplementationConfig(<the recipe's attention>, every
kernel field "eager">))``; then :func:`_tiny_image_forward` (bf16, CPU, random weights, attention ``eager`` when
the recipe's is a flash attention). Kernel back-ends (fused MoE, liger, triton, flash attention) are not run: their
availability depends on the accelerator, which the image smoke stage checks with the image's kernels.

The child runs in a fresh interpreter because importing VeOmni patches transformers process-wide (attention
functions, the Qwen3-VL-MoE classes); the preflight process itself never imports VeOmni or torch for this check.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

from .report import ERROR, Finding, Report, Where

#: prefix of the child's one result line on stdout (VeOmni logs to stdout too)
RESULT_MARK = "VLGRPO_VEOMNI_BUILD "
#: seconds the child may take (VeOmni + torch import is ~3 s on an idle 2-core machine)
DEFAULT_TIMEOUT_S = 240.0

#: the VL model classes the Qwen3-VL-MoE recipe needs: the registry entry VeOmni must have, and what it must build
MODEL_TYPE = "qwen3_vl_moe"


def build_on_meta(
    model_path: str,
    *,
    attn_implementation: str = "eager",
    torch_dtype: str = "bfloat16",
    ops_overrides: dict[str, str] | None = None,
    image_forward: bool = True,
) -> dict[str, Any]:
    """Build the folder's model through VeOmni's builder on ``meta``, in this process (imports VeOmni and torch).

    Mirrors verl 0.8.0 ``verl/workers/engine/veomni/transformer_impl.py::VeOmniEngine._build_model_optimizer``
    (``OpsImplementationConfig`` + ``build_foundation_model``) with ``init_device="meta"`` and no weights.

    Args:
        model_path: a Hugging Face model folder with ``config.json`` (weights are not read).
        attn_implementation: the recipe's ``actor_rollout_ref.actor.veomni.attn_implementation``
            (``flash_attention_2`` becomes ``veomni_flash_attention_2_with_sp`` inside VeOmni, as in verl).
        torch_dtype: ``"bfloat16"`` or ``"float32"`` (verl: float32 when ``veomni.mixed_precision``).
        ops_overrides: extra ``OpsImplementationConfig`` fields (default: every kernel field ``"eager"``).
        image_forward: after the meta build, also run :func:`_tiny_image_forward` (one forward with one synthetic
            image through a 1-layer copy of the config on the CPU; about a second) -- a VeOmni that builds the VL
            classes but refuses ``pixel_values`` at run time (verl issue #6146) fails only there.

    Returns:
        dict with ``stage`` (``"ok"`` or where it failed: ``"import"``, ``"registry"``, ``"build"``,
        ``"vision"``, ``"forward"``), ``veomni_version``, ``transformers_version``, ``model_type``, ``architecture``,
        ``model_class`` (module.qualname), ``parameters`` (count on meta), ``vision_tower`` (attribute path),
        ``forward_takes`` (which of pixel_values/image_grid_thw ``forward`` names), ``forward`` (the tiny forward's ``loss`` and ``image_tokens``), ``registered`` (registry keys
        when the model type is missing), ``error`` (``Type: message`` of a failure), ``seconds``.
        Never raises for a VeOmni failure; the failure is the ``stage``/``error`` fields.
    """
    t0 = time.perf_counter()
    out: dict[str, Any] = {"stage": "import"}
    try:
        import dataclasses
        import inspect

        import transformers
        from veomni.arguments.arguments_types import OpsImplementationConfig
        from veomni.models.auto import build_foundation_model
        from veomni.models.loader import MODELING_REGISTRY

        try:
            from importlib.metadata import version

            out["veomni_version"] = version("veomni")
        except Exception:
            out["veomni_version"] = None
        out["transformers_version"] = transformers.__version__

        out["stage"] = "registry"
        with open(os.path.join(model_path, "config.json"), encoding="utf-8") as fh:
            raw = json.load(fh)
        out["model_type"] = raw.get("model_type")
        out["architecture"] = (raw.get("architectures") or [None])[0]
        keys = list(MODELING_REGISTRY.valid_keys())
        if out["model_type"] not in keys:
            out["registered"] = sorted(keys)
            out["error"] = f"MODELING_REGISTRY has no entry {out['model_type']!r}"
            return out

        out["stage"] = "build"
        fields = {f.name for f in dataclasses.fields(OpsImplementationConfig)}
        kw = {name: "eager" for name in fields if name.endswith("_implementation")}
        kw["attn_implementation"] = attn_implementation
        kw.update(ops_overrides or {})
        ops = OpsImplementationConfig(**kw)
        model = build_foundation_model(model_path, torch_dtype=torch_dtype, init_device="meta", ops_implementation=ops)
        cls = type(model)
        out["model_class"] = f"{cls.__module__}.{cls.__qualname__}"
        out["parameters"] = int(sum(p.numel() for p in model.parameters()))
        out["devices"] = sorted({str(p.device) for p in model.parameters()})

        out["stage"] = "vision"
        tower = None
        for path in ("visual", "model.visual"):
            obj = model
            for part in path.split("."):
                obj = getattr(obj, part, None)
            if obj is not None:
                tower = path
                break
        out["vision_tower"] = tower
        params = inspect.signature(model.forward).parameters
        out["forward_takes"] = [n for n in ("pixel_values", "image_grid_thw") if n in params]
        if tower is None or len(out["forward_takes"]) < 2:
            out["error"] = (
                f"{out['model_class']} has "
                + ("no vision tower" if tower is None else f"a vision tower at .{tower}")
                + f"; forward takes {out['forward_takes'] or 'no'} image "
                "inputs (pixel_values, image_grid_thw needed)"
            )
            return out
        del model

        if image_forward:
            out["stage"] = "forward"
            # flash attention has no CPU kernel: the tiny forward runs eager attention then
            tiny_attn = "eager" if "flash" in ops.attn_implementation else ops.attn_implementation
            tiny_ops = OpsImplementationConfig(**{**kw, "attn_implementation": tiny_attn})
            out["forward"] = _tiny_image_forward(raw, build_foundation_model, tiny_ops)
        out["stage"] = "ok"
    except BaseException as exc:  # SystemExit/KeyboardInterrupt in VeOmni's import: report them too
        out["error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:600]}"
    finally:
        out["seconds"] = round(time.perf_counter() - t0, 3)
    return out


def _tiny_image_forward(raw: dict[str, Any], build_foundation_model: Any, ops: Any) -> dict[str, Any]:
    """One bf16 forward of a 1-layer copy of the folder's config (``raw``: its config.json) built by VeOmni's
    builder on the CPU with random weights, on one synthetic image.

    The copy keeps the vocabulary, token ids, patch/merge sizes and position-embedding grid; depths become 1
    (deepstack ``[0]``), widths 16-64, experts 2. Inputs: ``image_grid_thw`` [[1, 2m, 2m]] (m = spatial merge),
    ``pixel_values`` (4m^2, 3 * temporal_patch * patch^2) random, ``input_ids`` <|vision_start|> + 4 image tokens
    + <|vision_end|> + 2 text ids, and the placeholder masks verl 0.8.0's
    ``VeOmniEngine._apply_veomni_input_transforms`` passes (so no process group is needed). ``ops``: the
    ``OpsImplementationConfig`` to build with (a CPU-runnable attention).

    Returns:
        {"loss": float, "image_tokens": 4}. Raises whatever VeOmni's forward raises (e.g. "currently supports
        text-only inputs ... pixel_values"), or ValueError for a non-finite loss.
    """
    import copy
    import math
    import tempfile

    import torch

    cfg = copy.deepcopy(raw)
    text, vision = cfg.setdefault("text_config", {}), cfg.setdefault("vision_config", {})
    text.update(
        hidden_size=64,
        intermediate_size=64,
        moe_intermediate_size=16,
        num_experts=2,
        num_experts_per_tok=1,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        decoder_sparse_step=1,
        mlp_only_layers=[],
    )
    rope = dict(text.get("rope_scaling") or {"rope_type": "default"})
    if "mrope_section" in rope:
        rope["mrope_section"] = [4, 2, 2]  # sums to head_dim / 2
    text["rope_scaling"] = rope
    vision.update(
        depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=64, deepstack_visual_indexes=[0]
    )
    patch, tpatch = int(vision.get("patch_size", 16)), int(vision.get("temporal_patch_size", 2))
    merge = int(vision.get("spatial_merge_size", 2))
    with tempfile.TemporaryDirectory(prefix="vlgrpo-veomni-") as tmp:
        with open(os.path.join(tmp, "config.json"), "w", encoding="utf-8") as fh:
            json.dump(cfg, fh)
        torch.manual_seed(0)
        model = build_foundation_model(tmp, torch_dtype="bfloat16", init_device="cpu", ops_implementation=ops)
    grid = torch.tensor([[1, 2 * merge, 2 * merge]])
    n_image = int(grid.prod()) // merge**2
    pixel_values = torch.randn(int(grid.prod()), 3 * tpatch * patch * patch)
    ids = torch.tensor(
        [[cfg["vision_start_token_id"]] + [cfg["image_token_id"]] * n_image + [cfg["vision_end_token_id"], 13, 14]]
    )
    with torch.no_grad():
        res = model(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            pixel_values=pixel_values,
            image_grid_thw=grid,
            labels=ids,
            image_mask=ids == cfg["image_token_id"],
            video_mask=ids == cfg.get("video_token_id", -1),
        )
    loss = float(res.loss)
    if not math.isfinite(loss):
        raise ValueError(f"the forward with one image gave a non-finite loss {loss}")
    return {"loss": round(loss, 4), "image_tokens": n_image}


def main(argv: list[str] | None = None) -> int:
    """Child entry: ``python -m vlgrpo.preflight.veomni_build MODEL_DIR [ATTN [DTYPE]]``; prints one result line
    (``RESULT_MARK`` + JSON of :func:`build_on_meta`). Exit 0 when built, 2 when not."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or len(args) > 3:
        print(
            "usage: python -m vlgrpo.preflight.veomni_build MODEL_DIR [ATTN_IMPLEMENTATION [TORCH_DTYPE]]",
            file=sys.stderr,
        )
        return 2
    result = build_on_meta(
        args[0],
        attn_implementation=args[1] if len(args) > 1 else "eager",
        torch_dtype=args[2] if len(args) > 2 else "bfloat16",
    )
    sys.stdout.flush()
    print(RESULT_MARK + json.dumps(result), flush=True)
    return 0 if result.get("stage") == "ok" else 2


def run_child(
    model_path: str,
    *,
    attn_implementation: str = "eager",
    torch_dtype: str = "bfloat16",
    timeout_s: float = DEFAULT_TIMEOUT_S,
    python: str | None = None,
) -> dict[str, Any]:
    """:func:`build_on_meta` in a fresh interpreter that sees this process's ``sys.path`` (so it finds the same
    VeOmni). Returns its dict; ``stage`` ``"child"`` with ``error`` when the child printed no result (crash,
    timeout)."""
    code = (
        "import sys, json; sys.path[:0] = json.loads(sys.argv[1]); "
        "from vlgrpo.preflight.veomni_build import main; sys.exit(main(sys.argv[2:]))"
    )
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    cmd = [python or sys.executable, "-c", code, json.dumps(paths), model_path, attn_implementation, torch_dtype]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {"stage": "child", "error": f"the build did not finish within {timeout_s:.0f} s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_MARK):
            result: dict[str, Any] = json.loads(line[len(RESULT_MARK) :])
            return result
    tail = " ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])[:600]
    return {"stage": "child", "error": f"exit {proc.returncode} without a result: {tail}"}


def check_veomni_build(
    work: Any, model_path: str, report: Report, *, pinned: str, timeout_s: float = DEFAULT_TIMEOUT_S
) -> dict[str, Any]:
    """B19: add a ``rules.veomni-build`` error when VeOmni cannot build the folder's model on this transformers.

    Call only for ``model_engine=veomni`` with VeOmni installed and a clean Qwen3-VL model folder. Reads the
    actor's ``veomni.attn_implementation`` and ``veomni.mixed_precision`` (as verl does) from ``work`` (the
    resolved verl config). Runs :func:`run_child` (3-4 s on an idle 2-core machine, mostly the VeOmni + torch
    import).

    Returns:
        the summary entry ``{"stage", "model_class", "parameters", "forward", "seconds"}`` (plus ``error`` on
        failure).
    """
    node = (work.actor_rollout_ref.get("actor") or {}).get("veomni") or {}
    attn = str(node.get("attn_implementation") or "flash_attention_2")
    dtype = "float32" if node.get("mixed_precision") else "bfloat16"
    res = run_child(model_path, attn_implementation=attn, torch_dtype=dtype, timeout_s=timeout_s)
    summary = {k: res.get(k) for k in ("stage", "model_class", "parameters", "forward", "seconds")}
    if res.get("stage") == "ok":
        return summary
    summary["error"] = res.get("error")
    where = Where(key="model_engine", file=os.path.join(model_path, "config.json"))
    ver = res.get("veomni_version") or "here"
    tf = res.get("transformers_version") or "this transformers"
    fix_pin = f"pip install --no-deps veomni=={pinned} (with transformers 4.57.6, as the images pin)"
    why = (
        "verl's VeOmni engine builds the actor with VeOmni's build_foundation_model in every training worker, "
        "after Ray start (verl issue #6146)"
    )
    stage, err = res.get("stage"), str(res.get("error") or "")
    if stage == "registry":
        what = (
            f"VeOmni {ver} has no model for model_type {res.get('model_type')!r} (its MODELING_REGISTRY lists "
            f"{', '.join(res.get('registered') or []) or 'nothing'})"
        )
    elif stage == "vision" or "text-only" in err or "pixel_values" in err:
        what = f"VeOmni {ver} cannot run this folder's vision-language model on transformers {tf}: {err}"
        why = (
            'the first forward with images fails: VeOmni raised "currently supports text-only inputs ... '
            'pixel_values ... not supported yet" for a VL model (verl issue #6146)'
        )
    elif stage == "forward":
        what = (
            f"VeOmni {ver} builds {res.get('model_class')}, but one forward with one image fails on "
            f"transformers {tf}: {err}"
        )
    elif stage == "import":
        what = f"VeOmni cannot be imported here: {err}"
        fix_pin = (
            f"install VeOmni's runtime needs in the image (VeOmni is installed --no-deps), then "
            f"pip install --no-deps veomni=={pinned}"
        )
    elif stage == "child":
        what = f"building the model with VeOmni on the meta device failed: {err}"
    else:
        what = f"VeOmni {ver} cannot build {res.get('architecture') or 'the model'} on transformers {tf}: {err}"
    report.add(Finding("rules.veomni-build", ERROR, what, where, why, fix_pin))
    return summary


if __name__ == "__main__":
    raise SystemExit(main())
