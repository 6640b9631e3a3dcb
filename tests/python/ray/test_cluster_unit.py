"""vlgrpo.cluster without a cluster: the readiness verdict on hand-built node lists, input validation, the
test hook's refusal on real hardware, and the bounded wait against an address nobody listens on."""

from __future__ import annotations

import importlib.util
import socket
import time

import pytest

from vlgrpo import cluster
from vlgrpo.cluster import NodeInfo, evaluate, nodes_from_ray


def ray_node(ip: str, alive: bool = True, **res: float) -> dict:
    return {"NodeID": f"id-{ip}", "Alive": alive, "NodeManagerAddress": ip, "Resources": {"CPU": 8.0, **res}}


def test_ready_when_every_node_has_enough():
    v = evaluate([NodeInfo("a", "10.0.0.1", 16), NodeInfo("b", "10.0.0.2", 16)], "NPU", 2, 16)
    assert v.ok and v.missing == 0 and not v.short_nodes


def test_short_and_missing_nodes_are_named_with_their_counts():
    nodes = nodes_from_ray([ray_node("10.0.0.1", NPU=8.0), ray_node("10.0.0.2", NPU=4.0), ray_node("10.0.0.3")], "NPU")
    v = evaluate(nodes, "NPU", 3, 8)
    assert not v.ok
    assert v.describe() == (
        "need 3 node(s) x 8 NPU (= 24); ready 1 [10.0.0.1: 8 NPU] (8 NPU); "
        "short [10.0.0.2: 4 NPU] (each needs 8); missing 2 node(s)"
    )


def test_b15_a_node_started_with_gpus_instead_of_npus_does_not_count():
    nodes = nodes_from_ray([ray_node("10.0.0.1", NPU=16.0), ray_node("10.0.0.2", GPU=16.0)], "NPU")
    v = evaluate(nodes, "NPU", 2, 16)
    assert v.missing == 1 and [n.ip for n in v.ready_nodes] == ["10.0.0.1"]


def test_dead_nodes_ignored_and_ips_sorted_numerically():
    raw = [ray_node("10.0.0.10", NPU=8.0), ray_node("10.0.0.9", NPU=8.0), ray_node("10.0.0.2", alive=False, NPU=8.0)]
    assert [n.ip for n in nodes_from_ray(raw, "NPU")] == ["10.0.0.9", "10.0.0.10"]


def test_extra_nodes_are_fine():
    nodes = [NodeInfo(str(i), f"10.0.0.{i}", 8) for i in range(1, 5)]
    assert evaluate(nodes, "GPU", 2, 8).ok


@pytest.mark.parametrize("bad", ["10.0.0.1", "10.0.0.1:", ":6379", "10.0.0.1:0", "10.0.0.1:70000", "h:p"])
def test_bad_address_is_a_usage_error(bad):
    with pytest.raises(cluster.UsageError, match="--address"):
        cluster.parse_address(bad)


@pytest.mark.parametrize(
    "argv",
    [
        ["wait"],
        ["wait", "--address", "h:1", "--resource", "TPU", "--nodes", "1", "--per-node", "1"],
        ["wait", "--address", "h:1", "--resource", "NPU", "--nodes", "0", "--per-node", "1"],
        ["probe", "--address", "nohostport", "--resource", "NPU", "--nodes", "1", "--per-node", "1"],
        ["bogus"],
    ],
)
def test_cli_refuses_invalid_input_with_exit_2(argv, capsys):
    assert cluster.main(argv) == 2
    assert capsys.readouterr().err.startswith("cluster: ")


def test_probe_hook_refused_when_torch_npu_is_installed(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: object() if name == "torch_npu" else real(name, *a)
    )
    with pytest.raises(cluster.UsageError, match="refused because torch_npu is installed"):
        cluster.load_probe_hook("NPU", {"VLGRPO_PROBE_DEVICE_MODULE": "json"})


def test_probe_hook_refused_on_a_cuda_build_of_torch(monkeypatch):
    import torch

    monkeypatch.setattr(torch.version, "cuda", "12.9")
    with pytest.raises(cluster.UsageError, match="a CUDA build of torch"):
        cluster.load_probe_hook("GPU", {"VLGRPO_PROBE_DEVICE_MODULE": "json"})


def test_probe_hook_needs_a_device_count_function():
    with pytest.raises(cluster.UsageError, match="no callable device_count"):
        cluster.load_probe_hook("NPU", {"VLGRPO_PROBE_DEVICE_MODULE": "json"})
    assert cluster.load_probe_hook("NPU", {}) is None


def test_wait_is_bounded_when_no_head_listens(capsys):
    with socket.socket() as s:  # a port that is free now and has no listener
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    rc = cluster.main(
        [
            "wait",
            "--address",
            f"127.0.0.1:{port}",
            "--resource",
            "NPU",
            "--nodes",
            "1",
            "--per-node",
            "8",
            "--timeout",
            "2",
        ]
    )
    assert rc == 2
    assert time.monotonic() - t0 < 10
    assert f"Ray head 127.0.0.1:{port} not reachable" in capsys.readouterr().err


class _StartingHead:
    """ray.init stand-in for a head whose GCS port is open while it is still starting: Ray 2.48.0 then raises a
    bare ConnectionError whose __context__ is the RPC failure (ray/_private/worker.py, connect_only=True)."""

    def __init__(self, failures: int):
        self.failures, self.calls, self.up = failures, 0, False

    def init(self, **_kw):
        self.calls += 1
        if self.calls <= self.failures:
            try:
                raise RuntimeError("RPC Error message: Deadline Exceeded; RPC Error details: ")
            except RuntimeError:
                raise ConnectionError  # noqa: B904 - Ray's own bare raise, context kept
        self.up = True


@pytest.fixture
def listening_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def _fake_ray(monkeypatch, head: _StartingHead):
    ray = pytest.importorskip("ray")
    monkeypatch.setattr(ray, "init", head.init)
    monkeypatch.setattr(ray, "is_initialized", lambda: head.up)
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    monkeypatch.setattr(ray, "nodes", lambda: [ray_node("127.0.0.1", NPU=8.0)])


def test_wait_retries_ray_init_while_the_head_is_starting(monkeypatch, listening_port):
    head = _StartingHead(failures=2)
    _fake_ray(monkeypatch, head)
    monkeypatch.setattr(cluster.time, "sleep", lambda s: None)
    said = []
    verdict = cluster.wait(f"127.0.0.1:{listening_port}", "NPU", 1, 8, timeout=30, log=said.append)
    assert verdict.ok and head.calls == 3
    assert said[0] == (
        f"cluster: the Ray head at 127.0.0.1:{listening_port} is not ready yet "
        "(RuntimeError: RPC Error message: Deadline Exceeded; RPC Error details: ); retrying"
    )
    assert said[-1].startswith("cluster: ready")


def test_wait_gives_up_at_the_deadline_naming_the_cause(monkeypatch, listening_port):
    head = _StartingHead(failures=10**6)
    _fake_ray(monkeypatch, head)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match=r"accepts connections, but ray.init kept failing.*Deadline Exceeded"):
        cluster.wait(f"127.0.0.1:{listening_port}", "NPU", 1, 8, timeout=1, log=lambda line: None)
    assert head.calls >= 1 and time.monotonic() - t0 < 10


# ---- the probe's verdict on one process's view (cluster.need / cluster.judge) ----------------------------


def view(kind, visible, env=None, node_devices=0, job_driver=False, error="", node_source=""):
    return cluster.View(
        kind, "10.0.0.1", "n1", "h1", visible, "torch_npu x", env or {}, node_devices, node_source, job_driver, error
    )


def test_ascend_needs_every_process_to_see_the_nodes_npus():
    assert cluster.need(view("cpu", 0), "npu", 16) == 16  # verl's TaskRunner picks its device from what it sees
    assert cluster.need(view("device", 1), "npu", 16) == 16
    assert cluster.need(view("driver", 0, node_devices=8), "npu", 16) == 8  # capped by its own node
    assert cluster.need(view("driver", 0), "npu", 16) == 1  # verl's auto_set_device needs one
    # NVIDIA: Ray's per-worker restriction is what verl expects
    assert cluster.need(view("cpu", 0), "gpu", 8) == 0
    assert cluster.need(view("device", 1), "gpu", 8) == 1
    assert cluster.need(view("driver", 0), "gpu", 8) == 0


def test_judge_names_ray_for_a_job_driver_with_an_empty_list():
    v = view("driver", 0, {"ASCEND_RT_VISIBLE_DEVICES": ""}, node_devices=4, job_driver=True)
    got = cluster.judge(v, "npu", 4)
    assert got.startswith(
        "10.0.0.1: the job driver sees 0 NPU, the launch needs 4: ASCEND_RT_VISIBLE_DEVICES is set but empty"
    )
    assert "ray issue #59063" in got and "entrypoints/ray-node.sh" in got
    # the same process with the NOSET switch is not Ray's doing any more: the generic container fix
    v = view(
        "driver",
        0,
        {"ASCEND_RT_VISIBLE_DEVICES": "", "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES": "1"},
        node_devices=4,
        job_driver=True,
    )
    assert "ray issue" not in cluster.judge(v, "npu", 4)


def test_judge_an_actor_that_ray_restricted_and_a_container_that_exposes_too_few():
    got = cluster.judge(view("device", 1, {"ASCEND_RT_VISIBLE_DEVICES": "3"}), "npu", 8)
    assert (
        "Ray set ASCEND_RT_VISIBLE_DEVICES='3' for it" in got
        and "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES=1" in got
    )
    got = cluster.judge(view("device", 8, node_devices=4, node_source="/dev/davinci[0-9]*"), "npu", 8)
    assert got.startswith("10.0.0.1: the container exposes 4 NPU (/dev/davinci[0-9]*), the launch needs 8 per node")
    assert cluster.judge(view("device", 1, {"CUDA_VISIBLE_DEVICES": "5"}), "gpu", 8) == ""
    assert "sees 0 GPU, the launch needs 1" in cluster.judge(view("device", 0, {"CUDA_VISIBLE_DEVICES": "5"}), "gpu", 8)
    assert "device import failed: ImportError" in cluster.judge(view("cpu", 0, error="ImportError: x"), "npu", 8)


def test_judge_a_driver_on_a_node_without_npus_names_verls_device_choice():
    got = cluster.judge(view("driver", 0), "npu", 8)
    assert "auto_set_device" in got and "launch from a node with its NPUs mapped" in got
    assert cluster.judge(view("driver", 0), "gpu", 8) == ""
