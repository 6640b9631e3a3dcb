"""The multi-node examples stay in step with the entrypoints and with the schedulers' own schemas.

- Every VLGRPO_* variable they set is a declared setting of the entrypoint that reads it; ray-node.sh accepts the
  examples' node settings (dry run); the Slurm script passes shellcheck.
- The RayJob examples (NPU and GPU) validate against KubeRay's own CRD schema (tests/python/ray/kuberay-crd: the
  generated ray.io_rayjobs.yaml of the pinned releases, see ATTRIBUTION.md) with unknown fields refused:
  ``additionalProperties: false`` is added to every object schema that lists ``properties`` and does not carry
  ``x-kubernetes-preserve-unknown-fields`` (the API server prunes or, with strict field validation, refuses
  such fields; jsonschema alone would accept them). Their runtimeEnvYAML is a runtime_env Ray accepts.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
RAY_NODE = REPO / "entrypoints" / "ray-node.sh"
RAYJOBS = {
    "npu": REPO / "examples" / "kuberay" / "rayjob-npu-fully-async-grpo.yaml",
    "gpu": REPO / "examples" / "kuberay" / "rayjob-gpu-fully-async-grpo.yaml",
}
RAYJOB = RAYJOBS["npu"]
SBATCH = REPO / "examples" / "slurm" / "fully-async-grpo.sbatch"
ENV_EXAMPLE = REPO / "examples" / "ray-node.env.example"
CRD_DIR = Path(__file__).resolve().parent / "kuberay-crd"
CRDS = sorted(CRD_DIR.glob("ray.io_rayjobs-*.yaml"))
WANDB_KEY = "0123456789abcdef0123456789abcdef01234567"
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the CRD is 1.4 MB: libyaml reads it in a second


def declared(script: Path) -> set[str]:
    """The VLGRPO_* settings an entrypoint declares, as the launcher reads them from the registry."""
    owner = {"fully-async-grpo.sh": "fa", "veomni-grpo.sh": "vo", "ray-node.sh": "node"}[script.name]
    out = subprocess.run(
        [sys.executable, "-I", "-m", "vlgrpo.launch", "docs", "rows", owner],
        capture_output=True,
        text=True,
        check=True,
    )
    return {"VLGRPO_" + line.split("\t")[0] for line in out.stdout.splitlines()}


def containers(job: dict) -> dict[str, dict]:
    spec = job["spec"]["rayClusterSpec"]
    out = {"head": spec["headGroupSpec"]["template"]["spec"]["containers"][0]}
    out["worker"] = spec["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    return out


@pytest.mark.parametrize("platform", sorted(RAYJOBS))
def test_rayjob_uses_only_declared_settings(platform):
    job = yaml.safe_load(RAYJOBS[platform].read_text())
    recipe_vars = set(yaml.safe_load(job["spec"]["runtimeEnvYAML"])["env_vars"])
    assert recipe_vars <= declared(REPO / "entrypoints" / "fully-async-grpo.sh")
    node_settings = declared(RAY_NODE)
    for role, c in containers(job).items():
        names = {e["name"] for e in c["env"] if e["name"].startswith("VLGRPO_")}
        assert names <= node_settings, (role, names - node_settings)
        assert "ray-node.sh" in " ".join(c["command"]) and role in c["command"][-1]


@pytest.mark.parametrize("platform", sorted(RAYJOBS))
def test_rayjob_mounts_the_wandb_key_with_a_mode_the_key_file_rule_takes(platform):
    # a secret volume's files are 0644 unless defaultMode says otherwise; a key file others can read is refused
    spec = yaml.safe_load(RAYJOBS[platform].read_text())["spec"]["rayClusterSpec"]
    for group in [spec["headGroupSpec"], *spec["workerGroupSpecs"]]:
        vols = [v for v in group["template"]["spec"]["volumes"] if "secret" in v]
        assert vols and all(v["secret"].get("defaultMode") in (0o400, 0o600) for v in vols), vols


def test_ray_node_env_example_names_only_declared_settings():
    names = set(re.findall(r"^#?(VLGRPO_[A-Z_]+)=", ENV_EXAMPLE.read_text(), re.M))
    assert names and names <= declared(RAY_NODE)


@pytest.mark.parametrize("platform", sorted(RAYJOBS))
@pytest.mark.parametrize("role", ["head", "worker"])
def test_ray_node_accepts_the_rayjob_node_settings(role, platform, tmp_path):
    c = containers(yaml.safe_load(RAYJOBS[platform].read_text()))[role]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLGRPO_", "WANDB_"))}
    key = tmp_path / "api-key"  # the pod's mounted secret (/run/secrets/wandb/api-key)
    key.write_text(WANDB_KEY + "\n")
    key.chmod(0o400)  # the secret volume's defaultMode
    for e in c["env"]:
        if "valueFrom" in e:  # the downward API: the pod's own IP (the dashboard binds there)
            assert e["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}, e
            env[e["name"]] = "10.0.0.2"
            continue
        env[e["name"]] = "lo" if e["name"].endswith("_SOCKET_IFNAME") else str(e["value"])
    assert env.get("WANDB_API_KEY_FILE") == "/run/secrets/wandb/api-key", "every node carries the W&B key"
    env["WANDB_API_KEY_FILE"] = str(key)
    env.update(VLGRPO_DRY_RUN="1", VLGRPO_TEST_DEVICE_COUNT="8", VLGRPO_RAY_NODE_IP="10.0.0.2")
    # ray-node.sh counts the node with `python3 -m vlgrpo devices`: this interpreter's, as in the image
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    if role == "worker":
        env["VLGRPO_RAY_HEAD"] = "vlgrpo-head-svc.default.svc.cluster.local:6379"  # what FQ_RAY_IP:6379 gives
    out = subprocess.run(["bash", str(RAY_NODE), role], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    argv = out.stdout.splitlines()
    # the key is read for ray start's environment (verl's W&B logger may run on this node), never printed
    assert any(line.startswith("ray-node: child environment") and " WANDB_API_KEY" in line for line in argv), out.stdout
    assert WANDB_KEY not in out.stdout + out.stderr
    if platform == "npu":
        assert '--resources={"NPU": 8}' in argv
        assert not any(a.startswith("--num-gpus") for a in argv)
    else:
        assert "--num-gpus=8" in argv
        assert not any(a.startswith("--resources") for a in argv)


@pytest.mark.parametrize("platform", sorted(RAYJOBS))
@pytest.mark.parametrize("shell", ["/bin/sh", "bash as sh"])
def test_rayjob_entrypoint_reads_no_start_up_file_of_the_jobs_env_vars(tmp_path, platform, shell):
    # Ray 2.48.0's job supervisor (dashboard/modules/job/job_supervisor.py _exec_entrypoint) runs spec.entrypoint
    # with shell=True, i.e. /bin/sh -c, in an environment that holds the job's runtime_env env_vars: a BASH_ENV
    # there must not run before the hardened entrypoint (a `bash -c` wrapper reads it first), and the entrypoint
    # refuses it. "bash as sh": an image whose /bin/sh is bash (bash started as sh reads no start-up file).
    job = yaml.safe_load(RAYJOBS[platform].read_text())
    entry = job["spec"]["entrypoint"].replace("/opt/vlgrpo/", f"{REPO}/")
    mark, evil = tmp_path / "ran", tmp_path / "evil.sh"
    evil.write_text(f"touch {mark}\n")
    env = {k: str(v) for k, v in yaml.safe_load(job["spec"]["runtimeEnvYAML"])["env_vars"].items()}
    env.update(
        PATH=f"{Path(sys.executable).parent}:/usr/bin:/bin",
        HOME=str(tmp_path),
        BASH_ENV=str(evil),
        ENV=str(evil),
        RAY_ADDRESS="127.0.0.1:6390",
        VLGRPO_DRY_RUN="1",
    )
    executable = None
    if shell != "/bin/sh":
        executable = tmp_path / "sh"
        executable.symlink_to(shutil.which("bash"))
    out = subprocess.run(entry, shell=True, executable=executable, env=env, capture_output=True, text=True, timeout=120)
    assert not mark.exists(), "a start-up file named by the job's env_vars ran before the entrypoint"
    assert out.returncode == 2, out.stderr
    assert any(line.startswith("fully-async-grpo.sh: error: BASH_ENV: ") for line in out.stderr.splitlines()), (
        out.stderr
    )


@pytest.mark.parametrize("platform", sorted(RAYJOBS))
def test_rayjob_entrypoint_line_passes_its_dry_run_as_shipped(tmp_path, platform):
    # the exact spec.entrypoint, through /bin/sh -c as Ray's job supervisor runs it, with the job's env_vars; what
    # the head pod gives the job's driver stands in: its 8 devices (the dry run's planning override), the W&B key
    # its ray-node.sh exported from the mounted secret (the driver is a child of the head's Ray), no RAY_ADDRESS
    # (no cluster here: the plan says it needs one). Paths of the PVCs are the shipped model folder and data sample.
    from ray_harness import MODEL_30B, geo3k_parquet

    job = yaml.safe_load(RAYJOBS[platform].read_text())
    entry = job["spec"]["entrypoint"].replace("/opt/vlgrpo/", f"{REPO}/")
    env = {k: str(v) for k, v in yaml.safe_load(job["spec"]["runtimeEnvYAML"])["env_vars"].items()}
    train, val = geo3k_parquet(tmp_path)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir(mode=0o700)
    paths = {
        "/models/Qwen3-VL-30B-A3B-Instruct": str(MODEL_30B),
        "/data/geo3k/train.parquet": str(train),
        "/data/geo3k/test.parquet": str(val),
        "/checkpoints": str(ckpt),
    }
    assert {env[k] for k in env if k.endswith(("_PATH", "_FILE", "_DIR"))} == set(paths), "the example's paths changed"
    env = {k: paths.get(v, v) for k, v in env.items()}
    env.update(
        PATH=f"{Path(sys.executable).parent}:/usr/bin:/bin",
        HOME=str(tmp_path),
        VLGRPO_DRY_RUN="1",
        VLGRPO_PLAN_DEVICES_PER_NODE="8",
        WANDB_API_KEY=WANDB_KEY,
    )
    env.setdefault("VLGRPO_PLATFORM", platform)
    cmd = [entry]
    if os.path.exists("/.dockerenv"):
        # in a container the checkpoint folder must be a mount of its own: bind it onto itself, privately
        script = tmp_path / "bind.sh"
        script.write_text('#!/bin/sh\nmount --bind "$1" "$1" && exec /bin/sh -c "$2"\n')
        script.chmod(0o755)
        cmd = ["unshare", "--mount", "--propagation", "private", str(script), str(ckpt), entry]
    out = subprocess.run(cmd, shell=len(cmd) == 1, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    plan = [line for line in out.stdout.splitlines() if line.startswith("# ")]
    assert plan[0] == "# fully-async-grpo.sh dry run: configuration valid, nothing started", plan
    assert "# preflight: clean" in plan
    assert (
        "# cluster: this plan needs a Ray cluster of 2 node(s) with 8 "
        + platform
        + " each (set VLGRPO_RAY_ADDRESS to launch it)"
        in plan
    )
    assert not [line for line in plan if "warning: VLGRPO_LOGGER" in line], plan
    assert "# environment: WANDB_API_KEY (set, not shown)" in plan and WANDB_KEY not in out.stdout + out.stderr


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed (make tools)")
def test_sbatch_script_is_shellcheck_clean():
    out = subprocess.run(["shellcheck", "-s", "bash", str(SBATCH)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout


# ---- KubeRay's own schema ----------------------------------------------------------------------


def closed(schema: dict) -> dict:
    """A copy of an OpenAPI v3 (Kubernetes structural) schema in which every object schema that lists
    ``properties`` and does not carry ``x-kubernetes-preserve-unknown-fields: true`` refuses other keys
    (``additionalProperties: false``), walking properties, items, additionalProperties and allOf/anyOf/oneOf/not."""

    def visit(node: dict) -> None:
        if "properties" in node and not node.get("x-kubernetes-preserve-unknown-fields"):
            node.setdefault("additionalProperties", False)
        for sub in node.get("properties", {}).values():
            visit(sub)
        for key in ("items", "additionalProperties", "not"):
            if isinstance(node.get(key), dict):
                visit(node[key])
        for key in ("allOf", "anyOf", "oneOf"):
            for sub in node.get(key, []):
                visit(sub)

    out = copy.deepcopy(schema)
    visit(out)
    return out


@functools.lru_cache(maxsize=None)
def rayjob_schema(crd: Path, close: bool = True) -> dict:
    """The v1 RayJob schema of a KubeRay CRD file (``closed`` unless ``close`` is False)."""
    doc = yaml.load(crd.read_text(), Loader=YAML_LOADER)
    assert doc["kind"] == "CustomResourceDefinition" and doc["spec"]["group"] == "ray.io"
    assert doc["spec"]["names"]["kind"] == "RayJob"
    version = next(v for v in doc["spec"]["versions"] if v["name"] == "v1")
    assert version["served"] and version["storage"]
    schema = version["schema"]["openAPIV3Schema"]
    return closed(schema) if close else schema


def schema_errors(job: dict, crd: Path, close: bool = True) -> list[str]:
    validator = jsonschema.Draft4Validator(rayjob_schema(crd, close))
    return sorted(f"{'.'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}" for e in validator.iter_errors(job))


def test_the_crd_copies_are_the_attributed_files():
    table = dict(
        re.findall(
            r"^\| `(ray\.io_rayjobs-[^`]+\.yaml)` \|.*\| `([0-9a-f]{64})` \|$",
            (CRD_DIR / "ATTRIBUTION.md").read_text(),
            re.M,
        )
    )
    assert table and sorted(table) == [c.name for c in CRDS]
    for crd in CRDS:
        assert hashlib.sha256(crd.read_bytes()).hexdigest() == table[crd.name], crd.name
    assert (CRD_DIR / "LICENSE").read_text().lstrip().startswith("Apache License")


@pytest.mark.parametrize("crd", CRDS, ids=lambda p: p.stem.split("-")[-1])
@pytest.mark.parametrize("platform", sorted(RAYJOBS))
def test_rayjob_example_validates_against_kuberays_schema(platform, crd):
    job = yaml.safe_load(RAYJOBS[platform].read_text())
    assert (job["apiVersion"], job["kind"]) == ("ray.io/v1", "RayJob")
    assert schema_errors(job, crd) == []


def _set(doc: dict, path: str, value=None, rename: str | None = None) -> dict:
    """Copy of ``doc`` with the key at dotted ``path`` (list indices as numbers) renamed or its value replaced."""
    doc = copy.deepcopy(doc)
    *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
    node = doc
    for p in parents:
        node = node[p]
    if rename is not None:
        node[rename] = node.pop(last)
    else:
        node[last] = value
    return doc


HEAD_POD = "spec.rayClusterSpec.headGroupSpec.template.spec"
WORKER_GROUP = "spec.rayClusterSpec.workerGroupSpecs.0"


@pytest.mark.parametrize(
    "path, rename, where",
    [
        ("spec.shutdownAfterJobFinishes", "shutdownAfterJobFinish", "spec"),
        ("spec.rayClusterSpec.rayVersion", "rayversion", "spec.rayClusterSpec"),
        (f"{WORKER_GROUP}.replicas", "replica", WORKER_GROUP),
        (f"{HEAD_POD}.terminationGracePeriodSeconds", "terminationGracePeriod", HEAD_POD),
        (f"{HEAD_POD}.containers.0.volumeMounts", "volumesMounts", f"{HEAD_POD}.containers.0"),
        (f"{HEAD_POD}.containers.0.ports.0.name", "nmae", f"{HEAD_POD}.containers.0.ports.0"),
    ],
)
@pytest.mark.parametrize("platform", sorted(RAYJOBS))
def test_a_misspelt_field_is_refused_naming_it(platform, path, rename, where):
    job = _set(yaml.safe_load(RAYJOBS[platform].read_text()), path, rename=rename)
    for crd in CRDS:
        assert schema_errors(job, crd) == [
            f"{where}: Additional properties are not allowed ('{rename}' was unexpected)"
        ], crd.name
    # the CRD as published does not refuse it (unknown fields are pruned by the API server): the closing does
    assert schema_errors(job, CRDS[-1], close=False) == []


@pytest.mark.parametrize(
    "path, value, message",
    [
        (f"{WORKER_GROUP}.replicas", "1", "'1' is not of type 'integer'"),
        ("spec.shutdownAfterJobFinishes", "yes", "'yes' is not of type 'boolean'"),
        (f"{HEAD_POD}.containers.0.ports.0.containerPort", "6379", "'6379' is not of type 'integer'"),
    ],
)
def test_a_value_of_the_wrong_type_is_refused(path, value, message):
    job = _set(yaml.safe_load(RAYJOB.read_text()), path, value)
    assert schema_errors(job, CRDS[-1]) == [f"{path}: {message}"]


@pytest.mark.parametrize("platform", sorted(RAYJOBS))
def test_runtime_env_yaml_is_a_runtime_env_ray_accepts(platform):
    ray_runtime_env = pytest.importorskip("ray.runtime_env")
    env = yaml.safe_load(yaml.safe_load(RAYJOBS[platform].read_text())["spec"]["runtimeEnvYAML"])
    # Ray takes unknown keys as plugin names and fails only when the job starts: check them against its own list
    assert set(env) <= set(ray_runtime_env.RuntimeEnv.known_fields), set(env) - set(
        ray_runtime_env.RuntimeEnv.known_fields
    )
    ray_runtime_env.RuntimeEnv(**env)  # Ray's own type checks (env_vars: Dict[str, str])


@pytest.mark.parametrize("platform, image", [("npu", "npu-a2"), ("gpu", "gpu")])
def test_rayjob_images_are_the_tags_the_build_computes(platform, image):
    tag = subprocess.run(
        ["python3", str(REPO / "docker" / "images.py"), "tag", image], capture_output=True, text=True, check=True
    ).stdout.strip()
    for c in containers(yaml.safe_load(RAYJOBS[platform].read_text())).values():
        assert c["image"] == f"vlgrpo:{tag}"
