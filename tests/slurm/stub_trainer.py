"""Stand-in for verl's trainer in the Slurm test: what the recipe execs in place of
``python3 -m verl.experimental.fully_async_policy.fully_async_main`` (the test's ``python3`` on PATH routes that
one module here; tests/slurm/test_sbatch_cluster.py writes that wrapper).

    python stub_trainer.py RECORD_DIR -m verl.experimental.fully_async_policy.fully_async_main OVERRIDE...

Records in RECORD_DIR: ``argv.json`` (the argv the recipe exec'd, from ``-m`` on), ``env.json`` (RAY_ADDRESS and
the process id), ``nodes.json`` (the alive Ray nodes as verl's driver would see them: ``ray.init()`` joins the
cluster named by RAY_ADDRESS, as verl's main does), then ``ready``; then it waits until SIGTERM, writes
``terminated`` and exits 143.
"""

import json
import os
import signal
import sys
import time
from pathlib import Path


def main() -> int:
    record = Path(sys.argv[1])
    (record / "argv.json").write_text(json.dumps(["python3", *sys.argv[2:]]))
    (record / "env.json").write_text(json.dumps({"RAY_ADDRESS": os.environ.get("RAY_ADDRESS"), "pid": os.getpid()}))
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    import ray

    for _attempt in range(30):  # a loaded machine: the GCS may miss an RPC deadline at first (as in vlgrpo.cluster)
        try:
            ray.init(logging_level="ERROR", log_to_driver=False)
            break
        except ConnectionError:
            ray.shutdown()
            time.sleep(2)
    nodes = sorted(n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"])
    (record / "nodes.json").write_text(json.dumps(nodes))
    (record / "ready").write_text("")
    while not stop:
        time.sleep(0.2)
    (record / "terminated").write_text("")
    return 143


if __name__ == "__main__":
    sys.exit(main())
