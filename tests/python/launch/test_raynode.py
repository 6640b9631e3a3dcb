"""ray-node.sh's rules that need no Ray and no script (vlgrpo.launch.raynode), and the image's CANN file, in process.

References: the holder lines are written here from the npu-smi and nvidia-smi output the fixtures hold (the
fixtures are the ones tests/bats/ray-node.bats feeds the real script); the interface lists are judged against a
list of interfaces given here; the TCP probe against a listener this test opens. The real entrypoint's behaviour
(exact argv, refusals, waits, signals) is tests/bats/ray-node.bats and tests/slurm/test_ray_node_signals.py.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from vlgrpo.launch import entry, raynode

REPO = Path(__file__).resolve().parents[3]
FIX = REPO / "tests/bats/fixtures/ray-node"


def test_npu_holders_are_the_rows_of_the_process_table():
    assert raynode.npu_holders((FIX / "npu-smi-info-busy.txt").read_text()) == ["NPU 0 chip 0: pid 424242 python3"]
    assert raynode.npu_holders((FIX / "npu-smi-info-idle.txt").read_text()) == []
    table = (
        "| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |\n"
        "+===========================+===============+==========================+=========================+\n"
        "| 2       0                 | 1333928       | python3                  | 37709                   |\n"
        "| 3       1                 | 77            | ray::WorkerDict          | 1                       |\n"
        "| No running processes found in NPU 4                                                            |\n"
    )
    assert raynode.npu_holders(table) == ["NPU 2 chip 0: pid 1333928 python3", "NPU 3 chip 1: pid 77 ray::WorkerDict"]
    # the same rows before the header are the NPU table, not holders
    assert raynode.npu_holders(table.split("\n", 2)[2]) == []


def test_gpu_holders_are_the_compute_apps():
    out = "GPU-aaaa, 31337, python3\nGPU-bbbb, 42, /usr/bin/python3.11\nNo running processes found\n"
    assert raynode.gpu_holders(out) == ["GPU GPU-aaaa: pid 31337 python3", "GPU GPU-bbbb: pid 42 /usr/bin/python3.11"]
    assert raynode.gpu_holders("") == []


HAVE = ["docker0", "eth0", "eth1", "lo"]


@pytest.mark.parametrize(
    "value, exact, ok",
    [
        ("eth0", True, True),
        ("eth", False, True),  # NCCL/HCCL: a prefix
        ("eth", True, False),  # Gloo: exact names
        ("=eth", False, False),  # '=': exact names for NCCL too
        ("eth0,lo", True, True),
        ("^docker0,virbr0", True, True),  # an exclusion list is not checked against the node
        ("ib0", False, False),
    ],
)
def test_an_interface_list_must_name_this_nodes_interfaces(value, exact, ok):
    got = raynode.ifname_problem("HCCL_SOCKET_IFNAME", value, exact, HAVE)
    if ok:
        assert got is None
    else:
        assert got is not None and got.startswith("HCCL_SOCKET_IFNAME: no network interface ")
        assert got.endswith("(it has: docker0 eth0 eth1 lo); fix: set HCCL_SOCKET_IFNAME to one of them")


@pytest.mark.parametrize("value", ["eth0;touch x", "$(id)", "eth0 eth1", "averyveryverylonginterfacename", "", "a,,b"])
def test_a_value_that_is_no_interface_list_is_refused_as_such(value):
    got = raynode.ifname_problem("GLOO_SOCKET_IFNAME", value, True, HAVE)
    assert got is not None and " is not a network interface list; fix: " in got


def test_the_head_probe_is_a_tcp_connect_within_its_limit():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert raynode.tcp_open(f"127.0.0.1:{port}")
        assert raynode.tcp_open(f"localhost:{port}")
    t0 = time.monotonic()
    assert not raynode.tcp_open(f"127.0.0.1:{port}", limit=1.0)  # closed now: refused at once
    assert not raynode.tcp_open("nosuchhost.invalid:6379", limit=1.0)
    assert time.monotonic() - t0 < 3


def test_a_dropped_variable_does_not_come_back_through_the_images_cann_file(tmp_path, monkeypatch):
    """Finding 8: CANN's set_env.sh runs ``export PYTHONPATH=...:$PYTHONPATH``; sourced in the built environment, an
    inherited (dropped) PYTHONPATH must not come back, and CANN's own exports must reach the children."""
    cann = tmp_path / "cann-env.sh"
    cann.write_text(
        "export PYTHONPATH=/usr/local/Ascend/python/site-packages:$PYTHONPATH\n"
        "export LD_LIBRARY_PATH=/usr/local/Ascend/lib64:$LD_LIBRARY_PATH\nexport ASCEND_OPP_PATH=/opp\n"
    )
    monkeypatch.setattr(entry, "IMAGE_BASH_ENV", str(cann))
    entries = [
        ("PATH", "/usr/bin:/bin"),
        ("BASH_ENV", str(cann)),
        ("PYTHONPATH", f"{tmp_path}/canary"),
        ("MY_LIB", "canary"),
    ]
    for owner in ("fa", "node"):
        launch = entry.Launch(owner, entries, "/proc/self/environ", True, entry.Hooks())
        launch.build_environment()
        launch.image_env()
        env = launch.env
        # no empty entry from CANN's `X=...:$X` where X was unset: Python and the loader read it as the working
        # directory (PYTHONPATH="a:" puts the working directory on sys.path even under -P)
        assert env["PYTHONPATH"] == "/usr/local/Ascend/python/site-packages"
        assert env["ASCEND_OPP_PATH"] == "/opp" and env["LD_LIBRARY_PATH"] == "/usr/local/Ascend/lib64"
        assert not any("canary" in v for v in env.values()), env


def test_no_working_directory_on_the_childrens_search_paths_after_cannfile(tmp_path, monkeypatch):
    """Of the kind above: every `export X=...:$X` (empty middle and leading entries too) and a repeated entry."""
    cann = tmp_path / "cann-env.sh"
    cann.write_text(
        "export PYTHONPATH=:/a::/b:$PYTHONPATH\nexport LD_LIBRARY_PATH=/l::$LD_LIBRARY_PATH\n"
        "export ASCEND_CUSTOM_OPP_PATH=/opp:$ASCEND_CUSTOM_OPP_PATH\nexport PATH=/cann/bin:$PATH:\n"
        "export ATB_HOME_PATH=:\n"
    )
    monkeypatch.setattr(entry, "IMAGE_BASH_ENV", str(cann))
    entries = [("PATH", "/usr/bin:/bin"), ("BASH_ENV", str(cann)), ("LD_LIBRARY_PATH", "/usr/lib64")]
    launch = entry.Launch("fa", entries, "/proc/self/environ", True, entry.Hooks())
    launch.build_environment()
    launch.image_env()
    env = launch.env
    assert env["PYTHONPATH"] == "/a:/b"
    assert env["LD_LIBRARY_PATH"] == "/l:/usr/lib64"
    assert env["ASCEND_CUSTOM_OPP_PATH"] == "/opp"
    assert env["PATH"] == "/cann/bin:/usr/bin:/bin"
    assert "ATB_HOME_PATH" not in env
    # what a child's Python makes of it: no working directory on sys.path
    import subprocess
    import sys

    got = subprocess.run(
        [sys.executable, "-P", "-s", "-c", "import sys; print(repr(sys.path))"],
        env={"PYTHONPATH": env["PYTHONPATH"]},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "''" not in got and repr(str(tmp_path)) not in got, got
