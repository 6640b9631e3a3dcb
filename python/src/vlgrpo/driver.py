"""The host driver the container sees, against what the image's runtime needs (CUDA, CANN).

The most common way a pulled image fails on a cluster node is a host driver older than the image's runtime
needs: the failure comes at the first device call, after the allocation. :func:`check` reads both sides on
this node, inside the container, the way the runtime will meet them, and returns a :class:`DriverCheck`
whose ``problem`` (empty when fine) names both versions and the fix. Used by the doctor (``driver-version``)
and by the entrypoints' node check (``python -m vlgrpo devices`` reports it, the launcher refuses).
Standard library only.

NVIDIA (image: vllm/vllm-openai:v0.13.0, CUDA 12.9.1)
    host driver: ``nvidia-smi`` (its "Driver Version:" header); GPU names: ``nvidia-smi -L``.
    image: the CUDA release from ``/usr/local/cuda/version.json`` (else ``CUDA_VERSION``, which NVIDIA's
    base images set), and the forward-compatibility driver libraries of the ``cuda-compat-<major>-<minor>``
    package under ``/usr/local/cuda*/compat`` (``libcuda.so.<driver version>``; NVIDIA builds the package
    "from the NVIDIA driver that matches with the CUDA release", so its version is the driver that runs the
    image's CUDA natively). vLLM's Dockerfile adds that folder to the linker cache
    (``ldconfig /usr/local/cuda-X.Y/compat/``), so the compat libcuda is the one loaded.
    Rule (NVIDIA "CUDA Compatibility": minor version compatibility, forward compatibility):
      driver >= the compat libcuda's version: native;
      older, on a data-center GPU: forward compatibility through the image's compat libraries;
      older, on a GeForce/TITAN GPU with the compat libraries in the linker cache: refused -- forward
      compatibility is for data-center GPUs only, the first CUDA call fails (error 804,
      cudaErrorCompatNotSupportedOnDevice);
      below the CUDA 12.x minor-version floor 525.60.13 and no forward-compatibility path: refused.
Ascend (image: quay.io/ascend/vllm-ascend:v0.13.0, CANN 8.5.0)
    host driver: ``/usr/local/Ascend/driver/version.info`` (``package_version``, else ``Version``), else
    the ``npu-smi info`` header.
    image: the CANN release (the toolkit's ``version.info`` / ``ascend_toolkit_install.info`` under
    ``/usr/local/Ascend/ascend-toolkit/latest``) and every ``required_driver_<x>_version`` that a CANN
    ``version.info`` in the image declares, compared with the driver's ``<x>_version``.
    Rule: each declared requirement met, and the driver at least the Ascend HDK release that CANN pairs
    with its release (:data:`CANN_HDK`: CANN 8.5.0 -> HDK 25.5.0, hicann/release-management
    ``8.5.0/release-notes.md`` "版本配套").
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import re
import subprocess
from typing import Callable, Mapping

#: CUDA 12.x minor version compatibility floor (NVIDIA CUDA Compatibility, "Minor Version Compatibility",
#: and the CUDA 12 toolkit release notes: ">= 525.60.13" on Linux)
CUDA12_MINOR_FLOOR = "525.60.13"
#: the Ascend HDK release CANN pairs with its release (hicann/release-management <release>/release-notes.md)
CANN_HDK = {"8.5": "25.5.0"}
CONSUMER_GPU = re.compile(r"GeForce|TITAN", re.I)
ASCEND_DRIVER_INFO = "/usr/local/Ascend/driver/version.info"
ASCEND_TOOLKIT = "/usr/local/Ascend/ascend-toolkit/latest"

Runner = Callable[[list], "tuple[int, str]"]


@dataclasses.dataclass(frozen=True)
class DriverCheck:
    """``host``: the driver version the container sees ("" when unknown); ``needs``: what the image needs
    (one line); ``via``: how the image runs on this driver (native, forward compatibility); ``problem``
    and ``fix``: empty when fine; ``skipped``: why nothing was compared ("" when compared)."""

    platform: str
    host: str = ""
    needs: str = ""
    via: str = ""
    problem: str = ""
    fix: str = ""
    skipped: str = ""

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


# ------------------------------------------------------------------------------------------------ versions


def version_key(text: str) -> tuple:
    """Order NVIDIA (``575.57.08``) and Ascend (``25.5.0``, ``25.3.rc1``, ``24.1.rc2.2``) versions: numeric
    parts compare as numbers; an ``rc``/``alpha``/``beta`` part sorts below the release it precedes
    (``25.5.rc1`` < ``25.5.0``). Raises ValueError for a text without a leading number."""
    parts = re.split(r"[.\-_]", text.strip().lower())
    if not parts or not parts[0].isdigit():
        raise ValueError(f"not a version: {text!r}")
    key: list = []
    for part in parts:
        if part.isdigit():
            key.append((1, int(part), ""))
        else:
            m = re.fullmatch(r"(rc|alpha|beta|a|b|t)(\d*)", part)
            key.append((0, int(m.group(2) or 0), m.group(1)) if m else (1, -1, part))
    return tuple(key)


def older(a: str, b: str) -> bool:
    """``a`` is an older version than ``b`` (:func:`version_key`)."""
    ka, kb = version_key(a), version_key(b)
    pad = (1, 0, "")
    n = max(len(ka), len(kb))
    return ka + (pad,) * (n - len(ka)) < kb + (pad,) * (n - len(kb))


def parse_key_values(text: str) -> dict[str, str]:
    """``key=value`` lines (Ascend version.info, ascend_install.info); surrounding quotes removed."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key:
            out[key.strip()] = value.strip().strip('"')
    return out


def parse_nvidia_smi_driver(text: str) -> str:
    """The "Driver Version: X" of ``nvidia-smi``'s header, "" when absent."""
    m = re.search(r"Driver Version:\s*([0-9][0-9.]*)", text)
    return m.group(1) if m else ""


def parse_npu_smi_version(text: str) -> str:
    """The "Version: X" of ``npu-smi info``'s header, "" when absent."""
    m = re.search(r"npu-smi\s+\S+\s+Version:\s*([0-9][0-9A-Za-z.]*)", text)
    return m.group(1) if m else ""


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read(1 << 20)
    except OSError:
        return ""


def _run(argv: list) -> tuple[int, str]:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        return 127, f"{type(exc).__name__}: {exc}"
    return out.returncode, out.stdout + out.stderr


# ------------------------------------------------------------------------------------------------- NVIDIA


@dataclasses.dataclass(frozen=True)
class CudaImage:
    """The image's CUDA side: ``cuda`` release ("12.9.1"), its source, and the forward-compatibility libcuda:
    ``compat`` (driver version in its file name, "" when the image has none), ``compat_path``,
    ``compat_linked`` (its folder is in the linker cache)."""

    cuda: str
    cuda_source: str
    compat: str = ""
    compat_path: str = ""
    compat_linked: bool = False


def cuda_image(root: str = "/", environ: Mapping[str, str] | None = None, run: Runner | None = None) -> CudaImage:
    """Read the image's CUDA release and compat libraries under ``root`` (tests point it at a fake tree)."""
    environ = os.environ if environ is None else environ
    cuda, source = "", ""
    info = _read(os.path.join(root, "usr/local/cuda/version.json"))
    if info:
        try:
            cuda, source = json.loads(info)["cuda"]["version"], "/usr/local/cuda/version.json"
        except (ValueError, KeyError, TypeError):
            pass
    if not cuda and environ.get("CUDA_VERSION"):
        cuda, source = environ["CUDA_VERSION"], "CUDA_VERSION"
    libs = []
    for path in glob.glob(os.path.join(glob.escape(root), "usr/local/cuda*/compat/libcuda.so.*")):
        m = re.fullmatch(r"libcuda\.so\.(\d+\.\d+(?:\.\d+)?)", os.path.basename(path))
        if m:
            libs.append((version_key(m.group(1)), m.group(1), path))
    if not libs:
        return CudaImage(cuda, source)
    _, compat, path = max(libs)
    path = path[len(root.rstrip("/")) :]  # as the image sees it
    rc, cache = (run or _run)(["ldconfig", "-p"])
    linked = rc == 0 and f"{os.path.dirname(path)}/libcuda.so" in cache
    return CudaImage(cuda, source, compat, path, linked)


def check_nvidia(smi: str, smi_list: str, image: CudaImage) -> DriverCheck:
    """Judge ``nvidia-smi`` output (``smi``: the default table; ``smi_list``: ``nvidia-smi -L``) against the
    image (see the module docstring for the rule)."""
    host = parse_nvidia_smi_driver(smi)
    if not host:
        return DriverCheck("gpu", skipped="nvidia-smi shows no driver version")
    names = [
        ln.split(":", 1)[1].split("(UUID", 1)[0].strip() for ln in smi_list.splitlines() if re.match(r"GPU \d+:", ln)
    ]
    consumer = [n for n in names if CONSUMER_GPU.search(n)]
    cuda = image.cuda or "?"
    if image.compat:
        needs = f"CUDA {cuda} (driver {image.compat} natively: the image's cuda-compat libcuda {image.compat_path})"
    else:
        needs = f"CUDA {cuda} (no forward-compatibility libraries in the image)"
    upgrade = f"upgrade the host's NVIDIA driver to {image.compat or 'the one of CUDA ' + cuda} or newer"
    if image.compat and not older(host, image.compat):
        return DriverCheck("gpu", host, needs, "native")
    if image.compat and not consumer:
        return DriverCheck(
            "gpu",
            host,
            needs,
            f"forward compatibility (the image's libcuda {image.compat} on a data-center GPU driver)",
        )
    if image.compat and consumer and image.compat_linked:
        return DriverCheck(
            "gpu",
            host,
            needs,
            "",
            f"host driver {host} is older than {image.compat}, which CUDA {cuda} in this "
            f"image needs; the image loads its forward-compatibility libcuda instead, which NVIDIA supports on "
            f"data-center GPUs only, and this node has {consumer[0]}: the first CUDA call fails (error 804, "
            f"forward compatibility on unsupported hardware)",
            upgrade,
        )
    if cuda.startswith("12.") and older(host, CUDA12_MINOR_FLOOR):
        return DriverCheck(
            "gpu",
            host,
            needs,
            "",
            f"host driver {host} is older than {CUDA12_MINOR_FLOOR}, the oldest that runs "
            f"CUDA 12.x (minor version compatibility), and the image's CUDA {cuda} has no forward-compatibility "
            "path on this GPU: the first CUDA call fails (CUDA driver version is insufficient)",
            upgrade,
        )
    return DriverCheck(
        "gpu",
        host,
        needs,
        f"minor version compatibility (CUDA 12.x on driver >= {CUDA12_MINOR_FLOOR}; "
        "features of a newer driver unavailable)",
    )


# ------------------------------------------------------------------------------------------------- Ascend


def cann_release(toolkit: str) -> tuple[str, str]:
    """(CANN release "8.5.0", the file it came from) from the toolkit folder, ("", "") when not found."""
    candidates = [os.path.join(toolkit, "opp", "version.info"), os.path.join(toolkit, "runtime", "version.info")]
    candidates += sorted(glob.glob(os.path.join(glob.escape(toolkit), "*", "ascend_toolkit_install.info")))
    for path in candidates:
        kv = parse_key_values(_read(path))
        value = kv.get("version_dir") or kv.get("Version") or kv.get("version") or ""
        m = re.match(r"\d+\.\d+(\.\d+)?", value)
        if m:
            return m.group(0), path
    return "", ""


def cann_requirements(toolkit: str) -> list[tuple[str, str, str]]:
    """Every ``required_driver_<x>_version=V`` a ``version.info`` under the toolkit declares: (x, V, file)."""
    out = []
    for path in sorted(glob.glob(os.path.join(glob.escape(toolkit), "**", "version.info"), recursive=True)):
        for key, value in parse_key_values(_read(path)).items():
            m = re.fullmatch(r"required_driver_(\w+?)_version", key)
            if m and value:
                out.append((m.group(1), value.strip("[]>= "), path))
    return out


def check_ascend(driver_info: str, npu_smi: str, toolkit: str) -> DriverCheck:
    """Judge the driver's ``version.info`` text (or, when empty, the ``npu-smi info`` output) against the CANN
    under ``toolkit`` (see the module docstring for the rule)."""
    kv = parse_key_values(driver_info)
    host = kv.get("package_version") or kv.get("Version") or parse_npu_smi_version(npu_smi)
    if not host:
        return DriverCheck("npu", skipped=f"no driver version ({ASCEND_DRIVER_INFO} unreadable, npu-smi shows none)")
    cann, cann_file = cann_release(toolkit)
    if not cann:
        return DriverCheck("npu", host, skipped=f"no CANN version found under {toolkit}")
    paired = CANN_HDK.get(".".join(cann.split(".")[:2]), "")
    needs = f"CANN {cann} ({cann_file})" + (f", paired with Ascend HDK {paired}" if paired else "")
    fix = f"upgrade the host's Ascend driver and firmware to HDK {paired or 'the release paired with CANN ' + cann} or newer"
    short = []
    for part, want, path in cann_requirements(toolkit):
        have = kv.get(f"{part}_version", "")
        try:
            if have and older(have, want):
                short.append(f"{part}_version {have} < {want} required by {path}")
        except ValueError:
            continue
    if short:
        return DriverCheck(
            "npu",
            host,
            needs,
            "",
            f"host driver {host} does not meet what CANN {cann} in this image declares: " + "; ".join(short),
            fix,
        )
    try:
        too_old = bool(paired) and older(host, paired)
    except ValueError:
        return DriverCheck("npu", host, needs, skipped=f"driver version {host!r} not understood")
    if too_old:
        return DriverCheck(
            "npu",
            host,
            needs,
            "",
            f"host driver {host} is older than Ascend HDK {paired}, which CANN "
            f"{cann} in this image is released with (hicann/release-management {cann}/release-notes.md)",
            fix,
        )
    return DriverCheck("npu", host, needs, "native")


# ---------------------------------------------------------------------------------------------------- node


def check(
    platform: str,
    root: str = "/",
    environ: Mapping[str, str] | None = None,
    run: Runner | None = None,
    which: Callable[[str], str | None] | None = None,
    smi_list: str = "",
    npu_smi: bool = False,
) -> DriverCheck:
    """Read this node's driver and the image's needs for ``platform`` ("npu"/"gpu") and judge them.

    ``smi_list``: ``nvidia-smi -L`` output the caller already has (else it is run); ``npu_smi``: read the
    Ascend driver version from ``npu-smi info`` when the driver's version.info is not mounted.
    """
    import shutil

    run = run or _run
    which = which or shutil.which
    if platform == "gpu":
        if not which("nvidia-smi"):
            return DriverCheck("gpu", skipped="nvidia-smi not found")
        rc, smi = run(["nvidia-smi"])
        smi_list = smi_list or run(["nvidia-smi", "-L"])[1]
        if rc != 0:
            return DriverCheck("gpu", skipped=f"nvidia-smi failed (exit {rc})")
        return check_nvidia(smi, smi_list, cuda_image(root, environ, run))
    if platform == "npu":
        info = _read(os.path.join(root, ASCEND_DRIVER_INFO.lstrip("/")))
        smi = run(["npu-smi", "info"])[1] if npu_smi and not info and which("npu-smi") else ""
        return check_ascend(info, smi, os.path.join(root, ASCEND_TOOLKIT.lstrip("/")))
    return DriverCheck(platform, skipped="no accelerator platform")
