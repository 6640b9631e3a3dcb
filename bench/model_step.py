#!/usr/bin/env python3
"""Benchmark: one training step (forward + backward) of Qwen3-VL-30B-A3B cut to 4 text layers and 2 vision blocks,
the pinned loop, the vlgrpo patches, Liger-Kernel and both together, side by side in one run.

Model: the real config (``assets/models/qwen3-vl-30b-a3b-instruct/config.json``) at full widths (text hidden 2048,
128 experts, moe_intermediate 768, top-8, vocabulary 151936; vision hidden 1152, 2304 positions), 4 text layers
(every one a sparse MoE layer, as in the real model) and 2 vision blocks (deepstack taps at both), bf16 parameters,
sdpa attention, built on the GPU from one seed (identical weights in every contender). Batches (``--modes``):
``image``: the first Geometry3K row of ``assets/geo3k-sample`` (its image and problem through the real processor and
chat template, then the answer and the problem text repeated in the assistant turn up to exactly ``--tokens``
tokens, 4,096); ``text``: the same without the image (the problem through the chat template, the same assistant
turn, ``--tokens`` tokens). Labels = the ids with the vision tokens ignored. Train mode.

Contenders (``--contenders``), each in its own interpreter started by this script (the patch loader works only at
start-up, as in an image), with the same seed, batches and weights; each child runs every mode, text first:
- ``pinned``: ``VLGRPO_PATCHES=off`` (transformers 4.57.6 as shipped: the per-expert loop, ...);
- ``patched``: the vlgrpo sitecustomize (``python/`` on PYTHONPATH), every patch that applies (``patched2``: the
  same again, for the run-to-run spread; ``liger+patched2`` likewise);
- ``liger``: ``VLGRPO_PATCHES=off`` plus Liger-Kernel applied to the built model as verl 0.8.0's ``use_liger``
  does (``liger_kernel.transformers.monkey_patch._apply_liger_kernel_to_instance(model=...,
  fused_linear_cross_entropy=False, swiglu=True)``, verl/workers/engine/fsdp/transformer_impl.py): on
  transformers 4.x that is Liger's RoPE and RMSNorm (its SwiGLU experts need transformers 5);
- ``liger+patched``: the same on top of the vlgrpo patches;
- ``liger-flce+patched``: Liger's own defaults on top of the vlgrpo patches, fused linear cross-entropy included
  (the loss without materialising the logits; verl turns it off because it computes log-probs itself);
- ``fp32``: the reference: ``VLGRPO_PATCHES=off``, the same bf16-built weights cast to float32, float32 compute;
  one step per mode.

Each child times ``--steps`` steps after ``--warmup`` per mode (CUDA synchronised wall clock around forward +
backward; median), the mode's first step (the child's first step is the process's first call), peak memory
over the timed steps, and reports the first step's loss, total gradient norm and every parameter's gradient
norm. The parent compares every contender with the fp32 reference: loss, total gradient norm, per-parameter
gradient norms (median and worst relative difference); "within bf16 noise" = no worse than 2x the pinned bf16
loop's own difference from the fp32 reference (loss and median; worst per-parameter 3x).

Needs transformers 4.57.6 (+ tokenizers) importable in the children: ``--site`` (default ``$VLGRPO_GPU_SITE``)
is put on their PYTHONPATH (tests/gpu/run.sh installs the carried wheels there), and for the Liger contenders
liger-kernel 0.8.4 (the newest release that imports on transformers 4.x; 0.8.5 requires transformers >= 5.0).

Usage (see bench/RESULTS.md):
    python bench/model_step.py --out model_step.json
    python bench/model_step.py --device cpu --smoke --contenders pinned,patched --steps 1 --tokens 512  # CPU check
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODEL_DIR = REPO / "assets" / "models" / "qwen3-vl-30b-a3b-instruct"
GEO3K = REPO / "assets" / "geo3k-sample"
VISION_TOKENS = (151652, 151653, 151655, 151656)  # vision start/end, image pad, video pad


CONTENDERS = {  # name: (label, vlgrpo patches, liger mode, dtype)
    "pinned": ("pinned loop (4.57.6, no patches)", False, None, "bf16"),
    "patched": ("vlgrpo patches", True, None, "bf16"),
    "liger": ("Liger (verl use_liger)", False, "verl", "bf16"),
    "liger+patched": ("Liger (verl use_liger) + vlgrpo", True, "verl", "bf16"),
    "liger-flce+patched": ("Liger incl. fused linear CE + vlgrpo", True, "all", "bf16"),
    "patched2": ("vlgrpo patches (again)", True, None, "bf16"),
    "liger+patched2": ("Liger (verl use_liger) + vlgrpo (again)", True, "verl", "bf16"),
    "fp32": ("fp32 reference (no patches)", False, None, "fp32"),
}
DEFAULT_CONTENDERS = "fp32,pinned,patched,liger+patched,liger,liger-flce+patched,patched2,liger+patched2"


def child_env(patched: bool, site: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLGRPO_PATCHES")}
    parts = [str(REPO / "python"), str(REPO / "python" / "src")] if patched else []
    parts += [site] if site else []
    parts += [
        p
        for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
        if p and Path(p).resolve() not in (REPO / "python", REPO / "python" / "src") and p != site
    ]
    env["PYTHONPATH"] = os.pathsep.join(parts)
    if not patched:
        env["VLGRPO_PATCHES"] = "off"
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1", TOKENIZERS_PARALLELISM="false")
    return env


# ----------------------------------------------------------------------------------------------------------------
# Child: build, step, report
# ----------------------------------------------------------------------------------------------------------------
def build_batch(tokens: int, device, mode: str = "image"):
    import torch
    from PIL import Image
    from transformers import AutoProcessor

    proc = AutoProcessor.from_pretrained(str(MODEL_DIR))
    with open(GEO3K / "hiyouga-geometry3k-format" / "rows.jsonl", encoding="utf-8") as f:
        row = json.loads(f.readline())
    question = row["problem"].replace("<image>", "").strip()
    if mode == "image":
        image = Image.open(GEO3K / row["image"]).convert("RGB")
        msgs = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]
        prompt = proc.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        batch = dict(proc(text=[prompt], images=[image], return_tensors="pt"))  # the image row through the processor
    else:
        msgs = [{"role": "user", "content": [{"type": "text", "text": question}]}]
        prompt = proc.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        batch = dict(proc(text=[prompt], return_tensors="pt"))
    answer = proc.tokenizer(row["answer"] + "<|im_end|>", return_tensors="pt")["input_ids"]
    filler = proc.tokenizer(" " + question + " " + row["answer"], return_tensors="pt")["input_ids"]
    need = max(tokens - batch["input_ids"].shape[1] - answer.shape[1], 0)
    repeat = -(-need // filler.shape[1]) if need else 0
    # the assistant turn: the answer, then the problem and answer text repeated up to `tokens` tokens
    ids = torch.cat([batch["input_ids"], answer] + [filler] * repeat, dim=1)[:, :tokens]
    batch["input_ids"], batch["attention_mask"] = ids, torch.ones_like(ids)
    labels = batch["input_ids"].clone()
    for tid in VISION_TOKENS:
        labels[labels == tid] = -100
    batch["labels"] = labels
    grids = [list(map(int, r)) for r in batch["image_grid_thw"]] if "image_grid_thw" in batch else []
    return {k: v.to(device) for k, v in batch.items()}, grids


SMOKE_TEXT = {
    "hidden_size": 64,
    "moe_intermediate_size": 32,
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "intermediate_size": 128,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
}


def build_model(device, seed: int, smoke: bool = False, dtype: str = "bf16"):
    import torch
    from transformers import Qwen3VLMoeConfig, Qwen3VLMoeForConditionalGeneration

    d = json.loads((MODEL_DIR / "config.json").read_text())
    d["text_config"].update(num_hidden_layers=4)
    d["vision_config"].update(depth=2, deepstack_visual_indexes=[0, 1])
    if smoke:  # narrow text model: only to check this script on a CPU
        d["text_config"].update(SMOKE_TEXT)
        d["vision_config"]["out_hidden_size"] = SMOKE_TEXT["hidden_size"]
    d.pop("transformers_version", None)
    d["text_config"].pop("dtype", None)
    cfg = Qwen3VLMoeConfig(**d)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    with torch.device(device):
        model = Qwen3VLMoeForConditionalGeneration._from_config(cfg, dtype=torch.bfloat16)
    model = model.to(device, torch.bfloat16)
    if dtype == "fp32":  # the same (bf16-valued) weights, float32 compute
        model = model.float()
    return model.train()


def apply_liger(model, mode: str) -> dict:
    """Liger-Kernel on the built model: ``verl`` as verl 0.8.0's use_liger, ``all`` Liger's defaults (with FLCE)."""
    import liger_kernel
    from liger_kernel.transformers.monkey_patch import _apply_liger_kernel_to_instance

    kwargs = {"fused_linear_cross_entropy": False, "swiglu": True} if mode == "verl" else {}
    _apply_liger_kernel_to_instance(model=model, **kwargs)
    from transformers.models.qwen3_vl_moe import modeling_qwen3_vl_moe as m

    norms = [mod for mod in model.modules() if "RMSNorm" in type(mod).__name__]
    liger_norms = sum(
        "liger" in getattr(getattr(vars(mod).get("forward"), "__func__", None), "__module__", "")
        or type(mod).__module__.startswith("liger")
        for mod in norms
    )
    return {
        "liger_version": getattr(liger_kernel, "__version__", None) or _dist_version("liger-kernel"),
        "liger_kwargs": kwargs,
        "rope": getattr(m.apply_rotary_pos_emb, "__module__", "?"),
        "rms_norm_classes": sorted({type(mod).__name__ for mod in norms}),
        "rms_norm_liger": f"{liger_norms} of {len(norms)}",
        "forward": getattr(type(model).forward, "__module__", "?")
        if "forward" not in vars(model)
        else getattr(model.forward, "__module__", "?"),
        "experts": type(model.model.language_model.layers[0].mlp.experts).__module__,
    }


def _dist_version(name):
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:
        return None


def child(args) -> int:
    import torch
    import transformers

    label, patched, liger, dtype = CONTENDERS[args.contender]
    device = torch.device(args.device)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    t_start = time.perf_counter()
    model = build_model(device, args.seed, args.smoke, dtype)
    liger_info = apply_liger(model, liger) if liger else None
    build_s = time.perf_counter() - t_start
    from transformers.models.qwen3_vl_moe import modeling_qwen3_vl_moe as m

    bound = {
        name: getattr(getattr(m, cls), attr)
        for name, (cls, attr) in {
            "experts": ("Qwen3VLMoeTextExperts", "forward"),
            "moe_block": ("Qwen3VLMoeTextSparseMoeBlock", "forward"),
            "pos_embed": ("Qwen3VLMoeVisionModel", "fast_pos_embed_interpolate"),
            "text_rotary": ("Qwen3VLMoeTextRotaryEmbedding", "forward"),
        }.items()
    }
    steps = 0 if dtype == "fp32" else args.steps
    warmup = 0 if dtype == "fp32" else args.warmup
    modes = {}
    for mode in args.modes.split(","):
        batch, grids = build_batch(args.tokens, device, mode)

        def step():
            model.zero_grad(set_to_none=True)
            loss = model(**batch).loss
            loss.backward()
            return loss

        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
        sync()
        t0 = time.perf_counter()
        loss = step()
        sync()
        first_ms = (time.perf_counter() - t0) * 1e3
        first_peak = torch.cuda.max_memory_allocated(device) / (1 << 30) if device.type == "cuda" else None
        norms = {n: float(p.grad.float().norm()) for n, p in model.named_parameters() if p.grad is not None}
        total = float(sum(v * v for v in norms.values()) ** 0.5)
        loss_v = float(loss.detach().float())
        del loss
        for _ in range(warmup):
            step()
        times = []
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        for _ in range(steps):
            sync()
            t0 = time.perf_counter()
            step()
            sync()
            times.append((time.perf_counter() - t0) * 1e3)
        model.zero_grad(set_to_none=True)
        modes[mode] = {
            "tokens": int(batch["input_ids"].shape[1]),
            "image_grid_thw": grids,
            "loss": loss_v,
            "grad_norm_total": total,
            "grad_norms": norms,
            "first_step_ms": first_ms,
            "first_step_peak_gib": first_peak,
            "step_ms": times,
            "step_median_ms": statistics.median(times) if times else None,
            "peak_memory_gib": (
                torch.cuda.max_memory_allocated(device) / (1 << 30) if device.type == "cuda" and times else None
            ),
        }
        del batch
    report = {
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "dtype": dtype,
        "vlgrpo_loaded": any(k == "vlgrpo" or k.startswith("vlgrpo.") for k in sys.modules),
        "bound_patches": {k: getattr(v, "__vlgrpo_patch__", None) for k, v in bound.items()},
        "liger": liger_info,
        "build_s": round(build_s, 2),
        "params": sum(p.numel() for p in model.parameters()),
        "modes": modes,
    }
    Path(args.child_out).write_text(json.dumps(report))
    return 0


# ----------------------------------------------------------------------------------------------------------------
# Parent: both contenders, comparison, table
# ----------------------------------------------------------------------------------------------------------------
def liger_missing(patched: bool, site: str | None) -> str | None:
    """Why liger_kernel cannot be imported in a child (None when it can)."""
    proc = subprocess.run(
        [sys.executable, "-c", "import liger_kernel.transformers.monkey_patch"],
        env=child_env(patched, site),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(REPO),
    )
    return None if proc.returncode == 0 else (proc.stderr.strip().splitlines() or ["import failed"])[-1][:300]


def run_child(name, args, out_dir: Path) -> dict:
    label, patched, liger, _dtype = CONTENDERS[name]
    if liger and (why := liger_missing(patched, args.site)):
        return {"name": name, "label": label, "skipped": f"liger-kernel not importable: {why}"}
    slug = name.replace("+", "_")
    out = out_dir / f"model_step_{slug}.json"
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        "--contender",
        name,
        "--child-out",
        str(out),
        "--device",
        args.device,
        "--tokens",
        str(args.tokens),
        "--steps",
        str(args.steps),
        "--modes",
        args.modes,
        "--warmup",
        str(args.warmup),
        "--seed",
        str(args.seed),
    ] + (["--smoke"] if args.smoke else [])
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd, env=child_env(patched, args.site), capture_output=True, text=True, timeout=args.timeout, cwd=str(REPO)
        )
    except subprocess.TimeoutExpired as exc:
        return {"name": name, "label": label, "error": f"timed out after {exc.timeout} s"}
    (out_dir / f"model_step_{slug}.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        return {"name": name, "label": label, "error": f"exit {proc.returncode}: {proc.stderr[-1500:]}"}
    res = json.loads(out.read_text())
    res["name"], res["label"], res["wall_s"] = name, label, round(time.perf_counter() - t0, 1)
    print(
        f"  {name}: {res['wall_s']} s; "
        + "; ".join(
            f"{m}: first {r['first_step_ms']:.0f} ms, median {r['step_median_ms'] or 0:.1f} ms, loss {r['loss']:.5f}"
            for m, r in res["modes"].items()
        ),
        file=sys.stderr,
        flush=True,
    )
    return res


def compare(a: dict, b: dict) -> dict:
    """a against the reference b (one mode each)."""
    names = sorted(set(a["grad_norms"]) & set(b["grad_norms"]))
    per = sorted(
        ((abs(a["grad_norms"][n] - b["grad_norms"][n]) / max(b["grad_norms"][n], 1e-30), n) for n in names),
        reverse=True,
    )
    return {
        "loss_rel": abs(a["loss"] - b["loss"]) / abs(b["loss"]),
        "grad_norm_total_rel": abs(a["grad_norm_total"] - b["grad_norm_total"]) / b["grad_norm_total"],
        "param_norm_rel_median": statistics.median(v for v, _ in per),
        "param_norm_rel_worst": per[:3],
        "params_compared": len(names),
        "params_missing": len(set(a["grad_norms"]) ^ set(b["grad_norms"])),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--modes", default="text,image", help="comma-separated: text, image")
    ap.add_argument(
        "--contenders",
        default=DEFAULT_CONTENDERS,
        help=f"comma-separated, run in this order, of: {', '.join(CONTENDERS)}",
    )
    ap.add_argument(
        "--site",
        default=os.environ.get("VLGRPO_GPU_SITE"),
        help="a --target dir holding transformers 4.57.6 for the children (default $VLGRPO_GPU_SITE)",
    )
    ap.add_argument("--timeout", type=int, default=300, help="seconds per child")
    ap.add_argument("--out", help="the results as JSON (the children's files go beside it)")
    ap.add_argument("--smoke", action="store_true", help="narrow text widths (a CPU check of this script)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--contender", help=argparse.SUPPRESS)
    ap.add_argument("--child-out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    names = [n.strip() for n in args.contenders.split(",") if n.strip()]
    bad = [n for n in names + [m for m in args.modes.split(",")] if n not in CONTENDERS and n not in ("text", "image")]
    if bad:
        ap.error(f"unknown contender or mode {bad}; contenders: {', '.join(CONTENDERS)}; modes: text, image")
    if args.child:
        return child(args)
    out_dir = Path(args.out).resolve().parent if args.out else Path.cwd()
    out_dir.mkdir(parents=True, exist_ok=True)
    runs = [run_child(n, args, out_dir) for n in names]
    cmp = {}
    ref = next((r for r in runs if r.get("name") == "fp32" and "error" not in r), None)
    for r in runs:
        if "error" in r or "skipped" in r or ref is None:
            continue
        cmp[r["name"]] = {m: compare(r["modes"][m], ref["modes"][m]) for m in r["modes"] if m in ref["modes"]}
    meta = {
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "python": platform.python_version(),
        "site": args.site,
        "modes": args.modes.split(","),
    }
    text = render(meta, runs, cmp)
    print(text)
    if args.out:
        Path(args.out).write_text(
            json.dumps(
                {
                    "meta": meta,
                    "runs": [
                        {
                            k: (
                                {m: {kk: vv for kk, vv in mv.items() if kk != "grad_norms"} for m, mv in v.items()}
                                if k == "modes"
                                else v
                            )
                            for k, v in r.items()
                        }
                        for r in runs
                    ],
                    "compare": cmp,
                },
                indent=1,
            )
            + "\n"
        )
        Path(args.out).with_suffix(".md").write_text(text + "\n")
    return 0 if ref is not None and len(cmp) == len([r for r in runs if "skipped" not in r]) else 1


def render(meta, runs, cmp) -> str:
    lines = [f"Qwen3-VL-30B-A3B, 4 text layers + 2 vision blocks, full widths, train fwd+bwd; {meta['utc']}", ""]
    for r in runs:
        if "error" in r or "skipped" in r:
            lines.append(f"- {r['label']}: {r.get('error') or 'skipped: ' + r['skipped']}")
    ok = [r for r in runs if "error" not in r and "skipped" not in r]
    if not ok:
        return "\n".join(lines)
    r0 = ok[0]
    lines += [f"transformers {r0['transformers']}, torch {r0['torch']}; {r0['params'] / 1e9:.2f} B parameters"]
    for r in ok:
        if r.get("liger"):
            lg = r["liger"]
            lines.append(
                f"- {r['label']}: liger-kernel {lg['liger_version']} kwargs {lg['liger_kwargs']}"
                f"; rope from {lg['rope']}; RMSNorm classes {lg['rms_norm_classes']} (Liger forward: "
                f"{lg.get('rms_norm_liger', '?')}); "
                f"forward from {lg['forward']}; experts from {lg['experts']}"
            )
    pinned = next((r for r in ok if r["name"] == "pinned"), None)
    base = next((r for r in ok if r["name"] == "patched"), None)
    for mode in meta["modes"]:
        rm = next((r["modes"][mode] for r in ok if mode in r["modes"]), None)
        if rm is None:
            continue
        lines += [
            "",
            f"**{mode}** ({rm['tokens']} tokens, image grid {rm['image_grid_thw'] or 'none'})",
            "",
            "| contender | first step ms | step median ms (min-max) | vs vlgrpo patches | peak GiB (first step) "
            "| loss | loss rel vs fp32 | grad-norm rel vs fp32: total / median / worst (parameter) |",
            "|---|---:|---|---:|---|---:|---:|---|",
        ]
        for r in ok:
            m = r["modes"].get(mode)
            if m is None:
                continue
            c = cmp.get(r["name"], {}).get(mode)
            t = m["step_ms"]
            speed = (
                f"{base['modes'][mode]['step_median_ms'] / m['step_median_ms']:.2f}x"
                if base and t and mode in base["modes"]
                else ""
            )
            med = f"{m['step_median_ms']:.1f} ({min(t):.1f}-{max(t):.1f})" if t else "-"
            peak = f"{m['peak_memory_gib']:.2f}" if m["peak_memory_gib"] is not None else "-"
            peak += f" ({m['first_step_peak_gib']:.2f})" if m["first_step_peak_gib"] is not None else ""
            if c and r["name"] != "fp32":
                w = c["param_norm_rel_worst"][0]
                acc = (
                    f"{c['loss_rel']:.2g} | {c['grad_norm_total_rel']:.2g} / {c['param_norm_rel_median']:.2g} / "
                    f"{w[0]:.2g} ({w[1]})"
                )
            else:
                acc = "ref | ref"
            lines.append(
                f"| {r['label']} | {m['first_step_ms']:.0f} | {med} | {speed} | {peak} | {m['loss']:.5f} | {acc} |"
            )
        pc = cmp.get("pinned", {}).get(mode) if pinned else None
        if pc:
            verdict = []
            for r in ok:
                c = cmp.get(r["name"], {}).get(mode)
                if not c or r["name"] in ("fp32", "pinned"):
                    continue
                within = (
                    c["loss_rel"] <= max(2 * pc["loss_rel"], 1e-4)
                    and c["param_norm_rel_median"] <= 2 * pc["param_norm_rel_median"]
                    and c["param_norm_rel_worst"][0][0] <= 3 * pc["param_norm_rel_worst"][0][0]
                )
                verdict.append(f"{r['label']}: {'within' if within else 'NOT within'}")
            lines += ["", "bf16 noise (vs the pinned loop's own difference from fp32): " + "; ".join(verdict)]
        if base and mode in base["modes"]:
            b = base["modes"][mode]
            for r in ok:
                m = r["modes"].get(mode)
                if r["name"] in ("patched", "fp32", "pinned", "patched2") or not m or not m["step_ms"]:
                    continue
                speed = b["step_median_ms"] / m["step_median_ms"]
                lower = m["peak_memory_gib"] < b["peak_memory_gib"]
                lines.append(
                    f"- target {r['label']}: {speed:.2f}x the vlgrpo patches' step (>= 1.3x: "
                    f"{'met' if speed >= 1.3 else 'NOT met'}), peak {m['peak_memory_gib']:.2f} vs "
                    f"{b['peak_memory_gib']:.2f} GiB (lower: {'met' if lower else 'NOT met'})"
                )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
