"""examples/slurm/fully-async-grpo.sbatch under a real Slurm 22.05 (slurmctld + slurmd n1 + slurmd n2 on loopback).

The example runs in CONTAINER=none mode with this checkout as its tree: ``ray-node.sh head`` on n1 and ``worker`` on
n2 start real Ray 2.48.0 nodes (1 CPU, 300 MB, 80 MB object store each), then ``fully-async-grpo.sh`` on n1 in
cluster mode waits for both nodes, probes their devices and runs its preflight against the shipped
Qwen3-VL-30B-A3B metadata and the converted Geometry3K sample. Devices are test stand-ins: each node declares 8
NPUs through ray-node.sh's ``VLGRPO_TEST_DEVICE_COUNT`` and the probe task on each node imports a CPU stand-in
``torch_npu`` (tests/slurm/standin) that reports 8. Each node's address comes from the node: the cluster's
TaskProlog gives n1 and n2 their own ``VLGRPO_RAY_NODE_IP`` (127.0.0.x / 127.0.0.y, one host).

Each node has 8 NPUs as Slurm's generic resource ``npu``: the job gets them by ``--exclusive`` and every device step
requests ``--gres=npu:8`` (the recipe's 8 devices per node), which this Slurm grants. Before any Ray step the job
checks that the checkpoint folder is one file system on both nodes (the batch shell on n1 writes a token there, a
step on each node reads it).

The tests share the cluster and run in file order: the dry-run job (READY plan), the launch job (the stub trainer
records the argv the recipe execs; then ``scancel``), the job whose worker cannot reach the head, the job where n2's
checkpoint folder is a folder of its own (a bind mount in n2's mount namespace only) instead of the shared one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_harness import CLIENTS, HERE, REPO, SlurmCluster, alive, free_port, missing_tools

pytestmark = [pytest.mark.slow, pytest.mark.ray]

SBATCH = REPO / "examples" / "slurm" / "fully-async-grpo.sbatch"
MODEL = REPO / "assets" / "models" / "qwen3-vl-30b-a3b-instruct"
SAMPLE = REPO / "assets" / "geo3k-sample" / "hiyouga-geometry3k-format"
VENV_BIN = Path(sys.executable).parent
TRAINER_MODULE = "verl.experimental.fully_async_policy.fully_async_main"
RAY_PROCESS = re.compile(
    r"(^|/)(raylet|gcs_server)( |$)|\bray[/ ](start|_private|dashboard|autoscaler)|ray::|"
    r"default_worker\.py|runtime_env/agent|dashboard/agent\.py|log_monitor\.py|ray/util/client"
)

if missing_tools():
    pytest.skip(
        f"Slurm/munge not installed ({', '.join(missing_tools())}): make tools installs Debian's slurm-wlm and munge",
        allow_module_level=True,
    )
if os.geteuid() != 0:
    pytest.skip("slurmd runs jobs as their user and must start as root (CI runs as root)", allow_module_level=True)
pytest.importorskip("ray")


def ray_processes(cluster: SlurmCluster, node: str) -> dict[int, str]:
    return {p: c for p, c in cluster.node_processes(node).items() if RAY_PROCESS.search(c)}


class Setup:
    """The cluster plus the files every job of this module uses."""

    def __init__(self, cluster: SlurmCluster):
        self.cluster = cluster
        r = cluster.root
        self.ip1, self.ip2 = cluster.node_ip["n1"], cluster.node_ip["n2"]
        self.ray_port = free_port(self.ip1)
        self.data = r / "data"
        out = subprocess.run(
            [sys.executable, "-m", "vlgrpo", "data", "geo3k", str(SAMPLE), str(self.data)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stdout + out.stderr
        # python3 of every step: the venv's, except the trainer module, which is the stub trainer
        self.record = r / "trainer"
        self.record.mkdir()
        self.bin = r / "bin"
        self.bin.mkdir()
        (self.bin / "python3").write_text(
            "#!/bin/bash\n"
            f"if [[ ${{1-}} == -m && ${{2-}} == {TRAINER_MODULE} ]]; then\n"
            f'  exec {sys.executable} {REPO}/tests/slurm/stub_trainer.py {self.record} "$@"\nfi\n'
            f'exec {sys.executable} "$@"\n'
        )
        (self.bin / "python3").chmod(0o755)
        self.node_env = self.write(
            "ray-node.env",
            "# Ray node settings of the test jobs (RAY_NODE_ENV)",
            "VLGRPO_TEST_DEVICE_COUNT=8",
            # 4 logical CPUs per NPU: the recipe's probe rehearses verl's worker groups, whose bundles hold 3
            "VLGRPO_RAY_NUM_CPUS=32",
            "VLGRPO_RAY_MEMORY_MB=300",
            "VLGRPO_RAY_OBJECT_STORE_MB=80",
            f"VLGRPO_RAY_TEMP_DIR={r}/ray",
            "VLGRPO_RAY_DASHBOARD=false",
            f"VLGRPO_RAY_DASHBOARD_PORT={free_port()}",
            f"VLGRPO_RAY_CLIENT_PORT={free_port()}",
            "VLGRPO_RAY_CARDS_WAIT=0",
            "VLGRPO_RAY_HEAD_WAIT=60",
            # (PYTHONPATH and STANDIN_PHYSICAL_NPUS: the submitting shell's, which CONTAINER=none gives every Ray
            # step; a node file takes only VLGRPO_*, NCCL_*, HCCL_*, GLOO_SOCKET_IFNAME and RAY_* lines)
            # the nodes are slow to register on a loaded 2-core machine (Ray's default is 10 s)
            "RAY_raylet_start_wait_time_s=120",
            # ray-node.sh builds ray start's environment from the registry: these two pass only when named
            "VLGRPO_PASS_ENV=PYTHONPATH,RAY_raylet_start_wait_time_s,STANDIN_PHYSICAL_NPUS",
        )
        shutil.copytree(HERE / "standin", r / "standin")
        (r / "standin" / "torch_npu" / "physical").write_text("8\n")
        # the Ascend-runtime stand-in of the rehearsal, copied so its node count can be written beside it (the Ray
        # steps get only named variables: STANDIN_PHYSICAL_NPUS would not reach them)
        shutil.copytree(REPO / "tests" / "python" / "ray" / "standin_rt", r / "standin_rt")
        (r / "standin_rt" / "torch_npu" / "physical").write_text("8\n")
        # no saves (save_freq -1): the stub trainer writes no checkpoint, and the space rule (kept x size, capped by the
        # disk under a loop image) needs 746 GB of real disk; it is tested in tests/python/preflight
        recipe = [
            "VLGRPO_SAVE_FREQ=-1",
            "VLGRPO_TRAINER_NNODES=1",
            "VLGRPO_ROLLOUT_NNODES=1",
            "VLGRPO_TRAINER_DEVICES_PER_NODE=8",
            "VLGRPO_ROLLOUT_DEVICES_PER_NODE=8",
            "VLGRPO_LOGGER=console",
            "VLGRPO_RAY_WAIT_TIMEOUT=150",
            # the recipe step is the probe's job driver: the stand-in torch_npu reaches it through
            # PYTHONPATH, which the entrypoint's built environment drops unless named (an image has it)
            "VLGRPO_PASS_ENV=PYTHONPATH",
        ]
        self.dry_env = self.write("dry-run.env", *recipe, "VLGRPO_DRY_RUN=1")
        self.launch_env = self.write("launch.env", *recipe)
        self.plan: list[str] | None = None

    def write(self, name: str, *lines: str) -> Path:
        path = self.cluster.root / "etc" / name
        path.write_text("\n".join(lines) + "\n")
        return path

    def submit(self, vlgrpo_env: Path, node_env: Path | None = None) -> str:
        # a fresh Ray temp dir per job (the previous job's processes are gone: each test checks that)
        shutil.rmtree(self.cluster.root / "ray", ignore_errors=True)
        env = {
            "PATH": f"{self.bin}:{VENV_BIN}:/usr/local/bin:/usr/bin:/bin",
            "HOME": os.environ.get("HOME", "/root"),
            "LANG": "C.UTF-8",
            "RAY_USAGE_STATS_ENABLED": "0",
            "CONTAINER": "none",
            "TREE": str(REPO),
            "PLATFORM": "npu",
            "IFNAME": "lo",
            "RAY_PORT": str(self.ray_port),
            "MODEL_DIR": str(MODEL),
            "DATA_DIR": str(self.data),
            "CKPT_DIR": str(self.cluster.ckpt),
            "VLGRPO_ENV": str(vlgrpo_env),
            "RAY_NODE_ENV": str(node_env or self.node_env),
            # the Ray workers: the Ascend-runtime stand-in loaded like torch_npu (tests/python/ray/standin_rt,
            # set_device checked, is_available only in verl's workers), then this test's own; the recipe step's
            # torch_npu too: the device probe counts the launching process's NPUs (B14)
            "PYTHONPATH": f"{self.cluster.root}/standin_rt:{self.cluster.root}/standin:{REPO}/tests/python/ray",
        }
        return self.cluster.sbatch(SBATCH, env, "--nodes=2")

    def wait_no_processes(self, timeout: float = 30) -> dict[str, dict[int, str]]:
        deadline = time.monotonic() + timeout
        while True:
            left = {n: self.cluster.node_processes(n) for n in ("n1", "n2")}
            if not any(left.values()) or time.monotonic() > deadline:
                return {n: p for n, p in left.items() if p}
            time.sleep(0.5)


@pytest.fixture(scope="module")
def slurm():
    cluster = SlurmCluster()
    flag = cluster.root / "etc" / "partition-n2"
    for n, ip in cluster.node_ip.items():
        cluster.task_prolog_lines[n] += [
            f"echo export VLGRPO_RAY_NODE_IP={ip}",
            f"echo export VLGRPO_RAY_AGENT_PORT={free_port()}",
        ]
    # One host, one Ray session folder: a worker takes the head's temp dir from the GCS, and two raylets that
    # start at the same moment pick the same socket names there (sockets/plasma_store: "bind: Address already in
    # use", the head's raylet aborts). On separate hosts the folders are separate; here n2's Ray worker waits in
    # its TaskProlog (at most 60 s) until the head's raylet has made its sockets, so it picks other names.
    sockets = cluster.root / "ray" / "session_latest" / "sockets"
    cluster.task_prolog_lines["n2"].append(
        f'if [ -n "$VLGRPO_RAY_HEAD" ]; then i=0; while [ $i -lt 240 ] && ! [ -S {sockets}/raylet -a '
        f"-S {sockets}/plasma_store ]; do sleep 0.25; i=$((i + 1)); done; fi"
    )
    # the fault job's partition: while the flag file exists, n2's environment points its worker at a port where
    # nothing listens (see test_a_worker_that_cannot_reach_the_head_fails_the_job_naming_it)
    cluster.task_prolog_lines["n2"].append(f'if [ -e {flag} ]; then echo "export VLGRPO_RAY_HEAD=$(cat {flag})"; fi')
    try:
        cluster.start()
        yield Setup(cluster)
    finally:
        problems = cluster.stop()
        assert not problems, problems


def plan_argv(log: str) -> list[str]:
    """The command of the recipe's dry-run plan: the N lines after '# command (N arguments, one per line):'."""
    m = re.search(r"^# command \((\d+) arguments, one per line\):\n", log, re.M)
    assert m, log
    lines = [line for line in log[m.end() :].splitlines() if not line.startswith(("ray-node:", "fully-async-grpo"))]
    return lines[: int(m.group(1))]


def test_dry_run_job_reaches_a_ready_plan_on_two_nodes(slurm):
    t0 = time.monotonic()
    job = slurm.submit(slurm.dry_env)
    info = slurm.cluster.wait_job(job, timeout=600)
    log = slurm.cluster.job_output(job)
    assert (info["JobState"], info["ExitCode"]) == ("COMPLETED", "0:0"), log + slurm.cluster.logs()
    assert info["NodeList"] == "n[1-2]"
    head = f"{slurm.ip1}:{slurm.ray_port}"
    # the head's address came from n1 (its TaskProlog), the worker's own from n2
    assert f"fully-async-grpo.sbatch: head n1 at {head}; workers: n2" in log
    assert f"--node-ip-address={slurm.ip2}" in log
    # both nodes read the token the batch shell wrote in the checkpoint folder, then it was removed
    assert f"fully-async-grpo.sbatch: CKPT_DIR={slurm.cluster.ckpt}: the same folder on n1 n2" in log
    assert not list(slurm.cluster.ckpt.glob(".vlgrpo-shared-check.*"))
    # the recipe's cluster check saw both nodes with their own addresses and 8 NPUs each, and the probe ran on both
    assert "cluster: ready" in log and f"{slurm.ip1}: 8 NPU, {slurm.ip2}: 8 NPU" in log, log
    assert "probe ok on 2 node(s), each sees >= 8 NPU" in log
    # and the rehearsal of the worker groups verl builds for this argv (the recipe hands the probe its argv): the
    # trainer's 1 x 8, the rollout replicas' 8 devices, and the weight-sync rendezvous of trainer rank 0 + 8 rollout
    # workers (gloo on CPU torch)
    assert "trainer: process group ok (8 rank(s), all_reduce = 8" in log, log
    assert "weight sync: rendezvous ok" in log and "+ 8 rollout worker(s), all_reduce = 9" in log, log
    assert "cluster: rehearsal ok in" in log
    assert f"# cluster: {head} ready and probed" in log
    assert "# preflight: clean" in log
    assert "# topology: trainer 1 node(s) x 8 + rollout 1 node(s) x 8 = 16 npu devices" in log
    argv = plan_argv(log)
    assert argv[:3] == ["python3", "-m", TRAINER_MODULE]
    for element in (
        f"actor_rollout_ref.model.path={MODEL}",
        f"data.train_files={slurm.data}/train.parquet",
        f"data.val_files={slurm.data}/test.parquet",
        f"trainer.default_local_dir={slurm.cluster.ckpt}",
        "trainer.nnodes=1",
        "rollout.nnodes=1",
        "trainer.n_gpus_per_node=8",
    ):
        assert element in argv, element
    slurm.plan = argv
    # when the recipe ended, the job stopped both Ray nodes through ray-node.sh
    assert log.count("ray-node: stopped") == 2, log
    assert not slurm.wait_no_processes(), "processes left after the job"
    print(f"dry-run job: {time.monotonic() - t0:.0f}s")


def test_launch_execs_the_trainer_and_scancel_stops_every_ray_process(slurm):
    assert slurm.plan, "needs the dry-run job's plan (test above)"
    from vlgrpo.checkpoint.size import checkpoint_bytes

    need, _ = checkpoint_bytes(str(MODEL))
    if shutil.disk_usage(slurm.cluster.ckpt).free < need:
        pytest.skip(
            f"the checkpoint folder holds less than one checkpoint ({need / 1e9:.0f} GB), which the launch "
            "refuses, and no loop-mounted volume could be made (loop devices, mkfs.ext4)"
        )
    t0 = time.monotonic()
    job = slurm.submit(slurm.launch_env)
    deadline = time.monotonic() + 600
    while not (slurm.record / "ready").exists():
        info = slurm.cluster.job(job)
        assert info.get("JobState") in ("PENDING", "RUNNING", "CONFIGURING"), f"{info}\n{slurm.cluster.job_output(job)}"
        assert time.monotonic() < deadline, slurm.cluster.job_output(job)
        time.sleep(0.5)
    log = slurm.cluster.job_output(job)
    # the recipe exec'd exactly the command its dry run printed, with RAY_ADDRESS naming the checked cluster,
    # and verl's driver (the stub's ray.init()) joins that cluster and sees both nodes
    assert json.loads((slurm.record / "argv.json").read_text()) == slurm.plan
    assert json.loads((slurm.record / "env.json").read_text())["RAY_ADDRESS"] == f"{slurm.ip1}:{slurm.ray_port}"
    assert json.loads((slurm.record / "nodes.json").read_text()) == sorted([slurm.ip1, slurm.ip2])
    assert "fully-async-grpo.sh: launching verl.experimental.fully_async_policy.fully_async_main" in log
    trainer_tree = slurm.cluster.node_processes("n1")  # the trainer runs in the recipe step on n1
    ray = {n: ray_processes(slurm.cluster, n) for n in ("n1", "n2")}
    assert any("gcs_server" in c for c in ray["n1"].values()), ray
    assert all(any("raylet" in c for c in ray[n].values()) for n in ("n1", "n2")), ray
    launched = time.monotonic() - t0

    t1 = time.monotonic()
    slurm.cluster.run(str(CLIENTS["scancel"]), job)
    while any(ray_processes(slurm.cluster, n) for n in ("n1", "n2")) and time.monotonic() - t1 < 60:
        time.sleep(0.2)
    gone_s = time.monotonic() - t1
    left = {n: ray_processes(slurm.cluster, n) for n in ("n1", "n2")}
    assert not any(left.values()), f"Ray processes still alive {gone_s:.0f}s after scancel: {left}"
    assert gone_s <= 30, f"Ray processes took {gone_s:.1f}s to go (KillWait is 120 s: SIGTERM must stop them)"
    info = slurm.cluster.wait_job(job, timeout=60)
    assert info["JobState"] == "CANCELLED", info
    assert not slurm.wait_no_processes(), "processes left after scancel"
    # the trainer is gone too (it may have had no time for its SIGTERM handler: srun, signalled by the cancel as
    # well, SIGKILLs its tasks)
    trainer_pid = json.loads((slurm.record / "env.json").read_text())["pid"]
    assert trainer_pid in trainer_tree and not alive(trainer_pid)
    print(f"launch job: trainer running after {launched:.0f}s; every Ray process gone {gone_s:.1f}s after scancel")


def test_a_worker_that_cannot_reach_the_head_fails_the_job_naming_it(slurm):
    # Two nodes on one host cannot be cut apart by the network, so n2's node environment (its TaskProlog, while
    # the flag file exists) points the worker at the head's address with a port where nothing listens: what a
    # worker behind a firewall, or given an address that is not the head's, sees.
    dead = free_port(slurm.ip1)
    flag = slurm.cluster.root / "etc" / "partition-n2"
    flag.write_text(f"{slurm.ip1}:{dead}\n")
    node_env = slurm.write(
        "ray-node-wait5.env",
        *slurm.node_env.read_text().replace("VLGRPO_RAY_HEAD_WAIT=60", "VLGRPO_RAY_HEAD_WAIT=5").splitlines(),
    )
    for f in slurm.record.iterdir():
        f.unlink()
    t0 = time.monotonic()
    try:
        job = slurm.submit(slurm.launch_env, node_env)
        info = slurm.cluster.wait_job(job, timeout=120)
    finally:
        flag.unlink()
    took = time.monotonic() - t0
    log = slurm.cluster.job_output(job)
    assert (info["JobState"], info["ExitCode"]) == ("FAILED", "2:0"), log
    assert f"ray-node: VLGRPO_RAY_HEAD={slurm.ip1}:{dead}: head not reachable after 5s (VLGRPO_RAY_HEAD_WAIT)" in log
    assert (
        "fully-async-grpo.sbatch: error: the Ray worker on n2 ended (status 2) while the recipe was running; "
        "stopping the job"
    ) in log, log
    assert not (slurm.record / "argv.json").exists(), "the trainer was started"
    # failed when the worker gave up, not after the recipe's VLGRPO_RAY_WAIT_TIMEOUT (150 s)
    assert took < 100, f"the job took {took:.0f}s to fail"
    assert not slurm.wait_no_processes(), "processes left after the failed job"
    print(f"unreachable-head job: failed after {took:.0f}s")


def test_a_node_without_the_shared_checkpoint_folder_fails_the_job_naming_it(slurm):
    # One host cannot have two file systems at one path for two processes of the same mount namespace, but each
    # slurmd here has a mount namespace of its own: n2's gets an empty folder of its own bound at the checkpoint
    # folder, what a node that lacks the shared mount (a local disk at the same path) sees. n1 keeps the shared one.
    if not slurm.cluster.bind_ckpt:
        pytest.skip("the nodes have no mount namespace of their own (unshare --mount failed)")
    ckpt = slurm.cluster.ckpt
    t0 = time.monotonic()
    with slurm.cluster.node_own_folder("n2", ckpt) as own:
        job = slurm.submit(slurm.dry_env)  # a dry run too: the check comes before any step of the recipe's
        info = slurm.cluster.wait_job(job, timeout=600)
        left_on_n2 = list(own.iterdir())
    took = time.monotonic() - t0
    log = slurm.cluster.job_output(job)
    assert (info["JobState"], info["ExitCode"]) == ("FAILED", "2:0"), log
    assert (
        f"fully-async-grpo.sbatch: error: CKPT_DIR={ckpt} is not shared with n2: the token file the head node n1 "
        "wrote there is not visible on n2 (status 1: "
    ) in log, log
    # cat's own message (srun runs it as /usr/bin/cat), then the fix
    assert (
        f"cat: {ckpt}/.vlgrpo-shared-check.{job}: No such file or directory); every node must mount the same "
        "shared file system (NFS, Lustre, GPFS, ...) at CKPT_DIR: mount it there on n2"
    ) in log, log
    assert log.count("error: CKPT_DIR=") == 1  # n1 saw it
    # before any Ray node or the recipe started, and the token is gone from the shared folder
    assert "ray-node:" not in log and "fully-async-grpo.sh" not in log, log
    assert took < 60, f"the job took {took:.0f}s to fail"
    assert not list(ckpt.glob(".vlgrpo-shared-check.*")) and left_on_n2 == []
    assert not slurm.wait_no_processes(), "processes left after the failed job"
    print(f"unshared-checkpoint job: failed after {took:.0f}s")
