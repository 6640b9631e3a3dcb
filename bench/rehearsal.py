"""Cost of the rehearsal (``python -m vlgrpo cluster probe``, vlgrpo.rehearse) on a 2-node loopback Ray cluster.

The cluster is the Ray tests' own (tests/python/ray/ray_harness.py): ``entrypoints/ray-node.sh`` head on 127.0.0.2
and worker on 127.0.0.3, 2 stand-in NPUs each (tests/python/ray/standin_rt, the CPU stand-in for the Ascend
runtime), 8 logical CPUs each, gloo. Three commands, interleaved A B C A B C ... (``--rounds``):

- ``A`` probe only: ``cluster probe --no-rehearse`` (what the entrypoint ran before the rehearsal existed);
- ``B`` today's call: ``cluster probe`` (the probe, then the rehearsal of one group of 2 nodes x 2);
- ``C`` ``cluster probe --rehearse --argv-file`` of the fully-async layout (trainer 1 x 2, rollout 1 x 2 with
  tp 2: two groups, then the weight-sync rendezvous of 3 ranks).

Each: wall time of the CLI process (``time.perf_counter``) and, for B and C, the rehearsal's own line (total and
per stage). The Ray workers' CPU time is not in the CLI's rusage; the wall time is what a launch waits.

Usage: ``python bench/rehearsal.py [--rounds 2]`` (prints a Markdown table). Start-up of the nodes is not timed.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "python" / "ray"))

from ray_harness import HERE, Cluster, run_cli

FA = "verl.experimental.fully_async_policy.fully_async_main"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="rh-bench-"))
    c = Cluster(root)
    rt = HERE / "standin_rt"
    extra = dict(
        VLGRPO_RAY_NUM_CPUS="8",
        PYTHONPATH=f"{c.shim_dir}:{rt}",
        RAY_raylet_start_wait_time_s="120",
        VLGRPO_PASS_ENV="PYTHONPATH,STANDIN_PHYSICAL_NPUS,RAY_raylet_start_wait_time_s",
        STANDIN_PHYSICAL_NPUS="2",
    )
    argv = root / "argv.txt"
    argv.write_text(
        "\n".join(
            [
                "python3",
                "-m",
                FA,
                "trainer.nnodes=1",
                "trainer.n_gpus_per_node=2",
                "rollout.nnodes=1",
                "rollout.n_gpus_per_node=2",
                "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
            ]
        )
    )
    base = ["cluster", "probe", "--address", "", "--resource", "NPU", "--nodes", "2", "--per-node", "2"]
    hook = dict(VLGRPO_PROBE_DEVICE_MODULE="npu_standin", STANDIN_PHYSICAL_NPUS="2")
    runs = {
        "A": (["--no-rehearse"], hook),
        "B": ([], hook),
        "C": (["--rehearse", "--backend", "gloo", "--argv-file", str(argv)], {}),
    }
    got: dict[str, list] = {k: [] for k in runs}
    try:
        c.start_head(devices=2, physical=2, **extra)
        c.start_worker("127.0.0.3", devices=2, physical=2, **extra)
        out = run_cli(
            "cluster",
            "wait",
            "--address",
            c.address,
            "--resource",
            "NPU",
            "--nodes",
            "2",
            "--per-node",
            "2",
            "--timeout",
            "180",
            timeout=240,
        )
        assert out.returncode == 0, out.stdout + out.stderr
        base[3] = c.address
        for _ in range(args.rounds):
            for key, (more, env) in runs.items():
                t0 = time.perf_counter()
                out = run_cli(*base, *more, timeout=600, **env)
                wall = time.perf_counter() - t0
                if out.returncode != 0:
                    print(out.stdout[-3000:], out.stderr[-3000:], file=sys.stderr)
                    return 1
                m = re.search(r"rehearsal ok in ([0-9.]+)s \((.*)\)", out.stdout)
                got[key].append((wall, float(m.group(1)) if m else None, m.group(2) if m else ""))
    finally:
        problems = c.close()
        if problems:
            print("clean-up:", problems, file=sys.stderr)
    print("| command | wall per run (s) | median (s) | rehearsal's own total (s) | stages of the last run |")
    print("|---|---|---|---|---|")
    names = {
        "A": "A `probe --no-rehearse`",
        "B": "B `probe` (today's call: probe + rehearsal, 1 group 2 x 2)",
        "C": "C `probe --rehearse --argv-file` (fully-async: trainer 2, rollout 2, weight sync 3)",
    }
    for key, rows in got.items():
        walls = [w for w, _, _ in rows]
        own = [t for _, t, _ in rows if t is not None]
        print(
            f"| {names[key]} | {', '.join(f'{w:.1f}' for w in walls)} | {statistics.median(walls):.1f} | "
            f"{', '.join(f'{t:.1f}' for t in own) or '-'} | {rows[-1][2] or '-'} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
