"""tests/docker/check_pins.py must fail on the mistakes it exists for, and pass on this repository.

Run: ``.venv/bin/python -m pytest tests/docker -q`` (part of ``make test-docker``; < 1 s).
"""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import check_pins

ROOT = Path(__file__).resolve().parents[2]


def findings_for(tmp_path, dockerfile: str, image: bool = True):
    path = tmp_path / "x.Dockerfile"
    path.write_text(dockerfile)
    return check_pins.check_dockerfile(path, image_dockerfile=image)


GOOD = """ARG BASE_IMAGE=quay.io/ascend/vllm-ascend:v0.13.0
FROM ${BASE_IMAGE} AS base
RUN python3 -m pip install --no-cache-dir --no-deps --require-hashes -r /opt/lock.txt
FROM base AS two
RUN python3 -m pip install --no-deps /tmp/dist/verl-0.8.0-py3-none-any.whl
"""


def test_good_dockerfile_passes(tmp_path):
    assert findings_for(tmp_path, GOOD) == []


@pytest.mark.parametrize(
    "bad, why",
    [
        ("FROM vllm/vllm-openai:v0.13.0\n", "base must be"),
        ("ARG BASE_IMAGE=vllm/vllm-openai\nFROM ${BASE_IMAGE}\n", "not a pinned"),
        ("ARG BASE_IMAGE=vllm/vllm-openai:latest\nFROM ${BASE_IMAGE}\n", "not a pinned"),
        ("FROM ${NOT_DECLARED}\n", "not a global ARG"),
        (GOOD + "RUN pip install transformers==4.57.6\n", "neither from a hash-checked lock"),
        (GOOD + "RUN pip install --require-hashes -r /l.txt -U ray\n", "forbidden option"),
        (GOOD + "RUN python3 -m pip install --upgrade pip\n", "forbidden option"),
        (GOOD + "RUN pip install git+https://github.com/verl-project/verl.git@main\n", "VCS requirement"),
        (GOOD + "RUN git clone --branch main https://github.com/verl-project/verl.git\n", "git clone"),
        (GOOD + "RUN PIP_CONSTRAINT= pip install --require-hashes -r /l.txt\n", "clears PIP_CONSTRAINT"),
        (GOOD + "RUN apt-get update && apt-get install -y git\n", "apt install"),
        (GOOD + "RUN set -e; \\\n    pip download verl -d /dist\n", "neither from a hash-checked lock"),
    ],
)
def test_bad_dockerfile_is_caught(tmp_path, bad, why):
    found = findings_for(tmp_path, bad)
    assert any(why in f for f in found), found


def test_lock_without_hash_or_pin_is_caught(tmp_path):
    lock = tmp_path / "l.txt"
    lock.write_text("ray==2.48.0 \\\n    --hash=sha256:" + "a" * 64 + "\nnumpy>=1.26\ntransformers==4.57.6\n")
    found = check_pins.check_lock(lock)
    assert any("numpy>=1.26" in f and "not pinned" in f for f in found), found
    assert any("transformers" in f and "no sha256" in f for f in found), found
    assert not any(f.startswith(f"{lock}: ray") for f in found)


def test_repository_passes():
    proc = subprocess.run([sys.executable, str(ROOT / "tests/docker/check_pins.py")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_made_up_digest_and_pin_drift_are_caught(tmp_path):
    for sub in ("docker",):
        shutil.copytree(ROOT / sub, tmp_path / sub, ignore=shutil.ignore_patterns("__pycache__"))
    digests = tmp_path / "docker/base-digests.lock"
    digests.write_text(digests.read_text().replace("v0.13.0\tunresolved", "v0.13.0\tsha256:1234", 1))
    pins = tmp_path / "docker/pins.env"
    pins.write_text(pins.read_text().replace("TRANSFORMERS_VERSION=4.57.6", "TRANSFORMERS_VERSION=4.57.5"))
    found = check_pins.check_consistency(tmp_path)
    assert any("digest 'sha256:1234'" in f for f in found), found
    assert any("transformers==4.57.5" in f for f in found), found
