"""``ppo.stall_watchdog`` on verl v0.8.0's real ``RayPPOTrainer`` (``main_ppo``'s trainer, the VeOmni recipe), built with
``object.__new__``; the resource-pool manager is a stand-in. Run by test_stall_watchdog.py in a fresh interpreter with
the sitecustomize shim; ``VLGRPO_STALL_TIMEOUT`` is the bound.

``VLGRPO_TEST_CASE``:

- ``status``: the record's status per target and the originals behind the wrappers; prints one JSON line.
- ``init_workers``: verl's ``init_workers`` asks the resource-pool manager for its placement groups, which never
  come (a cluster that is short of devices): the process must end with exit code 75 and a stacks file under
  ``<VLGRPO_TEST_TMP>/ckpt/stalls/``.
- ``slow_pools``: the placement groups come after 1.5 x the bound, but the pool manager beats every 0.3 s while it
  waits (a stage that makes progress): ``init_workers`` goes on past the stand-in (and fails there, which is fine:
  the point is that the watchdog did not end it); prints one JSON line.
"""

import json
import os
import sys
import threading
import time
import traceback
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stub_modules import StubFinder  # noqa: E402

TARGET_ID = "ppo.stall_watchdog"


def main():
    out = {}
    try:
        sys.meta_path.append(
            StubFinder(("vllm", "zmq", "msgspec", "uvicorn", "fastapi", "cachetools", "peft", "accelerate"))
        )
        from omegaconf import OmegaConf
        from verl.trainer.ppo import ray_trainer as rt

        import vlgrpo.patches
        from vlgrpo import watchdog

        case = os.environ["VLGRPO_TEST_CASE"]
        root = os.path.join(os.environ["VLGRPO_TEST_TMP"], "ckpt")
        os.makedirs(root, mode=0o700, exist_ok=True)
        trainer = object.__new__(rt.RayPPOTrainer)
        trainer.config = OmegaConf.create({"trainer": {"default_local_dir": root}})
        if case == "status":
            (row,) = [r for r in vlgrpo.patches.status(import_targets=False) if r["id"] == TARGET_ID]
            out["targets"] = {t["target"]: t["status"] for t in row["targets"]}
            out["reasons"] = {t["target"]: t["reason"] for t in row["targets"]}
            names = (
                "init_workers",
                "fit",
                "_validate",
                "_compute_old_log_prob",
                "_compute_ref_log_prob",
                "_update_actor",
            )
            originals = {n: vlgrpo.patches.original(f"{rt.__name__}:RayPPOTrainer.{n}") for n in names}
            out["originals"] = {n: f"{o.__module__}.{o.__qualname__}" for n, o in originals.items()}
            out["wrapped_is_original"] = {
                n: getattr(getattr(rt.RayPPOTrainer, n), "__wrapped__", None) is o for n, o in originals.items()
            }
        elif case in ("init_workers", "slow_pools"):

            def create_resource_pool():
                if case == "init_workers":
                    threading.Event().wait()  # placement groups that never fit
                for _ in range(int(1.5 * watchdog.timeout_s() / 0.3) + 1):
                    time.sleep(0.3)
                    watchdog.beat()

            trainer.resource_pool_manager = types.SimpleNamespace(create_resource_pool=create_resource_pool)
            print("STARTED", time.monotonic(), flush=True)
            start = time.monotonic()
            try:
                trainer.init_workers()
            except Exception as exc:  # past the stand-in: verl's next line needs what the stand-in lacks
                out["after"] = type(exc).__name__
            out["seconds"] = time.monotonic() - start
    except Exception:
        out["crash"] = traceback.format_exc()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
