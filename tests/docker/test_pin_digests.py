"""docker/pin_digests.py: reference parsing, and a lock line changes only with a value read from the network.

The registry itself is out of reach in CI; the resolver is replaced by a function here. Run with
``.venv/bin/python -m pytest tests/docker -q``.
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "docker"))
import pin_digests


@pytest.mark.parametrize(
    "image, want",
    [
        ("vllm/vllm-openai:v0.13.0", ("registry-1.docker.io", "vllm/vllm-openai", "v0.13.0")),
        ("quay.io/ascend/vllm-ascend:v0.13.0-a3", ("quay.io", "ascend/vllm-ascend", "v0.13.0-a3")),
        ("debian:12", ("registry-1.docker.io", "library/debian", "12")),
        ("localhost:5000/x/y:1", ("localhost:5000", "x/y", "1")),
    ],
)
def test_split_ref(image, want):
    assert pin_digests.split_ref(image) == want


@pytest.mark.parametrize(
    "host, want",
    [
        ("localhost:5000", "http"),
        ("localhost", "http"),
        ("127.0.0.1:35123", "http"),
        ("127.1.2.3:5000", "http"),
        ("[::1]:5000", "http"),
        ("quay.io", "https"),
        ("registry-1.docker.io", "https"),
        ("127.0.0.1.example.com:5000", "https"),
        ("localhost.example.com", "https"),
        ("10.0.0.1:5000", "https"),
    ],
)
def test_only_loopback_registries_are_asked_without_tls(host, want):
    assert pin_digests.scheme(host) == want


LOCK = "# header\ngpu\tvllm/vllm-openai:v0.13.0\tunresolved\nnpu-a2\tquay.io/ascend/vllm-ascend:v0.13.0\tunresolved\n"


def test_failed_lookup_leaves_unresolved(tmp_path):
    path = tmp_path / "base-digests.lock"
    path.write_text(LOCK)

    def unreachable(image):
        raise OSError("Name or service not known")

    failed = pin_digests.update(path, unreachable, 1)
    assert len(failed) == 2 and all("Name or service not known" in f for f in failed)
    assert path.read_text() == LOCK


def test_resolved_digest_is_written_per_line(tmp_path):
    path = tmp_path / "base-digests.lock"
    path.write_text(LOCK)
    digest = "sha256:" + "ab" * 32

    def resolve(image):
        if "quay.io" in image:
            raise OSError("timeout")
        return digest

    failed = pin_digests.update(path, resolve, 1)
    lines = path.read_text().splitlines()
    assert lines[0] == "# header"
    assert lines[1] == f"gpu\tvllm/vllm-openai:v0.13.0\t{digest}"
    assert lines[2].endswith("\tunresolved") and failed and "quay.io" in failed[0]
