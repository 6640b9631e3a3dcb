"""``python -m vlgrpo doctor [--json] [--platform npu|gpu|auto]``: is this node/image fit to train?

One line per check, ``PASS``/``FAIL``/``SKIP``, what was found and, for a failure, the fix. Exit 0 when no
check failed, 2 when at least one did, 1 when the doctor itself broke. Checks, in order:

``versions``        installed distributions against the image's build manifest
                    (``/opt/vlgrpo/build-manifest.json``, written by docker/image/build_manifest.py, schema
                    ``vlgrpo.build-manifest/1``): any changed, missing or added package is drift. Without a
                    manifest: FAIL inside a container, SKIP outside one (not an image).
``devices``         Ascend: /dev/davinciN (8 on A2, 16 on A3 per the manifest's platform) and the control
                    devices /dev/davinci_manager, /dev/devmm_svm, /dev/hisi_hdc; NVIDIA: ``nvidia-smi -L``.
``driver``          Ascend (field case B16): /usr/local/Ascend/driver mounted whole (not only lib64 and
                    version.info: HCCL reads other files under it), /usr/local/dcmi, /etc/ascend_install.info,
                    ``npu-smi info`` runs; -8005/-8020 mean the cards are in use by another container.
``driver-version``  the host driver the container sees against what the image's CUDA / CANN needs
                    (vlgrpo.driver: natively, or through the image's CUDA forward-compatibility libraries on
                    data-center GPUs; CANN's declared requirements and its paired Ascend HDK).
``torch-devices``   a fresh interpreter imports torch (+ torch_npu) and sees as many devices as the node has.
``shm``             /dev/shm at least ``--min-shm-gib`` (Docker's default 64 MiB breaks NCCL/HCCL and vLLM).
``sitecustomize``   our shim is the ``sitecustomize`` imported, with the patch bootstrap installed, in this
                    interpreter, in a multiprocessing "spawn" child and in a Ray actor (field case B18).
``patches``         ``vlgrpo.patches.status()``: no patch failed.
``ckpt-engine``     the pinned verl registers checkpoint-engine backend ``nccl`` (field case B13; on Ascend the
                    HCCL engine registers under that name).
``model``           the model folder passes the preflight's folder check (vlgrpo.preflight.model_dir).
``data``            the train/val parquet files are readable with rows; with ``--argv-file`` the whole
                    preflight (vlgrpo.preflight.api.run_preflight) runs on that launch argv.
``checkpoint-space`` the checkpoint folder exists, is writable and has ``--min-free-gib`` free.

On an image built FROM the CI stand-in base (manifest ``stand_in: true``) the accelerator checks are SKIP,
with that reason; everything else runs for real.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.metadata as md
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Any, Callable

from vlgrpo import devices as devcount
from vlgrpo import mounts

MANIFEST_PATH = "/opt/vlgrpo/build-manifest.json"
ASCEND_DRIVER = "/usr/local/Ascend/driver"
ASCEND_CONTROL_DEVICES = ("davinci_manager", "devmm_svm", "hisi_hdc")
NPUS_PER_PLATFORM = {"npu-a2": 8, "npu-a3": 16}
SHIM_MARKER = b"vlgrpo-sitecustomize-shim"  # first line of the shim (vlgrpo.patches.cli.shim_source)
# Qwen3-VL-30B-A3B: ~31.1e9 parameters; an FSDP checkpoint holds fp32 weights (4 B) + Adam moments (8 B)
DEFAULT_MIN_FREE_GIB = 400
DEFAULT_MIN_SHM_GIB = 16

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"


@dataclasses.dataclass
class Result:
    """One check: ``status`` is PASS, FAIL or SKIP; ``fix`` says what to do (empty unless FAIL)."""

    name: str
    status: str
    detail: str
    fix: str = ""

    def line(self) -> str:
        text = f"doctor: {self.status} {self.name}: {self.detail}"
        return text + (f" -- fix: {self.fix}" if self.fix else "")


@dataclasses.dataclass
class Context:
    """Where the doctor looks. Paths are parameters so tests can point them at a fake tree; the CLI only
    ever uses the real ones."""

    platform: str = "auto"
    manifest_path: str = MANIFEST_PATH
    dev_dir: str = "/dev"
    driver_dir: str = ASCEND_DRIVER
    dcmi_dir: str = "/usr/local/dcmi"
    install_info: str = "/etc/ascend_install.info"
    root: str = "/"  # where vlgrpo.driver reads the driver's and the image's version files
    shm_dir: str = "/dev/shm"
    container_markers: tuple[str, ...] = mounts.CONTAINER_MARKERS
    mountinfo: str = mounts.MOUNTINFO
    min_shm_gib: float = DEFAULT_MIN_SHM_GIB
    min_free_gib: float = DEFAULT_MIN_FREE_GIB
    model_path: str = ""
    train_file: str = ""
    val_file: str = ""
    argv_file: str = ""
    checkpoint_dir: str = ""
    ray: bool = True
    manifest: dict | None = None
    manifest_error: str = ""

    def load_manifest(self) -> None:
        try:
            with open(self.manifest_path, encoding="utf-8") as fh:
                self.manifest = json.load(fh)
        except FileNotFoundError:
            self.manifest, self.manifest_error = None, "missing"
        except (OSError, ValueError) as exc:
            self.manifest, self.manifest_error = None, f"unreadable: {exc}"

    @property
    def stand_in(self) -> bool:
        return bool(self.manifest and self.manifest.get("stand_in"))

    def in_container(self) -> bool:
        """The launch's rule (:func:`vlgrpo.mounts.in_container`): a marker file, or a container-layer root."""
        return mounts.in_container(self.container_markers, self.mountinfo)

    def davinci(self) -> list[str]:
        return devcount.davinci_devices(self.dev_dir)

    def node_count(self, platform: str) -> devcount.NodeCount:
        """This node's devices by the one device counter (vlgrpo.devices)."""
        return devcount.count(platform, self.dev_dir)

    def resolve_platform(self) -> str:
        """npu | gpu | "" (none found). Explicit --platform wins; then devices/tools; then the manifest."""
        if self.platform in ("npu", "gpu"):
            return self.platform
        found = devcount.detect_platform(self.dev_dir)
        if found:
            return found
        flavour = (self.manifest or {}).get("platform", "")
        if flavour.startswith("npu"):
            return "npu"
        if flavour == "gpu":
            return "gpu"
        return ""


def _run(argv: list[str], timeout: float = 30) -> tuple[int, str]:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        return out.returncode, (out.stdout + out.stderr)
    except FileNotFoundError:
        return 127, f"{argv[0]}: not found"
    except subprocess.TimeoutExpired:
        return 124, f"{argv[0]}: timed out after {timeout:g}s"


def _canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# ----------------------------------------------------------------------------------------------- checks


def check_versions(ctx: Context) -> Result:
    if ctx.manifest is None:
        where = f"no build manifest at {ctx.manifest_path} ({ctx.manifest_error})"
        if ctx.in_container():
            return Result(
                "versions",
                FAIL,
                where + " inside a container",
                "run the vlgrpo image (make image-npu / image-gpu), or restore the file from the image",
            )
        return Result("versions", SKIP, where + "; not inside a vlgrpo image, nothing to compare against")
    if ctx.manifest.get("schema") != "vlgrpo.build-manifest/1":
        return Result(
            "versions",
            FAIL,
            f"{ctx.manifest_path}: unknown schema {ctx.manifest.get('schema')!r}",
            "rebuild the image with this version of vlgrpo",
        )
    want = {_canon(k): v for k, v in (ctx.manifest.get("packages") or {}).items()}
    have = {_canon(d.metadata["Name"]): d.version for d in md.distributions() if d.metadata["Name"]}
    changed = sorted(f"{n} {want[n]} -> {have[n]}" for n in want if n in have and have[n] != want[n])
    missing = sorted(f"{n} {want[n]}" for n in want if n not in have)
    added = sorted(f"{n} {have[n]}" for n in have if n not in want)
    key = ", ".join(
        f"{n} {have[n]}"
        for n in ("torch", "torch-npu", "transformers", "verl", "ray", "vllm", "vllm-ascend", "veomni")
        if n in have
    )
    if changed or missing or added:
        parts = (
            ([f"changed: {'; '.join(changed)}"] if changed else [])
            + ([f"missing: {'; '.join(missing)}"] if missing else [])
            + ([f"added: {'; '.join(added)}"] if added else [])
        )
        return Result(
            "versions",
            FAIL,
            f"drift from {ctx.manifest_path}: " + " | ".join(parts),
            "use the image as built (no pip install into it); rebuild to change versions",
        )
    return Result(
        "versions",
        PASS,
        f"{len(want)} packages match {ctx.manifest_path} "
        f"({ctx.manifest.get('platform', '?')}, verl {((ctx.manifest.get('verl') or {}).get('commit') or '')[:12]}); {key}",
    )


def check_devices(ctx: Context, platform: str) -> Result:
    if ctx.stand_in:
        return Result("devices", SKIP, "CI stand-in image (manifest stand_in: true): no accelerator stack")
    if platform == "npu":
        devs = ctx.davinci()
        missing = [d for d in ASCEND_CONTROL_DEVICES if not os.path.exists(os.path.join(ctx.dev_dir, d))]
        flavour = (ctx.manifest or {}).get("platform", "")
        expected = NPUS_PER_PLATFORM.get(flavour)
        problems = []
        if not devs:
            problems.append(f"no {ctx.dev_dir}/davinciN device")
        elif expected and len(devs) < expected:
            problems.append(f"{len(devs)} of the {expected} davinci devices of an {flavour} node")
        if missing:
            problems.append("missing control device(s) " + ", ".join(f"{ctx.dev_dir}/{d}" for d in missing))
        if problems:
            return Result(
                "devices",
                FAIL,
                "; ".join(problems),
                "map every /dev/davinciN of the node plus /dev/davinci_manager, /dev/devmm_svm and "
                "/dev/hisi_hdc into the container (compose.yaml's Ascend device anchor)",
            )
        return Result(
            "devices",
            PASS,
            f"{len(devs)} davinci device(s) and the control devices {', '.join(ASCEND_CONTROL_DEVICES)}",
        )
    if platform == "gpu":
        node = ctx.node_count("gpu")
        if not node.node_devices:
            return Result(
                "devices",
                FAIL,
                f"no GPU listed by {node.node_source}" + (f" ({node.tool_error})" if node.tool_error else ""),
                "run the container with the NVIDIA runtime (--gpus all / deploy.resources.devices)",
            )
        return Result("devices", PASS, f"{node.node_devices} GPU(s) ({node.node_source})")
    return Result(
        "devices",
        FAIL,
        "no Ascend NPU (/dev/davinci*, npu-smi) or NVIDIA GPU (nvidia-smi) found",
        "run on an accelerator node with the devices mapped, or pass --platform",
    )


def check_driver(ctx: Context, platform: str) -> Result:
    if platform != "npu":
        return Result("driver", SKIP, "Ascend only")
    if ctx.stand_in:
        return Result("driver", SKIP, "CI stand-in image (manifest stand_in: true): no Ascend driver")
    problems, fixes = [], []
    d = ctx.driver_dir
    if not os.path.isdir(d):
        problems.append(f"{d} missing")
    else:
        entries = set(os.listdir(d))
        for need in ("lib64", "version.info"):
            if need not in entries:
                problems.append(f"{d}/{need} missing")
        if entries and entries <= {"lib64", "version.info"}:
            problems.append(f"only {', '.join(sorted(entries))} of {d} are mounted (HCCL reads more of it: EI0014)")
    if problems:
        fixes.append(f"mount {ASCEND_DRIVER} whole, read-only (-v {ASCEND_DRIVER}:{ASCEND_DRIVER}:ro)")
    for path, fix in ((ctx.dcmi_dir, "mount /usr/local/dcmi"), (ctx.install_info, "mount /etc/ascend_install.info")):
        if not os.path.exists(path):
            problems.append(f"{path} missing")
            fixes.append(fix)
    if not shutil.which("npu-smi"):
        problems.append("npu-smi not on PATH")
        fixes.append("mount /usr/local/bin/npu-smi")
    else:
        rc, out = _run(["npu-smi", "info"])
        if "-8005" in out or "-8020" in out:
            problems.append("npu-smi info: cards in use by another container (-8005/-8020)")
            fixes.append("stop the other container holding these cards, or give this one other cards")
        elif rc != 0:
            problems.append(f"npu-smi info: exit {rc}: {out.strip()[:160]}")
            fixes.append("check the driver mounts and the devices")
    if problems:
        return Result("driver", FAIL, "; ".join(problems), "; ".join(fixes))
    return Result("driver", PASS, f"{d} mounted whole, dcmi, install info and npu-smi present; npu-smi info ok")


def check_driver_version(ctx: Context, platform: str) -> Result:
    if ctx.stand_in:
        return Result("driver-version", SKIP, "CI stand-in image (manifest stand_in: true): no accelerator driver")
    from vlgrpo import driver

    found = driver.check(platform, ctx.root, npu_smi=True)
    if found.skipped:
        return Result(
            "driver-version",
            FAIL if platform in devcount.PLATFORMS and ctx.in_container() else SKIP,
            found.skipped,
            "mount the host driver into the container (see the devices/driver checks)",
        )
    if found.problem:
        return Result("driver-version", FAIL, f"{found.problem}; the image needs {found.needs}", found.fix)
    return Result("driver-version", PASS, f"host driver {found.host}; the image needs {found.needs}: {found.via}")


def check_torch_devices(ctx: Context, platform: str) -> Result:
    if ctx.stand_in:
        return Result("torch-devices", SKIP, "CI stand-in image (manifest stand_in: true): CPU torch only")
    if platform not in devcount.PLATFORMS:
        return Result("torch-devices", FAIL, "no accelerator platform", "see the devices check")
    node = ctx.node_count(platform).node_devices
    # a fresh interpreter, as a training process starts: the one device counter with --torch
    rc, out = _run(
        [
            sys.executable,
            "-m",
            "vlgrpo",
            "devices",
            "--torch",
            "--format",
            "json",
            "--platform",
            platform,
            "--dev-dir",
            ctx.dev_dir,
        ],
        timeout=180,
    )
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]  # stderr (warnings) may follow the JSON line
    try:
        got = json.loads(lines[-1]) if lines else {}
    except ValueError:
        got = {}
    if rc != 0 or got.get("torch_error") or "torch_visible" not in got:
        why = got.get("torch_error") or (out.strip().splitlines() or [""])[-1]
        return Result(
            "torch-devices",
            FAIL,
            f"device import failed: {why[:200]}",
            "check torch/torch_npu in the image and CANN's set_env (Ascend)",
        )
    seen = int(got["torch_visible"])
    visible = "ASCEND_RT_VISIBLE_DEVICES" if platform == "npu" else "CUDA_VISIBLE_DEVICES"
    if seen == 0 or seen < node and visible not in os.environ:
        return Result(
            "torch-devices",
            FAIL,
            f"torch sees {seen} device(s), the node has {node}",
            "map every device and the driver into the container; unset a stale " + visible,
        )
    return Result(
        "torch-devices",
        PASS,
        f"torch sees {seen} {platform.upper()} device(s) (node: {node}"
        + (f", {visible}={os.environ[visible]}" if visible in os.environ else "")
        + ")",
    )


def check_shm(ctx: Context) -> Result:
    try:
        st = os.statvfs(ctx.shm_dir)
    except OSError as exc:
        return Result("shm", FAIL, f"{ctx.shm_dir}: {exc}", "mount a tmpfs at /dev/shm (ipc: host)")
    gib = st.f_blocks * st.f_frsize / 2**30
    if gib < ctx.min_shm_gib:
        return Result(
            "shm",
            FAIL,
            f"{ctx.shm_dir} is {gib:.2f} GiB, below {ctx.min_shm_gib:g} GiB",
            "compose: ipc: host (or shm_size: 64g, not both); docker run --ipc=host",
        )
    return Result("shm", PASS, f"{ctx.shm_dir} is {gib:.1f} GiB")


def sitecustomize_probe() -> dict[str, Any]:
    """Runs in each process under test: which ``sitecustomize`` was imported, is it ours, is the bootstrap in.

    Returns a JSON-able dict: ``file``, ``ours`` (bool: the file carries the shim marker), ``installed`` and
    ``via`` from ``vlgrpo.patches.bootstrap.STATE``, ``chained`` (the shadowed sitecustomize it ran), ``pid``.
    """
    info: dict[str, Any] = {
        "pid": os.getpid(),
        "file": None,
        "ours": False,
        "installed": False,
        "via": None,
        "chained": None,
    }
    mod = sys.modules.get("sitecustomize")
    if mod is None:
        try:
            mod = importlib.import_module("sitecustomize")
        except ImportError:
            mod = None
    path = getattr(mod, "__file__", None) if mod else None
    info["file"] = path
    if path:
        try:
            with open(path, "rb") as fh:
                info["ours"] = SHIM_MARKER in fh.read(4096)
        except OSError:
            pass
    boot = sys.modules.get("vlgrpo.patches.bootstrap")
    if boot is not None:
        info["installed"] = bool(boot.STATE.get("installed")) or not boot.STATE.get("enabled", True)
        info["via"] = boot.STATE.get("via")
        info["chained"] = boot.STATE.get("chained_sitecustomize")
    return info


def _judge_site(where: str, info: dict[str, Any]) -> Result:
    name = f"sitecustomize[{where}]"
    if not info.get("ours"):
        found = repr(info["file"]) if info.get("file") else "none (no sitecustomize module imported)"
        return Result(
            name,
            FAIL,
            f"imported sitecustomize is {found}, not vlgrpo's shim",
            "install it where the interpreter imports it first: python -m vlgrpo patches "
            "install-sitecustomize (images: docker/image/place-sitecustomize.sh); B18",
        )
    if not info.get("installed"):
        return Result(
            name,
            FAIL,
            f"our shim {info['file']} ran but the patch bootstrap is not installed",
            "check `python -m vlgrpo patches status` for the install error",
        )
    chained = f", chained {info['chained']}" if info.get("chained") else ""
    return Result(name, PASS, f"{info['file']} (bootstrap via {info.get('via')}{chained}; pid {info['pid']})")


def check_site_driver(ctx: Context) -> Result:
    return _judge_site("driver", sitecustomize_probe())


def check_site_spawn(ctx: Context) -> Result:
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(1) as pool:
        info = pool.apply(sitecustomize_probe)
    return _judge_site("spawn", info)


def check_site_ray(ctx: Context) -> list[Result]:
    if not ctx.ray:
        return [Result("sitecustomize[ray]", SKIP, "--no-ray")]
    try:
        import ray
    except ImportError:
        return [Result("sitecustomize[ray]", FAIL, "ray is not installed", "use the image's Python")]
    address = os.environ.get("RAY_ADDRESS", "")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        if address:
            ray.init(address=address, logging_level="ERROR", log_to_driver=False)
        else:  # a private single-node instance (RAY_ADDRESS unset), stopped by ray.shutdown() below
            ray.init(
                num_cpus=1,
                include_dashboard=False,
                object_store_memory=80 * 2**20,
                logging_level="ERROR",
                log_to_driver=False,
            )
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        @ray.remote(num_cpus=0)
        class _SiteProbe:
            def probe(self):
                return sitecustomize_probe()

        results = []
        for node in [n for n in ray.nodes() if n.get("Alive")]:
            actor = _SiteProbe.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node["NodeID"], soft=False)
            ).remote()
            info = ray.get(actor.probe.remote(), timeout=180)
            ray.kill(actor)
            where = f"ray actor on {node.get('NodeManagerAddress')}" if address else "ray actor"
            results.append(_judge_site(where, info))
        return results
    finally:
        if ray.is_initialized():
            ray.shutdown()  # disconnects; for the private instance, also stops the processes ray.init() started


def check_patches(ctx: Context) -> Result:
    import vlgrpo.patches as patches

    rows = patches.status(verify=False)
    failed = [r for r in rows if r["status"] == "failed"]
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    summary = ", ".join(f"{v} {k}" for k, v in counts.items())
    if failed:
        return Result(
            "patches",
            FAIL,
            f"{summary}: " + "; ".join(f"{r['id']}: {r['reason']}" for r in failed),
            "see `python -m vlgrpo patches status`; report the failing patch",
        )
    return Result("patches", PASS, f"{len(rows)} patches: {summary}")


def check_ckpt_engine(ctx: Context, platform: str) -> Result:
    engine_module = "hccl_checkpoint_engine" if platform == "npu" else "nccl_checkpoint_engine"
    try:
        ce = importlib.import_module("verl.checkpoint_engine")
    except Exception as exc:  # report whatever verl raises
        return Result(
            "ckpt-engine",
            FAIL,
            f"import verl.checkpoint_engine: {type(exc).__name__}: {exc}",
            "install verl's runtime dependencies (the image's lock)",
        )
    registered = sorted(getattr(ce.CheckpointEngineRegistry, "_registry", {}))
    if "nccl" in registered:
        which = "HCCL engine (Ascend registers it as nccl)" if platform == "npu" else "NCCL engine"
        return Result("ckpt-engine", PASS, f"backend nccl registered ({which}); registered: {', '.join(registered)}")
    try:  # verl swallows this ImportError in its __init__; show it
        importlib.import_module(f"verl.checkpoint_engine.{engine_module}")
        cause = f"{engine_module} imports, but did not register nccl"
    except Exception as exc:
        cause = f"{engine_module}: {type(exc).__name__}: {exc}"
    if ctx.stand_in:
        return Result(
            "ckpt-engine",
            SKIP,
            f"CI stand-in image: nccl cannot register here ({cause}); registered: {', '.join(registered)}",
        )
    need = "torch_npu, zmq and vLLM" if platform == "npu" else "cupy and zmq"
    return Result(
        "ckpt-engine",
        FAIL,
        f"backend nccl NOT registered ({cause}); registered: {', '.join(registered)}",
        f"the image needs {need} (B13); actor_rollout_ref.rollout.checkpoint_engine.backend must be nccl "
        "(also on Ascend)",
    )


def check_model(ctx: Context) -> Result:
    if not ctx.model_path:
        return Result("model", SKIP, "no model folder given (--model-path or VLGRPO_MODEL_PATH)")
    from vlgrpo.preflight.model_dir import check_model_dir
    from vlgrpo.preflight.report import ERROR, Report

    report = Report()
    info = check_model_dir(ctx.model_path, report)
    errors = [f for f in report.findings if f.severity == ERROR]
    if errors:
        return Result("model", FAIL, "; ".join(f.what for f in errors[:5]), errors[0].fix)
    return Result("model", PASS, f"{ctx.model_path}: model_type {info.get('model_type')}, no remote code")


def check_data(ctx: Context) -> list[Result]:
    results = []
    files = [(k, p) for k, p in (("train", ctx.train_file), ("val", ctx.val_file)) if p]
    if not files and not ctx.argv_file:
        return [Result("data", SKIP, "no data files given (--train-file/--val-file or VLGRPO_TRAIN_FILE/VAL_FILE)")]
    for split, path in files:
        try:
            import pyarrow.parquet as pq

            meta = pq.read_metadata(path)
            if meta.num_rows == 0:
                results.append(
                    Result(f"data[{split}]", FAIL, f"{path}: 0 rows", "regenerate it: python -m vlgrpo data geo3k")
                )
            else:
                results.append(
                    Result(f"data[{split}]", PASS, f"{path}: {meta.num_rows} rows, {meta.num_columns} columns")
                )
        except Exception as exc:
            results.append(
                Result(
                    f"data[{split}]",
                    FAIL,
                    f"{path}: {type(exc).__name__}: {exc}",
                    "mount the parquet file, or regenerate it: python -m vlgrpo data geo3k",
                )
            )
    if ctx.argv_file:
        from vlgrpo.preflight.api import run_preflight

        with open(ctx.argv_file, encoding="utf-8") as fh:
            argv = [ln.rstrip("\n") for ln in fh if ln.strip()]
        report = run_preflight(argv, check_data=True)
        errors = [f for f in report.findings if f.severity == "error"]
        if report.internal_error:
            results.append(
                Result(
                    "preflight",
                    FAIL,
                    "preflight crashed: " + report.internal_error.splitlines()[-1],
                    "run python -m vlgrpo preflight --argv-file FILE for the traceback",
                )
            )
        elif errors:
            results.append(
                Result(
                    "preflight",
                    FAIL,
                    f"{len(errors)} finding(s): " + "; ".join(f.what for f in errors[:3]),
                    errors[0].fix,
                )
            )
        else:
            results.append(Result("preflight", PASS, f"{ctx.argv_file}: no findings"))
    return results


def check_checkpoint_space(ctx: Context) -> Result:
    d = ctx.checkpoint_dir
    if not d:
        return Result(
            "checkpoint-space", SKIP, "no checkpoint folder given (--checkpoint-dir or VLGRPO_CHECKPOINT_DIR)"
        )
    if not os.path.isdir(d):
        return Result("checkpoint-space", FAIL, f"{d} does not exist", f"mount a persistent volume at {d}")
    try:
        with tempfile.NamedTemporaryFile(dir=d, prefix=".vlgrpo-doctor-"):
            pass
    except OSError as exc:
        return Result("checkpoint-space", FAIL, f"{d} is not writable: {exc}", "mount it read-write")
    free = shutil.disk_usage(d).free / 2**30
    if free < ctx.min_free_gib:
        return Result(
            "checkpoint-space",
            FAIL,
            f"{d}: {free:.1f} GiB free, below {ctx.min_free_gib:g} GiB",
            "free space or point VLGRPO_CHECKPOINT_DIR at a larger volume (one 30B-A3B checkpoint with "
            "optimizer state is ~350 GiB)",
        )
    return Result("checkpoint-space", PASS, f"{d}: writable, {free:.1f} GiB free")


def check_ports(ctx: Context) -> Result:
    """What a running job listens on (field case C01). None of it is authenticated, so with host networking a
    host firewall must admit only the cluster's nodes."""
    from vlgrpo.patches.state import read_switches

    _, all_off, disabled = read_switches()
    loopback = not all_off and "rollout.server_loopback" not in disabled
    ports = (
        "Ray GCS (VLGRPO_RAY_PORT, 6379) and Ray's node-manager, object-manager and worker ports (random) on "
        "every node's IP; the Ray dashboard/job API (VLGRPO_RAY_DASHBOARD_PORT, 8265) on "
        "VLGRPO_RAY_DASHBOARD_HOST (127.0.0.1 by default; job submission runs code); Ray's dashboard agent "
        "(VLGRPO_RAY_AGENT_PORT, 52365, its own job API) and the head's Ray client server (VLGRPO_RAY_CLIENT_PORT, "
        "10001) on every interface, both running code for whoever reaches them; per vLLM replica its "
        "OpenAI HTTP server on a random port of "
        + ("127.0.0.1 only (patch rollout.server_loopback)" if loopback else "the node IP, unauthenticated")
        + ", and torch.distributed / vLLM data-parallel ports on the node IP for multi-node or DP > 1 "
        "replicas; NCCL/HCCL ports between trainer and rollout nodes. None is authenticated: with host networking "
        "(compose.yaml) a host firewall must admit only the cluster's nodes"
    )
    if not loopback:
        return Result(
            "ports",
            FAIL,
            ports,
            "unset VLGRPO_PATCHES_DISABLED=rollout.server_loopback / VLGRPO_PATCHES=off "
            "(vLLM 0.13.0 is inside CVE-2026-22778 and CVE-2026-34755)",
        )
    return Result("ports", PASS, ports)


def run_checks(ctx: Context, only: Callable[[str], bool] = lambda name: True) -> list[Result]:
    """Run every check (each guarded: an exception becomes a FAIL naming it). Returns the results in order."""
    ctx.load_manifest()
    platform = ctx.resolve_platform()
    plan: list[tuple[str, Callable[[], Any]]] = [
        ("versions", lambda: check_versions(ctx)),
        ("devices", lambda: check_devices(ctx, platform)),
        ("driver", lambda: check_driver(ctx, platform)),
        ("driver-version", lambda: check_driver_version(ctx, platform)),
        ("torch-devices", lambda: check_torch_devices(ctx, platform)),
        ("shm", lambda: check_shm(ctx)),
        ("sitecustomize", lambda: [check_site_driver(ctx), check_site_spawn(ctx)] + check_site_ray(ctx)),
        ("patches", lambda: check_patches(ctx)),
        ("ckpt-engine", lambda: check_ckpt_engine(ctx, platform)),
        ("model", lambda: check_model(ctx)),
        ("data", lambda: check_data(ctx)),
        ("checkpoint-space", lambda: check_checkpoint_space(ctx)),
        ("ports", lambda: check_ports(ctx)),
    ]
    results: list[Result] = []
    for name, fn in plan:
        if not only(name):
            results.append(Result(name, SKIP, "skipped by --skip"))
            continue
        try:
            out = fn()
        except Exception as exc:  # a broken check is a failed check, named
            out = Result(name, FAIL, f"check raised {type(exc).__name__}: {exc}", "report this doctor failure")
        results.extend(out if isinstance(out, list) else [out])
    return results


CHECK_NAMES = (
    "versions",
    "devices",
    "driver",
    "driver-version",
    "torch-devices",
    "shm",
    "sitecustomize",
    "patches",
    "ckpt-engine",
    "model",
    "data",
    "checkpoint-space",
    "ports",
)


def parser(prog: str = "python -m vlgrpo doctor") -> argparse.ArgumentParser:
    """The doctor's command line (its flags; defaults of the paths from the ``VLGRPO_*`` settings). ``doctor.sh``'s
    launcher judges the words with it before the doctor starts."""
    env = os.environ.get
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    p.add_argument("--platform", choices=("npu", "gpu", "auto"), default="auto")
    p.add_argument("--json", action="store_true", help="print the results as a JSON list")
    p.add_argument("--manifest", default=MANIFEST_PATH, help=f"build manifest (default {MANIFEST_PATH})")
    p.add_argument("--model-path", default=env("VLGRPO_MODEL_PATH", ""))
    p.add_argument("--train-file", default=env("VLGRPO_TRAIN_FILE", ""))
    p.add_argument("--val-file", default=env("VLGRPO_VAL_FILE", ""))
    p.add_argument("--argv-file", default="", help="a launch argv (one element per line) for the full preflight")
    p.add_argument("--checkpoint-dir", default=env("VLGRPO_CHECKPOINT_DIR", ""))
    p.add_argument("--min-free-gib", type=float, default=DEFAULT_MIN_FREE_GIB)
    p.add_argument("--min-shm-gib", type=float, default=DEFAULT_MIN_SHM_GIB)
    p.add_argument("--no-ray", action="store_true", help="skip the Ray-actor sitecustomize check")
    p.add_argument("--skip", default="", help=f"comma list of checks to skip: {', '.join(CHECK_NAMES)}")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    unknown = skip - set(CHECK_NAMES)
    if unknown:
        print(
            f"doctor: --skip: unknown check(s) {', '.join(sorted(unknown))}; known: {', '.join(CHECK_NAMES)}",
            file=sys.stderr,
        )
        return 2
    ctx = Context(
        platform=args.platform,
        manifest_path=args.manifest,
        min_shm_gib=args.min_shm_gib,
        min_free_gib=args.min_free_gib,
        model_path=args.model_path,
        train_file=args.train_file,
        val_file=args.val_file,
        argv_file=args.argv_file,
        checkpoint_dir=args.checkpoint_dir,
        ray=not args.no_ray,
    )
    results = run_checks(ctx, only=lambda name: name not in skip)
    failed = [r for r in results if r.status == FAIL]
    if args.json:
        print(json.dumps([dataclasses.asdict(r) for r in results], indent=2))
    else:
        for r in results:
            print(r.line())
        print(f"doctor: {len(results) - len(failed)} ok/skipped, {len(failed)} failed")
    return 2 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
