"""Tracker settings on a real Ray 2.48.0 cluster on loopback, nodes started by entrypoints/ray-node.sh.

verl 0.8.0 creates its ``Tracking`` (verl/utils/tracking.py) in a Ray actor, whose environment is its node's ``ray
start`` environment: the W&B key and the tracker settings must be on every node. One cluster for the module, in
file order: head and worker started with ``WANDB_API_KEY_FILE``, ``VLGRPO_TENSORBOARD_DIR`` and
``VLGRPO_MLFLOW_TRACKING_URI``; an actor pinned on the worker (in a driver of the test's own, the reference) sees
them, and ``vlgrpo cluster probe --loggers`` passes; then the worker is replaced by one started without them, and
the probe names that node (exit 2), while the same probe without ``--loggers`` (the control) passes.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
import time

import pytest

from ray_harness import PY, REPO, Cluster, run_cli

pytestmark = pytest.mark.ray

KEY = "0123456789abcdef0123456789abcdef01234567"
LOGGERS = "console,wandb,tensorboard,mlflow"
MLFLOW = "http://mlflow.example:5000"


@pytest.fixture(scope="module")
def trackers(tmp_path_factory):
    root = tmp_path_factory.mktemp("trk")
    tb = root / "tensorboard"
    tb.mkdir(mode=0o700)
    key = root / "wandb.key"
    key.write_text(KEY + "\n")
    key.chmod(0o600)
    return {"WANDB_API_KEY_FILE": str(key), "VLGRPO_TENSORBOARD_DIR": str(tb), "VLGRPO_MLFLOW_TRACKING_URI": MLFLOW}


def slow(**extra: str) -> dict[str, str]:
    # the raylet registers slowly on a loaded 2-core machine (Ray's default wait is 10 s)
    return dict(
        RAY_raylet_start_wait_time_s="120",
        VLGRPO_PASS_ENV="PYTHONPATH,STANDIN_PHYSICAL_NPUS,RAY_raylet_start_wait_time_s",
        **extra,
    )


def ready(c: Cluster, timeout: float = 180) -> bool:
    """``cluster wait`` for 2 nodes x 2 NPUs in slices of 20 s; False at once when a node's ray-node.sh exited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = run_cli(
            "cluster",
            "wait",
            "--address",
            c.address,
            "--resource",
            "NPU",
            "--nodes",
            "2",
            "--per-node",
            "2",
            "--timeout",
            "20",
            timeout=120,
        )
        if out.returncode == 0:
            return True
        if any(n.proc.poll() is not None for n in c.nodes):
            return False
    return False


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, trackers):
    """Head and worker, both started with the tracker settings; on this shared 2-core machine a ``ray start``
    sometimes gives up while its raylet registers (gRPC "Deadline Exceeded"): up to 3 attempts."""
    for attempt in range(1, 4):
        c = Cluster(tmp_path_factory.mktemp("ray"))
        try:
            c.start_head(devices=2, physical=2, **slow(**trackers))
            c.start_worker("127.0.0.3", devices=2, physical=2, **slow(**trackers))
            up = ready(c)
        except RuntimeError:
            up = False
        if up:
            break
        c.close()
        assert attempt < 3, "the cluster did not start in 3 attempts:\n" + "".join(n.output()[-3000:] for n in c.nodes)
    try:
        yield c
    finally:
        assert not c.close()


def actor_env_on(address: str, ip: str) -> dict:
    """In a driver of the test's own: an actor pinned on the node at ``ip`` reports its environment's tracker names."""
    code = textwrap.dedent(f"""
        import json, os, ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        ray.init(address={address!r}, logging_level="ERROR", log_to_driver=False)
        node = next(n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeManagerAddress"] == {ip!r})

        @ray.remote(num_cpus=0)
        class Env:
            def get(self):
                names = ("WANDB_API_KEY", "TENSORBOARD_DIR", "MLFLOW_TRACKING_URI")
                return {{k: os.environ.get(k) for k in names}}, ray.util.get_node_ip_address()

        a = Env.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote()
        print(json.dumps(ray.get(a.get.remote(), timeout=120)))
    """)
    out = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=180, cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    env, where = json.loads(out.stdout.strip().splitlines()[-1])
    assert where == ip
    return env


def probe(cluster, *more: str, **launch: str) -> subprocess.CompletedProcess:
    return run_cli(
        "cluster",
        "probe",
        "--address",
        cluster.address,
        "--resource",
        "NPU",
        "--nodes",
        "2",
        "--per-node",
        "2",
        "--timeout",
        "150",
        "--no-rehearse",
        *more,
        timeout=240,
        VLGRPO_PROBE_DEVICE_MODULE="npu_standin",
        STANDIN_PHYSICAL_NPUS="2",
        **launch,
    )


def test_an_actor_on_the_worker_sees_the_wandb_key_and_the_tracker_settings(cluster, trackers):
    worker = [n for n in cluster.nodes if n.role == "worker"][0]
    env = actor_env_on(cluster.address, "127.0.0.3")
    assert env == {
        "WANDB_API_KEY": KEY,
        "TENSORBOARD_DIR": trackers["VLGRPO_TENSORBOARD_DIR"],
        "MLFLOW_TRACKING_URI": MLFLOW,
    }
    assert KEY not in worker.output()  # ray-node.sh never prints the key
    # the probe, with the launch's view of the same settings, checks it in its own actors on both nodes
    launch = {"TENSORBOARD_DIR": trackers["VLGRPO_TENSORBOARD_DIR"], "MLFLOW_TRACKING_URI": MLFLOW}
    out = probe(cluster, "--loggers", LOGGERS, **launch)
    assert out.returncode == 0, out.stdout + out.stderr
    seen = "trackers=['MLFLOW_TRACKING_URI', 'TENSORBOARD_DIR', 'WANDB_API_KEY']"
    assert sum(seen in line for line in out.stdout.splitlines() if line.startswith("cluster: probe 127.0.0.3")) == 2
    assert KEY not in out.stdout + out.stderr


def test_the_probe_names_a_worker_started_without_them(cluster, trackers):
    old = [n for n in cluster.nodes if n.role == "worker"][0]
    rc, survivors = old.stop()
    assert rc == 128 + 15 and not survivors
    cluster.nodes.remove(old)
    for attempt in range(1, 4):
        fresh = cluster.start_worker("127.0.0.4", devices=2, physical=2, **slow())
        if ready(cluster):
            break
        fresh.stop()
        cluster.nodes.remove(fresh)
        assert attempt < 3, fresh.output()[-3000:]
    assert actor_env_on(cluster.address, "127.0.0.4") == dict.fromkeys(
        ("WANDB_API_KEY", "TENSORBOARD_DIR", "MLFLOW_TRACKING_URI")
    )
    launch = {"TENSORBOARD_DIR": trackers["VLGRPO_TENSORBOARD_DIR"], "MLFLOW_TRACKING_URI": MLFLOW}
    # control: the device probe alone passes on this cluster
    assert probe(cluster, **launch).returncode == 0
    out = probe(cluster, "--loggers", LOGGERS, **launch)
    assert out.returncode == 2, out.stdout + out.stderr
    fails = [line for line in out.stderr.splitlines() if line.startswith("cluster: FAIL ")]
    assert len(fails) == 3, out.stderr
    for var, fix in (
        ("WANDB_API_KEY", "WANDB_API_KEY_FILE"),
        ("TENSORBOARD_DIR", "VLGRPO_TENSORBOARD_DIR"),
        ("MLFLOW_TRACKING_URI", "VLGRPO_MLFLOW_TRACKING_URI"),
    ):
        assert any(
            line.startswith("cluster: FAIL node 127.0.0.4 (")
            and f"{var} is not set in its Ray processes" in line
            and fix in line
            for line in fails
        ), (var, fails)
    assert "127.0.0.2" not in out.stderr
