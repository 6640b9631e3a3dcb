"""C01: ``rollout.server_loopback`` on verl v0.8.0's real ``vLLMHttpServer.run_server`` / ``run_uvicorn`` (real
uvicorn, stand-in vLLM app; scenarios/vllm_server_bind.py). What a user checks: another host on the network gets an
answer from the unpatched replica's OpenAI port and a refused connection from the patched one. The other host is a
network namespace joined by a veth pair (a real second IP stack, source address 10.231.x.2), made here as root."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from patch_helpers import SCENARIOS, run_py
from vlgrpo.patches.fixes import rollout_server_loopback as fix

SCRIPT = SCENARIOS / "vllm_server_bind.py"
PATCH = "rollout.server_loopback"


def _ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


@pytest.fixture
def other_host():
    if os.getuid() != 0 or shutil.which("ip") is None:
        pytest.skip("a network namespace needs root and iproute2 (CI runs as root)")
    tag = os.getpid() % 10000
    ns, host_if, ns_if, net = f"vgt{tag}", f"vgh{tag}", f"vgn{tag}", f"10.231.{tag % 250}"
    try:
        _ip("netns", "add", ns)
        _ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        _ip("link", "set", ns_if, "netns", ns)
        _ip("addr", "add", f"{net}.1/24", "dev", host_if)
        _ip("link", "set", host_if, "up")
        for cmd in (
            ("addr", "add", f"{net}.2/24", "dev", ns_if),
            ("link", "set", ns_if, "up"),
            ("link", "set", "lo", "up"),
            ("route", "add", "default", "via", f"{net}.1"),
        ):
            _ip("netns", "exec", ns, "ip", *cmd)
        yield ns
    finally:
        _ip("link", "del", host_if, check=False)
        _ip("netns", "del", ns, check=False)


def _run(tmp_path, shim_dir, netns=None, disabled=False):
    env = {"VLGRPO_TEST_TMP": str(tmp_path)}
    if netns:
        env["VLGRPO_TEST_NETNS"] = netns
    if disabled:
        env["VLGRPO_PATCHES_DISABLED"] = PATCH
    out = run_py(SCRIPT, path=[shim_dir], env=env).json
    assert out is not None and "crash" not in out, out
    return out


def test_unpatched_replica_answers_another_host(tmp_path, shim_dir, other_host):
    out = _run(tmp_path, shim_dir, other_host, disabled=True)
    assert out["status"] == "disabled" and out["address"] not in ("127.0.0.1", "::1")
    assert out["from_other_host"] == "HTTP/1.1 200 OK", out
    assert out["from_this_host_to_node_ip"] == "HTTP/1.1 200 OK"


def test_patched_replica_refuses_another_host_and_serves_loopback(tmp_path, shim_dir, other_host):
    out = _run(tmp_path, shim_dir, other_host)
    assert out["status"] == "applied"
    assert out["from_other_host"] == "refused", out
    assert out["from_this_host_to_node_ip"] == "refused"
    assert out["loopback"] == "HTTP/1.1 200 OK"


def test_detector_on_verl_091_source_and_a_loopback_server():
    from patch_helpers import REPO

    src = (REPO / ".cache/verl-0.9.1/verl/workers/rollout/vllm_rollout/vllm_async_server.py").read_text()
    assert fix.is_faulty(None, src)[0]  # no released verl binds elsewhere
    assert not fix.is_faulty(
        None, src.replace("run_uvicorn(app, args, self._server_address)", "run_uvicorn(app, args, '127.0.0.1')")
    )[0]


def test_verify_passes():
    fix.verify()
