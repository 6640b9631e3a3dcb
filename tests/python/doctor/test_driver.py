"""vlgrpo.driver: the host driver against what the image needs, on public nvidia-smi / npu-smi / version.info
samples (fixtures/SOURCES.md) and hand-built image trees (the file layout of NVIDIA's cuda-compat package and of
CANN's toolkit). Reference values: the versions printed in the samples and the pairing CANN's release notes declare."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vlgrpo import driver

FIX = Path(__file__).resolve().parent / "fixtures"


def text(name: str) -> str:
    return (FIX / name).read_text()


def cuda_tree(root: Path, cuda: str = "12.9.1", compat: str | None = "575.57.08") -> Path:
    (root / "usr/local/cuda").mkdir(parents=True)
    (root / "usr/local/cuda/version.json").write_text(json.dumps({"cuda": {"name": "CUDA SDK", "version": cuda}}))
    if compat:
        mm = ".".join(cuda.split(".")[:2])
        d = root / f"usr/local/cuda-{mm}/compat"
        d.mkdir(parents=True)
        (d / f"libcuda.so.{compat}").write_text("")
        (d / "libcuda.so.1").symlink_to(f"libcuda.so.{compat}")
    return root


def ldconfig(root: Path, linked: bool):
    cache = "\t/usr/local/cuda-12.9/compat/libcuda.so.1 (libc6,x86-64) => /usr/local/cuda-12.9/compat/libcuda.so.1\n"
    return lambda argv: (0, cache if linked else "\tlibc.so.6 (libc6,x86-64) => /lib/x86_64-linux-gnu/libc.so.6\n")


# ---- parsing -----------------------------------------------------------------------------------------------


def test_parse_driver_versions_from_the_public_samples():
    assert driver.parse_nvidia_smi_driver(text("nvidia-smi-550.54.14-a100.txt")) == "550.54.14"
    assert driver.parse_nvidia_smi_driver(text("nvidia-smi-510.47.03.txt")) == "510.47.03"
    assert (
        driver.parse_npu_smi_version((FIX.parents[2] / "bats/fixtures/ray-node/npu-smi-info-idle.txt").read_text())
        == "24.1.rc2"
    )
    kv = driver.parse_key_values(text("ascend-driver-version-25.3.rc1.info"))
    assert kv["package_version"] == "25.3.rc1" and kv["ascendhal_version"] == "7.35.23"


@pytest.mark.parametrize(
    "a,b",
    [
        ("525.60.13", "575.57.08"),
        ("575.51.03", "575.57.08"),
        ("25.3.rc1", "25.5.0"),
        ("25.5.rc1", "25.5.0"),
        ("24.1.rc2.2", "25.5.0"),
        ("25.5.0", "25.5.1"),
        ("7.35.19", "7.35.23"),
    ],
)
def test_version_order(a, b):
    assert driver.older(a, b) and not driver.older(b, a)
    assert not driver.older("25.5.0", "25.5") and not driver.older("26.0.rc1", "25.5.0")


# ---- NVIDIA ---------------------------------------------------------------------------------------------------


def test_an_old_driver_without_forward_compatibility_is_refused_naming_both_versions(tmp_path):
    image = driver.cuda_image(str(cuda_tree(tmp_path, compat=None)), {}, lambda a: (0, ""))
    got = driver.check_nvidia(text("nvidia-smi-510.47.03.txt"), text("nvidia-smi-L-a100-pcie.txt"), image)
    assert got.problem.startswith("host driver 510.47.03 is older than 525.60.13, the oldest that runs CUDA 12.x")
    assert "CUDA 12.9.1" in got.problem and got.fix.startswith("upgrade the host's NVIDIA driver")


def test_the_image_forward_compatibility_libcuda_carries_an_older_driver_on_a_data_center_gpu(tmp_path):
    image = driver.cuda_image(str(cuda_tree(tmp_path)), {}, ldconfig(tmp_path, True))
    assert (image.cuda, image.compat, image.compat_linked) == ("12.9.1", "575.57.08", True)
    assert image.compat_path == "/usr/local/cuda-12.9/compat/libcuda.so.575.57.08"
    got = driver.check_nvidia(text("nvidia-smi-550.54.14-a100.txt"), text("nvidia-smi-L-a100-pcie.txt"), image)
    assert got.problem == "" and got.via.startswith("forward compatibility") and got.host == "550.54.14"
    # the same old driver on a data-center GPU without compat libraries: minor version compatibility only
    bare = driver.cuda_image(str(cuda_tree(tmp_path / "bare", compat=None)), {}, lambda a: (0, ""))
    got = driver.check_nvidia(text("nvidia-smi-550.54.14-a100.txt"), text("nvidia-smi-L-a100-pcie.txt"), bare)
    assert got.problem == "" and got.via.startswith("minor version compatibility")


def test_forward_compatibility_on_a_geforce_is_refused_when_the_image_links_the_compat_libcuda(tmp_path):
    image = driver.cuda_image(str(cuda_tree(tmp_path)), {}, ldconfig(tmp_path, True))
    got = driver.check_nvidia(text("nvidia-smi-550.54.14-a100.txt"), text("nvidia-smi-L-geforce.txt"), image)
    assert "host driver 550.54.14 is older than 575.57.08, which CUDA 12.9.1 in this image needs" in got.problem
    assert "NVIDIA GeForce RTX 5090" in got.problem and "error 804" in got.problem
    assert got.fix == "upgrade the host's NVIDIA driver to 575.57.08 or newer"


def test_a_driver_at_least_the_compat_libcuda_is_native(tmp_path):
    image = driver.cuda_image(str(cuda_tree(tmp_path)), {}, ldconfig(tmp_path, True))
    smi = text("nvidia-smi-550.54.14-a100.txt").replace("550.54.14", "580.95.05")
    got = driver.check_nvidia(smi, text("nvidia-smi-L-geforce.txt"), image)
    assert (got.problem, got.via, got.host) == ("", "native", "580.95.05")


def test_cuda_release_from_the_environment_when_version_json_is_absent(tmp_path):
    image = driver.cuda_image(str(tmp_path), {"CUDA_VERSION": "12.9.1"}, lambda a: (0, ""))
    assert (image.cuda, image.cuda_source, image.compat) == ("12.9.1", "CUDA_VERSION", "")


# ---- Ascend ---------------------------------------------------------------------------------------------------


def cann_tree(root: Path, *extra: tuple[str, str]) -> Path:
    toolkit = root / "usr/local/Ascend/ascend-toolkit/latest"
    (toolkit / "opp").mkdir(parents=True)
    (toolkit / "opp/version.info").write_text(text("cann-8.5.0-opp-version.info"))
    for rel, body in extra:
        (toolkit / rel).parent.mkdir(parents=True, exist_ok=True)
        (toolkit / rel).write_text(body)
    return toolkit


def test_an_ascend_driver_older_than_the_hdk_cann_8_5_is_released_with_is_refused(tmp_path):
    toolkit = cann_tree(tmp_path)
    got = driver.check_ascend(text("ascend-driver-version-25.3.rc1.info"), "", str(toolkit))
    assert got.problem == (
        "host driver 25.3.rc1 is older than Ascend HDK 25.5.0, which CANN 8.5.0 in this image is "
        "released with (hicann/release-management 8.5.0/release-notes.md)"
    )
    assert got.fix.startswith("upgrade the host's Ascend driver and firmware to HDK 25.5.0")
    assert driver.check_ascend(text("ascend-driver-version-24.1.rc1.info"), "", str(toolkit)).problem


def test_a_new_enough_ascend_driver_passes(tmp_path):
    got = driver.check_ascend(text("ascend-driver-version-26.0.rc1.info"), "", str(cann_tree(tmp_path)))
    assert (got.problem, got.via, got.host) == ("", "native", "26.0.rc1")
    assert got.needs.startswith("CANN 8.5.0") and "HDK 25.5.0" in got.needs


def test_a_requirement_a_cann_package_declares_is_checked_against_the_driver(tmp_path):
    acllib = text("cann-acllib-version.info").replace(
        "required_driver_ascendhal_version=4.0.0", "required_driver_ascendhal_version=7.35.23"
    )
    toolkit = cann_tree(tmp_path, ("acllib/version.info", acllib))
    got = driver.check_ascend(text("ascend-driver-version-24.1.rc1.info"), "", str(toolkit))
    assert "ascendhal_version 7.35.19 < 7.35.23 required by" in got.problem and "acllib/version.info" in got.problem
    # the sample's own requirement (ascendhal 4.0.0, dvppkernels 1.1, tsfw 1.0) is met by a 26.0 driver
    toolkit = cann_tree(tmp_path / "b", ("acllib/version.info", text("cann-acllib-version.info")))
    assert driver.check_ascend(text("ascend-driver-version-26.0.rc1.info"), "", str(toolkit)).problem == ""


def test_npu_smi_header_is_the_fallback_and_missing_sides_are_skipped_with_the_reason(tmp_path):
    toolkit = cann_tree(tmp_path)
    smi = (FIX.parents[2] / "bats/fixtures/ray-node/npu-smi-info-idle.txt").read_text()
    got = driver.check_ascend("", smi, str(toolkit))
    assert got.host == "24.1.rc2" and "older than Ascend HDK 25.5.0" in got.problem
    assert "no driver version" in driver.check_ascend("", "", str(toolkit)).skipped
    assert (
        "no CANN version"
        in driver.check_ascend(text("ascend-driver-version-26.0.rc1.info"), "", str(tmp_path / "x")).skipped
    )
