"""vlgrpo.devices, the one device counter, against hand-built /dev trees, scripted npu-smi / nvidia-smi on
PATH and the visibility variables (read as CUDA and the Ascend runtime read them; reference values are the
counts the tree and the tools were built with)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vlgrpo import devices

REPO = Path(__file__).resolve().parents[3]
FIX = Path(__file__).resolve().parent / "fixtures"


def tool(tmp_path: Path, name: str, text: str, rc: int = 0) -> Path:
    """A scripted ``name`` in tmp_path/bin printing ``text`` and exiting ``rc``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / f"{name}.out").write_text(text)
    script = bin_dir / name
    script.write_text(f"#!/bin/sh\ncat '{bin_dir}/{name}.out'\nexit {rc}\n")
    script.chmod(0o755)
    return bin_dir


def davinci(tmp_path: Path, n: int) -> Path:
    dev = tmp_path / "dev"
    dev.mkdir(exist_ok=True)
    for i in range(n):
        (dev / f"davinci{i}").write_text("")
    for control in ("davinci_manager", "devmm_svm", "hisi_hdc"):
        (dev / control).write_text("")
    return dev


def npu_smi_list(npus: int, chips: int) -> str:
    """``npu-smi info -l`` in the layout of the public sample tests/python/doctor/fixtures/npu-smi-info-l-910b4.txt."""
    body = "".join(
        f"        NPU ID                         : {i}\n        Chip Count                     : {chips}\n\n"
        for i in range(npus)
    )
    return f"        Total Count                    : {npus}\n\n{body}"


def env(path_dirs=(), **extra) -> dict:
    base = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES")}
    base["PATH"] = os.pathsep.join([*map(str, path_dirs), "/usr/bin", "/bin"])
    base.update(extra)
    return base


# ---- parsers --------------------------------------------------------------------------------------------


def test_npu_smi_list_sums_chips_per_npu_a2_and_a3():
    assert devices.parse_npu_smi_list(npu_smi_list(8, 1)) == 8
    assert devices.parse_npu_smi_list(npu_smi_list(8, 2)) == 16  # Atlas A3: 2 chips per NPU id
    assert devices.parse_npu_smi_list("        Total Count                    : 4\n") == 4  # no chip lines
    assert devices.parse_npu_smi_list("dcmi module initialize failed. ret is -8005\n") == 0


def test_npu_smi_list_public_sample():
    # `npu-smi info -l` of an Atlas 800I A2 (8 x 910B4), see fixtures/SOURCES.md
    assert devices.parse_npu_smi_list((FIX / "npu-smi-info-l-910b4.txt").read_text()) == 8


def test_nvidia_smi_list_counts_gpus_not_mig_devices():
    text = (FIX / "nvidia-smi-L-dgx-a100-mig.txt").read_text()
    assert devices.parse_nvidia_smi_list(text) == 8  # 8 GPU lines, 16 indented MIG lines
    assert devices.parse_nvidia_smi_list("") == 0


@pytest.mark.parametrize(
    "var,value,want",
    [
        ("CUDA_VISIBLE_DEVICES", None, None),
        ("CUDA_VISIBLE_DEVICES", "", 0),
        ("CUDA_VISIBLE_DEVICES", "NoDevFiles", 0),
        ("CUDA_VISIBLE_DEVICES", "0,1,-1,3", 2),  # CUDA stops at the first invalid ordinal
        ("CUDA_VISIBLE_DEVICES", "0,0,1,1", 2),
        ("CUDA_VISIBLE_DEVICES", "GPU-0a1b2c3d-0000-1111-2222-333344445555,1", 2),
        ("CUDA_VISIBLE_DEVICES", "MIG-abc/1,2", 2),
        ("CUDA_VISIBLE_DEVICES", ",0", 0),
        ("CUDA_VISIBLE_DEVICES", "0, 1", 1),
        ("CUDA_VISIBLE_DEVICES", "10000", 0),
        ("ASCEND_RT_VISIBLE_DEVICES", "0,1,2,3", 4),
        ("ASCEND_RT_VISIBLE_DEVICES", "GPU-0a1b2c3d-0000-1111-2222-333344445555", 0),  # no UUIDs on Ascend
        ("ASCEND_RT_VISIBLE_DEVICES", "5\n6", 1),  # first line only
    ],
)
def test_visible_limit(var, value, want):
    assert devices.visible_limit(var, value) == want


# ---- count -------------------------------------------------------------------------------------------------


def test_ascend_from_davinci_files_control_devices_and_dangling_links_do_not_count(tmp_path):
    dev = davinci(tmp_path, 16)
    (dev / "davinci99").symlink_to(tmp_path / "absent")
    got = devices.count(dev_dir=str(dev), environ=env())
    assert (got.platform, got.devices, got.node_devices) == ("npu", 16, 16)
    assert got.source == f"{dev}/davinci[0-9]*"


def test_ascend_from_npu_smi_when_dev_shows_none(tmp_path):
    b = tool(tmp_path, "npu-smi", npu_smi_list(8, 2))
    got = devices.count(dev_dir=str(tmp_path / "nodev"), environ=env([b]))
    assert (got.platform, got.devices, got.source) == ("npu", 16, "npu-smi info -l")


def test_a_failing_tool_counts_zero_and_says_why(tmp_path):
    b = tool(
        tmp_path, "nvidia-smi", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver\n", rc=9
    )
    got = devices.count("gpu", str(tmp_path), env([b]))
    assert (got.devices, got.node_devices) == (0, 0)
    assert got.tool_error.startswith("nvidia-smi -L: exit 9: NVIDIA-SMI has failed")


def test_visibility_limits_what_this_process_may_use_not_the_node(tmp_path):
    b = tool(tmp_path, "nvidia-smi", (FIX / "nvidia-smi-L-dgx-a100-mig.txt").read_text())
    got = devices.count("gpu", str(tmp_path), env([b], CUDA_VISIBLE_DEVICES="0,1,2,3"))
    assert (got.devices, got.source, got.node_devices, got.node_source) == (
        4,
        "CUDA_VISIBLE_DEVICES",
        8,
        "nvidia-smi -L",
    )
    assert got.hidden == 4
    # a limit above the node's count does not raise it
    got = devices.count("gpu", str(tmp_path), env([b], CUDA_VISIBLE_DEVICES=",".join(map(str, range(12)))))
    assert (got.devices, got.source) == (8, "nvidia-smi -L")


def test_platform_detection_order(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    npu = tool(tmp_path / "a", "npu-smi", npu_smi_list(8, 1))
    gpu = tool(tmp_path / "b", "nvidia-smi", (FIX / "nvidia-smi-L-dgx-a100-mig.txt").read_text())
    assert devices.detect_platform(str(tmp_path), env([npu, gpu])) == "npu"
    assert devices.detect_platform(str(tmp_path), env([gpu])) == "gpu"
    assert devices.detect_platform(str(davinci(tmp_path, 1)), env([gpu])) == "npu"
    assert devices.detect_platform(str(tmp_path / "x"), env()) == ""
    none = devices.count(dev_dir=str(tmp_path / "x"), environ=env())
    assert (none.platform, none.devices) == ("", 0)


def test_b14_an_empty_ascend_list_in_a_submitted_job_names_ray_and_the_fix(tmp_path):
    dev = davinci(tmp_path, 4)
    job = env(ASCEND_RT_VISIBLE_DEVICES="", RAY_JOB_CONFIG_JSON_ENV_VAR='{"runtime_env": {}}')
    got = devices.count("npu", str(dev), job)
    assert (got.devices, got.node_devices) == (0, 4)
    cause = got.cause(job)
    assert "ASCEND_RT_VISIBLE_DEVICES is set but empty in this process, so it sees 0 of the node's 4 NPU" in cause
    assert "`ray job submit` driver" in cause and "ray issue #59063" in cause
    assert "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES=1" in devices.ray_fix("npu")
    # a user's own list outside Ray: the count is limited, no Ray blamed
    own = env(ASCEND_RT_VISIBLE_DEVICES="0,1")
    mine = devices.count("npu", str(dev), own)
    assert mine.devices == 2 and "ray job submit" not in mine.cause(own)


def test_unknown_platform_is_a_usage_error():
    with pytest.raises(devices.UsageError, match="expected npu or gpu"):
        devices.count("tpu")


# ---- CLI (what the entrypoints read) -------------------------------------------------------------------------


def run_cli(*args, **environ) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vlgrpo", "devices", *args],
        capture_output=True,
        text=True,
        env=env(**environ) if not environ.get("PATH") else {**env(), **environ},
        cwd=REPO,
    )


def test_cli_shell_format_is_one_key_per_line(tmp_path):
    dev = davinci(tmp_path, 8)
    out = run_cli("--format", "shell", "--dev-dir", str(dev), ASCEND_RT_VISIBLE_DEVICES="0,1\n2")
    assert out.returncode == 0, out.stderr
    got = dict(line.split("=", 1) for line in out.stdout.splitlines())
    assert got["platform"] == "npu" and got["devices"] == "2" and got["node_devices"] == "8"
    assert got["visibility_value"] == "0,1 2"  # a newline in a value never starts a new key
    assert got["source"] == "ASCEND_RT_VISIBLE_DEVICES" and got["node_source"] == f"{dev}/davinci[0-9]*"


def test_cli_json_and_torch_count_with_the_stand_in(tmp_path):
    dev = davinci(tmp_path, 8)
    standin = REPO / "tests" / "python" / "ray"
    out = run_cli(
        "--torch",
        "--format",
        "json",
        "--platform",
        "npu",
        "--dev-dir",
        str(dev),
        PATH="/usr/bin:/bin",
        PYTHONPATH=str(standin),
        VLGRPO_PROBE_DEVICE_MODULE="npu_standin",
        STANDIN_PHYSICAL_NPUS="8",
        ASCEND_RT_VISIBLE_DEVICES="0,1,2",
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["torch_visible"] == 3 and got["torch_source"] == "stand-in npu_standin" and got["devices"] == 3


def test_cli_refuses_an_unknown_platform():
    out = run_cli("--platform", "tpu")
    assert out.returncode == 2


# ---- visibility lists: field cases C06 (NOSET + a subset, unordered, repeated) and C12 (a missing card)


def slots(tmp_path: Path, ids) -> Path:
    """A /dev tree with davinci files for the given slot numbers (C12: a card missing from slot 2)."""
    dev = tmp_path / "dev"
    dev.mkdir(exist_ok=True)
    for i in ids:
        (dev / f"davinci{i}").write_text("")
    return dev


NOSET = "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES"


@pytest.mark.parametrize(
    "value, words",
    [
        ("7,6,5,4,3,2,1,0", ["not in ascending order", "ASCEND_RT_VISIBLE_DEVICES=0,1,2,3,4,5,6,7"]),
        ("0,0,1,2,3,4,5,6", ["repeats device 0", "two workers would get the same device"]),
    ],
)
def test_c06_unordered_or_repeated_list_is_refused_with_or_without_noset(tmp_path, value, words):
    dev = davinci(tmp_path, 8)
    for noset in ("", "1"):
        node = devices.count("npu", str(dev), env(ASCEND_RT_VISIBLE_DEVICES=value, **({NOSET: noset} if noset else {})))
        problem, fix = node.list_problem(env(**({NOSET: noset} if noset else {})))
        assert all(w in problem + " -- " + fix for w in words), (problem, fix)


def test_c06_a_subset_is_refused_only_under_noset_naming_the_set_device_id(tmp_path):
    dev = davinci(tmp_path, 16)
    value = "8,9,10,11,12,13,14,15"
    node = devices.count("npu", str(dev), env(ASCEND_RT_VISIBLE_DEVICES=value))
    assert node.list_problem(env()) == ("", "")  # without NOSET Ray sets each worker's own id: valid
    problem, fix = node.list_problem(env(**{NOSET: "1"}))
    assert "set_device(8) is out of range" in problem and "0..7" in problem
    assert "give the container only these devices" in fix
    ok = devices.count("npu", str(dev), env(ASCEND_RT_VISIBLE_DEVICES="0,1,2,3,4,5,6,7"))
    assert ok.list_problem(env(**{NOSET: "1"})) == ("", "")


def test_c12_an_id_at_or_above_the_enumeration_count_names_the_list(tmp_path):
    dev = slots(tmp_path, (0, 1, 3, 4))  # slot 2 empty: the runtime enumerates 4 devices, indices 0..3
    node = devices.count("npu", str(dev), env(ASCEND_RT_VISIBLE_DEVICES="0,1,3,4"))
    assert node.node_devices == 4 and node.devices == 4  # the count alone sees nothing wrong
    problem, fix = node.list_problem(env())
    assert "id 4 is not below the 4 devices" in problem and "C12" in problem
    assert fix == "use enumeration indices: ASCEND_RT_VISIBLE_DEVICES=0,1,2,3"
    # the runtime's own count (the stand-in's CANN rule: ids >= 4 dropped) against the list names it too
    problem, fix = devices.shrink_problem("npu", "0,1,3,4", 3)
    assert "names 4 devices but the runtime exposes 3" in problem and "ASCEND_RT_VISIBLE_DEVICES=0,1,2,3" in fix
    assert devices.shrink_problem("npu", "0,1,2,3", 4) == ("", "")


def test_cuda_lists_are_checked_the_same_way_and_uuids_are_left_alone(tmp_path):
    assert "repeats device 1" in devices.list_problem("gpu", "0,1,1", 8, False)[0]
    assert "ascending" in devices.list_problem("gpu", "1,0", 8, False)[0]
    assert devices.list_problem("gpu", "GPU-0a1b2c3d-0000-1111-2222-333344445555,1", 8, True) == ("", "")
    assert devices.list_problem("gpu", "", 8, True) == ("", "")


def test_cli_shell_carries_the_list_problem_for_the_entrypoints(tmp_path):
    dev = davinci(tmp_path, 8)
    out = run_cli("--format", "shell", "--dev-dir", str(dev), ASCEND_RT_VISIBLE_DEVICES="0,0,1")
    assert out.returncode == 0, out.stderr
    got = dict(line.split("=", 1) for line in out.stdout.splitlines())
    assert "repeats device 0" in got["list_problem"] and got["list_fix"].endswith("ASCEND_RT_VISIBLE_DEVICES=0,1")
    out = run_cli("--format", "shell", "--dev-dir", str(dev), ASCEND_RT_VISIBLE_DEVICES="0,1")
    got = dict(line.split("=", 1) for line in out.stdout.splitlines())
    assert got["list_problem"] == "" and got["list_fix"] == ""
