"""The rehearsal before the model loads (vlgrpo.rehearse) on real Ray 2.48.0 on loopback, with verl 0.8.0's own
worker-group code and gloo; field cases C06 and C12.

Nodes are started by entrypoints/ray-node.sh (NOSET exported, as on every Ascend node) with the CPU stand-in for
the Ascend runtime (standin_rt: loaded through torch's device-extension autoload like torch_npu, ids >= the node's
count dropped, ``set_device`` out of 0..N-1 fails). References: Ray's own accelerator ids and placement, verl's own
``Worker.__init__`` (the set_device it calls), torch.distributed's own rendezvous errors and timeouts, and the
node sizes the tests set. Each node declares 4 logical CPUs per device (verl's bundles hold 3).
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from ray_harness import HERE, PY, RAY_NODE, REPO, Cluster, RayNode, free_port, run_cli

pytestmark = pytest.mark.ray

STANDIN_RT = HERE / "standin_rt"
FA = "verl.experimental.fully_async_policy.fully_async_main"


def node_env(c: Cluster, physical: int, **extra: str) -> dict[str, str]:
    # the raylet registers slowly on a loaded 2-core machine (Ray's default wait is 10 s)
    return dict(
        VLGRPO_RAY_NUM_CPUS="8",
        PYTHONPATH=f"{c.shim_dir}:{STANDIN_RT}",
        RAY_raylet_start_wait_time_s="120",
        VLGRPO_PASS_ENV="PYTHONPATH,STANDIN_PHYSICAL_NPUS,RAY_raylet_start_wait_time_s",
        STANDIN_PHYSICAL_NPUS=str(physical),
        **extra,
    )


def wait_ready(c: Cluster, nodes: int, per_node: int, timeout: float = 180) -> None:
    """``cluster wait`` in slices of 20 s until ready; fails at once when a node's ray-node.sh has exited."""
    deadline = time.monotonic() + timeout
    while True:
        out = run_cli(
            "cluster",
            "wait",
            "--address",
            c.address,
            "--resource",
            "NPU",
            "--nodes",
            str(nodes),
            "--per-node",
            str(per_node),
            "--timeout",
            "20",
            timeout=120,
        )
        if out.returncode == 0:
            return
        dead = [n for n in c.nodes if n.proc.poll() is not None]
        assert not dead and time.monotonic() < deadline, out.stderr + "".join(n.output()[-2000:] for n in c.nodes)


def argv_file(tmp: Path, *overrides: str) -> Path:
    path = tmp / "argv.txt"
    path.write_text("\n".join(["python3", "-m", FA, *overrides]) + "\n")
    return path


def rehearse(c: Cluster, nodes: int, per_node: int, *more: str, timeout: float = 500, **env: str):
    return run_cli(
        "cluster",
        "probe",
        "--address",
        c.address,
        "--resource",
        "NPU",
        "--nodes",
        str(nodes),
        "--per-node",
        str(per_node),
        *more,
        timeout=timeout,
        **env,
    )


def started(make, nodes: int, per_node: int, attempts: int = 3) -> Cluster:
    """``make()`` a cluster until it reports ``nodes`` x ``per_node`` ready: on this shared 2-core machine a
    ``ray start`` sometimes gives up while its raylet registers (gRPC "Deadline Exceeded"); a real fault fails
    every attempt."""
    for attempt in range(1, attempts + 1):
        c = make()
        try:
            wait_ready(c, nodes, per_node)
            return c
        except AssertionError:
            c.close()
            if attempt == attempts:
                raise
    raise AssertionError("unreachable")


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    def make():
        c = Cluster(tmp_path_factory.mktemp("rh2"))
        c.start_head(devices=2, physical=2, **node_env(c, 2))
        c.start_worker("127.0.0.3", devices=2, physical=2, **node_env(c, 2))
        return c

    c = started(make, 2, 2)
    try:
        yield c
    finally:
        assert not c.close()


def test_fully_async_layout_rehearses_trainer_rollout_and_the_weight_sync_on_two_nodes(two, tmp_path):
    argv = argv_file(
        tmp_path,
        "trainer.nnodes=1",
        "trainer.n_gpus_per_node=2",
        "rollout.nnodes=1",
        "rollout.n_gpus_per_node=2",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
    )
    out = rehearse(two, 2, 2, "--rehearse", "--backend", "gloo", "--argv-file", str(argv), "--start-timeout", "300")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    text = out.stdout
    assert "trainer: [2]; rollout0: [2]; weight-sync rendezvous" in text
    # verl's bundles, its NOSET device selection (ids 0 and 1 -> set_device(0), set_device(1)) on each node
    assert "trainer: placement ok (2 bundle(s) of {'CPU': 3, 'NPU': 1})" in text  # max_colocate_count 3
    assert "rollout0: placement ok (2 bundle(s) of {'CPU': 2, 'NPU': 1})" in text  # init_standalone: 2
    trainer = next(line for line in text.splitlines() if "trainer: device selection ok" in line)
    rollout = next(line for line in text.splitlines() if "rollout0: device selection ok" in line)
    ips = (
        {ip for ip in ("127.0.0.2", "127.0.0.3") if ip in trainer},
        {ip for ip in ("127.0.0.2", "127.0.0.3") if ip in rollout},
    )
    assert len(ips[0]) == 1 and len(ips[1]) == 1 and ips[0] != ips[1]  # STRICT_PACK: one node each
    assert "NPU 0 -> device 0" in trainer and "NPU 1 -> device 1" in trainer
    assert "trainer: process group ok (2 rank(s), all_reduce = 2" in text
    assert "rollout0: process group ok (2 rank(s), all_reduce = 2" in text
    assert "weight sync: rendezvous ok" in text and "+ 2 rollout worker(s), all_reduce = 3" in text
    assert "rehearsal ok in" in text
    print(text.splitlines()[-1])  # the stage timings (bench/RESULTS.md)


def test_todays_entrypoint_call_runs_the_visibility_probe_then_the_rehearsal(two):
    out = run_cli(
        "cluster",
        "probe",
        "--address",
        two.address,
        "--resource",
        "NPU",
        "--nodes",
        "2",
        "--per-node",
        "2",
        VLGRPO_PROBE_DEVICE_MODULE="npu_standin",
        STANDIN_PHYSICAL_NPUS="2",
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "probe ok on 2 node(s), each sees >= 2 NPU" in out.stdout
    assert "workers: [2, 2]" in out.stdout and "workers: process group ok (4 rank(s), all_reduce = 4" in out.stdout
    # no NPU device type in this CPU torch: gloo on CPU tensors, and the report says so
    assert "gloo on CPU tensors" in out.stdout


def test_a_node_whose_interface_does_not_exist_is_named_within_the_deadline(two, tmp_path):
    # a third node started by hand, with a socket interface copied from another machine
    env = {k: v for k, v in two.env("127.0.0.4", 2, 2).items()}
    env.update(
        PYTHONPATH=f"{STANDIN_RT}",
        RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES="1",
        RAY_raylet_start_wait_time_s="120",
        GLOO_SOCKET_IFNAME="nosuch0",
        STANDIN_PHYSICAL_NPUS="2",
    )
    ray = str(Path(PY).parent / "ray")
    two.wait_sockets()  # a third raylet in the same session folder picks its socket names after the others'
    node = RayNode(
        "worker",
        "127.0.0.4",
        env,
        tmp_path / "n4.log",
        [
            ray,
            "start",
            "--block",
            f"--address={two.address}",
            "--node-ip-address=127.0.0.4",
            "--num-cpus=8",
            '--resources={"NPU": 2}',
            "--memory=300000000",
            "--object-store-memory=80000000",
            f"--dashboard-agent-listen-port={free_port()}",
            "--disable-usage-stats",
        ],
    )
    try:
        wait_ready(two, 3, 2)
        out = rehearse(two, 3, 2, "--rehearse", "--backend", "gloo", "--stage-timeout", "20", "--start-timeout", "300")
    finally:
        _, survivors = node.stop()  # a plain `ray start --block` exits 1 on SIGTERM; nothing may be left
        assert not survivors
    assert out.returncode == 2, out.stdout[-3000:] + out.stderr[-3000:]
    err = out.stderr
    bad = [line for line in err.splitlines() if "127.0.0.4" in line and "stage process group" in line]
    assert len(bad) == 2 and all("Unable to find address for: nosuch0" in line for line in bad), err
    assert "GLOO_SOCKET_IFNAME" in bad[0] and "fix: check that GLOO_SOCKET_IFNAME" in bad[0]
    waited = [line for line in err.splitlines() if "stage process group" in line and "127.0.0.4" not in line]
    assert waited and all("it waited for the rank(s) that failed" in line for line in waited), err
    # the group's deadline (20 s) bounds the stage: its own timing, from the rehearsal's last line
    took = float(err.split("process group workers ")[1].split("s")[0])
    assert 20 <= took < 20 + 15, err[-500:]


# ---- C06 and C12: one node each, the list in the node's environment


def one_node(tmp: Path, devices: int, physical: int, value: str) -> Cluster:
    def make():
        c = Cluster(Path(tempfile.mkdtemp(dir=tmp)))
        c.start_head(devices=devices, physical=physical, **node_env(c, physical, ASCEND_RT_VISIBLE_DEVICES=value))
        return c

    return started(make, 1, devices)


def test_c06_noset_with_a_device_subset_verl_calls_set_device_with_the_physical_id(tmp_path):
    c = one_node(tmp_path, 8, 16, "8,9,10,11,12,13,14,15")
    try:
        # today's call: the visibility probe names the list (every actor of the node inherits it under NOSET)
        out = rehearse(c, 1, 2, VLGRPO_PROBE_DEVICE_MODULE="npu_standin", STANDIN_PHYSICAL_NPUS="16")
        assert out.returncode == 2, out.stdout[-3000:] + out.stderr[-3000:]
        assert (
            "127.0.0.2: an actor holding 1 NPU: ASCEND_RT_VISIBLE_DEVICES=8,9,10,11,12,13,14,15 with "
            "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES=1" in out.stderr
        )
        # the rehearsal: verl's own Worker.__init__ took Ray's id 8 or 9 and called set_device with it
        out = rehearse(c, 1, 2, "--rehearse", "--backend", "gloo", "--start-timeout", "300")
        assert out.returncode == 2, out.stdout[-3000:] + out.stderr[-3000:]
        fails = [line for line in out.stderr.splitlines() if "stage set_device" in line]
        assert len(fails) == 2, out.stderr
        for line in fails:
            assert line.startswith("cluster: FAIL rehearsal: 127.0.0.2 (")
            assert "Invalid device ID" in line and "the process sees 8 device(s)" in line
            assert "fix: give the container only these devices, so that they appear as 0..7" in line
        assert {l.split("Ray gave it NPU id ")[1].split(",")[0] for l in fails} == {"8", "9"}
    finally:
        assert not c.close()


@pytest.mark.parametrize(
    "value, words", [("7,6,5,4,3,2,1,0", "is not in ascending order"), ("0,0,1,2,3,4,5,6", "repeats device 0")]
)
def test_c06_ray_node_refuses_an_unordered_or_repeated_list(tmp_path, value, words):
    c = Cluster(tmp_path)
    env = c.env(
        "127.0.0.2",
        8,
        8,
        VLGRPO_RAY_PORT=str(free_port()),
        VLGRPO_RAY_TEMP_DIR=str(c.temp_dir),
        ASCEND_RT_VISIBLE_DEVICES=value,
    )
    out = subprocess.run(
        ["bash", str(RAY_NODE), "head"], env=env, capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert "ASCEND_RT_VISIBLE_DEVICES=" in out.stderr + out.stdout and words in out.stderr + out.stdout
    assert not c.close()


def test_c12_a_missing_card_is_named_as_the_lists_fault(tmp_path):
    # a 4-card host with slot 2 empty: CANN enumerates 0..3, so 4 is dropped and the processes see 3
    c = one_node(tmp_path, 4, 4, "0,1,3,4")
    try:
        out = rehearse(c, 1, 4, "--no-rehearse", VLGRPO_PROBE_DEVICE_MODULE="npu_standin", STANDIN_PHYSICAL_NPUS="4")
        assert out.returncode == 2, out.stdout[-3000:] + out.stderr[-3000:]
        fails = [line for line in out.stderr.splitlines() if line.startswith("cluster: FAIL 127.0.0.2")]
        assert fails and all(
            "ASCEND_RT_VISIBLE_DEVICES=0,1,3,4 names 4 devices but the runtime exposes 3" in line
            and "fix: use the enumeration indices: ASCEND_RT_VISIBLE_DEVICES=0,1,2,3" in line
            for line in fails
        ), out.stderr
        assert "map every device" not in out.stderr and "fix: start every node" not in out.stderr
    finally:
        assert not c.close()
