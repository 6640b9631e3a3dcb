"""CPU stand-in for ``torch_npu``'s device count, for the real-Ray job tests (tests/python/ray only, never installed).

``standin_site()`` in ray_harness.py copies this package next to a file ``physical`` with the node's NPU count
and puts it first on the PYTHONPATH of a ``ray start``, so every Ray worker and every job driver of that node
imports it as ``torch_npu``. ``torch.npu.device_count()`` applies the Ascend runtime's ASCEND_RT_VISIBLE_DEVICES
rule (npu_standin.py) to that count in the calling process's environment: what Ray left there decides it.
``torch.npu.is_available()`` is False: the stand-in runs no NPU code, so libraries that probe for an NPU at
import (transformers, verl) stay on their CPU paths in the job driver's preflight.
"""

import os
import types
from pathlib import Path

import torch

import npu_standin

__version__ = "0.0+job-standin"


def device_count() -> int:
    physical = (Path(__file__).with_name("physical")).read_text().strip()
    os.environ.setdefault("STANDIN_PHYSICAL_NPUS", physical)
    return npu_standin.device_count()


torch.npu = types.SimpleNamespace(device_count=device_count, is_available=lambda: False)
