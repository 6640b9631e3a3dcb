"""CPU stand-in for the Ascend runtime as torch_npu exposes it, for the rehearsal tests (tests/python/ray only).

Loaded the way the real torch_npu 2.x is: through torch's device-extension autoload (the ``torch.backends`` entry
point in ``../torch_npu_standin-0.0.dist-info``), so every process of a Ray node whose PYTHONPATH has this folder
gets ``torch.npu`` at ``import torch``, before verl computes ``is_npu_available`` -- as on an Ascend image.

The runtime's rules it models (CANN documentation, "ASCEND_RT_VISIBLE_DEVICES"): the node has
``STANDIN_PHYSICAL_NPUS`` devices, enumerated 0..N-1; ``ASCEND_RT_VISIBLE_DEVICES`` unset = all of them, else the
listed ids that are enumeration indices (an id >= N is dropped), renumbered 0..M-1 in the process;
``set_device(i)`` outside 0..M-1 fails ("Invalid device ID", as torch_npu reports it). No NPU code runs;
``is_available()`` is True only in verl's workers (see :func:`is_available`).
"""

import os
import types

import torch

__version__ = "0.0+rehearsal-standin"


def _physical() -> int:
    """STANDIN_PHYSICAL_NPUS, else a ``physical`` file next to this module (a test that copies the stand-in into its
    own folder writes it there, as the Slurm test does: its steps pass only named variables), else 0."""
    value = os.environ.get("STANDIN_PHYSICAL_NPUS")
    if value is None:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "physical")
        if os.path.isfile(path):
            with open(path, encoding="ascii") as fh:
                value = fh.read().strip()
    return int(value or "0")


def _visible() -> list:
    physical = _physical()
    value = os.environ.get("ASCEND_RT_VISIBLE_DEVICES")
    if value is None:
        return list(range(physical))
    ids = [item.strip() for item in value.split(",") if item.strip()]
    return [int(item) for item in ids if item.isdigit() and int(item) < physical]


_current = [0]


def device_count() -> int:
    return len(_visible())


def set_device(device) -> None:
    index = device if isinstance(device, int) else torch.device(device).index
    count = device_count()
    if not 0 <= int(index) < count:
        raise RuntimeError(
            f"set_device: Invalid device ID. The device id is {index}, the device count is {count} "
            f"(stand-in for the Ascend runtime's check)"
        )
    _current[0] = int(index)


def is_available() -> bool:
    """True in verl's worker processes (``WG_BACKEND=ray``, set by verl's RayWorkerGroup in their runtime_env),
    where the rehearsal runs verl's device selection; False elsewhere (the job driver, whose CPU-only preflight
    and libraries must stay on their CPU paths: this stand-in runs no NPU code)."""
    return os.environ.get("WG_BACKEND") == "ray" and device_count() > 0


torch.npu = types.SimpleNamespace(
    device_count=device_count,
    is_available=is_available,
    set_device=set_device,
    current_device=lambda: _current[0],
    synchronize=lambda *a, **k: None,
)


def _autoload() -> None:
    """torch's autoload hook (importing this module did the work)."""
