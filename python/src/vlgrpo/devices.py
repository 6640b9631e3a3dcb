"""The one device counter: which accelerators this node has, and how many this process may use.

``python -m vlgrpo devices [--platform npu|gpu] [--dev-dir DIR] [--torch] [--format text|shell|json]``

Every part of vlgrpo that needs a device count asks this module: the entrypoints' node check
(the launcher, :mod:`vlgrpo.launch.entry` and :mod:`vlgrpo.launch.raynode`, runs ``python3 -m vlgrpo devices --format
shell``), ``entrypoints/ray-node.sh``
(what a node declares to Ray), the preflight's topology check, the doctor and ``vlgrpo cluster probe``.
Standard library only (the entrypoints call it before anything else; torch is imported only for
:func:`torch_count`).

How a node is counted (:func:`count`):

Ascend (``npu``)
    the ``/dev/davinci<N>`` device files (the control devices ``davinci_manager`` etc. do not match);
    when there are none, ``npu-smi info -l``: the sum of its "Chip Count" lines when present (an Atlas A3
    board carries 2 chips per NPU id), else its "Total Count".
NVIDIA (``gpu``)
    the ``GPU <n>:`` lines of ``nvidia-smi -L`` (MIG lines are not counted).
Platform
    given, else ``npu`` when there is a davinci device or ``npu-smi`` on ``PATH``, else ``gpu`` when
    ``nvidia-smi`` is on ``PATH``, else none ("").
Visibility
    ``ASCEND_RT_VISIBLE_DEVICES`` (npu) / ``CUDA_VISIBLE_DEVICES`` (gpu) limit what this process may use,
    read the way the runtimes read them (:func:`visible_limit`): set but empty, or Ray's ``NoDevFiles``,
    hides every device; the list ends at the first entry that is not a device index (CUDA also takes
    ``GPU-``/``MIG-`` UUIDs); a repeated entry counts once. A management tool and the device files are
    not affected by these variables, so :attr:`NodeCount.node_devices` is the node's count and
    :attr:`NodeCount.devices` what this process may use.
List checks (field cases C06, C12; :func:`list_problem`)
    a repeated or unordered list, an id at or above the node's count, and, under Ray's NOSET switch, any
    list other than ``0..N-1`` are refused (the entrypoints' node check turns ``list_problem`` into an
    error); :func:`shrink_problem` names the list when the runtime exposes fewer devices than it lists.

Test stand-ins (CPU machines): ``--dev-dir`` (Python: ``dev_dir``) points the davinci scan at a folder
of empty files; scripted ``npu-smi``/``nvidia-smi`` first on ``PATH`` stand in for the tools; and for
:func:`torch_count` the module named by ``VLGRPO_PROBE_DEVICE_MODULE`` stands in for torch_npu/CUDA
(refused where the real backend is installed, so it cannot weaken a run on a real image).

Exit codes of the CLI: 0 counted (a count of 0 is a result, not an error), 2 invalid input.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import importlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from typing import Callable, Mapping

PLATFORMS = ("npu", "gpu")
#: the variable each runtime reads to restrict a process to some devices
VISIBILITY_VAR = {"npu": "ASCEND_RT_VISIBLE_DEVICES", "gpu": "CUDA_VISIBLE_DEVICES"}
#: Ray 2.48.0's switch that stops it from setting VISIBILITY_VAR per worker (ray/_private/accelerators/npu.py,
#: nvidia_gpu.py: set_current_process_visible_accelerator_ids returns early when it is set)
NOSET_VAR = {
    "npu": "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES",
    "gpu": "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES",
}
#: the Ray resource each platform's devices are declared as
RESOURCE = {"npu": "NPU", "gpu": "GPU"}
#: set by Ray's job supervisor in the environment of a ``ray job submit`` driver (job_supervisor.py)
RAY_JOB_CONFIG_VAR = "RAY_JOB_CONFIG_JSON_ENV_VAR"
STANDIN_ENV = "VLGRPO_PROBE_DEVICE_MODULE"
TOOL_TIMEOUT_S = 60.0

Runner = Callable[[list], "tuple[int, str]"]


class UsageError(ValueError):
    """Invalid input (CLI exit 2)."""


@dataclasses.dataclass(frozen=True)
class NodeCount:
    """What :func:`count` found.

    ``platform``: "npu", "gpu" or "" (no accelerator found). ``devices``: how many this process may use
    (``node_devices`` limited by the visibility variable). ``source``: how ``devices`` was found (a path
    pattern, a tool, or the variable's name when it set the limit). ``node_devices``/``node_source``: the
    node's own count, without the visibility limit. ``visibility_var``: the variable of the platform;
    ``visibility_value``: its value in this process, None when unset. ``tool_error``: the management
    tool's failure ("npu-smi info -l: exit 3: ..."), "" when it ran or was not needed.
    """

    platform: str
    devices: int
    source: str
    node_devices: int
    node_source: str
    visibility_var: str = ""
    visibility_value: str | None = None
    tool_error: str = ""
    tool_output: str = dataclasses.field(default="", repr=False, compare=False)

    @property
    def hidden(self) -> int:
        """Devices of the node this process may not use (0 when none are hidden)."""
        return max(0, self.node_devices - self.devices)

    def ray_hidden(self, environ: Mapping[str, str] | None = None) -> bool:
        """True when Ray restricted this ``ray job submit`` driver: the visibility variable is set (empty, or
        fewer ids than the node has), the process has Ray's job config and no NOSET switch."""
        environ = os.environ if environ is None else environ
        if self.visibility_value is None or not self.platform or RAY_JOB_CONFIG_VAR not in environ:
            return False
        if environ.get(NOSET_VAR[self.platform]):
            return False
        return self.visibility_value in ("", "NoDevFiles") or self.hidden > 0

    def cause(self, environ: Mapping[str, str] | None = None) -> str:
        """Why devices are hidden from this process, in words ("" when none are, or no variable hides them)."""
        environ = os.environ if environ is None else environ
        if self.visibility_value is None or not (self.hidden or self.ray_hidden(environ)):
            return ""
        return hidden_cause(
            self.platform, self.visibility_value, self.devices, self.node_devices, RAY_JOB_CONFIG_VAR in environ, False
        )

    def fix(self, environ: Mapping[str, str] | None = None) -> str:
        """The fix for :meth:`cause` ("" when there is nothing to fix)."""
        if not self.cause(environ):
            return ""
        if self.ray_hidden(environ):
            return ray_fix(self.platform, self.visibility_value or "")
        return f"unset {self.visibility_var} or list the devices this launch may use in it"

    def list_problem(self, environ: Mapping[str, str] | None = None) -> tuple[str, str]:
        """:func:`list_problem` for this process's visibility list, against the node's count, under the NOSET
        switch as ``environ`` has it."""
        environ = os.environ if environ is None else environ
        if not self.platform:
            return "", ""
        return list_problem(
            self.platform, self.visibility_value, self.node_devices, bool(environ.get(NOSET_VAR[self.platform]))
        )

    def as_dict(self) -> dict:
        """The fields as a dict, without the raw tool output."""
        data = dataclasses.asdict(self)
        data.pop("tool_output")
        return data


def hidden_cause(platform: str, value: str, seen: int, node: int, job_driver: bool, ray_worker: bool) -> str:
    """Explain why a process sees ``seen`` of a node's ``node`` devices under ``VISIBILITY_VAR=value``.

    A ``ray job submit`` driver (``job_driver``) with an empty value is field case B14: Ray 2.48.0 sets the
    variable for the job supervisor, which holds no device, and the driver inherits it (ray issue #59063,
    fixed by PR #59163 after 2.48.0; verl issue #6741); with ids, Ray gave the driver devices (the job was
    submitted with ``--entrypoint-resources`` / ``--entrypoint-num-gpus``). A Ray worker (``ray_worker``) gets
    the ids it holds. Returns one line.
    """
    var, noset, res = VISIBILITY_VAR[platform], NOSET_VAR[platform], RESOURCE[platform]
    shown = "set but empty" if value == "" else f"{value!r}"
    of = f"of the node's {node} {res}" if node else f"{res}"
    line = f"{var} is {shown} in this process, so it sees {seen} {of}"
    if job_driver and value in ("", "NoDevFiles"):
        line += (
            f"; this process is a `ray job submit` driver, and Ray 2.48.0 hides the {res}s from it when the node "
            f"was started without {noset}=1 (ray issue #59063, fixed after 2.48.0; verl issue #6741)"
        )
    elif job_driver:
        line += (
            f"; this process is a `ray job submit` driver that Ray gave these {res} ids (the job was submitted "
            f"with --entrypoint-resources / --entrypoint-num-gpus): it holds them for the whole job"
        )
    elif ray_worker:
        line += f"; Ray sets {var} to the ids a worker holds unless {noset}=1"
    return line


def ray_fix(platform: str, value: str = "") -> str:
    """The fix for devices hidden by Ray (``value``: the visibility variable's value in the process)."""
    noset = NOSET_VAR[platform]
    if value not in ("", "NoDevFiles"):
        return (
            "submit the job without --entrypoint-resources / --entrypoint-num-gpus (the driver needs no device; "
            "verl places its own workers)"
        )
    if platform == "npu":
        return (
            f"start every node with entrypoints/ray-node.sh (it exports {noset}=1), or set {noset}=1 in the "
            f"environment of `ray start` on every node"
        )
    return f"start the nodes with entrypoints/ray-node.sh, or set {noset}=1 in the environment of `ray start`"


# ------------------------------------------------------------------------------------------ node counts


def davinci_devices(dev_dir: str = "/dev") -> list[str]:
    """Paths of the ``davinci<N>`` device files in ``dev_dir`` that exist (a dangling link does not), sorted."""
    found = []
    for path in glob.glob(os.path.join(glob.escape(dev_dir), "davinci[0-9]*")):
        if re.fullmatch(r"davinci[0-9]+", os.path.basename(path)) and os.path.exists(path):
            found.append(path)
    return sorted(found)


def parse_npu_smi_list(text: str) -> int:
    """NPUs in ``npu-smi info -l`` output: the sum of the "Chip Count" values when any is present, else the
    last "Total Count" value, else 0. A value is the digits of the text between the first and the second
    colon of its line."""
    chips, seen, total = 0, False, 0
    for line in text.splitlines():
        parts = line.split(":")
        value = re.sub(r"[^0-9]", "", parts[1]) if len(parts) > 1 else ""
        if "Chip Count" in line and value:
            chips, seen = chips + int(value), True
        if "Total Count" in line and value:
            total = int(value)
    return chips if seen else total


def parse_nvidia_smi_list(text: str) -> int:
    """GPUs in ``nvidia-smi -L`` output: lines starting ``GPU <n>:`` (MIG device lines are indented)."""
    return sum(1 for line in text.splitlines() if re.match(r"GPU [0-9]+:", line))


def visible_limit(var: str, value: str | None) -> int | None:
    """How many devices ``var=value`` leaves visible; None when the variable is unset (no limit).

    Only the first line of the value is read. Empty or ``NoDevFiles`` (Ray's marker for "no devices"):
    0. Otherwise the comma-separated entries up to the first one that is not a device index (1-4 digits;
    for ``CUDA_VISIBLE_DEVICES`` also ``GPU-<uuid>`` / ``MIG-<id>``), each distinct entry counted once:
    ``0,1,-1,3`` leaves 2, ``0,0,1`` leaves 2, ``,0`` leaves 0.
    """
    if value is None:
        return None
    value = value.split("\n", 1)[0]
    if value in ("", "NoDevFiles"):
        return 0
    pattern = r"[0-9]{1,4}"
    if var == "CUDA_VISIBLE_DEVICES":
        pattern = r"[0-9]{1,4}|GPU-[0-9A-Fa-f-]{1,64}|MIG-[0-9A-Za-z/-]{1,96}"
    seen: list[str] = []
    for item in value.split(","):
        if not re.fullmatch(pattern, item):
            break
        if item not in seen:
            seen.append(item)
    return len(seen)


def visible_ids(value: str | None) -> list[int] | None:
    """The device indices of a visibility list, in order and with repeats; None when the variable is unset,
    empty, ``NoDevFiles``, or holds an entry that is not a plain index (a CUDA UUID: nothing to check)."""
    if value is None:
        return None
    value = value.split("\n", 1)[0]
    if value in ("", "NoDevFiles"):
        return None
    items = value.split(",")
    if not all(re.fullmatch(r"[0-9]{1,4}", item) for item in items):
        return None
    return [int(item) for item in items]


def list_problem(platform: str, value: str | None, node_devices: int, noset: bool) -> tuple[str, str]:
    """What is wrong with a visibility list (field cases C06, C12), as ``(problem, fix)``; ``("", "")`` when
    nothing is.

    Args:
        platform: "npu" or "gpu" (names ``ASCEND_RT_VISIBLE_DEVICES`` / ``CUDA_VISIBLE_DEVICES``).
        value: the variable's value in the process (None: unset).
        node_devices: the devices the runtime enumerates on this node (0: unknown, no range check).
        noset: Ray's NOSET switch (:data:`NOSET_VAR`) is set where the list applies: Ray then leaves the list
            to every worker and hands out its entries as accelerator ids, which verl 0.8.0 passes to
            ``set_device`` (``verl/single_controller/base/worker.py`` ``_setup_env_cuda_visible_devices``).

    Refused, in this order: a repeated id (two workers would share a device), ids not in ascending order (CANN
    wants them ascending; under NOSET Ray's ids no longer match the process's numbering), an id at or above
    ``node_devices`` (ids are the runtime's enumeration indices 0..N-1, not slot numbers: a missing or failed
    card shifts them and CANN silently drops the id, field case C12), and under ``noset`` any list other than
    ``0..N-1`` (C06: ``8..15`` makes verl call ``set_device(8)`` in a process that sees devices 0..7).
    """
    ids = visible_ids(value)
    if not ids:
        return "", ""
    var, noset_var = VISIBILITY_VAR[platform], NOSET_VAR[platform]
    shown = f"{var}={(value or '').split(chr(10), 1)[0]}"
    n = len(ids)
    indices = ",".join(str(i) for i in range(len(set(ids))))
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        return (
            f"{shown} repeats device {', '.join(map(str, repeated))}: two workers would get the same device "
            f"(field case C06)",
            f"list each device once, in ascending order, e.g. {var}={indices}",
        )
    if ids != sorted(ids):
        return (
            f"{shown} is not in ascending order: the runtime wants ascending ids, and Ray hands the entries out "
            f"as accelerator ids in this order (field case C06)",
            f"list the ids in ascending order: {var}={','.join(map(str, sorted(ids)))}",
        )
    if node_devices and ids[-1] >= node_devices:
        bad = [i for i in ids if i >= node_devices]
        return (
            f"{shown}: id {', '.join(map(str, bad))} is not below the {node_devices} devices this node enumerates; "
            f"the ids are the runtime's enumeration indices 0..{node_devices - 1}, not slot numbers (a missing or "
            f"failed card shifts them; CANN drops such an id and the process sees fewer devices than listed: "
            f"field case C12)",
            f"use enumeration indices: {var}={','.join(map(str, range(min(n, node_devices))))}",
        )
    if noset and ids != list(range(n)):
        return (
            f"{shown} with {noset_var}=1: Ray gives each worker an id from this list and verl 0.8.0 calls "
            f"set_device(<that id>) (single_controller/base/worker.py), but the process numbers its {n} "
            f"devices 0..{n - 1}, so set_device({ids[0] if ids[0] >= n else ids[-1]}) is out of range "
            f"(field case C06; verl PR #7507)",
            f"give the container only these devices, so that they appear as 0..{n - 1}, and set "
            f"{var}={indices} (or leave it unset)",
        )
    return "", ""


def shrink_problem(platform: str, value: str | None, seen: int) -> tuple[str, str]:
    """``(problem, fix)`` when the runtime exposes fewer devices than the visibility list names (C12: CANN
    drops ids that are not enumeration indices of the host, so ``0,1,3,4`` on a host whose cards are in slots
    0, 1, 3, 4 gives 3 devices); ``("", "")`` otherwise. ``seen``: the torch-level device count of the process.
    """
    ids = visible_ids(value)
    if not ids or seen >= len(set(ids)):
        return "", ""
    var = VISIBILITY_VAR[platform]
    n = len(set(ids))
    return (
        f"{var}={value} names {n} devices but the runtime exposes {seen}: the runtime drops ids that are not "
        f"enumeration indices of this host (a card is missing or failed, so the slots are not 0..{n - 1}; "
        f"field case C12); the list is at fault, not the device mapping or Ray",
        f"use the enumeration indices: {var}={','.join(map(str, range(n)))} (or leave it unset)",
    )


def _run_tool(argv: list) -> tuple[int, str]:
    """(exit status, stdout); on failure, stdout and stderr together (for the message)."""
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as exc:
        return 127, f"{type(exc).__name__}: {exc}"
    return out.returncode, out.stdout if out.returncode == 0 else out.stdout + out.stderr


def _which(environ: Mapping[str, str]) -> Callable[[str], str | None]:
    return lambda name: shutil.which(name, path=environ.get("PATH", os.defpath))


def detect_platform(dev_dir: str = "/dev", environ: Mapping[str, str] | None = None) -> str:
    """``npu`` when a davinci device exists or ``npu-smi`` is on PATH, else ``gpu`` when ``nvidia-smi`` is,
    else ""."""
    which = _which(os.environ if environ is None else environ)
    if davinci_devices(dev_dir) or which("npu-smi"):
        return "npu"
    if which("nvidia-smi"):
        return "gpu"
    return ""


def count(
    platform: str = "", dev_dir: str = "/dev", environ: Mapping[str, str] | None = None, run: Runner | None = None
) -> NodeCount:
    """Count this node's accelerators and those this process may use (see the module docstring).

    Args:
        platform: "npu", "gpu", or "" to detect it (:func:`detect_platform`).
        dev_dir: folder scanned for ``davinci<N>`` files (tests point it at a fake tree).
        environ: the environment read for ``PATH`` and the visibility variables (default ``os.environ``).
        run: runs a tool, ``run(argv) -> (exit status, stdout)``; default: subprocess with a 60 s limit.
            A tool that fails or is missing counts 0.
    Returns:
        :class:`NodeCount`; platform "" and counts 0 when no accelerator platform is found.
    Raises:
        UsageError: ``platform`` is not "", "npu" or "gpu".
    """
    environ = os.environ if environ is None else environ
    run = _run_tool if run is None else run
    if platform not in ("",) + PLATFORMS:
        raise UsageError(f"platform {platform!r}: expected npu or gpu")
    platform = platform or detect_platform(dev_dir, environ)
    if not platform:
        return NodeCount("", 0, "no Ascend NPU (/dev/davinci*, npu-smi) or NVIDIA GPU (nvidia-smi) found", 0, "")
    which = _which(environ)
    error, output = "", ""

    def tool(argv: list, parse: Callable[[str], int]) -> int:
        nonlocal error, output
        path = which(argv[0])
        if not path:
            return 0
        rc, out = run([path, *argv[1:]])
        if rc != 0:
            error = f"{' '.join(argv)}: exit {rc}: {' '.join(out.split())[:200]}"
            return 0
        output = out
        return parse(out)

    if platform == "npu":
        n, source = len(davinci_devices(dev_dir)), f"{dev_dir}/davinci[0-9]*"
        if n == 0 and which("npu-smi"):
            n, source = tool(["npu-smi", "info", "-l"], parse_npu_smi_list), "npu-smi info -l"
    else:
        n, source = tool(["nvidia-smi", "-L"], parse_nvidia_smi_list), "nvidia-smi -L"
    var = VISIBILITY_VAR[platform]
    value = environ.get(var)
    limit = visible_limit(var, value)
    if limit is not None and limit < n:
        return NodeCount(platform, limit, var, n, source, var, value, error, output)
    return NodeCount(platform, n, source, n, source, var, value, error, output)


# ----------------------------------------------------------------------------------------- torch counts


@dataclasses.dataclass(frozen=True)
class TorchCount:
    """What torch (with torch_npu on Ascend), or the stand-in, reports in this process.

    ``visible``: ``torch.npu.device_count()`` / ``torch.cuda.device_count()`` (0 on error); ``source``: which
    backend counted; ``env``: the visibility variables as this process has them; ``error``: the import or
    runtime error, "" when none.
    """

    visible: int
    source: str
    env: dict
    error: str = ""


def real_backend_present(platform: str) -> bool:
    """True when the real device backend is installed: torch_npu (npu), a CUDA build of torch (gpu)."""
    if platform == "npu":
        return importlib.util.find_spec("torch_npu") is not None
    try:
        import torch
    except ImportError:
        return False
    return torch.version.cuda is not None


def load_standin(platform: str, environ: Mapping[str, str] | None = None) -> Callable[[], int] | None:
    """The test stand-in named by ``VLGRPO_PROBE_DEVICE_MODULE`` (its ``device_count``), or None if unset.

    Raises:
        UsageError: the real backend is installed (the stand-in would mask a real fault), or the module has
            no callable ``device_count``.
    """
    environ = os.environ if environ is None else environ
    name = environ.get(STANDIN_ENV, "")
    if not name:
        return None
    if real_backend_present(platform):
        backend = "torch_npu" if platform == "npu" else "a CUDA build of torch"
        raise UsageError(
            f"{STANDIN_ENV}={name!r} is a CPU test hook, refused because {backend} is installed here; "
            f"unset {STANDIN_ENV}"
        )
    module = importlib.import_module(name)
    fn = getattr(module, "device_count", None)
    if not callable(fn):
        raise UsageError(f"{STANDIN_ENV}={name!r}: module has no callable device_count()")
    return fn


def torch_count(platform: str, standin: Callable[[], int] | None = None) -> TorchCount:
    """Import torch (and torch_npu for ``npu``) in this process and count the devices it sees.

    ``standin`` replaces only the device backend (torch is still imported). Never raises: an import or
    runtime error is returned in :attr:`TorchCount.error` with ``visible`` 0.
    """
    env = {k: os.environ[k] for k in VISIBILITY_VAR.values() if k in os.environ}
    try:
        import torch

        if standin is not None:
            return TorchCount(int(standin()), f"stand-in {getattr(standin, '__module__', '?')}", env)
        if platform == "npu":
            import torch_npu  # noqa: F401  (registers torch.npu)

            return TorchCount(int(torch.npu.device_count()), f"torch_npu {torch_npu.__version__}", env)
        return TorchCount(int(torch.cuda.device_count()), f"torch {torch.__version__} cuda {torch.version.cuda}", env)
    except Exception as exc:  # reported, never raised
        return TorchCount(0, "import failed", env, f"{type(exc).__name__}: {exc}")


# ------------------------------------------------------------------------------------------------- CLI


def _shell_lines(data: Mapping[str, object]) -> str:
    """``key=value`` lines; None as empty; newlines in values become spaces (one line per key)."""
    lines = []
    for key, value in data.items():
        text = "" if value is None else str(value)
        lines.append(f"{key}={text.replace(chr(10), ' ').replace(chr(13), ' ')}")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m vlgrpo devices", description=__doc__.split("\n\n")[0])
    p.add_argument("--platform", choices=PLATFORMS, help="npu or gpu (default: detect)")
    p.add_argument("--dev-dir", default="/dev", help="folder with the davinci device files (default /dev)")
    p.add_argument(
        "--torch",
        action="store_true",
        help="also count with torch in this process (torch_npu on Ascend; honours the stand-in hook)",
    )
    p.add_argument(
        "--format",
        choices=("text", "shell", "json"),
        default="text",
        help="text (one line), shell (key=value lines for the entrypoints) or json",
    )
    p.add_argument(
        "--driver",
        action="store_true",
        help="also check the host driver against the image's CUDA/CANN (vlgrpo.driver) when devices are found",
    )
    p.add_argument("--root", default="/", help="file-system root the driver check reads (default /; tests)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        node = count(args.platform or "", args.dev_dir)
        data: dict = node.as_dict()
        data.update(cause=node.cause(), fix=node.fix(), ray_hidden=int(node.ray_hidden()))
        data.update(zip(("list_problem", "list_fix"), node.list_problem()))
        if args.driver and node.platform and node.node_devices:
            from vlgrpo import driver

            found = driver.check(node.platform, args.root, smi_list=node.tool_output)
            data.update({f"driver_{k}": v for k, v in found.as_dict().items() if k != "platform"})
        if args.torch:
            if not node.platform:
                raise UsageError("--torch: no platform found here; pass --platform npu|gpu")
            tc = torch_count(node.platform, load_standin(node.platform))
            data.update(torch_visible=tc.visible, torch_source=tc.source, torch_error=tc.error)
    except UsageError as exc:
        print(f"devices: {exc}", file=sys.stderr)
        return 2
    if args.format == "json":
        print(json.dumps(data))
    elif args.format == "shell":
        print(_shell_lines(data))
    else:
        line = (
            f"devices: platform {node.platform or 'none'}: {node.devices} usable ({node.source}); "
            f"node: {node.node_devices} ({node.node_source or '-'})"
        )
        if data["cause"]:
            line += f"; {data['cause']}"
        if data["list_problem"]:
            line += f"; {data['list_problem']} -- fix: {data['list_fix']}"
        if data.get("driver_problem"):
            line += f"; {data['driver_problem']} -- fix: {data['driver_fix']}"
        if args.torch:
            line += f"; torch sees {data['torch_visible']} [{data['torch_source']}]"
            if data["torch_error"]:
                line += f" ({data['torch_error']})"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
