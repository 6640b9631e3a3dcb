"""GPU suite (tests/gpu): every test here needs a CUDA device and is skipped cleanly without one.

Not in pytest.ini's testpaths, so CPU CI does not collect it; `make test-gpu` / tests/gpu/run.sh run
it. If it is collected anyway on a machine without CUDA (or without torch), every test is reported
as skipped with the reason -- never as a failure or an error.

Helpers shared by the tests live in gpu_helpers.py (unique module names: this folder has no __init__.py
and may be collected together with tests/python).
"""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def _cuda_devices() -> tuple[int, str]:
    try:
        import torch
    except Exception as exc:  # torch missing: skip, with the reason
        return 0, f"torch not importable: {exc}"
    if not torch.cuda.is_available():
        return 0, "no CUDA device (the GPU suite runs on the lent H200; see docs/verification.md)"
    return torch.cuda.device_count(), ""


N_GPUS, NO_GPU_REASON = _cuda_devices()


def pytest_collection_modifyitems(config, items):
    here = str(HERE)
    for item in items:
        if not str(item.fspath).startswith(here):
            continue
        item.add_marker(pytest.mark.gpu)
        if N_GPUS == 0:
            item.add_marker(pytest.mark.skip(reason=NO_GPU_REASON))
        elif item.get_closest_marker("two_gpus") and N_GPUS < 2:
            item.add_marker(pytest.mark.skip(reason=f"needs 2 CUDA devices, {N_GPUS} present"))


def pytest_configure(config):
    config.addinivalue_line("markers", "two_gpus: needs two CUDA devices (torchrun --nproc_per_node 2)")
