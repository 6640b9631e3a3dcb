"""Where the time of a call of vlgrpo's pos-embed interpolation goes on CUDA, with its index cache warm and cold.

Written to find why, in the first CUDA design (an index-build kernel, an LRU cache of per-(h, w) indices, a
gather kernel and a broadcast copy), a cold-cache call on 64 x 28x28 (bf16, hidden 1152, 2304 positions, merge
2) cost about 4x a warm one (GPU run 4, commit 7f2e85e, 2 x H200: host launch overhead of two kernels and the
cache book-keeping, not GPU work). The fused kernel that replaced it keeps no cache, so the
two calls should now cost the same. The script times the warm and cold calls with host wall clocks
(``time.perf_counter`` around the call plus ``torch.cuda.synchronize``), then each host-side step on its own,
then prints ``torch.profiler``'s table of operator times for 20 cold calls.

usage: PYTHONPATH=python/src python3 bench/pos_embed_cold_profile.py [--reps 200] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch


def _timed(fn, reps: int, before=None) -> dict:
    times = []
    for _ in range(reps):
        if before:
            before()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e6)
    q = statistics.quantiles(times, n=4, method="inclusive")
    return {
        "median_us": round(statistics.median(times), 1),
        "p25_us": round(q[0], 1),
        "p75_us": round(q[2], 1),
        "min_us": round(min(times), 1),
        "reps": reps,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--out", default=None, help="write the timings as JSON here")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to profile")
        return 0

    from vlgrpo.patches import qwen3_vl_pos_embed as pe

    dev = torch.device("cuda", 0)
    emb = torch.nn.Embedding(2304, 1152, device=dev, dtype=torch.bfloat16)
    grid = torch.tensor([[1, 28, 28]] * 64, device=dev)
    call = lambda: pe.interpolate_pos_embed(emb, grid, 48, 2)
    for _ in range(20):
        pe.clear_cache()
        call()
    rows = [(1, 28, 28)] * 64
    n = 48
    host = torch.arange(300, dtype=torch.long)
    results = {
        "warm call": _timed(call, args.reps),
        "cold call": _timed(call, args.reps, before=pe.clear_cache),
        "grid_thw.tolist()": _timed(lambda: grid.tolist(), args.reps),
        "_axis_taps (host)": _timed(lambda: pe._axis_taps([28], n), args.reps),
        "_plan_triton (host + copy)": _timed(lambda: pe._plan_triton(rows, n, 2, dev), args.reps),
        "_build (torch ops, cached paths)": _timed(lambda: pe._build([(28, 28)], n, 2, dev, torch.float32), args.reps),
        "pin_memory() of 300 int64": _timed(lambda: host.pin_memory(), args.reps),
        "pinned non_blocking copy": _timed(lambda: host.pin_memory().to(dev, non_blocking=True), args.reps),
        "pageable copy": _timed(lambda: host.to(dev), args.reps),
        "torch.empty x2 on cuda": _timed(
            lambda: (
                torch.empty((784, 4), dtype=torch.long, device=dev),
                torch.empty((784, 4), dtype=torch.float32, device=dev),
            ),
            args.reps,
        ),
    }
    width = max(map(len, results))
    print(f"{'step':<{width}}  median_us  p25-p75_us       min_us")
    for name, r in results.items():
        print(f"{name:<{width}}  {r['median_us']:>9}  {r['p25_us']:>7}-{r['p75_us']:<8} {r['min_us']:>7}")

    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            pe.clear_cache()
            call()
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30))
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(
                {"device": torch.cuda.get_device_name(dev), "torch": torch.__version__, "results": results},
                fh,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
