#!/usr/bin/env python3
"""Benchmark: one training step (forward + backward) of Qwen3-VL-30B-A3B cut to 4 text layers and 2 vision blocks,
with and without the vlgrpo patches, side by side in one run.

Model: the real config (``assets/models/qwen3-vl-30b-a3b-instruct/config.json``) at full widths (text hidden 2048,
128 experts, moe_intermediate 768, top-8, vocabulary 151936; vision hidden 1152, 2304 positions), 4 text layers
(every one a sparse MoE layer, as in the real model) and 2 vision blocks (deepstack taps at both), bf16 parameters,
sdpa attention, built on the GPU from one seed (identical weights in both contenders). Batch: the first
Geometry3K row of ``assets/geo3k-sample`` (its image and problem through the real processor and chat template,
then the answer and the problem text repeated in the assistant turn up to exactly ``--tokens`` tokens, 4,096), labels
= the ids with the vision tokens ignored. Train mode.

Contenders, each in its own interpreter started by this script (the patch loader works only at start-up, as in an
image), with the same seed, batch and weights:
- ``without patches``: ``VLGRPO_PATCHES=off`` (transformers 4.57.6 as shipped: the per-expert loop, the
  original pos-embed interpolation, ...);
- ``with patches``: the vlgrpo sitecustomize (``python/`` on PYTHONPATH), every patch that applies.

Each child times ``--steps`` steps after ``--warmup`` (CUDA synchronised wall clock around forward + backward;
median), the first step too, peak memory, and reports the first step's loss, total gradient norm and every
parameter's gradient norm. The parent compares them: loss and total gradient norm within ``LOSS_RTOL`` /
``NORM_RTOL``, per-parameter norms summarised (median and worst).

Needs transformers 4.57.6 (+ tokenizers) importable in the children: ``--site`` (default ``$VLGRPO_GPU_SITE``)
is put on their PYTHONPATH (tests/gpu/run.sh installs the carried wheels there).

Usage (see bench/RESULTS.md):
    python bench/model_step.py --out model_step.json
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
LOSS_RTOL = 1e-2  # bf16 parameters and compute: the two sum the same products in other orders
NORM_RTOL = 2e-2
VISION_TOKENS = (151652, 151653, 151655, 151656)  # vision start/end, image pad, video pad


def child_env(patched: bool, site: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLGRPO_PATCHES")}
    parts = [str(REPO / "python"), str(REPO / "python" / "src")] if patched else []
    parts += [site] if site else []
    parts += [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
              if p and Path(p).resolve() not in (REPO / "python", REPO / "python" / "src") and p != site]
    env["PYTHONPATH"] = os.pathsep.join(parts)
    if not patched:
        env["VLGRPO_PATCHES"] = "off"
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1", TOKENIZERS_PARALLELISM="false")
    return env


# ----------------------------------------------------------------------------------------------------------------
# Child: build, step, report
# ----------------------------------------------------------------------------------------------------------------
def build_batch(tokens: int, device):
    import torch
    from PIL import Image
    from transformers import AutoProcessor

    proc = AutoProcessor.from_pretrained(str(MODEL_DIR))
    with open(GEO3K / "hiyouga-geometry3k-format" / "rows.jsonl", encoding="utf-8") as f:
        row = json.loads(f.readline())
    image = Image.open(GEO3K / row["image"]).convert("RGB")
    question = row["problem"].replace("<image>", "").strip()
    msgs = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]
    prompt = proc.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    batch = dict(proc(text=[prompt], images=[image], return_tensors="pt"))  # the image row through the processor
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
    return {k: v.to(device) for k, v in batch.items()}, [list(map(int, r)) for r in batch["image_grid_thw"]]


SMOKE_TEXT = {"hidden_size": 64, "moe_intermediate_size": 32, "num_experts": 8, "num_experts_per_tok": 2,
              "intermediate_size": 128, "num_attention_heads": 2, "num_key_value_heads": 1}


def build_model(device, seed: int, smoke: bool = False):
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
    return model.to(device, torch.bfloat16).train()


def child(args) -> int:
    import torch
    import transformers

    device = torch.device(args.device)
    batch, grids = build_batch(args.tokens, device)
    model = build_model(device, args.seed, args.smoke)
    from transformers.models.qwen3_vl_moe import modeling_qwen3_vl_moe as m

    bound = {name: getattr(getattr(m, cls), attr) for name, (cls, attr) in {
        "experts": ("Qwen3VLMoeTextExperts", "forward"), "moe_block": ("Qwen3VLMoeTextSparseMoeBlock", "forward"),
        "pos_embed": ("Qwen3VLMoeVisionModel", "fast_pos_embed_interpolate"),
        "text_rotary": ("Qwen3VLMoeTextRotaryEmbedding", "forward")}.items()}

    def step():
        model.zero_grad(set_to_none=True)
        loss = model(**batch).loss
        loss.backward()
        return loss

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    sync()
    t0 = time.perf_counter()
    loss = step()
    sync()
    first_ms = (time.perf_counter() - t0) * 1e3
    norms = {n: float(p.grad.float().norm()) for n, p in model.named_parameters() if p.grad is not None}
    total = float(sum(v * v for v in norms.values()) ** 0.5)
    for _ in range(args.warmup):
        step()
    times = []
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    for _ in range(args.steps):
        sync()
        t0 = time.perf_counter()
        step()
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    report = {
        "transformers": transformers.__version__, "torch": torch.__version__,
        "vlgrpo_loaded": any(k == "vlgrpo" or k.startswith("vlgrpo.") for k in sys.modules),
        "bound_patches": {k: getattr(v, "__vlgrpo_patch__", None) for k, v in bound.items()},
        "tokens": int(batch["input_ids"].shape[1]), "image_grid_thw": grids,
        "params": sum(p.numel() for p in model.parameters()),
        "loss": float(loss.detach().float()), "grad_norm_total": total, "grad_norms": norms,
        "first_step_ms": first_ms, "step_ms": times, "step_median_ms": statistics.median(times),
        "peak_memory_gib": torch.cuda.max_memory_allocated(device) / (1 << 30) if device.type == "cuda" else None,
    }
    Path(args.child_out).write_text(json.dumps(report))
    return 0


# ----------------------------------------------------------------------------------------------------------------
# Parent: both contenders, comparison, table
# ----------------------------------------------------------------------------------------------------------------
def run_child(label, patched, args, out_dir: Path) -> dict:
    out = out_dir / f"model_step_{'patched' if patched else 'original'}.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--child-out", str(out),
           "--device", args.device, "--tokens", str(args.tokens), "--steps", str(args.steps),
           "--warmup", str(args.warmup), "--seed", str(args.seed)] + (["--smoke"] if args.smoke else [])
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=child_env(patched, args.site), capture_output=True, text=True,
                          timeout=args.timeout, cwd=str(REPO))
    (out_dir / f"model_step_{'patched' if patched else 'original'}.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        return {"label": label, "error": f"exit {proc.returncode}: {proc.stderr[-1500:]}"}
    res = json.loads(out.read_text())
    res["label"], res["wall_s"] = label, round(time.perf_counter() - t0, 1)
    return res


def compare(a: dict, b: dict) -> dict:
    names = sorted(set(a["grad_norms"]) & set(b["grad_norms"]))
    per = sorted(((abs(a["grad_norms"][n] - b["grad_norms"][n]) / max(b["grad_norms"][n], 1e-30), n) for n in names),
                 reverse=True)
    return {"loss_rel": abs(a["loss"] - b["loss"]) / abs(b["loss"]),
            "grad_norm_total_rel": abs(a["grad_norm_total"] - b["grad_norm_total"]) / b["grad_norm_total"],
            "param_norm_rel_median": statistics.median(v for v, _ in per), "param_norm_rel_worst": per[:5],
            "params_compared": len(names), "params_missing": len(set(a["grad_norms"]) ^ set(b["grad_norms"]))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--site", default=os.environ.get("VLGRPO_GPU_SITE"),
                    help="a --target dir holding transformers 4.57.6 for the children (default $VLGRPO_GPU_SITE)")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per child")
    ap.add_argument("--out", help="the results as JSON (the children's files go beside it)")
    ap.add_argument("--smoke", action="store_true", help="narrow text widths (a CPU check of this script)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--child-out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args)
    out_dir = Path(args.out).resolve().parent if args.out else Path.cwd()
    out_dir.mkdir(parents=True, exist_ok=True)
    runs = [run_child("without patches", False, args, out_dir), run_child("with patches", True, args, out_dir)]
    original, patched = runs
    cmp = compare(patched, original) if not any("error" in r for r in runs) else {}
    meta = {"command": " ".join([os.path.basename(sys.executable), *sys.argv]),
            "utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "python": platform.python_version(), "site": args.site}
    print(render(meta, runs, cmp))
    if args.out:
        Path(args.out).write_text(json.dumps({"meta": meta, "runs": [{k: v for k, v in r.items() if k != "grad_norms"}
                                                                     for r in runs], "compare": cmp}, indent=1) + "\n")
    return 0 if cmp else 1


def render(meta, runs, cmp) -> str:
    lines = [f"Qwen3-VL-30B-A3B, 4 text layers + 2 vision blocks, full widths, bf16, train fwd+bwd; {meta['utc']}", ""]
    for r in runs:
        if "error" in r:
            lines.append(f"- {r['label']}: {r['error']}")
    ok = [r for r in runs if "error" not in r]
    if ok:
        r0 = ok[0]
        lines += [f"transformers {r0['transformers']}, torch {r0['torch']}; {r0['tokens']} tokens, image grid "
                  f"{r0['image_grid_thw']}; {r0['params'] / 1e9:.2f} B parameters", "",
                  "| contender | patches bound | first step ms | step median ms | steps | peak GiB | loss | total grad norm |",
                  "|---|---|---:|---:|---:|---:|---:|---:|"]
        for r in ok:
            bound = ", ".join(f"{k}: {v}" for k, v in r["bound_patches"].items() if v) or "none"
            lines.append(f"| {r['label']} | {bound} | {r['first_step_ms']:.0f} | {r['step_median_ms']:.1f} | "
                         f"{len(r['step_ms'])} | {r['peak_memory_gib'] or 0:.1f} | {r['loss']:.5f} | "
                         f"{r['grad_norm_total']:.5g} |")
    if cmp:
        original, patched = runs
        speed = original["step_median_ms"] / patched["step_median_ms"]
        lines += ["", f"- speed-up with the patches: {speed:.1f}x (bar >= 5x: {'met' if speed >= 5 else 'NOT met'})",
                  f"- loss relative difference {cmp['loss_rel']:.2g} (tolerance {LOSS_RTOL}: "
                  f"{'met' if cmp['loss_rel'] <= LOSS_RTOL else 'NOT met'}); total gradient norm "
                  f"{cmp['grad_norm_total_rel']:.2g} (tolerance {NORM_RTOL}: "
                  f"{'met' if cmp['grad_norm_total_rel'] <= NORM_RTOL else 'NOT met'})",
                  f"- per-parameter gradient norms ({cmp['params_compared']} parameters, {cmp['params_missing']} "
                  f"without a gradient in one run only): median relative difference "
                  f"{cmp['param_norm_rel_median']:.2g}; worst {[(round(v, 4), n) for v, n in cmp['param_norm_rel_worst']]}"]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
