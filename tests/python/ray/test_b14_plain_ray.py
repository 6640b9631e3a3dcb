"""Field case B14 on real Ray 2.48.0: one node started the plain way, ``ray start --head --resources='{"NPU": 4}'
--num-gpus=2`` (no ray-node.sh, so no RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES on the node), and jobs
submitted with ``ray job submit``.

First what each way of starting a process leaves it (the variables Ray sets, read from the process itself),
each against the Ray 2.48.0 source that decides it; then what vlgrpo makes of it: the device probe and the
recipe entrypoint run as a submitted job must refuse, naming the cause and the fix. The node has 4 "physical"
NPUs through the torch_npu stand-in (tests/slurm/standin), which applies the Ascend runtime's
ASCEND_RT_VISIBLE_DEVICES rule to the environment Ray gave each process.
"""

from __future__ import annotations

import json
import subprocess
import textwrap

import pytest

from ray_harness import MODEL_30B, PY, REPO, PlainHead, geo3k_parquet, submit

pytestmark = pytest.mark.ray

NPU_VAR, CUDA_VAR = "ASCEND_RT_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"
NOSET_NPU = "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES"
UNSET = None

# What each process reports: its visibility variables and what torch_npu (the stand-in) counts.
VIEWS = textwrap.dedent("""
    import json, os, sys
    import ray
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    def view():
        import os, torch, torch_npu
        return {"npu": os.environ.get("ASCEND_RT_VISIBLE_DEVICES"), "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
                "seen": torch.npu.device_count()}

    @ray.remote(num_cpus=0)
    class Probe:
        def view(self):
            return view()

    ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
    pg = placement_group([{"CPU": 0.01, "NPU": 1}])
    ray.get(pg.ready())
    noset = {"env_vars": {"RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES": "1"}}
    out = {
        "driver": view(),
        "cpu_task": ray.get(ray.remote(num_cpus=0)(view).remote()),
        "cpu_actor": ray.get(Probe.remote().view.remote()),
        "npu_actor": ray.get(Probe.options(resources={"NPU": 1}).remote().view.remote()),
        "pg_npu_actor": ray.get(Probe.options(resources={"NPU": 1}, scheduling_strategy=PlacementGroupSchedulingStrategy(pg, 0))
                                .remote().view.remote()),
        "gpu_actor": ray.get(Probe.options(num_gpus=1).remote().view.remote()),
        "npu_actor_noset": ray.get(Probe.options(resources={"NPU": 1}, runtime_env=noset).remote().view.remote()),
    }
    print("VIEWS " + json.dumps(out), flush=True)
""")


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    head = PlainHead(tmp_path_factory.mktemp("plain"), npus=4, gpus=2, physical=4).start()
    try:
        yield head
    finally:
        assert not head.stop()


@pytest.fixture(scope="module")
def views_script(tmp_path_factory):
    path = tmp_path_factory.mktemp("views") / "views.py"
    path.write_text(VIEWS)
    return path


def parse_views(text: str) -> dict:
    (line,) = [ln for ln in text.splitlines() if ln.startswith("VIEWS ")]
    return json.loads(line[len("VIEWS ") :])


def ids(value: str | None) -> list[str]:
    return [] if not value else value.split(",")


# ---- what Ray 2.48.0 leaves each kind of process ---------------------------------------------------------


def test_a_driver_started_on_the_head_is_not_restricted(plain, views_script):
    # a plain driver is no Ray worker: nothing calls set_visible_accelerator_ids for it
    out = subprocess.run(
        [PY, str(views_script), plain.address], env=plain.env, capture_output=True, text=True, timeout=300, cwd=REPO
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got = parse_views(out.stdout)
    assert got["driver"] == {"npu": UNSET, "cuda": UNSET, "seen": 4}
    # workers: ray/_private/worker.py get_accelerator_ids_for_accelerator_resource gives a worker the ids it holds;
    # accelerators/npu.py / nvidia_gpu.py set_current_process_visible_accelerator_ids write them (",".join([]) = "")
    for kind in ("cpu_task", "cpu_actor"):  # a task and an actor holding no accelerator: both hidden
        assert got[kind] == {"npu": "", "cuda": "", "seen": 0}, kind
    for kind in ("npu_actor", "pg_npu_actor"):  # {"NPU": 1}, plain or as a placement-group bundle (verl's workers)
        assert len(ids(got[kind]["npu"])) == 1 and got[kind]["seen"] == 1 and got[kind]["cuda"] == "", kind
    assert got["gpu_actor"]["npu"] == "" and len(ids(got["gpu_actor"]["cuda"])) == 1
    # the NOSET switch in an actor's own runtime_env: Ray leaves the variable alone
    assert got["npu_actor_noset"]["npu"] is UNSET and got["npu_actor_noset"]["seen"] == 4


def test_b14_a_submitted_job_driver_gets_no_npu_but_all_gpus(plain, views_script):
    out = submit(plain.dashboard, [PY, str(views_script), plain.address])
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    got = parse_views(out.stdout)
    # job_manager.py _get_supervisor_runtime_env sets RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES for the
    # supervisor actor (so CUDA is left alone), nothing for Ascend: the supervisor holds no NPU, Ray writes
    # ASCEND_RT_VISIBLE_DEVICES="" and the driver (its child, job_supervisor.py _exec_entrypoint) inherits it
    assert got["driver"] == {"npu": "", "cuda": UNSET, "seen": 0}
    # the driver's actors: as for any driver (the supervisor's NOSET is removed from the job's runtime_env)
    assert got["cpu_actor"] == {"npu": "", "cuda": "", "seen": 0}


def test_a_job_with_noset_in_its_runtime_env_sees_the_npus_everywhere(plain, views_script):
    # the job's runtime_env is the job config (RAY_JOB_CONFIG_JSON_ENV_VAR) of the driver: the supervisor and
    # every task/actor the driver starts get its env_vars (worker.py merges it into the driver's job config)
    out = submit(plain.dashboard, [PY, str(views_script), plain.address], runtime_env={"env_vars": {NOSET_NPU: "1"}})
    assert out.returncode == 0, out.stdout[-3000:]
    got = parse_views(out.stdout)
    for kind in ("driver", "cpu_actor", "npu_actor", "pg_npu_actor"):
        assert got[kind]["npu"] is UNSET and got[kind]["seen"] == 4, kind


def test_entrypoint_resources_give_the_driver_one_device(plain, views_script):
    # resources_specified: job_manager.py skips the CUDA exemption and places the supervisor with those resources
    out = submit(
        plain.dashboard,
        [PY, str(views_script), plain.address],
        "--entrypoint-resources",
        '{"NPU": 1}',
        "--entrypoint-num-gpus",
        "1",
    )
    assert out.returncode == 0, out.stdout[-3000:]
    got = parse_views(out.stdout)
    assert len(ids(got["driver"]["npu"])) == 1 and got["driver"]["seen"] == 1
    assert len(ids(got["driver"]["cuda"])) == 1


# ---- what vlgrpo makes of it -------------------------------------------------------------------------------


def probe_argv(plain, per_node: int = 4, resource: str = "NPU") -> list[str]:
    return [
        PY,
        "-m",
        "vlgrpo",
        "cluster",
        "probe",
        "--address",
        plain.address,
        "--resource",
        resource,
        "--nodes",
        "1",
        "--per-node",
        str(per_node),
        "--timeout",
        "240",
        "--no-rehearse",
    ]


def test_b14_the_probe_as_a_submitted_job_is_refused_naming_ray_and_the_fix(plain):
    out = submit(plain.dashboard, probe_argv(plain))
    assert out.returncode != 0, out.stdout[-3000:]
    log = out.stdout
    assert "the job driver sees 0 NPU" in log, log[-3000:]
    assert "ASCEND_RT_VISIBLE_DEVICES is set but empty" in log and "ray issue #59063" in log
    assert "entrypoints/ray-node.sh" in log and f"{NOSET_NPU}=1" in log
    assert "probe ok" not in log


def test_the_probe_from_the_head_refuses_workers_that_hide_the_npus(plain):
    # not a job: the driver sees all 4, but a process holding no NPU (verl's TaskRunner) sees none and a
    # 1-NPU actor sees 1 of 4 -- verl on Ascend needs the node's NPUs visible (the NOSET switch on every node)
    out = subprocess.run(probe_argv(plain), env=plain.env, capture_output=True, text=True, timeout=400, cwd=REPO)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "the job driver sees 4 NPU" in out.stdout
    assert "127.0.0.2: an actor holding no NPU sees 0 NPU" in out.stderr
    assert "127.0.0.2: an actor holding 1 NPU sees 1 NPU" in out.stderr
    assert f"{NOSET_NPU}=1" in out.stderr


def test_the_probe_passes_a_job_that_sets_noset_in_its_runtime_env(plain):
    out = submit(plain.dashboard, probe_argv(plain), runtime_env={"env_vars": {NOSET_NPU: "1"}})
    assert out.returncode == 0, out.stdout[-3000:]
    assert "probe ok on 1 node(s)" in out.stdout


def test_the_probe_refuses_a_job_whose_driver_holds_devices_for_the_whole_job(plain):
    # NOSET in the job: the driver sees every NPU, but it holds one for the whole job, so a placement group
    # asking for the node's 4 would wait forever
    out = submit(
        plain.dashboard,
        probe_argv(plain),
        "--entrypoint-resources",
        '{"NPU": 1}',
        runtime_env={"env_vars": {NOSET_NPU: "1"}},
    )
    assert out.returncode != 0, out.stdout[-3000:]
    assert "1 of the 4 NPU the cluster declares are in use before the launch" in out.stdout, out.stdout[-3000:]
    assert "--entrypoint-resources" in out.stdout


def test_gpu_flavour_a_driver_given_a_gpu_is_named(plain):
    out = submit(plain.dashboard, probe_argv(plain, per_node=2, resource="GPU"), "--entrypoint-num-gpus", "1")
    assert out.returncode != 0, out.stdout[-3000:]
    assert "1 of the 2 GPU the cluster declares are in use before the launch" in out.stdout, out.stdout[-3000:]
    assert "CUDA_VISIBLE_DEVICES=" in out.stdout and "--entrypoint-num-gpus" in out.stdout


# ---- the recipe entrypoint as the job's driver -----------------------------------------------------------------


def entrypoint_job(plain, tmp_path, **settings: str) -> list[str]:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir(exist_ok=True)
    train, val = geo3k_parquet(tmp_path)
    env = {
        "VLGRPO_DRY_RUN": "1",
        "VLGRPO_PLATFORM": "npu",
        "VLGRPO_RAY_ADDRESS": plain.address,
        "VLGRPO_MODEL_PATH": str(MODEL_30B),
        "VLGRPO_TRAIN_FILE": str(train),
        "VLGRPO_VAL_FILE": str(val),
        "VLGRPO_CHECKPOINT_DIR": str(ckpt),
        "VLGRPO_LOGGER": "console",
        "VLGRPO_TRAINER_NNODES": "1",
        "VLGRPO_RAY_WAIT_TIMEOUT": "60",
        "VLGRPO_PASS_ENV": "PYTHONPATH,STANDIN_PHYSICAL_NPUS",
        **settings,
    }
    return ["env", *(f"{k}={v}" for k, v in env.items()), str(REPO / "entrypoints" / "veomni-grpo.sh")]


def test_b14_the_entrypoint_as_a_submitted_job_is_refused_before_anything_starts(plain, tmp_path):
    out = submit(plain.dashboard, entrypoint_job(plain, tmp_path, VLGRPO_TRAINER_DEVICES_PER_NODE="4"))
    log = out.stdout
    assert out.returncode != 0, log[-4000:]
    assert "veomni-grpo.sh: error: ASCEND_RT_VISIBLE_DEVICES: ASCEND_RT_VISIBLE_DEVICES is set but empty" in log, log[
        -4000:
    ]
    assert "ray issue #59063" in log and "entrypoints/ray-node.sh" in log
    assert "preflight" not in log.split("error:", 1)[1].split("\n", 1)[0]


def test_b14_without_per_node_counts_no_variable_the_user_never_set_is_blamed(plain, tmp_path):
    out = submit(plain.dashboard, entrypoint_job(plain, tmp_path))
    log = out.stdout
    assert out.returncode != 0, log[-4000:]
    assert "VLGRPO_FSDP_SIZE" not in log, log[-4000:]
    assert "ASCEND_RT_VISIBLE_DEVICES is set but empty" in log
