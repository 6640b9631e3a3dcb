"""Field case B14, the passing side: a node started with entrypoints/ray-node.sh (which exports
RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES=1) on real Ray 2.48.0, with its dashboard for ``ray job submit``.

The same job that tests/python/ray/test_b14_plain_ray.py submits to a plain ``ray start`` node -- the device
probe, and the VeOmni recipe entrypoint as the job's driver (dry run: node check, cluster wait, probe,
preflight) -- must pass here. The node declares 4 NPUs (the test-only VLGRPO_TEST_DEVICE_COUNT) and has 4
through the torch_npu stand-in.
"""

from __future__ import annotations

import os

import pytest

from ray_harness import HERE, MODEL_30B, PY, REPO, Cluster, geo3k_parquet, patient_ray, submit

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    root = tmp_path_factory.mktemp("raynode")
    c = Cluster(root)
    try:
        # 4 logical CPUs per NPU (verl's bundles hold 3: the entrypoint's probe rehearses verl's worker group) and
        # the Ascend-runtime stand-in loaded like torch_npu (standin_rt; False is_available outside verl's workers)
        c.start_head(
            devices=4,
            physical=4,
            dashboard=True,
            VLGRPO_RAY_NUM_CPUS="16",
            PATH=f"{patient_ray(root)}:{c.env('127.0.0.2', 4, 4)['PATH']}",
            PYTHONPATH=f"{HERE / 'standin_rt'}{os.pathsep}{HERE}",
            RAY_raylet_start_wait_time_s="120",
            VLGRPO_PASS_ENV="PYTHONPATH,STANDIN_PHYSICAL_NPUS,RAY_raylet_start_wait_time_s",
        )
        yield c
    finally:
        assert not c.close()


def test_the_probe_as_a_submitted_job_passes_on_ray_node_nodes(node):
    out = submit(
        node.dashboard,
        [
            PY,
            "-m",
            "vlgrpo",
            "cluster",
            "probe",
            "--address",
            node.address,
            "--resource",
            "NPU",
            "--nodes",
            "1",
            "--per-node",
            "4",
            "--timeout",
            "240",
            "--no-rehearse",
        ],
    )
    assert out.returncode == 0, out.stdout[-4000:]
    assert "the job driver sees 4 NPU" in out.stdout and "probe ok on 1 node(s)" in out.stdout


def test_the_entrypoint_as_a_submitted_job_passes_the_node_check_the_probe_and_the_preflight(node, tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    train, val = geo3k_parquet(tmp_path)
    settings = {
        "VLGRPO_DRY_RUN": "1",
        "VLGRPO_PLATFORM": "npu",
        "VLGRPO_RAY_ADDRESS": node.address,
        "VLGRPO_MODEL_PATH": str(MODEL_30B),
        "VLGRPO_TRAIN_FILE": str(train),
        "VLGRPO_VAL_FILE": str(val),
        "VLGRPO_CHECKPOINT_DIR": str(ckpt),
        "VLGRPO_LOGGER": "console",
        "VLGRPO_TRAINER_NNODES": "1",
        "VLGRPO_TRAINER_DEVICES_PER_NODE": "4",
        "VLGRPO_RAY_WAIT_TIMEOUT": "120",
        # the stand-in torch_npu reaches the job driver through the node's PYTHONPATH; the entrypoint
        # builds its children's environment, so the test names it (an image has torch_npu installed)
        "VLGRPO_PASS_ENV": "PYTHONPATH,STANDIN_PHYSICAL_NPUS",
    }
    # this machine is a container (/.dockerenv): the checkpoint folder must be a mount of its own, so the job
    # binds it onto itself in a private mount namespace, as tests/slurm does for its steps
    # (a script file: `ray job submit` hands the command to /bin/sh -c, which would expand "$1" in an argument)
    script = tmp_path / "bind-ckpt.sh"
    script.write_text('#!/bin/sh\nmount --bind "$1" "$1" && shift && exec "$@"\n')
    script.chmod(0o755)
    bind = ["unshare", "--mount", "--propagation", "private", str(script), str(ckpt)]
    out = submit(
        node.dashboard,
        [*bind, "env", *(f"{k}={v}" for k, v in settings.items()), str(REPO / "entrypoints" / "veomni-grpo.sh")],
        timeout=900,
    )
    log = out.stdout
    assert out.returncode == 0, log[-6000:]
    assert "cluster: probe ok on 1 node(s)" in log
    # the probe rehearses the worker group verl builds for the recipe's argv too (main_ppo: the trainer's 1 node x 4,
    # no weight sync; gloo: a CPU torch)
    assert "trainer: [4]" in log and "weight-sync" not in log, log[-6000:]
    assert "trainer: process group ok (4 rank(s), all_reduce = 4" in log and "cluster: rehearsal ok in" in log
    assert "# preflight: clean" in log and "# cluster: " + node.address + " ready and probed" in log
