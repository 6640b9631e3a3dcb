"""``make image-*`` (docker/images.py build): what the locks leave unresolved is read at build time.

The build command is caught by a ``docker`` on PATH that records its argv and environment; the registry is an HTTP
server on loopback answering the Registry API v2 manifest HEAD with the digest of a manifest body made here (the
real docker-registry and engine run the same path in tests/docker/run.sh, steps 2c and 3). What a user checks: the
build runs FROM tag@digest with the digest the registry gave, flash-attn's sha256 is the one of the bytes served,
both are named in RESOLVED_AT_BUILD, the output says how to pin them, a pinned lock reads nothing from the network,
and an unreachable registry stops the build with the base and the fix named.
"""

import hashlib
import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MANIFEST = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": []})
DIGEST = "sha256:" + hashlib.sha256(MANIFEST.encode()).hexdigest()
WHEEL = b"PK\x05\x06" + b"\0" * 18  # the bytes served as the wheel; only their sha256 matters here
DOCKER_STUB = """#!/bin/sh
if [ "$1" = image ] && [ "$2" = inspect ]; then
  [ -n "$STUB_REPO_DIGESTS" ] && { printf '%s\\n' "$STUB_REPO_DIGESTS"; exit 0; }
  echo "Error: No such image" >&2; exit 1
fi
printf '%s\\n' "$@" > "$STUB_ARGV"
printf 'DOCKER_BUILDKIT=%s\\n' "$DOCKER_BUILDKIT" >> "$STUB_ARGV.env"
"""


class Registry(http.server.BaseHTTPRequestHandler):
    requests: list = []

    def do_HEAD(self):
        Registry.requests.append(self.path)
        if self.path == "/v2/ci/base/manifests/v1":
            self.send_response(200)
            self.send_header("Docker-Content-Digest", DIGEST)
            self.send_header("Content-Length", str(len(MANIFEST)))
            self.end_headers()
        else:
            self.send_response(404)
            self.end_headers()

    def do_GET(self):
        Registry.requests.append(self.path)
        if self.path == "/flash_attn-2.8.3-py3-none-any.whl":
            self.send_response(200)
            self.send_header("Content-Length", str(len(WHEEL)))
            self.end_headers()
            self.wfile.write(WHEEL)
        else:
            self.send_response(404)
            self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Registry)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


@pytest.fixture
def run(tmp_path, server):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "docker").write_text(DOCKER_STUB)
    (bindir / "docker").chmod(0o755)

    def _run(platform, base_digest="unresolved", flash_sha="unresolved", image=None, extra=(), **env):
        base = tmp_path / "base.lock"
        base.write_text(f"# platform\timage\tdigest\n{platform}\t{image or server + '/ci/base:v1'}\t{base_digest}\n")
        art = tmp_path / "artifacts.lock"
        art.write_text(f"flash-attn\thttp://{server}/flash_attn-2.8.3-py3-none-any.whl\t{flash_sha}\n")
        argv_file = tmp_path / "argv"
        argv_file.unlink(missing_ok=True)
        Registry.requests.clear()
        cmd = [sys.executable, str(REPO / "docker/images.py"), "build", platform, "--base-lock", str(base)]
        cmd += ["--artifacts-lock", str(art), "--repo", "localhost/t", "--", *extra]
        environ = {"PATH": f"{bindir}:/usr/bin:/bin", "STUB_ARGV": str(argv_file), **env}
        done = subprocess.run(cmd, capture_output=True, text=True, env=environ, cwd=REPO, timeout=60)
        argv = argv_file.read_text().splitlines() if argv_file.exists() else None
        return done, argv

    return _run


def build_args(argv):
    return dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "--build-arg")


def test_an_unresolved_base_is_built_from_the_digest_its_registry_gives(run, server):
    done, argv = run("npu-a2")
    assert done.returncode == 0, done.stderr
    args = build_args(argv)
    assert args["BASE_IMAGE"] == f"{server}/ci/base:v1@{DIGEST}"
    assert args["BASE_DIGEST"] == DIGEST
    assert args["RESOLVED_AT_BUILD"] == "base"
    assert f"resolved at build time: the base {server}/ci/base:v1 -> {DIGEST}" in done.stderr
    assert "make pin-digests" in done.stderr
    assert "/v2/ci/base/manifests/v1" in Registry.requests


def test_gpu_resolves_the_base_and_flash_attn_and_buildkit_is_on(run, server, tmp_path):
    done, argv = run("gpu")
    assert done.returncode == 0, done.stderr
    args = build_args(argv)
    assert args["FLASH_ATTN_SHA256"] == hashlib.sha256(WHEEL).hexdigest()
    assert args["FLASH_ATTN_WHEEL"] == f"http://{server}/flash_attn-2.8.3-py3-none-any.whl"
    assert args["RESOLVED_AT_BUILD"] == "base flash-attn"
    assert "resolved at build time: flash-attn" in done.stderr
    assert (tmp_path / "argv.env").read_text().strip() == "DOCKER_BUILDKIT=1"


def test_a_pinned_lock_reads_nothing_from_the_network(run, server):
    pinned = "sha256:" + "ab" * 32
    done, argv = run("gpu", base_digest=pinned, flash_sha="cd" * 32)
    assert done.returncode == 0, done.stderr
    args = build_args(argv)
    assert args["BASE_IMAGE"] == f"{server}/ci/base:v1@{pinned}"
    assert args["FLASH_ATTN_SHA256"] == "cd" * 32
    assert args["RESOLVED_AT_BUILD"] == ""
    assert Registry.requests == []
    assert "resolved at build time" not in done.stderr


def test_extra_docker_options_come_last_so_they_win(run):
    done, argv = run("npu-a2", extra=("--platform", "linux/amd64", "--build-arg", "STAND_IN=1"))
    assert done.returncode == 0, done.stderr
    assert argv[-5:] == ["--platform", "linux/amd64", "--build-arg", "STAND_IN=1", "."]
    assert argv.index("--platform") < argv.index("-f")  # the pinned platform is there too, first


@pytest.mark.parametrize(
    "image, what",
    [
        ("127.0.0.1:9/ci/base:v1", "URLError"),  # nothing listens on port 9 (discard)
        ("SERVER/ci/missing:v1", "HTTPError"),  # the registry has no such tag
        ("no-such-host.invalid/ci/base:v1", "URLError"),  # the name does not resolve
    ],
)
def test_an_unreachable_base_stops_the_build_naming_it_and_the_fix(run, server, image, what):
    image = image.replace("SERVER", server)
    done, argv = run("npu-a3", image=image)
    assert done.returncode == 1
    assert argv is None  # docker build never ran
    assert f"image-npu NPU=a3: the base {image} has no digest in" in done.stderr
    assert what in done.stderr and "make pin-digests" in done.stderr and f"docker pull {image}" in done.stderr


def test_without_the_registry_the_engine_s_pull_record_is_used(run):
    digest = "sha256:" + "ef" * 32
    image = "127.0.0.1:9/ci/base:v1"
    done, argv = run(
        "npu-a2",
        image=image,
        STUB_REPO_DIGESTS=json.dumps([f"other/repo@sha256:{'00' * 32}", f"127.0.0.1:9/ci/base@{digest}"]),
    )
    assert done.returncode == 0, done.stderr
    assert build_args(argv)["BASE_IMAGE"] == f"{image}@{digest}"
    assert "the local engine recorded" in done.stderr


def test_flash_attn_that_cannot_be_downloaded_stops_the_gpu_build(run, tmp_path, server):
    run("gpu", base_digest="sha256:" + "ab" * 32)  # writes base.lock with a pinned base
    art = tmp_path / "artifacts.lock"
    art.write_text(f"flash-attn\thttp://{server}/gone.whl\tunresolved\n")
    base = tmp_path / "base.lock"
    cmd = [sys.executable, str(REPO / "docker/images.py"), "build", "gpu", "--base-lock", str(base)]
    cmd += ["--artifacts-lock", str(art)]
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "STUB_ARGV": str(tmp_path / "argv2")}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=60)
    assert done.returncode == 1
    assert not (tmp_path / "argv2").exists()
    assert f"flash-attn's sha256 is unresolved in {art}" in done.stderr and "HTTPError" in done.stderr


def test_dry_run_prints_the_command_and_reads_nothing():
    done = subprocess.run(
        [sys.executable, str(REPO / "docker/images.py"), "build", "npu-a2", "--dry-run"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PATH": "/nonexistent"},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("DOCKER_BUILDKIT=1 docker build ")
    assert "--build-arg RESOLVED_AT_BUILD= " in done.stdout
    assert (
        "DRY_RUN: the base quay.io/ascend/vllm-ascend:v0.13.0 is unresolved; a build reads its digest first"
        in done.stderr
    )
