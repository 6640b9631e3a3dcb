"""Stand-in for verl's trainer module in the launch tests (run by the test's python3 wrapper in place of
``python3 -m verl.experimental.fully_async_policy.fully_async_main ...``).

Like verl 0.8.0 (``verl/trainer/main_ppo.py run_ppo``: ``ray.init(runtime_env=..., num_cpus=...)``) it calls
``ray.init()`` without an address, runs one task, and writes what it saw as JSON to the file named by
``STANDIN_OUT`` (the test names that variable in VLGRPO_PASS_ENV): the GCS address it joined, the node IPs of
the cluster, and the task's environment (names only) and ``sys.path``.
"""

import json
import os
import sys

import ray


@ray.remote(num_cpus=0)
def probe():
    return {"env": sorted(os.environ), "sys_path": list(sys.path)}


def main():
    # no arguments that only a new cluster takes (num_cpus, object_store_memory): joining one must stay possible
    ray.init(include_dashboard=False)
    try:
        ctx = ray.get_runtime_context()
        out = {
            "gcs_address": ctx.gcs_address,
            "nodes": sorted(n["NodeManagerAddress"] for n in ray.nodes()),
            "driver_env": sorted(os.environ),
            "worker": ray.get(probe.remote(), timeout=120),
        }
    finally:
        ray.shutdown()
    with open(os.environ["STANDIN_OUT"], "w") as fh:
        json.dump(out, fh)


if __name__ == "__main__":
    main()
