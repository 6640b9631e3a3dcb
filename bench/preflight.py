"""Wall and CPU time of ``python -m vlgrpo preflight`` on the demo's argv: a baseline checkout against this one,
run in turn (A B A B ...), each as a whole process, with the machine's load average.

Usage::

    git worktree add --detach ../vlgrpo-base <commit>        # the preflight to compare against
    .venv/bin/python bench/preflight.py --baseline ../vlgrpo-base/python/src [--runs 5] [--vllm PATHS]

The argv is the one ``make demo`` plans (scripts/demo.sh is run once into a temporary folder: converted Geometry3K
sample, 2 + 2 Atlas A3 nodes). ``--baseline`` is the ``python/src`` folder of another checkout of this repository;
its ``vlgrpo`` package is put first on PYTHONPATH of the baseline runs (same interpreter, same verl/transformers).
``--vllm PATHS`` (os.pathsep-separated, e.g. ``.cache/vllm-0.13.0/src:.cache/vllm-0.13.0/deps``) adds a third contender:
this checkout with ``--vllm-rules vllm`` (vLLM's own config classes imported in the preflight process).

Prints one Markdown table: per contender the first run (not counted) and the median, min and max of wall and CPU
(user + system of the child) seconds over ``--runs`` counted runs, the median ratio to the baseline of each A/B pair,
the exit codes, and the 1-minute load average before and after. The figures are for whole processes; the machine's
other users show in the load average and in the spread.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def demo_argv(out: str) -> str:
    """Run scripts/demo.sh into ``out`` and write the argv it plans to ``out/argv.txt`` (one element per line)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLGRPO_")}
    proc = subprocess.run(
        [os.path.join(REPO, "scripts", "demo.sh"), "--python", sys.executable, "--out", out],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    if proc.returncode != 0:
        sys.exit(f"bench: make demo failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    lines = open(os.path.join(out, "logs", "entrypoint.out"), encoding="utf-8").read().splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("# command ("))
    path = os.path.join(out, "argv.txt")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines[start + 1 :]) + "\n")
    return path


def run_once(cmd: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """(wall s, child CPU s, exit code) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc.returncode


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--baseline", required=True, help="python/src folder of the checkout to compare against")
    p.add_argument("--runs", type=int, default=5, help="counted runs per contender (default 5)")
    p.add_argument("--vllm", help="PYTHONPATH entries with vLLM 0.13.0 for a third contender (--vllm-rules vllm)")
    p.add_argument("--argv-file", help="use this argv instead of running make demo")
    args = p.parse_args()
    base_src = os.path.abspath(args.baseline)
    if not os.path.isdir(os.path.join(base_src, "vlgrpo", "preflight")):
        sys.exit(f"bench: {base_src} has no vlgrpo/preflight package")
    with tempfile.TemporaryDirectory(prefix="vlgrpo-bench-") as tmp:
        argv_file = args.argv_file or demo_argv(tmp)
        cmd = [sys.executable, "-m", "vlgrpo", "preflight", "--argv-file", argv_file]
        env = {k: v for k, v in os.environ.items() if not k.startswith("VLGRPO_")}
        contenders = {
            "baseline": (cmd, dict(env, PYTHONPATH=base_src)),
            "this checkout": (cmd, dict(env, PYTHONPATH=os.path.join(REPO, "python", "src"))),
        }
        if args.vllm:
            paths = os.pathsep.join(os.path.abspath(x) for x in args.vllm.split(os.pathsep))
            contenders["this checkout, --vllm-rules vllm"] = (
                cmd + ["--vllm-rules", "vllm"],
                dict(env, PYTHONPATH=os.pathsep.join([os.path.join(REPO, "python", "src"), paths])),
            )
        load_before = os.getloadavg()[0]
        first = {name: run_once(c, e) for name, (c, e) in contenders.items()}
        results: dict[str, list[tuple[float, float, int]]] = {name: [] for name in contenders}
        for _ in range(args.runs):
            for name, (c, e) in contenders.items():
                results[name].append(run_once(c, e))
        load_after = os.getloadavg()[0]
    base_walls = [w for w, _, _ in results["baseline"]]
    print(
        f"preflight on the demo's argv, {args.runs} counted runs each in turn after one first run; "
        f"{os.cpu_count()} CPUs; load average (1 min) {load_before:.2f} before, {load_after:.2f} after\n"
    )
    print(
        "| contender | first run wall s | wall s median (min-max) | CPU s median (min-max) | wall / baseline "
        "(median of pairs) | exit codes |"
    )
    print("|---|---|---|---|---|---|")
    for name, runs in results.items():
        walls, cpus, codes = [r[0] for r in runs], [r[1] for r in runs], sorted({r[2] for r in runs})
        ratio = statistics.median(w / b for w, b in zip(walls, base_walls))
        print(
            f"| {name} | {first[name][0]:.1f} | {statistics.median(walls):.1f} ({min(walls):.1f}-{max(walls):.1f}) | "
            f"{statistics.median(cpus):.1f} ({min(cpus):.1f}-{max(cpus):.1f}) | {ratio:.2f} | "
            f"{', '.join(map(str, codes))} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
