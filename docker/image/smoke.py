"""Smoke test of a built vlgrpo image: the last stage of both Dockerfiles runs it (so an image that fails it
is never produced), and CI runs it again in a container of the built image.

Checks (each prints one line: ok / FAIL / n/a with the reason):
  base        the base image has what docker/constraints/<platform>-base.txt expects ("# expect:" lines)
  lock        every package of the installed locks is at its locked version
  pins        transformers, ray, hydra-core, omegaconf, tensordict, verl, veomni match docker/pins.env
  imports     vlgrpo, verl, veomni, transformers, ray, hydra, omegaconf, tensordict and the runtime needs
              (numpy, pyarrow, pandas, datasets, peft, ...) import
  patches     `python -m vlgrpo patches status --verify` exits 0 under VLGRPO_PATCHES_STRICT=1
  sitecustomize  a fresh interpreter (subprocess) and a multiprocessing "spawn" child import OUR shim as
              `sitecustomize`, with the patch bootstrap installed, chained to the base's own sitecustomize
              when the base had one (field case B18)
  ckpt-engine verl.checkpoint_engine registers backend "nccl" (field case B13: GPU = NCCL engine needing cupy
              and zmq; Ascend = HCCL engine, registered under the name nccl). On the CI stand-in base (no
              cupy, no vLLM) it cannot register: reported n/a with the registered list, never faked.
  accelerator GPU: flash_attn, cupy import; Ascend: torch_npu and verl's npu_patch (the reason for upstream
              commit c5a9ed569) import with CANN's set_env sourced. n/a on the stand-in.
  sitecustomize-ray  (--ray) the same inside a Ray worker process (CI runs it in a container of the image)
  entrypoints the recipe entrypoints exist, are executable and parse (bash -n)

Standard library + packaging. Exit 0 when nothing failed, 1 otherwise. Result also in --out (JSON).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import importlib.metadata as md
import json
import multiprocessing
import os
import re
import subprocess
import sys

RESULTS: list[dict] = []


def record(check: str, status: str, detail: str) -> None:
    RESULTS.append({"check": check, "status": status, "detail": detail})
    print(f"smoke: {status:<4} {check:<14} {detail}", flush=True)


def canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed() -> dict[str, str]:
    return {canon(d.metadata["Name"]): d.version for d in md.distributions() if d.metadata["Name"]}


def check_base(path: str, have: dict[str, str]) -> None:
    from packaging.requirements import Requirement

    bad, seen = [], []
    for line in open(path, encoding="utf-8"):
        m = re.match(r"#\s*expect:\s*(\S+)", line)
        if not m:
            continue
        req = Requirement(m.group(1))
        version = have.get(canon(req.name))
        seen.append(f"{req.name} {version}")
        if version is None or not req.specifier.contains(version, prereleases=True):
            bad.append(f"{req} (image has {version or 'nothing'})")
    if bad:
        record("base", "FAIL", f"{os.path.basename(path)}: " + "; ".join(bad))
    else:
        record("base", "ok", f"{os.path.basename(path)}: " + ", ".join(seen))


def check_locks(paths: list[str], have: dict[str, str]) -> None:
    bad, count = [], 0
    for path in paths:
        for line in open(path, encoding="utf-8"):
            m = re.match(r"([A-Za-z0-9._-]+)(\[[^\]]*\])?==([^\s\\;]+)", line)
            if not m:
                continue
            count += 1
            name, want = canon(m.group(1)), m.group(3)
            if have.get(name) != want:
                bad.append(f"{name}=={want} (image has {have.get(name) or 'nothing'})")
    record(
        "lock", "FAIL" if bad else "ok", "; ".join(bad) if bad else f"{count} locked packages at their locked versions"
    )


def check_pins(pins: dict[str, str], have: dict[str, str]) -> None:
    want = {
        "transformers": pins["TRANSFORMERS_VERSION"],
        "ray": pins["RAY_VERSION"],
        "hydra-core": pins["HYDRA_VERSION"],
        "omegaconf": pins["OMEGACONF_VERSION"],
        "tensordict": pins["TENSORDICT_VERSION"],
        "verl": pins["VERL_VERSION"],
        "veomni": pins["VEOMNI_VERSION"],
    }
    bad = [f"{k}: want {v}, image has {have.get(k)}" for k, v in want.items() if have.get(k) != v]
    record("pins", "FAIL" if bad else "ok", "; ".join(bad) if bad else ", ".join(f"{k} {v}" for k, v in want.items()))


# torchvision comes from the vendor bases; the CI stand-in has none (PyPI's x86_64 torchvision is a CUDA build)
NEEDS_TORCHVISION = {"qwen_vl_utils"}


def check_imports(stand_in: bool) -> None:
    bad, skipped = [], []
    for mod in (
        "vlgrpo",
        "vlgrpo.patches",
        "transformers",
        "ray",
        "hydra",
        "omegaconf",
        "tensordict",
        "verl",
        "veomni",
        "numpy",
        "pyarrow",
        "pandas",
        "datasets",
        "peft",
        "accelerate",
        "torchdata",
        "qwen_vl_utils",
        "mathruler.grader",
        "zmq",
        "uvicorn",
        "fastapi",
        "codetiming",
        "pylatexenc",
        "wandb",
        "tensorboard",
    ):
        if stand_in and mod in NEEDS_TORCHVISION and importlib.util.find_spec("torchvision") is None:
            skipped.append(mod)
            continue
        try:
            importlib.import_module(mod)
        except Exception as exc:  # reported, the check fails
            bad.append(f"{mod}: {type(exc).__name__}: {exc}")
    note = f" ({', '.join(skipped)} not tried: needs torchvision, which the stand-in base lacks)" if skipped else ""
    record("imports", "FAIL" if bad else "ok", "; ".join(bad) if bad else "all import" + note)


def check_patches() -> None:
    env = dict(os.environ, VLGRPO_PATCHES_STRICT="1")
    proc = subprocess.run(
        [sys.executable, "-m", "vlgrpo", "patches", "status", "--verify"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    for line in (proc.stdout + proc.stderr).splitlines():
        print(f"smoke:        | {line}")
    record(
        "patches",
        "ok" if proc.returncode == 0 else "FAIL",
        f"python -m vlgrpo patches status --verify (strict) exit {proc.returncode}",
    )


PROBE = (
    "import json, sys, sitecustomize\n"
    "from vlgrpo.patches import bootstrap as b\n"
    "print(json.dumps({'file': sitecustomize.__file__, 'state': b.STATE,"
    " 'chained_loaded': 'vlgrpo_chained_sitecustomize' in sys.modules}, default=str))\n"
)


def _spawn_child(queue) -> None:  # runs in a multiprocessing "spawn" child
    import sitecustomize
    from vlgrpo.patches import bootstrap as b

    queue.put(
        {
            "file": sitecustomize.__file__,
            "state": dict(b.STATE),
            "chained_loaded": "vlgrpo_chained_sitecustomize" in sys.modules,
        }
    )


def check_sitecustomize(info: dict) -> None:
    shim = info["shim"]
    views = {}
    proc = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    views["subprocess"] = (
        json.loads(proc.stdout.strip().splitlines()[-1])
        if proc.returncode == 0
        else {"error": proc.stderr.strip()[-400:]}
    )
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    child = ctx.Process(target=_spawn_child, args=(queue,))
    child.start()
    views["spawn"] = queue.get(timeout=120)
    child.join(60)
    bad = []
    for where, view in views.items():
        if "error" in view:
            bad.append(f"{where}: {view['error']}")
            continue
        if os.path.realpath(view["file"]) != os.path.realpath(shim):
            bad.append(f"{where}: imports sitecustomize from {view['file']}, not our shim {shim}")
        elif "vlgrpo-sitecustomize-shim" not in open(view["file"], encoding="utf-8").read(4096):
            bad.append(f"{where}: {view['file']} is not the vlgrpo shim")
        if not view["state"].get("installed"):
            bad.append(f"{where}: patch bootstrap not installed (state {view['state']})")
        if info.get("kept_as"):
            chained = view["state"].get("chained_sitecustomize")
            if (
                not chained
                or os.path.realpath(chained) != os.path.realpath(info["kept_as"])
                or not view["chained_loaded"]
            ):
                bad.append(f"{where}: base sitecustomize {info['base_sitecustomize']} not chained (state {chained})")
    base = info.get("base_sitecustomize")
    detail = f"ours ({shim}) in a subprocess and a spawn child" + (
        f"; base's {base} kept as {info['kept_as']} and chained" if base else "; base had none"
    )
    record("sitecustomize", "FAIL" if bad else "ok", "; ".join(bad) if bad else detail)


RAY_PROBE = (
    "import json, os, ray\n"
    "ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, object_store_memory=78_643_200)\n"
    "@ray.remote\n"
    "def probe():\n"
    "    import sys\n"
    "    try:\n"
    "        import sitecustomize\n"
    "        f = sitecustomize.__file__\n"
    "    except ImportError:\n"
    "        f = None\n"
    "    from vlgrpo.patches import bootstrap as b\n"
    "    return {'file': f, 'state': {k: v for k, v in b.STATE.items() if isinstance(v, (str, bool, type(None)))},\n"
    "            'chained_loaded': 'vlgrpo_chained_sitecustomize' in sys.modules, 'pid': os.getpid()}\n"
    "print(json.dumps(ray.get(probe.remote(), timeout=120)))\n"
    "ray.shutdown()\n"
)


def check_sitecustomize_ray(info: dict) -> None:
    """The same check inside a Ray worker process (B18: Ray workers are started by Ray, not by us)."""
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    try:
        proc = subprocess.run([sys.executable, "-c", RAY_PROBE], capture_output=True, text=True, timeout=300, env=env)
    except subprocess.TimeoutExpired:
        record("sitecustomize-ray", "FAIL", "Ray probe did not finish within 300 s")
        return
    lines = [l for l in proc.stdout.splitlines() if l.startswith("{")]
    if proc.returncode != 0 or not lines:
        record("sitecustomize-ray", "FAIL", f"Ray probe exit {proc.returncode}: {proc.stderr.strip()[-400:]}")
        return
    view = json.loads(lines[-1])
    bad = []
    if view["file"] is None or os.path.realpath(view["file"]) != os.path.realpath(info["shim"]):
        bad.append(f"Ray worker imports sitecustomize from {view['file']}, not {info['shim']}")
    if not view["state"].get("installed"):
        bad.append("patch bootstrap not installed in the Ray worker")
    if info.get("kept_as") and not view["chained_loaded"]:
        bad.append("base sitecustomize not chained in the Ray worker")
    record(
        "sitecustomize-ray",
        "FAIL" if bad else "ok",
        "; ".join(bad)
        if bad
        else f"ours in a Ray worker (pid {view['pid']}), bootstrap installed"
        + (", base's chained" if info.get("kept_as") else ""),
    )


def check_ckpt_engine(stand_in: bool) -> None:
    try:
        ce = importlib.import_module("verl.checkpoint_engine")
        registered = sorted(ce.CheckpointEngineRegistry._registry)
    except Exception as exc:
        record("ckpt-engine", "FAIL", f"import verl.checkpoint_engine: {type(exc).__name__}: {exc}")
        return
    if "nccl" in registered:
        record("ckpt-engine", "ok", f"backend nccl registered (registered: {registered})")
    elif stand_in:
        record(
            "ckpt-engine",
            "n/a",
            f"stand-in base has no cupy/vLLM/torch_npu, so nccl cannot register here "
            f"(registered: {registered}); the GPU and Ascend builds require it",
        )
    else:
        record(
            "ckpt-engine",
            "FAIL",
            f"backend nccl NOT registered (registered: {registered}); GPU needs cupy "
            "and pyzmq, Ascend needs torch_npu and vllm (field case B13)",
        )


def check_accelerator(platform: str, stand_in: bool) -> None:
    if stand_in:
        record("accelerator", "n/a", f"stand-in base: no {'CUDA' if platform == 'gpu' else 'CANN'} stack to import")
        return
    mods = ["flash_attn", "cupy", "quack"] if platform == "gpu" else ["torch_npu", "verl.models.transformers.npu_patch"]
    bad, needs_driver, done = [], [], []
    for mod in mods:
        try:
            importlib.import_module(mod)
            done.append(mod)
        except Exception as exc:
            # no driver is mounted during `docker build`: a module that loads the driver library at import
            # (libcuda.so / libascend_hal.so) cannot be judged here; the doctor imports it on the node
            if re.search(r"libcuda\.so|libascend_hal\.so|libnvidia-ml", str(exc)):
                needs_driver.append(f"{mod} ({exc})")
            else:
                bad.append(f"{mod}: {type(exc).__name__}: {exc}")
    if needs_driver:
        record("accel-driver", "n/a", "needs the host driver, absent at build: " + "; ".join(needs_driver))
    record("accelerator", "FAIL" if bad else "ok", "; ".join(bad) if bad else "imported " + ", ".join(done))


def check_entrypoints(root: str) -> None:
    bad, names = [], []
    for name in ("fully-async-grpo.sh", "veomni-grpo.sh"):
        path = os.path.join(root, name)
        names.append(name)
        if not os.access(path, os.X_OK):
            bad.append(f"{path} missing or not executable")
        elif subprocess.run(["bash", "-n", path]).returncode != 0:
            bad.append(f"{path} does not parse")
    record("entrypoints", "FAIL" if bad else "ok", "; ".join(bad) if bad else f"{', '.join(names)} in {root}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="vlgrpo image smoke test")
    ap.add_argument("--platform", required=True, choices=["gpu", "npu-a2", "npu-a3"])
    ap.add_argument("--stand-in", action="store_true", help="built FROM the CI stand-in base")
    ap.add_argument("--pins", required=True)
    ap.add_argument("--base-constraints", required=True)
    ap.add_argument("--lock", action="append", default=[])
    ap.add_argument("--sitecustomize", required=True)
    ap.add_argument("--entrypoints", default="/opt/vlgrpo/entrypoints")
    ap.add_argument(
        "--ray", action="store_true", help="also check sitecustomize in a Ray worker (starts a 1-CPU local Ray)"
    )
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    pins = {
        k: v for k, _, v in (l.strip().partition("=") for l in open(args.pins) if "=" in l and not l.startswith("#"))
    }
    have = installed()
    check_base(args.base_constraints, have)
    check_locks(args.lock, have)
    check_pins(pins, have)
    check_imports(args.stand_in)
    check_patches()
    check_sitecustomize(json.load(open(args.sitecustomize, encoding="utf-8")))
    if args.ray:
        check_sitecustomize_ray(json.load(open(args.sitecustomize, encoding="utf-8")))
    check_ckpt_engine(args.stand_in)
    check_accelerator(args.platform, args.stand_in)
    check_entrypoints(args.entrypoints)
    failed = [r for r in RESULTS if r["status"] == "FAIL"]
    ok = [r for r in RESULTS if r["status"] == "ok"]
    na = [r for r in RESULTS if r["status"] == "n/a"]
    print(
        f"smoke: {len(ok)} checks ok, {len(failed)} failed, {len(na)} not applicable"
        + (" (stand-in base)" if args.stand_in else "")
    )
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump({"platform": args.platform, "stand_in": args.stand_in, "results": RESULTS}, fh, indent=2)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
