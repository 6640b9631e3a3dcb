"""``python -m vlgrpo doctor``: each check against a real or hand-built tree (field cases B13, B16, B18).

Reference values come from outside the doctor: ``importlib.metadata`` for the manifest, ``os.statvfs`` /
``shutil.disk_usage`` for sizes, the real patch-package installer for the shim, a real Ray instance for the
actor check.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from vlgrpo import doctor
from vlgrpo.doctor import FAIL, PASS, SKIP, Context

REPO = Path(__file__).resolve().parents[3]
MODEL_30B = REPO / "assets" / "models" / "qwen3-vl-30b-a3b-instruct"
TRAIN_PARQUET = REPO / "assets" / "geo3k-sample" / "hiyouga-geometry3k-format" / "data" / "train-00000-of-00001.parquet"


def installed() -> dict[str, str]:
    return {
        re.sub(r"[-_.]+", "-", d.metadata["Name"]).lower(): d.version for d in md.distributions() if d.metadata["Name"]
    }


def write_manifest(path: Path, packages: dict[str, str], **extra) -> Path:
    data = {
        "schema": "vlgrpo.build-manifest/1",
        "platform": "npu-a2",
        "stand_in": False,
        "packages": packages,
        "verl": {"commit": "0123456789abcdef"},
    }
    data.update(extra)
    path.write_text(json.dumps(data))
    return path


def ctx_for(tmp_path: Path, **kw) -> Context:
    ctx = Context(
        manifest_path=str(tmp_path / "absent.json"),
        dev_dir=str(tmp_path / "dev"),
        driver_dir=str(tmp_path / "driver"),
        dcmi_dir=str(tmp_path / "dcmi"),
        install_info=str(tmp_path / "ascend_install.info"),
        container_markers=(str(tmp_path / "marker"),),
        mountinfo=str(tmp_path / "mountinfo"),
    )
    (tmp_path / "mountinfo").write_text("1 0 254:0 / / rw - ext4 /dev/vda rw\n")  # a host, not a container layer
    for k, v in kw.items():
        setattr(ctx, k, v)
    (tmp_path / "dev").mkdir(exist_ok=True)
    ctx.load_manifest()
    return ctx


# ---- versions --------------------------------------------------------------------------------------------


def test_versions_pass_when_the_manifest_matches_what_is_installed(tmp_path):
    ctx = ctx_for(tmp_path, manifest_path=str(write_manifest(tmp_path / "m.json", installed())))
    ctx.load_manifest()
    r = doctor.check_versions(ctx)
    assert r.status == PASS, r
    assert f"{len(installed())} packages match" in r.detail
    assert f"transformers {md.version('transformers')}" in r.detail


def test_versions_drift_names_changed_missing_and_added_packages(tmp_path):
    pk = installed()
    have_tf = pk["transformers"]
    pk["transformers"] = "4.57.5"
    pk["not-installed-pkg"] = "1.0"
    del pk["pyarrow"]
    ctx = ctx_for(tmp_path, manifest_path=str(write_manifest(tmp_path / "m.json", pk)))
    ctx.load_manifest()
    r = doctor.check_versions(ctx)
    assert r.status == FAIL
    assert f"transformers 4.57.5 -> {have_tf}" in r.detail
    assert "missing: not-installed-pkg 1.0" in r.detail
    assert f"added: pyarrow {md.version('pyarrow')}" in r.detail
    assert "no pip install" in r.fix


def test_missing_manifest_fails_in_a_container_and_is_skipped_outside(tmp_path):
    outside = doctor.check_versions(ctx_for(tmp_path))
    assert outside.status == SKIP and "not inside a vlgrpo image" in outside.detail
    (tmp_path / "marker").write_text("")
    inside = doctor.check_versions(ctx_for(tmp_path))
    assert inside.status == FAIL and "inside a container" in inside.detail


# ---- devices and driver (B16) ---------------------------------------------------------------------------


def ascend_tree(
    tmp_path: Path, npus: int, control=doctor.ASCEND_CONTROL_DEVICES, driver=("lib64", "version.info", "tools")
):
    dev = tmp_path / "dev"
    dev.mkdir(exist_ok=True)
    for i in range(npus):
        (dev / f"davinci{i}").write_text("")
    for c in control:
        (dev / c).write_text("")
    drv = tmp_path / "driver"
    drv.mkdir(exist_ok=True)
    for entry in driver:
        (drv / entry).mkdir(exist_ok=True)
    (tmp_path / "dcmi").mkdir(exist_ok=True)
    (tmp_path / "ascend_install.info").write_text("")


def npu_smi_on_path(tmp_path: Path, monkeypatch, text: str, rc: int = 0) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "out.txt").write_text(text)
    script = bin_dir / "npu-smi"
    script.write_text(f"#!/bin/sh\ncat '{bin_dir}/out.txt'\nexit {rc}\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


def test_b16_every_davinci_and_the_three_control_devices(tmp_path):
    ascend_tree(tmp_path, 8)
    ok = doctor.check_devices(ctx_for(tmp_path), "npu")
    assert ok.status == PASS and ok.detail.startswith("8 davinci device(s)")
    (tmp_path / "dev" / "devmm_svm").unlink()
    bad = doctor.check_devices(ctx_for(tmp_path), "npu")
    assert bad.status == FAIL
    assert f"missing control device(s) {tmp_path}/dev/devmm_svm" in bad.detail


def test_b16_an_a3_image_with_eight_devices_mapped_is_short(tmp_path):
    ascend_tree(tmp_path, 8)
    ctx = ctx_for(tmp_path, manifest_path=str(write_manifest(tmp_path / "m.json", {}, platform="npu-a3")))
    ctx.load_manifest()
    r = doctor.check_devices(ctx, "npu")
    assert r.status == FAIL and "8 of the 16 davinci devices of an npu-a3 node" in r.detail


def test_b16_driver_mounted_whole_passes(tmp_path, monkeypatch):
    ascend_tree(tmp_path, 8)
    npu_smi_on_path(tmp_path, monkeypatch, "| No running processes found in NPU 0 |\n")
    r = doctor.check_driver(ctx_for(tmp_path), "npu")
    assert r.status == PASS, r


def test_b16_only_lib64_and_version_info_mounted_fails(tmp_path, monkeypatch):
    ascend_tree(tmp_path, 8, driver=("lib64", "version.info"))
    npu_smi_on_path(tmp_path, monkeypatch, "ok\n")
    r = doctor.check_driver(ctx_for(tmp_path), "npu")
    assert r.status == FAIL
    assert "only lib64, version.info of" in r.detail
    assert "mount /usr/local/Ascend/driver whole" in r.fix


@pytest.mark.parametrize("code", ["-8005", "-8020"])
def test_b16_npu_smi_8005_8020_means_cards_held_by_another_container(tmp_path, monkeypatch, code):
    ascend_tree(tmp_path, 8)
    npu_smi_on_path(tmp_path, monkeypatch, f"dcmi module initialize failed. ret is {code}\n", rc=1)
    r = doctor.check_driver(ctx_for(tmp_path), "npu")
    assert r.status == FAIL
    assert "cards in use by another container" in r.detail


def test_stand_in_image_skips_accelerator_checks_with_the_reason(tmp_path):
    ctx = ctx_for(tmp_path, manifest_path=str(write_manifest(tmp_path / "m.json", {}, stand_in=True)))
    ctx.load_manifest()
    for r in (
        doctor.check_devices(ctx, "npu"),
        doctor.check_driver(ctx, "npu"),
        doctor.check_torch_devices(ctx, "npu"),
    ):
        assert r.status == SKIP and "stand-in" in r.detail


# ---- shm, checkpoint space ------------------------------------------------------------------------------


def test_shm_threshold_against_statvfs(tmp_path):
    st = os.statvfs("/dev/shm")
    gib = st.f_blocks * st.f_frsize / 2**30
    assert doctor.check_shm(ctx_for(tmp_path, min_shm_gib=gib / 2)).status == PASS
    r = doctor.check_shm(ctx_for(tmp_path, min_shm_gib=gib * 2 + 1))
    assert r.status == FAIL and f"{gib:.2f} GiB" in r.detail and "ipc: host" in r.fix


def test_checkpoint_space(tmp_path):
    free = shutil.disk_usage(tmp_path).free / 2**30
    assert doctor.check_checkpoint_space(ctx_for(tmp_path, checkpoint_dir=str(tmp_path), min_free_gib=0)).status == PASS
    r = doctor.check_checkpoint_space(ctx_for(tmp_path, checkpoint_dir=str(tmp_path), min_free_gib=free * 2 + 1))
    assert r.status == FAIL and "GiB free, below" in r.detail
    assert doctor.check_checkpoint_space(ctx_for(tmp_path, checkpoint_dir=str(tmp_path / "nope"))).status == FAIL
    assert doctor.check_checkpoint_space(ctx_for(tmp_path)).status == SKIP


# ---- checkpoint engine (B13) ----------------------------------------------------------------------------


def fake_ckpt_engine(monkeypatch, registered):
    reg = types.SimpleNamespace(_registry={name: object for name in registered})
    mod = types.ModuleType("verl.checkpoint_engine")
    mod.CheckpointEngineRegistry = reg
    mod.__path__ = []  # submodule imports fail like a missing dependency would
    monkeypatch.setitem(sys.modules, "verl.checkpoint_engine", mod)


def test_b13_nccl_not_registered_fails_with_the_swallowed_cause(tmp_path, monkeypatch):
    fake_ckpt_engine(monkeypatch, ["naive"])
    r = doctor.check_ckpt_engine(ctx_for(tmp_path), "gpu")
    assert r.status == FAIL
    assert "backend nccl NOT registered (nccl_checkpoint_engine: ModuleNotFoundError" in r.detail
    assert "cupy and zmq" in r.fix
    r = doctor.check_ckpt_engine(ctx_for(tmp_path), "npu")
    assert "hccl_checkpoint_engine" in r.detail and "must be nccl (also on Ascend)" in r.fix


def test_b13_nccl_registered_passes_and_explains_the_ascend_name(tmp_path, monkeypatch):
    fake_ckpt_engine(monkeypatch, ["naive", "nccl"])
    r = doctor.check_ckpt_engine(ctx_for(tmp_path), "npu")
    assert r.status == PASS and "Ascend registers it as nccl" in r.detail


# ---- model and data (preflight reused) ------------------------------------------------------------------


def test_model_folder_check_reuses_the_preflight(tmp_path):
    assert doctor.check_model(ctx_for(tmp_path, model_path=str(MODEL_30B))).status == PASS
    bad = tmp_path / "model"
    shutil.copytree(MODEL_30B, bad)
    cfg = json.loads((bad / "config.json").read_text())
    cfg["auto_map"] = {"AutoModel": "modeling_x.Model"}
    (bad / "config.json").write_text(json.dumps(cfg))
    r = doctor.check_model(ctx_for(tmp_path, model_path=str(bad)))
    assert r.status == FAIL and "auto_map" in r.detail


def test_data_files_are_read_with_pyarrow(tmp_path):
    import pyarrow.parquet as pq

    rows = pq.read_metadata(TRAIN_PARQUET).num_rows
    res = doctor.check_data(ctx_for(tmp_path, train_file=str(TRAIN_PARQUET), val_file=str(tmp_path / "x.parquet")))
    assert [r.status for r in res] == [PASS, FAIL]
    assert f"{rows} rows" in res[0].detail


# ---- sitecustomize in the driver, a spawned process and a Ray actor (B18), through the CLI -------------


def run_doctor(env_extra: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLGRPO_", "RAY_"))}
    env.update(RAY_USAGE_STATS_ENABLED="0", **env_extra)
    skip = "versions,devices,driver,torch-devices,shm,patches,ckpt-engine,model,data,checkpoint-space"
    return subprocess.run(
        [sys.executable, "-m", "vlgrpo", "doctor", "--skip", skip, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        cwd=REPO,
    )


@pytest.mark.ray
def test_b18_our_shim_runs_everywhere_and_chains_the_shadowed_one(tmp_path):
    ours, vendor = tmp_path / "ours", tmp_path / "vendor"
    ours.mkdir()
    vendor.mkdir()
    (vendor / "sitecustomize.py").write_text("VENDOR = True\n")
    from vlgrpo.patches.cli import install_sitecustomize

    install_sitecustomize(str(ours), pth=False)  # the real installer, as the images use it
    out = run_doctor({"PYTHONPATH": f"{ours}{os.pathsep}{vendor}"}, "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    got = {r["name"]: r for r in json.loads(out.stdout)}
    for where in ("sitecustomize[driver]", "sitecustomize[spawn]", "sitecustomize[ray actor]"):
        assert got[where]["status"] == PASS, got[where]
        assert got[where]["detail"].startswith(str(ours / "sitecustomize.py"))
        assert f"chained {vendor / 'sitecustomize.py'}" in got[where]["detail"]


@pytest.mark.ray
def test_b18_a_vendor_sitecustomize_first_on_the_path_fails_in_every_process(tmp_path):
    ours, vendor = tmp_path / "ours", tmp_path / "vendor"
    ours.mkdir()
    vendor.mkdir()
    (vendor / "sitecustomize.py").write_text("VENDOR = True\n")
    from vlgrpo.patches.cli import install_sitecustomize

    install_sitecustomize(str(ours), pth=False)
    out = run_doctor({"PYTHONPATH": f"{vendor}{os.pathsep}{ours}"})
    assert out.returncode == 2, out.stdout + out.stderr
    for where in ("driver", "spawn", "ray actor"):
        assert (
            f"doctor: FAIL sitecustomize[{where}]: imported sitecustomize is '{vendor / 'sitecustomize.py'}'"
            in out.stdout
        )


def test_cli_refuses_unknown_skip_and_prints_one_line_per_check():
    out = subprocess.run(
        [sys.executable, "-m", "vlgrpo", "doctor", "--skip", "bogus"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert out.returncode == 2 and "unknown check(s) bogus" in out.stderr
    everything = ",".join(c for c in doctor.CHECK_NAMES if c != "shm")
    out = subprocess.run(
        [sys.executable, "-m", "vlgrpo", "doctor", "--skip", everything, "--min-shm-gib", "0.001"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert len([ln for ln in lines if ln.startswith("doctor: SKIP ")]) == len(doctor.CHECK_NAMES) - 1
    assert any(ln.startswith("doctor: PASS shm: /dev/shm is ") for ln in lines)


def test_ports_names_what_a_job_opens_and_fails_with_the_loopback_patch_off(monkeypatch):
    """C01: the doctor lists the listeners of a running job and the firewall rule; switching the loopback patch
    off is a FAIL naming both vLLM advisories."""
    monkeypatch.delenv("VLGRPO_PATCHES", raising=False)
    monkeypatch.delenv("VLGRPO_PATCHES_DISABLED", raising=False)
    ok = doctor.check_ports(None)
    assert ok.status == doctor.PASS and "127.0.0.1 only" in ok.detail and "firewall" in ok.detail
    assert "6379" in ok.detail and "8265" in ok.detail
    monkeypatch.setenv("VLGRPO_PATCHES_DISABLED", "rollout.server_loopback")
    off = doctor.check_ports(None)
    assert off.status == doctor.FAIL and "the node IP, unauthenticated" in off.detail
    assert "CVE-2026-22778" in off.fix and "CVE-2026-34755" in off.fix


# ---- the host driver against the image (vlgrpo.driver; public samples in fixtures/) ---------------------------

FIX = Path(__file__).resolve().parent / "fixtures"


def test_driver_version_an_old_nvidia_driver_fails_naming_both_versions_and_the_fix(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(
        f"#!/bin/sh\nif [ \"$1\" = -L ]; then cat '{FIX}/nvidia-smi-L-a100-pcie.txt'; "
        f"else cat '{FIX}/nvidia-smi-510.47.03.txt'; fi\n"
    )
    (bin_dir / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    (tmp_path / "usr/local/cuda").mkdir(parents=True)
    (tmp_path / "usr/local/cuda/version.json").write_text('{"cuda": {"version": "12.9.1"}}')
    r = doctor.check_driver_version(ctx_for(tmp_path, root=str(tmp_path)), "gpu")
    assert r.status == FAIL and "host driver 510.47.03 is older than 525.60.13" in r.detail
    assert "the image needs CUDA 12.9.1" in r.detail and r.fix.startswith("upgrade the host's NVIDIA driver")


@pytest.mark.parametrize(
    "info,status", [("ascend-driver-version-25.3.rc1.info", FAIL), ("ascend-driver-version-26.0.rc1.info", PASS)]
)
def test_driver_version_ascend_against_cann_8_5(tmp_path, info, status):
    (tmp_path / "usr/local/Ascend/driver").mkdir(parents=True)
    shutil.copy(FIX / info, tmp_path / "usr/local/Ascend/driver/version.info")
    opp = tmp_path / "usr/local/Ascend/ascend-toolkit/latest/opp"
    opp.mkdir(parents=True)
    shutil.copy(FIX / "cann-8.5.0-opp-version.info", opp / "version.info")
    r = doctor.check_driver_version(ctx_for(tmp_path, root=str(tmp_path)), "npu")
    assert r.status == status, r
    if status == FAIL:
        assert "25.3.rc1 is older than Ascend HDK 25.5.0" in r.detail and "HDK 25.5.0" in r.fix
    else:
        assert r.detail.startswith("host driver 26.0.rc1; the image needs CANN 8.5.0")


def test_a_container_without_a_marker_file_is_one_by_its_layer_root(tmp_path):
    """Kubernetes with containerd or CRI-O leaves no /.dockerenv: the root file system (an overlay) says it."""
    ctx = ctx_for(tmp_path)
    assert not ctx.in_container()
    (tmp_path / "mountinfo").write_text("1 0 0:1 / / rw - overlay overlay rw\n")
    assert ctx.in_container()
    res = doctor.check_versions(ctx)
    assert res.status == doctor.FAIL and "inside a container" in res.detail
