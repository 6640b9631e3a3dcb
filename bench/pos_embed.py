#!/usr/bin/env python3
"""Benchmark: Qwen3-VL vision position-embedding interpolation, all contenders side by side in one process.

Contenders (each included when available, otherwise listed under "skipped" with the reason):

- ``transformers <v> method``: ``Qwen3VLVisionModel.fast_pos_embed_interpolate`` of the installed transformers
  (4.57.x-5.16.x have it; if a vlgrpo patch replaced it, its ``__wrapped__`` original is used), and of every
  ``--transformers-source`` (a transformers wheel, or a directory holding ``transformers/``, e.g. a
  ``pip install --target`` dir): its ``modeling_qwen3_vl.py`` is parsed and just that method is compiled in this
  process (it needs only ``torch``), so 4.57.6 can be measured next to an installed 5.17.
- ``transformers <v> vision_utils helper``: ``transformers.vision_utils.get_vision_interpolation_indices_and_weights``
  (transformers >= 5.17; installed, or compiled from a ``--transformers-source`` the same way) followed by the
  weighted embedding sum that 5.17's ``Qwen3VLVisionModel.forward`` applies:
  ``(pos_embed(indices) * weights[:, :, None]).sum(1)``, cast to the weight dtype as ``forward`` does.
- ``vlgrpo (warm cache)``: ``vlgrpo.patches.qwen3_vl_pos_embed.fast_pos_embed_interpolate`` after a first call;
  ``vlgrpo (cold cache)``: the same with its caches (``clear_cache()``: the per-(h, w) index cache and the
  host's per-length axis taps) cleared before every call (clearing not timed); on CUDA also ``vlgrpo
  embedding_bag, no Triton``: the path CUDA takes where Triton is unavailable. On CUDA with Triton, vlgrpo keeps
  no index cache (one fused kernel per call), so its warm and cold rows differ only by the axis taps.

Model sizes: Qwen3-VL-30B-A3B vision tower (hidden 1152, 2304 = 48x48 positions, spatial merge 2), bf16 by
default; ``grid_thw`` (int64) and the weight live on ``--device``.
Timing: CUDA events around each call (after a synchronize) on GPU, ``time.perf_counter`` on CPU; median and
IQR (25th-75th percentile) over the repetitions. Memory (CUDA only): ``max_memory_allocated`` after
``reset_peak_memory_stats`` minus the allocation before the call, i.e. the peak extra memory including the
output; reported next to the output size. Accuracy: max |output - float64 reference| where the reference is a
from-the-definition bilinear resampling (align_corners=True) of the same weights in float64.

First call per new batch (run before everything else, so each contender's first call in the process is in it):
``--first-call-batches`` (60) random batches of 1-16 images whose (h, w) are drawn from the size range of the
shipped Geometry3K sample through the processor's resize rule; the host wall time of one call on each (a new
combination of sizes every time: what a training run meets), forward under ``no_grad`` and forward+backward, as
max / median / total and the number over 5 ms, plus the contender's very first call. Triton re-specialising its
kernel on the row count or the number of images would show here as 1 s calls.

Usage (see bench/RESULTS.md for the committed runs):
    python bench/pos_embed.py --device cuda --transformers-source transformers-4.57.6-py3-none-any.whl --out r.json
    python bench/pos_embed.py --device cpu --transformers-source transformers-5.17.0-py3-none-any.whl
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
import types
from pathlib import Path

import torch
from torch import nn
from upstream_source import compile_functions, kind, read_source
from upstream_source import sources as upstream_sources

N_SIDE, MERGE, HIDDEN = 48, 2, 1152
MODELING = "transformers/models/qwen3_vl/modeling_qwen3_vl.py"
VISION_UTILS = "transformers/vision_utils.py"
HELPER = "get_vision_interpolation_indices_and_weights"


def _import_vlgrpo():
    try:
        from vlgrpo.patches import qwen3_vl_pos_embed
    except ImportError:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python" / "src"))
        from vlgrpo.patches import qwen3_vl_pos_embed
    return qwen3_vl_pos_embed


def cases(only=None):
    gen = torch.Generator().manual_seed(0)
    mixed = (torch.randint(4, 33, (256, 2), generator=gen) * 2).tolist()
    table = {
        "64 x 28x28": [[1, 28, 28]] * 64,
        "1 x 64x64": [[1, 64, 64]],
        "256 mixed (even 8..64, seed 0)": [[1, h, w] for h, w in mixed],
        "video 16 x 48x48": [[16, 48, 48]],
        "1 x 4x4 (verl text-only dummy)": [[1, 4, 4]],
    }
    if only:
        missing = [c for c in only if c not in table]
        if missing:
            raise SystemExit(f"--case {missing}: unknown; choose from {list(table)}")
        table = {k: v for k, v in table.items() if k in only}
    return table


class Tower(nn.Module):
    """The attributes the contenders read from a Qwen3-VL vision tower (only ``pos_embed`` has parameters)."""

    def __init__(self, hidden, dtype, device):
        super().__init__()
        self.pos_embed = nn.Embedding(N_SIDE * N_SIDE, hidden, device=device, dtype=dtype)
        with torch.no_grad():
            self.pos_embed.weight.normal_(0.0, 0.02, generator=torch.Generator(device=device).manual_seed(0))
        self.num_grid_per_side = N_SIDE
        self.spatial_merge_size = MERGE
        self.config = types.SimpleNamespace(spatial_merge_size=MERGE)
        self.interpolation_mode, self.interpolation_align_corners = "bilinear", True


# ----------------------------------------------------------------------------------------------------------------
# Loading contenders
# ----------------------------------------------------------------------------------------------------------------
def _method_uses_helper(func) -> bool:
    return HELPER in getattr(func, "__code__", types.SimpleNamespace(co_names=())).co_names


def _helper_contender(helper):
    def run(tower, grid_thw):
        idx, wts = helper(
            grid_thw,
            num_grid_per_side=tower.num_grid_per_side,
            mode="bilinear",
            align_corners=True,
            spatial_merge_size=tower.spatial_merge_size,
        )
        return (tower.pos_embed(idx) * wts[:, :, None]).sum(1).to(tower.pos_embed.weight.dtype)

    return run


def discover(paths, pe):
    contenders, skipped = {}, []
    try:
        import transformers

        installed = transformers.__version__
    except ImportError:
        installed = None
        skipped.append("installed transformers: not importable")
    seen = set()
    if installed:
        try:
            from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionModel

            method = getattr(Qwen3VLVisionModel, "fast_pos_embed_interpolate", None)
            if method is not None and getattr(method, "__vlgrpo_patch__", None):
                method = method.__wrapped__
            if method is None:
                skipped.append(f"transformers {installed} method: Qwen3VLVisionModel has no fast_pos_embed_interpolate")
            elif _method_uses_helper(method):
                skipped.append(f"transformers {installed} method: a deprecated wrapper of the vision_utils helper")
            else:
                contenders[f"transformers {installed} method"] = method
                seen.add(("method", installed))
        except ImportError as exc:
            skipped.append(f"transformers {installed} method: {exc}")
        try:
            from transformers import vision_utils

            contenders[f"transformers {installed} vision_utils helper"] = _helper_contender(
                getattr(vision_utils, HELPER)
            )
            seen.add(("helper", installed))
        except (ImportError, AttributeError):
            skipped.append(f"transformers {installed} vision_utils helper: not in this version (needs >= 5.17)")
    for src, version, text in upstream_sources(paths, MODELING):
        if text is None:
            skipped.append(f"{src}: no {MODELING} inside")
        elif ("method", version) not in seen:
            funcs = compile_functions(text, ["Qwen3VLVisionModel.fast_pos_embed_interpolate"], f"{src}::{MODELING}")
            func = funcs.get("Qwen3VLVisionModel.fast_pos_embed_interpolate")
            if func is None:
                skipped.append(f"transformers {version} method ({src.name}): no fast_pos_embed_interpolate")
            elif _method_uses_helper(func):
                skipped.append(f"transformers {version} method ({src.name}): a wrapper of the vision_utils helper")
            else:
                contenders[f"transformers {version} method [{kind(src)}]"] = func
                seen.add(("method", version))
        text = read_source(src, VISION_UTILS)
        if text is not None and ("helper", version) not in seen:
            funcs = compile_functions(text, ["_interpolation_axis_taps_weights", HELPER], f"{src}::{VISION_UTILS}")
            if HELPER in funcs:
                contenders[f"transformers {version} vision_utils helper [{kind(src)}]"] = _helper_contender(
                    funcs[HELPER]
                )
                seen.add(("helper", version))
            else:
                skipped.append(f"transformers {version} vision_utils ({src.name}): no {HELPER}")
    contenders["vlgrpo (warm cache)"] = pe.fast_pos_embed_interpolate
    contenders["vlgrpo (cold cache)"] = pe.fast_pos_embed_interpolate
    if torch.cuda.is_available():  # the path taken on CUDA without Triton
        contenders["vlgrpo embedding_bag, no Triton (warm cache)"] = lambda tower, grid: pe.interpolate_pos_embed(
            tower.pos_embed, grid, tower.num_grid_per_side, tower.spatial_merge_size, method="embedding_bag"
        )
    return contenders, skipped, installed


# ----------------------------------------------------------------------------------------------------------------
# Reference and measurement
# ----------------------------------------------------------------------------------------------------------------
def _axis(length: int):
    pos = torch.arange(length, dtype=torch.float64) * (N_SIDE - 1) / max(length - 1, 1)
    lo = pos.floor().long().clamp(max=N_SIDE - 1)
    return lo, (lo + 1).clamp(max=N_SIDE - 1), pos - lo


def max_error_vs_fp64(out, grid, weight):
    """Max |out - float64 bilinear reference|, one image at a time (bounded memory)."""
    table = weight.detach().double()
    err, start = 0.0, 0
    for t, h, w in grid:
        y0, y1, fy = (v.to(table.device) for v in _axis(h))
        x0, x1, fx = (v.to(table.device) for v in _axis(w))
        img = (
            table[y0[:, None] * N_SIDE + x0] * ((1 - fy)[:, None] * (1 - fx))[..., None]
            + table[y0[:, None] * N_SIDE + x1] * ((1 - fy)[:, None] * fx)[..., None]
            + table[y1[:, None] * N_SIDE + x0] * (fy[:, None] * (1 - fx))[..., None]
            + table[y1[:, None] * N_SIDE + x1] * (fy[:, None] * fx)[..., None]
        )  # (h, w, hidden)
        img = img.reshape(h // MERGE, MERGE, w // MERGE, MERGE, -1).transpose(1, 2).reshape(h * w, -1)
        for _ in range(t):
            err = max(err, (out[start : start + h * w].double() - img).abs().max().item())
            start += h * w
    if start != out.shape[0]:
        raise AssertionError(f"output has {out.shape[0]} rows, grid_thw needs {start}")
    return err


def measure(fn, tower, grid, device, reps, warmup, budget_s, before=None):
    cuda = device.type == "cuda"
    times = []
    for _ in range(warmup):
        if before:
            before()
        fn(tower, grid)
    if cuda:
        torch.cuda.synchronize()
    t_start = time.perf_counter()
    while len(times) < reps:
        if before:
            before()
        if cuda:
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn(tower, grid)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn(tower, grid)
            times.append((time.perf_counter() - t0) * 1e3)
        if len(times) >= 5 and time.perf_counter() - t_start > budget_s:
            break
    return times


def peak_memory(fn, tower, grid, before=None):
    if before:
        before()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    out = fn(tower, grid)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base, out


def quantiles(times):
    q = statistics.quantiles(times, n=4, method="inclusive") if len(times) > 1 else [times[0]] * 3
    return {
        "median_ms": statistics.median(times),
        "p25_ms": q[0],
        "p75_ms": q[2],
        "min_ms": min(times),
        "reps": len(times),
    }


def geo3k_grid_ranges():
    """(h, w) ranges in patches of the shipped Geometry3K sample images through the real processor's resize rule
    (transformers' ``smart_resize``, factor patch 16 x merge 2, the model folder's min/max pixels), or ``None``
    when PIL or that function is not importable."""
    try:
        from PIL import Image
        from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize
    except ImportError:
        return None
    repo = Path(__file__).resolve().parents[1]
    pre = json.loads(
        (repo / "assets" / "models" / "qwen3-vl-30b-a3b-instruct" / "preprocessor_config.json").read_text()
    )
    factor = pre["patch_size"] * pre["merge_size"]
    hs, ws = [], []
    for path in sorted((repo / "assets" / "geo3k-sample").rglob("*.png")):
        width, height = Image.open(path).size
        h, w = smart_resize(
            height,
            width,
            factor=factor,
            min_pixels=pre["size"]["shortest_edge"],
            max_pixels=pre["size"]["longest_edge"],
        )
        hs.append(h // pre["patch_size"])
        ws.append(w // pre["patch_size"])
    return (min(hs), max(hs)), (min(ws), max(ws)), len(hs)


def new_batches(count, ranges, seed):
    """``count`` grid_thw lists of 1..16 images, each (h, w) uniform over the even sizes of ``ranges``."""
    (h0, h1), (w0, w1) = ranges
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        n = int(torch.randint(1, 17, (1,), generator=gen))
        hs = torch.randint(h0 // 2, h1 // 2 + 1, (n,), generator=gen) * 2
        ws = torch.randint(w0 // 2, w1 // 2 + 1, (n,), generator=gen) * 2
        out.append([[1, int(h), int(w)] for h, w in zip(hs, ws)])
    return out


def first_calls(contenders, tower, device, batches, backward: bool):
    """Host wall time (synchronised) of each contender's first call in this process (on ``batches[0]``) and of
    its first call on each later batch (a new combination of image sizes every time)."""
    rows = []
    for label, fn in contenders.items():
        times = []
        try:
            for grid in batches:
                grid_t = torch.tensor(grid, dtype=torch.long, device=device)
                tower.pos_embed.weight.grad = None
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                t0 = time.perf_counter()
                if backward:
                    out = fn(tower, grid_t)
                    out.float().sum().backward()
                else:
                    with torch.no_grad():
                        fn(tower, grid_t)
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                times.append((time.perf_counter() - t0) * 1e3)
            rest = times[1:]
            rows.append(
                {
                    "contender": label,
                    "backward": backward,
                    "first_in_process_ms": times[0],
                    "max_ms": max(rest),
                    "median_ms": statistics.median(rest),
                    "total_ms": sum(rest),
                    "over_5ms": sum(t > 5 for t in rest),
                    "batches": len(rest),
                }
            )
        except Exception as exc:
            rows.append({"contender": label, "backward": backward, "error": f"{type(exc).__name__}: {exc}"[:300]})
        print(
            f"  first calls ({'fwd+bwd' if backward else 'fwd'}) {label:50s} "
            f"{rows[-1].get('max_ms', float('nan')):9.2f} ms max",
            file=sys.stderr,
            flush=True,
        )
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--device",
        default="cuda" if torch.cuda.is_available() else "cpu",
        help="cuda, cuda:N or cpu (default: cuda if available)",
    )
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--hidden", type=int, default=HIDDEN, help="vision hidden size (default 1152)")
    ap.add_argument(
        "--transformers-source",
        action="append",
        default=[],
        metavar="PATH",
        help="a transformers wheel or a dir holding transformers/ (repeatable); its Qwen3-VL method "
        "and vision_utils helper join the run",
    )
    ap.add_argument("--case", action="append", default=None, help="run only this case (repeatable)")
    ap.add_argument(
        "--contender",
        action="append",
        default=None,
        help="run only contenders whose label contains this text (repeatable)",
    )
    ap.add_argument(
        "--skip-pair",
        action="append",
        default=[],
        metavar="CASE::CONTENDER",
        help="skip contenders whose label contains CONTENDER on cases whose name contains CASE "
        "(e.g. '256 mixed::5.17' where the host lacks the memory; listed in the output)",
    )
    ap.add_argument("--reps", type=int, default=50, help="timed calls per contender and case (max)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument(
        "--budget-s",
        type=float,
        default=5.0,
        help="stop timing a contender/case after this many seconds once it has 5 reps",
    )
    ap.add_argument(
        "--first-call-batches",
        type=int,
        default=60,
        help="new batches (1-16 geo3k-sized images each) of the first-call section, run first (0: skip)",
    )
    ap.add_argument("--out", help="also write the results as JSON to this file")
    args = ap.parse_args(argv)

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device visible; use --device cpu")
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    dtype = getattr(torch, args.dtype)
    pe = _import_vlgrpo()
    contenders, skipped, installed = discover(args.transformers_source, pe)
    if args.contender:
        contenders = {k: v for k, v in contenders.items() if any(s in k for s in args.contender)}
    tower = Tower(args.hidden, dtype, device)
    cuda = device.type == "cuda"
    results, first = [], []
    ranges = geo3k_grid_ranges() if args.first_call_batches else None
    if ranges:  # before anything else: each contender's first call in this process is measured here
        tower.pos_embed.weight.requires_grad_(True)
        once = {k: v for k, v in contenders.items() if "cold" not in k}  # warm/cold: the same function
        first += first_calls(once, tower, device, new_batches(args.first_call_batches + 1, ranges[:2], 1), False)
        first += first_calls(once, tower, device, new_batches(args.first_call_batches + 1, ranges[:2], 2), True)
        tower.pos_embed.weight.requires_grad_(False)
    elif args.first_call_batches:
        skipped.append("first-call section: PIL or transformers' smart_resize not importable")
    for case, grid in cases(args.case).items():
        grid_t = torch.tensor(grid, dtype=torch.long, device=device)
        out_rows = sum(t * h * w for t, h, w in grid)
        for label, fn in contenders.items():
            pair = next((p for p in args.skip_pair if p.split("::")[0] in case and p.split("::")[-1] in label), None)
            if pair:
                skipped.append(f"{label} on {case}: --skip-pair {pair!r}")
                continue
            before = pe.clear_cache if "cold" in label else None
            row = {"case": case, "contender": label, "rows": out_rows}
            try:
                with torch.no_grad():
                    if cuda:
                        peak, out = peak_memory(fn, tower, grid_t, before)
                        row["peak_extra_bytes"] = peak
                    else:
                        if before:
                            before()
                        out = fn(tower, grid_t)
                    row["output_bytes"] = out.numel() * out.element_size()
                    row["output_dtype"] = str(out.dtype).replace("torch.", "")
                    if out.device != device:
                        raise AssertionError(f"output on {out.device}, expected {device}")
                    row["max_abs_err_vs_fp64"] = max_error_vs_fp64(out, grid, tower.pos_embed.weight)
                    del out
                    row.update(
                        quantiles(measure(fn, tower, grid_t, device, args.reps, args.warmup, args.budget_s, before))
                    )
                if "vlgrpo" in label:
                    row["cache_bytes_after"] = pe.cache_info()["bytes"]
            except Exception as exc:  # report and go on: one failing contender must not hide the others
                row["error"] = f"{type(exc).__name__}: {exc}"[:300]
            results.append(row)
            print(
                f"  {case:32s} {label:60s} {row.get('median_ms', float('nan')):10.3f} ms {row.get('error', '')}",
                file=sys.stderr,
                flush=True,
            )
            if cuda:
                torch.cuda.empty_cache()

    meta = {
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "device": torch.cuda.get_device_name(device) if cuda else (platform.processor() or platform.machine()),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers_installed": installed,
        "dtype": args.dtype,
        "hidden": args.hidden,
        "positions": N_SIDE * N_SIDE,
        "merge": MERGE,
        "grid_device": str(device),
        "skipped": skipped,
        "transformers_sources": [str(Path(s).resolve()) for s in args.transformers_source],
        "first_call_grids": None if not ranges else {"h": ranges[0], "w": ranges[1], "sample_images": ranges[2]},
    }
    print(render(meta, results))
    if first:
        print(render_first(meta, first))
    if args.out:
        Path(args.out).write_text(json.dumps({"meta": meta, "results": results, "first_calls": first}, indent=1) + "\n")
    return 0


def render_first(meta, rows) -> str:
    g = meta["first_call_grids"]
    lines = [
        "",
        f"First call per new batch: {rows[0].get('batches', '?')} random batches of 1-16 images, h in "
        f"{g['h'][0]}..{g['h'][1]}, w in {g['w'][0]}..{g['w'][1]} patches (the {g['sample_images']} shipped "
        f"Geometry3K images through smart_resize); every batch a new combination of sizes. Host wall time, "
        f"synchronised. 'first in process' is the contender's first call (batch 0), not counted in the others.",
        "",
        "| contender | pass | first in process ms | max ms | median ms | total ms | calls over 5 ms |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        mode = "fwd+bwd" if r["backward"] else "fwd (no grad)"
        if "error" in r:
            lines.append(f"| {r['contender']} | {mode} | error: {r['error']} |||||")
            continue
        lines.append(
            f"| {r['contender']} | {mode} | {r['first_in_process_ms']:.1f} | {r['max_ms']:.2f} | "
            f"{r['median_ms']:.2f} | {r['total_ms']:.1f} | {r['over_5ms']} |"
        )
    return "\n".join(lines)


def _baseline(results, case, prefix):
    for r in results:
        if r["case"] == case and r["contender"].startswith(prefix) and "median_ms" in r:
            return r
    return None


def render(meta, results) -> str:
    lines = [
        f"Device: {meta['device']} ({meta['grid_device']}); torch {meta['torch']}"
        f"{' (CUDA ' + meta['cuda'] + ')' if meta['cuda'] else ''}; python {meta['python']}; "
        f"installed transformers {meta['transformers_installed']}; {meta['cpu_count']} CPUs, "
        f"{meta['torch_threads']} torch threads; {meta['dtype']}, hidden {meta['hidden']}, "
        f"{meta['positions']} positions, merge {meta['merge']}; {meta['utc']}",
        "",
    ]
    for note in meta["skipped"]:
        lines.append(f"- skipped: {note}")
    if meta["skipped"]:
        lines.append("")
    lines.append(
        "| case | contender | median ms | IQR ms (p25-p75) | min ms | reps | speed-up vs 4.57 method "
        "| vs 5.x helper | peak extra MiB | output MiB | peak/output | max abs err vs fp64 |"
    )
    lines.append("|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        if "error" in r:
            lines.append(f"| {r['case']} | {r['contender']} | error: {r['error']} ||||||||||")
            continue
        old = _baseline(results, r["case"], "transformers 4.57")
        helper = next(
            (x for x in results if x["case"] == r["case"] and "helper" in x["contender"] and "median_ms" in x), None
        )
        mib = 1 << 20
        peak = r.get("peak_extra_bytes")
        cells = [
            r["case"],
            r["contender"],
            f"{r['median_ms']:.3f}",
            f"{r['p25_ms']:.3f}-{r['p75_ms']:.3f}",
            f"{r['min_ms']:.3f}",
            str(r["reps"]),
            f"{old['median_ms'] / r['median_ms']:.1f}x" if old else "n/a",
            f"{helper['median_ms'] / r['median_ms']:.2f}x" if helper else "n/a",
            f"{peak / mib:.2f}" if peak is not None else "n/a",
            f"{r['output_bytes'] / mib:.2f}",
            f"{peak / r['output_bytes']:.2f}" if peak is not None else "n/a",
            f"{r['max_abs_err_vs_fp64']:.3g}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
