"""The multi-node examples stay in step with the entrypoints: every VLGRPO_* variable they set is a declared
setting of the entrypoint that reads it, ray-node.sh accepts the examples' node settings (dry run), and the
Slurm script passes shellcheck."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
RAY_NODE = REPO / "entrypoints" / "ray-node.sh"
RAYJOB = REPO / "examples" / "kuberay" / "rayjob-npu-fully-async-grpo.yaml"
SBATCH = REPO / "examples" / "slurm" / "fully-async-grpo.sbatch"
ENV_EXAMPLE = REPO / "examples" / "ray-node.env.example"


def declared(script: Path) -> set[str]:
    out = subprocess.run(["bash", "-c", 'source "$1"; declare -F ray_node_declare >/dev/null && ray_node_declare; '
                          'printf "VLGRPO_%s\\n" "${VG_NAMES[@]}"', "_", str(script)],
                         capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def containers(job: dict) -> dict[str, dict]:
    spec = job["spec"]["rayClusterSpec"]
    out = {"head": spec["headGroupSpec"]["template"]["spec"]["containers"][0]}
    out["worker"] = spec["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    return out


def test_rayjob_uses_only_declared_settings():
    job = yaml.safe_load(RAYJOB.read_text())
    recipe_vars = set(yaml.safe_load(job["spec"]["runtimeEnvYAML"])["env_vars"])
    assert recipe_vars <= declared(REPO / "entrypoints" / "fully-async-grpo.sh")
    node_settings = declared(RAY_NODE)
    for role, c in containers(job).items():
        names = {e["name"] for e in c["env"] if e["name"].startswith("VLGRPO_")}
        assert names <= node_settings, (role, names - node_settings)
        assert "ray-node.sh" in " ".join(c["command"]) and role in c["command"][-1]


def test_ray_node_env_example_names_only_declared_settings():
    names = set(re.findall(r"^#?(VLGRPO_[A-Z_]+)=", ENV_EXAMPLE.read_text(), re.M))
    assert names and names <= declared(RAY_NODE)


@pytest.mark.parametrize("role", ["head", "worker"])
def test_ray_node_accepts_the_rayjob_node_settings(role):
    c = containers(yaml.safe_load(RAYJOB.read_text()))[role]
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLGRPO_")}
    for e in c["env"]:
        env[e["name"]] = "lo" if e["name"].endswith("_SOCKET_IFNAME") else str(e["value"])
    env.update(VLGRPO_DRY_RUN="1", VLGRPO_TEST_DEVICE_COUNT="8", VLGRPO_RAY_NODE_IP="10.0.0.2")
    if role == "worker":
        env["VLGRPO_RAY_HEAD"] = "vlgrpo-head-svc.default.svc.cluster.local:6379"  # what FQ_RAY_IP:6379 gives
    out = subprocess.run(["bash", str(RAY_NODE), role], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert '--resources={"NPU": 8}' in out.stdout.splitlines()
    assert not any(a.startswith("--num-gpus") for a in out.stdout.splitlines())


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed (make tools)")
def test_sbatch_script_is_shellcheck_clean():
    out = subprocess.run(["shellcheck", "-s", "bash", str(SBATCH)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout
