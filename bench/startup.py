"""Start-up cost of the vlgrpo patch loader: ``python -c pass`` with and without the sitecustomize active.

Two set-ups, each measured side by side in one run (runs interleaved, order rotated every round):

- ``dev``: this venv's interpreter; "with" puts a directory holding only ``python/sitecustomize.py`` first on
  ``PYTHONPATH``, "without" puts an empty directory there (same ``sys.path`` length).
- Both set-ups import a byte-compiled copy of ``python/src`` (an installed package has ``.pyc`` files; this
  machine sets ``PYTHONDONTWRITEBYTECODE=1``, so the checkout has none).
- ``image``: two bare venvs of the base interpreter that see ``python/src`` through a ``.pth`` (as an installed
  package would be found); "with" had ``python -m vlgrpo patches install-sitecustomize`` run into it (shim +
  ``vlgrpo-patches.pth``), "without" did not.
- ``image, no .pyc``: as ``image`` without any byte-code cache (what a ``PYTHONDONTWRITEBYTECODE`` machine with
  a source checkout pays: the shim and the stdlib-only start-up modules are compiled at every start). Informative;
  the budget applies to the other two.

Wall time of the whole child process (``subprocess.run``, ``time.perf_counter``; median, p10, p90 in ms; the
budget is checked on the wall medians) and its CPU time (user+sys from ``getrusage(RUSAGE_CHILDREN)``, less
sensitive to other jobs on a shared machine).

Usage: ``python bench/startup.py [--runs 40] [--markdown]``. Exit 2 if a median difference exceeds the 5 ms
budget of the issue, or if "with" did not actually load the bootstrap.
"""

from __future__ import annotations

import argparse
import compileall
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUDGET_MS = 5.0


def _venv(root: Path, name: str, src: Path) -> Path:
    venv = root / name
    subprocess.run(
        [getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", str(venv)],
        check=True,
        capture_output=True,
    )
    py = venv / "bin" / "python"
    site = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(site) / "_vlgrpo_src.pth").write_text(f"{src}\n")
    return py


def _env(pythonpath: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLGRPO_") and k != "PYTHONPATH"}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return env


def _loaded(py: str, env: dict) -> bool:
    code = "import sys; print('vlgrpo.patches.bootstrap' in sys.modules)"
    return subprocess.run([py, "-c", code], env=env, capture_output=True, text=True).stdout.strip() == "True"


def _ms(values):
    values = sorted(values)
    q = statistics.quantiles(values, n=10)
    return {"median": statistics.median(values), "p10": q[0], "p90": q[-1]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=40, help="runs per variant (>= 20)")
    ap.add_argument("--markdown", action="store_true", help="print a markdown table for bench/RESULTS.md")
    args = ap.parse_args(argv)
    if args.runs < 20:
        ap.error("--runs must be at least 20")
    tmp = Path(tempfile.mkdtemp(prefix="vlgrpo-startup-"))
    try:
        shim, empty = tmp / "shim", tmp / "empty"
        shim.mkdir()
        empty.mkdir()
        shutil.copy(REPO / "python" / "sitecustomize.py", shim / "sitecustomize.py")
        # Byte-code caches as an installed package has them (pip compiles on install; this machine sets
        # PYTHONDONTWRITEBYTECODE, so the repo tree has none): a compiled copy of python/src serves both set-ups.
        src = tmp / "src"
        shutil.copytree(REPO / "python" / "src", src, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        compileall.compile_dir(str(src), quiet=1)
        compileall.compile_dir(str(shim), quiet=1)
        raw = tmp / "src-nopyc"
        shutil.copytree(REPO / "python" / "src", raw, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        img_with, img_without = _venv(tmp, "img-with", src), _venv(tmp, "img-without", src)
        raw_with, raw_without = _venv(tmp, "raw-with", raw), _venv(tmp, "raw-without", raw)
        for py in (img_with, raw_with):
            subprocess.run(
                [str(py), "-m", "vlgrpo", "patches", "install-sitecustomize"],
                check=True,
                capture_output=True,
                env=_env(None),
            )
        for cache in (raw_with.parent.parent / "lib").rglob("__pycache__"):
            shutil.rmtree(cache)
        variants = {
            ("dev", "with"): (sys.executable, _env(f"{shim}{os.pathsep}{src}")),
            ("dev", "without"): (sys.executable, _env(f"{empty}{os.pathsep}{src}")),
            ("image", "with"): (str(img_with), _env(None)),
            ("image", "without"): (str(img_without), _env(None)),
            ("image, no .pyc", "with"): (str(raw_with), _env(None)),
            ("image, no .pyc", "without"): (str(raw_without), _env(None)),
        }
        for (setup, kind), (py, env) in variants.items():
            if _loaded(py, env) != (kind == "with"):
                print(f"{setup}/{kind}: bootstrap loaded state is wrong", file=sys.stderr)
                return 2
        times = {k: [] for k in variants}
        cpu = {k: [] for k in variants}
        keys = list(variants)
        for i in range(args.runs + 2):  # two warm-up rounds, discarded
            order = keys[i % len(keys) :] + keys[: i % len(keys)]
            for key in order:
                py, env = variants[key]
                r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                t0 = time.perf_counter()
                subprocess.run([py, "-c", "pass"], env=env, check=True)
                t1 = time.perf_counter()
                r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                if i >= 2:
                    times[key].append((t1 - t0) * 1000)
                    cpu[key].append((r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) * 1000)
        stats = {k: _ms(v) for k, v in times.items()}
        cpu_med = {k: statistics.median(v) for k, v in cpu.items()}
        ok = True
        lines = [
            f"`python bench/startup.py --runs {args.runs}` on {platform.node() or 'host'} "
            f"({os.cpu_count()} cores, Python {platform.python_version()}), {args.runs} runs per variant, "
            "interleaved:",
            "",
            "| set-up | without: wall median / p10 / p90 ms | with: wall median / p10 / p90 ms "
            "| wall median added | CPU (user+sys) median without / with / added |",
            "|---|---|---|---|---|",
        ]
        for setup in ("dev", "image", "image, no .pyc"):
            a, b = stats[(setup, "without")], stats[(setup, "with")]
            added = b["median"] - a["median"]
            if setup != "image, no .pyc":  # informative: PYTHONDONTWRITEBYTECODE machines compile every start
                ok &= added <= BUDGET_MS
            lines.append(
                f"| {setup} | {a['median']:.1f} / {a['p10']:.1f} / {a['p90']:.1f} | "
                f"{b['median']:.1f} / {b['p10']:.1f} / {b['p90']:.1f} | {added:+.2f} ms | "
                f"{cpu_med[(setup, 'without')]:.1f} / {cpu_med[(setup, 'with')]:.1f} / "
                f"{cpu_med[(setup, 'with')] - cpu_med[(setup, 'without')]:+.2f} ms |"
            )
        print("\n".join(lines) if args.markdown else "\n".join(lines[2:]))
        print(f"\nbudget {BUDGET_MS} ms: {'met' if ok else 'EXCEEDED'}")
        return 0 if ok else 2
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
