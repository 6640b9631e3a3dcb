"""CPU stand-in for ``torch_npu``'s device count, used by the Ray probe tests.

Loaded through the documented test hook ``VLGRPO_PROBE_DEVICE_MODULE=npu_standin`` (refused by
``vlgrpo.cluster`` when torch_npu is installed). It models the Ascend runtime's rule for
``ASCEND_RT_VISIBLE_DEVICES`` (CANN documentation, "ASCEND_RT_VISIBLE_DEVICES"): unset = every device of
the node is visible; a comma list of logical ids = those ids that exist; empty = none. The node's
physical device count comes from ``STANDIN_PHYSICAL_NPUS`` in the raylet's environment (what the test
gives ray-node.sh), so the count a probe task reports depends on what Ray really put in its environment.
"""

import os


def device_count() -> int:
    physical = int(os.environ.get("STANDIN_PHYSICAL_NPUS", "0"))
    visible = os.environ.get("ASCEND_RT_VISIBLE_DEVICES")
    if visible is None:
        return physical
    ids = [item.strip() for item in visible.split(",") if item.strip()]
    return sum(1 for item in ids if item.isdigit() and int(item) < physical)
