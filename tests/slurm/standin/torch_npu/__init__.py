"""CPU stand-in for ``torch_npu`` on the Slurm test's Ray nodes (tests/slurm only, never installed).

The recipe's device probe (``python3 -m vlgrpo cluster probe``) imports ``torch_npu`` in a Ray task on each node
and calls ``torch.npu.device_count()``. The test copies this package into its own folder, writes the node's
"physical" NPU count into ``physical`` next to this file, and puts that folder and tests/python/ray first on
the Ray nodes' PYTHONPATH (through the job's ray-node.env), so nothing depends on which other variables reach
the Ray workers. The count seen is that number filtered by ``ASCEND_RT_VISIBLE_DEVICES`` the way the Ascend
runtime reads it: tests/python/ray/npu_standin.py's rule (it reads the count from STANDIN_PHYSICAL_NPUS).
"""

import os
import types
from pathlib import Path

import npu_standin
import torch

__version__ = "0.0+cpu-standin"
PHYSICAL = (Path(__file__).parent / "physical").read_text().strip()


def device_count() -> int:
    os.environ.setdefault("STANDIN_PHYSICAL_NPUS", PHYSICAL)
    return npu_standin.device_count()


# is_available() False: the stand-in runs no NPU code, so libraries that probe for an NPU at import (transformers
# in the recipe's preflight, which now also imports it: the probe counts the launching process's NPUs) stay on CPU
npu = types.SimpleNamespace(device_count=device_count, is_available=lambda: False)
torch.npu = npu
