"""The srun lines of examples/slurm/fully-async-grpo.sbatch, with recording stand-ins for srun, squeue, scancel
and scontrol (tests/slurm/stubs): the CONTAINER=pyxis mode (pyxis/enroot cannot be installed here, so this is the
only check of its --container-* lines), the CONTAINER=none lines, the accelerator request of every step, the check
that the checkpoint folder is one file system on every node (the stub reads a node's file through the step's mounts;
STUB_LOCAL_CKPT gives a node a checkpoint folder of its own), the stop order, the SIGTERM a time limit sends
(--signal=B:TERM@120), a node step that ends early, and every refusal of the script's own settings.

The script runs under bash directly, as the batch step would run it, with SLURM_JOB_ID and SLURM_JOB_NODELIST set.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from slurm_harness import HERE, REPO, cmdline

SBATCH = REPO / "examples" / "slurm" / "fully-async-grpo.sbatch"
STUBS = HERE / "stubs"
NPU_MOUNTS = (
    "/usr/local/Ascend/driver:/usr/local/Ascend/driver:ro,/usr/local/dcmi:/usr/local/dcmi:ro,"
    "/usr/local/bin/npu-smi:/usr/local/bin/npu-smi:ro,/etc/ascend_install.info:/etc/ascend_install.info:ro"
)


class Run:
    """One run of the batch script against the stubs; ``calls`` are the srun calls in order."""

    def __init__(self, tmp: Path, proc: subprocess.Popen):
        self.tmp, self.proc = tmp, proc
        self.record = tmp / "record"

    def finish(self, timeout: float = 60) -> "Run":
        self.out, self.err = self.proc.communicate(timeout=timeout)
        self.rc = self.proc.returncode
        return self

    def calls(self) -> list[dict]:
        out = []
        for f in sorted(self.record.glob("*.argv")):
            n = f.stem
            env = dict(
                line.split("=", 1) for line in (self.record / f"{n}.env").read_text().splitlines() if "=" in line
            )
            out.append(
                {"n": n, "argv": f.read_text().splitlines(), "env": env, "term": (self.record / f"{n}.term").exists()}
            )
        return out

    def scancels(self) -> list[str]:
        log = self.record / "scancel.log"
        return log.read_text().splitlines() if log.exists() else []


STARTED: list[Run] = []


@pytest.fixture(autouse=True)
def stop_leftovers():
    """A failing test leaves no stub running: each script and srun stub still alive is killed by its PID."""
    yield
    while STARTED:
        run = STARTED.pop()
        if run.proc.poll() is None:
            run.proc.kill()
        run.proc.wait(timeout=10)
        for f in run.record.glob("*.pid"):
            pid = int(f.read_text())
            if str(STUBS / "srun") in cmdline(pid):  # still that stub, not a PID reused since
                os.kill(pid, signal.SIGKILL)


def start(
    tmp: Path,
    node_lines=(),
    recipe_lines=("VLGRPO_TRAINER_NNODES=2", "VLGRPO_ROLLOUT_NNODES=1"),
    plan="--node-ip-address=10.1.0.1\n--port=6380\n",
    hosts="n1 n2 n3",
    **env: str,
) -> Run:
    (tmp / "ray-node.env").write_text("\n".join(["# node settings", *node_lines]) + "\n")
    (tmp / "vlgrpo.env").write_text("\n".join(recipe_lines) + "\n")
    (tmp / "plan").write_text(plan)
    (tmp / "ckpt").mkdir(exist_ok=True)  # the shared checkpoint folder (the batch shell writes its token there)
    (tmp / "vlgrpo.sqsh").write_bytes(b"hsqs")  # the image file the batch shell finds on the head node
    base = {
        "PATH": f"{STUBS}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(tmp),
        "SLURM_JOB_ID": "77",
        "SLURM_JOB_NODELIST": "n[1-3]",
        "STUB_HOSTS": hosts,
        "STUB_RECORD": str(tmp / "record"),
        "STUB_HEAD_PLAN": str(tmp / "plan"),
        "IMAGE": str(tmp / "vlgrpo.sqsh"),
        "IFNAME": "ib0",
        "RAY_PORT": "6380",
        "MODEL_DIR": "/srv/models/Qwen3-VL-30B-A3B-Instruct",
        "DATA_DIR": "/srv/geo3k",
        "CKPT_DIR": str(tmp / "ckpt"),
        "VLGRPO_ENV": str(tmp / "vlgrpo.env"),
        "RAY_NODE_ENV": str(tmp / "ray-node.env"),
    }
    base.update(env)
    base = {k: v for k, v in base.items() if v is not None}
    # its own session: a Ctrl-C of the test run does not reach the stubs, the test stops them by its signals
    proc = subprocess.Popen(
        ["bash", str(SBATCH)],
        env=base,
        cwd=tmp,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    STARTED.append(Run(tmp, proc))
    return STARTED[-1]


def by_role(calls: list[dict]) -> dict[str, list[dict]]:
    roles: dict[str, list[dict]] = {"check": [], "plan": [], "head": [], "worker": [], "recipe": []}
    for c in calls:
        if c["argv"][0] == "--job-name=vlgrpo-ckpt-check":
            roles["check"].append(c)
        elif c["argv"][-1] == "head" and c["env"].get("VLGRPO_DRY_RUN") == "1":
            roles["plan"].append(c)
        elif c["argv"][-1] in ("head", "worker"):
            roles[c["argv"][-1]].append(c)
        else:
            roles["recipe"].append(c)
    return roles


def step_id(call: dict) -> str:
    return f"77.{int(call['n'])}"  # the stubs' step ids: SLURM_JOB_ID.N of srun call N


NODE_LINES = (
    "VLGRPO_RAY_NUM_CPUS=150",
    "VLGRPO_RAY_TEMP_DIR=/local/ray",
    "NCCL_IB_HCA=mlx5_0,mlx5_1",
    "GLOO_SOCKET_IFNAME=ib0",
)


def test_pyxis_mode_runs_every_step_in_the_image_with_an_explicit_environment(tmp_path):
    run = start(tmp_path, NODE_LINES).finish()
    assert run.rc == 0, run.err
    roles = by_role(run.calls())
    assert [len(roles[r]) for r in ("check", "plan", "head", "worker", "recipe")] == [3, 1, 1, 2, 1], run.calls()
    container = [
        f"--container-image={tmp_path}/vlgrpo.sqsh",
        "--container-name=vlgrpo-77",
        "--container-mounts=/srv/models/Qwen3-VL-30B-A3B-Instruct:/models/Qwen3-VL-30B-A3B-Instruct:ro,"
        f"/srv/geo3k:/data/geo3k:ro,{tmp_path}/ckpt:/checkpoints,{NPU_MOUNTS}",
        "--no-container-remap-root",
    ]
    devices = ["--gres=npu:8"]  # Ascend A2's 8 NPUs per node: no per-node count in the recipe file
    exports = "PATH,HOME,VLGRPO_PLATFORM,HCCL_SOCKET_IFNAME,GLOO_SOCKET_IFNAME"
    file_names = "VLGRPO_RAY_NUM_CPUS,VLGRPO_RAY_TEMP_DIR,NCCL_IB_HCA,GLOO_SOCKET_IFNAME"
    # the dry run of ray-node.sh on the head node, whose plan gives the head's address
    assert roles["plan"][0]["n"] == "0003"  # after the checkpoint-folder check on the three nodes
    assert roles["plan"][0]["argv"] == [
        "--job-name=vlgrpo-ray-head",
        "--nodes=1",
        "--ntasks=1",
        "-w",
        "n1",
        *devices,
        *container,
        f"--export={exports},VLGRPO_DRY_RUN,VLGRPO_RAY_PORT,{file_names}",
        "/opt/vlgrpo/entrypoints/ray-node.sh",
        "head",
    ]
    assert roles["head"][0]["argv"] == [
        "--job-name=vlgrpo-ray-head",
        "--nodes=1",
        "--ntasks=1",
        "-w",
        "n1",
        *devices,
        *container,
        f"--export={exports},VLGRPO_RAY_PORT,{file_names}",
        "/opt/vlgrpo/entrypoints/ray-node.sh",
        "head",
    ]
    head_env = roles["head"][0]["env"]
    assert head_env["VLGRPO_RAY_PORT"] == "6380" and "VLGRPO_RAY_HEAD" not in head_env
    assert head_env["NCCL_IB_HCA"] == "mlx5_0,mlx5_1"  # by name: a value with commas arrives whole
    assert head_env["VLGRPO_RAY_TEMP_DIR"] == "/local/ray"
    assert {k: head_env[k] for k in ("VLGRPO_PLATFORM", "HCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")} == {
        "VLGRPO_PLATFORM": "npu",
        "HCCL_SOCKET_IFNAME": "ib0",
        "GLOO_SOCKET_IFNAME": "ib0",
    }
    workers = sorted(roles["worker"], key=lambda c: c["argv"][4])
    for node, c in zip(("n2", "n3"), workers):
        assert c["argv"] == [
            "--job-name=vlgrpo-ray-worker",
            "--nodes=1",
            "--ntasks=1",
            "-w",
            node,
            *devices,
            *container,
            f"--export={exports},VLGRPO_RAY_HEAD,VLGRPO_RAY_NUM_CPUS,NCCL_IB_HCA,GLOO_SOCKET_IFNAME",
            "/opt/vlgrpo/entrypoints/ray-node.sh",
            "worker",
        ]
        assert c["env"]["VLGRPO_RAY_HEAD"] == "10.1.0.1:6380"  # the address of the head's own plan
        assert "VLGRPO_RAY_TEMP_DIR" not in c["env"]  # ray-node.sh refuses it on a worker
    recipe = roles["recipe"][0]
    assert recipe["argv"] == [
        "--job-name=vlgrpo-recipe",
        "--overlap",
        "--nodes=1",
        "--ntasks=1",
        "-w",
        "n1",
        *devices,
        *container,
        "--export=ALL",
        "/opt/vlgrpo/entrypoints/fully-async-grpo.sh",
    ]
    env = recipe["env"]
    assert env["VLGRPO_RAY_ADDRESS"] == "10.1.0.1:6380" and env["VLGRPO_PLATFORM"] == "npu"
    assert env["VLGRPO_TRAINER_NNODES"] == "2" and env["VLGRPO_ROLLOUT_NNODES"] == "1"  # from VLGRPO_ENV
    # the recipe refuses VLGRPO_* names that are not its settings: this script's own VLGRPO_ENV does not reach it,
    # nor do the node settings; pyxis mounts the folders at the recipe's default paths, so no paths are passed
    assert not {"VLGRPO_ENV", "VLGRPO_RAY_HEAD", "VLGRPO_RAY_NUM_CPUS", "VLGRPO_MODEL_PATH"} & set(env)
    # stop order after the recipe ended: the workers through Slurm (never a kill of an srun), then the head
    first, second = run.scancels()
    assert sorted(first.split()[1:]) == sorted(step_id(c) for c in roles["worker"]) and first.startswith(
        "--signal=TERM"
    )
    assert second == f"--signal=TERM {step_id(roles['head'][0])}"
    assert all(c["term"] for c in roles["head"] + roles["worker"])
    assert "fully-async-grpo.sbatch: head n1 at 10.1.0.1:6380; workers: n2 n3" in run.out


def test_none_mode_runs_the_tree_entrypoints_on_the_nodes(tmp_path):
    run = start(
        tmp_path,
        CONTAINER="none",
        TREE=str(REPO),
        PLATFORM="gpu",
        LD_LIBRARY_PATH="/opt/cuda/lib64",
        PYTHONPATH="/opt/site",
        ASCEND_X=None,
    ).finish()
    assert run.rc == 0, run.err
    roles = by_role(run.calls())
    head = roles["head"][0]
    assert head["argv"] == [
        "--job-name=vlgrpo-ray-head",
        "--nodes=1",
        "--ntasks=1",
        "-w",
        "n1",
        "--gpus-per-node=8",
        "--export=PATH,HOME,LD_LIBRARY_PATH,PYTHONPATH,VLGRPO_PLATFORM,NCCL_SOCKET_IFNAME,"
        "GLOO_SOCKET_IFNAME,VLGRPO_RAY_PORT",
        f"{REPO}/entrypoints/ray-node.sh",
        "head",
    ]
    assert head["env"]["VLGRPO_PLATFORM"] == "gpu" and head["env"]["NCCL_SOCKET_IFNAME"] == "ib0"
    assert head["env"]["LD_LIBRARY_PATH"] == "/opt/cuda/lib64"
    recipe = roles["recipe"][0]
    assert recipe["argv"] == [
        "--job-name=vlgrpo-recipe",
        "--overlap",
        "--nodes=1",
        "--ntasks=1",
        "-w",
        "n1",
        "--gpus-per-node=8",
        "--export=ALL",
        f"{REPO}/entrypoints/fully-async-grpo.sh",
    ]
    env = recipe["env"]
    assert (
        env["VLGRPO_MODEL_PATH"],
        env["VLGRPO_TRAIN_FILE"],
        env["VLGRPO_VAL_FILE"],
        env["VLGRPO_CHECKPOINT_DIR"],
    ) == (
        "/srv/models/Qwen3-VL-30B-A3B-Instruct",
        "/srv/geo3k/train.parquet",
        "/srv/geo3k/test.parquet",
        str(tmp_path / "ckpt"),
    )
    assert env["VLGRPO_PLATFORM"] == "gpu" and env["VLGRPO_RAY_ADDRESS"] == "10.1.0.1:6380"


def test_a_ray_step_that_ends_fails_the_job_at_once_naming_its_node(tmp_path):
    t0 = time.monotonic()
    run = start(tmp_path, STUB_NODE_EXIT="n3:2", STUB_RECIPE_SECONDS="60").finish()
    assert run.rc == 2, run.err
    assert time.monotonic() - t0 < 30  # not after the recipe's own wait
    assert (
        "fully-async-grpo.sbatch: error: the Ray worker on n3 ended (status 2) while the recipe was running; "
        "stopping the job" in run.err
    )
    roles = by_role(run.calls())
    assert roles["recipe"][0]["term"]  # the recipe got SIGTERM (through scancel), as did the other nodes
    assert all(c["term"] for c in roles["head"] + roles["worker"] if c["argv"][4] != "n3")


def test_sigterm_to_the_batch_shell_stops_every_step_then_the_head(tmp_path):
    # --signal=B:TERM@120 sends SIGTERM to the batch shell alone, 120 s before the time limit
    run = start(tmp_path, STUB_RECIPE_SECONDS="60")
    deadline = time.monotonic() + 30
    while len(list((tmp_path / "record").glob("*.pid"))) < 8 and time.monotonic() < deadline:  # 3 checks, plan, 4 steps
        time.sleep(0.1)
    time.sleep(0.5)
    os.kill(run.proc.pid, signal.SIGTERM)  # to the batch shell alone (B:), not its steps
    run.finish()
    assert run.rc == 143, run.err
    assert "fully-async-grpo.sbatch: SIGTERM: stopping every step" in run.out
    roles = by_role(run.calls())
    assert all(c["term"] for c in roles["head"] + roles["worker"] + roles["recipe"])
    first, second = run.scancels()
    assert sorted(first.split()[1:]) == sorted(step_id(c) for c in roles["worker"] + roles["recipe"])
    assert second == f"--signal=TERM {step_id(roles['head'][0])}"


@pytest.mark.parametrize(
    "env, node_lines, recipe_lines, message",
    [
        ({"CONTAINER": "docker"}, (), (), "CONTAINER=docker: must be pyxis"),
        ({"PLATFORM": "tpu"}, (), (), "PLATFORM=tpu: must be npu or gpu"),
        ({"MODEL_DIR": None}, (), (), "MODEL_DIR is not set"),
        ({"RAY_PORT": "80"}, (), (), "RAY_PORT=80 is not a port in 1024..65535"),
        ({}, ("VLGRPO_RAY_NODE_IP=10.0.0.5",), (), "line 2: VLGRPO_RAY_NODE_IP would give every node the same address"),
        ({}, ("VLGRPO_RAY_HEAD=10.0.0.1:6379",), (), "line 2: VLGRPO_RAY_HEAD is set by this script"),
        (
            {},
            ("GLOO_SOCKET_IFNAME=eth1",),
            (),
            "line 2: GLOO_SOCKET_IFNAME=eth1, but this script sets GLOO_SOCKET_IFNAME=ib0",
        ),
        ({}, ("VLGRPO_RAY_PORT=6390",), (), "line 2: VLGRPO_RAY_PORT=6390, but this script sets VLGRPO_RAY_PORT=6380"),
        ({}, ("export VLGRPO_RAY_NUM_CPUS=8",), (), "line 2: not NAME=VALUE"),
        (
            {"RAY_NODE_ENV": "/nonexistent/ray-node.env"},
            (),
            (),
            "RAY_NODE_ENV=/nonexistent/ray-node.env is not a readable file",
        ),
        (
            {"CONTAINER": "none", "TREE": "/nonexistent"},
            (),
            (),
            "TREE=/nonexistent has no executable entrypoints/ray-node.sh",
        ),
        (
            {"CONTAINER": "none", "TREE": str(REPO)},
            (),
            ("VLGRPO_MODEL_PATH=/elsewhere",),
            "VLGRPO_MODEL_PATH=/elsewhere in",
        ),
        ({}, (), ("VLGRPO_PLATFORM=gpu",), "VLGRPO_PLATFORM=gpu in"),
    ],
)
def test_bad_settings_are_refused_before_any_step(tmp_path, env, node_lines, recipe_lines, message):
    run = start(tmp_path, node_lines, recipe_lines or ("VLGRPO_TRAINER_NNODES=1",), **env).finish()
    assert run.rc == 2, (run.out, run.err)
    assert run.err.startswith("fully-async-grpo.sbatch: error: ") and message in run.err, run.err
    assert run.calls() == []


def test_the_settings_file_is_read_as_data_not_run(tmp_path):
    # the recipe settings file was `source`d by the batch shell: a command substitution in a value ran there
    mark = tmp_path / "ran"
    value = f"exp$(touch${{IFS}}{mark})`touch${{IFS}}{mark}`"  # no space: a value passes that rule first
    run = start(
        tmp_path, recipe_lines=("# recipe settings", "", f"VLGRPO_EXPERIMENT_NAME={value}", "VLGRPO_TRAINER_NNODES=2")
    ).finish()
    assert not mark.exists(), "a command in the settings file ran in the batch shell"
    assert run.rc == 0, run.err
    env = by_role(run.calls())["recipe"][0]["env"]
    # verbatim: the recipe gets the text and refuses it there (not a plain name), by the registry's rule
    assert env["VLGRPO_EXPERIMENT_NAME"] == value and env["VLGRPO_TRAINER_NNODES"] == "2"


@pytest.mark.parametrize(
    "line, message",
    [
        ("PATH=/home/other/bin:/usr/bin:/bin", "line 2: PATH is not a VLGRPO_* setting"),
        ("export VLGRPO_LR=1e-6", "line 2: not NAME=VALUE"),
        ("VLGRPO_LR=1e-6 2e-6", "line 2: VLGRPO_LR: a value with spaces"),
    ],
)
def test_the_settings_file_takes_only_setting_lines(tmp_path, line, message):
    run = start(tmp_path, recipe_lines=("# recipe settings", line)).finish()
    assert run.rc == 2, (run.out, run.err)
    assert run.err.startswith("fully-async-grpo.sbatch: error: ") and message in run.err, run.err
    assert run.calls() == []


@pytest.mark.parametrize(
    "line",
    [
        "PATH=/home/other/bin:/usr/bin:/bin",
        "LD_PRELOAD=/home/other/lib.so",
        "PYTHONPATH=/home/other/py",
        "BASH_ENV=/home/other/evil.sh",
        "SLURM_CONF=/home/other/slurm.conf",
    ],
)
def test_the_node_file_takes_no_variable_the_batch_shell_or_srun_would_act_on(tmp_path, line):
    # the node file's lines are exported in the batch shell before `exec srun`: a PATH there chose the srun
    # that ran (another user's, twice: the head's dry run and the head step)
    run = start(tmp_path, node_lines=(line,)).finish()
    assert run.rc == 2, (run.out, run.err)
    name = line.split("=", 1)[0]
    assert f"line 2: {name} is not a Ray node setting" in run.err, run.err
    assert run.calls() == []


def test_a_head_without_an_address_on_ifname_is_refused_before_the_nodes_start(tmp_path):
    run = start(tmp_path, plan="ray start\n--head\n--port=6380\n").finish()
    assert run.rc == 2
    assert (
        "fully-async-grpo.sbatch: error: no IPv4 address for the head on n1: IFNAME=ib0 has none there and the "
        "node sets no VLGRPO_RAY_NODE_IP"
    ) in run.err
    assert [c["argv"][-1] for c in run.calls() if c["argv"][0] != "--job-name=vlgrpo-ckpt-check"] == ["head"]  # dry run


def test_the_ray_node_env_example_is_a_node_file_the_script_takes(tmp_path):
    run = start(tmp_path, RAY_NODE_ENV=str(REPO / "examples" / "ray-node.env.example"), IFNAME="eth0").finish()
    assert run.rc == 0, run.err
    head = by_role(run.calls())["head"][0]
    assert head["env"]["GLOO_SOCKET_IFNAME"] == "eth0" and head["env"]["HCCL_SOCKET_IFNAME"] == "eth0"


# ---- pyxis: one named container per node, the accelerator request, the image, the shared checkpoint folder ----


def option(call: dict, name: str) -> list[str]:
    """The values of ``--name=VALUE`` in a step's srun line (every occurrence)."""
    return [a.split("=", 1)[1] for a in call["argv"] if a.startswith(f"--{name}=")]


def test_every_step_of_the_job_names_the_same_container(tmp_path):
    # pyxis makes a container per step unless the step names one; a named one is made once on a node and reused
    run = start(tmp_path).finish()
    assert run.rc == 0, run.err
    calls = run.calls()
    assert len(calls) == 8  # 3 checks, the head's dry run, the head, 2 workers, the recipe
    assert all(option(c, "container-name") == ["vlgrpo-77"] for c in calls), [c["argv"] for c in calls]
    assert all(option(c, "container-image") == [f"{tmp_path}/vlgrpo.sqsh"] for c in calls)
    # on the head node, four steps run in it: the check, the dry run, the Ray head and the recipe
    assert sorted(c["argv"][0] for c in calls if c["argv"][c["argv"].index("-w") + 1] == "n1") == [
        "--job-name=vlgrpo-ckpt-check",
        "--job-name=vlgrpo-ray-head",
        "--job-name=vlgrpo-ray-head",
        "--job-name=vlgrpo-recipe",
    ]
    (tmp_path / "named").mkdir()
    named = start(tmp_path / "named", CONTAINER_NAME="grpo-run3").finish()
    assert named.rc == 0, named.err
    assert {n for c in named.calls() for n in option(c, "container-name")} == {"grpo-run3"}


@pytest.mark.parametrize(
    "env, recipe_lines, asked_for",
    [
        ({}, ("VLGRPO_TRAINER_NNODES=2",), "--gres=npu:8"),  # no per-node count: Ascend A2's 8
        ({}, ("VLGRPO_TRAINER_DEVICES_PER_NODE=4", "VLGRPO_ROLLOUT_DEVICES_PER_NODE=16"), "--gres=npu:16"),
        ({"NPU_GRES": "davinci:910b"}, ("VLGRPO_TRAINER_DEVICES_PER_NODE=8",), "--gres=davinci:910b:8"),
        ({"DEVICES_PER_NODE": "16"}, ("VLGRPO_TRAINER_DEVICES_PER_NODE=8",), "--gres=npu:16"),
        (
            {"PLATFORM": "gpu"},
            ("VLGRPO_TRAINER_DEVICES_PER_NODE=4", "VLGRPO_ROLLOUT_DEVICES_PER_NODE=4"),
            "--gpus-per-node=4",
        ),
    ],
)
def test_each_device_step_requests_the_devices_the_recipe_plans_per_node(tmp_path, env, recipe_lines, asked_for):
    # #SBATCH --exclusive gives the job every device of its nodes, but a step gets only the GRES it requests
    run = start(tmp_path, recipe_lines=recipe_lines, **env).finish()
    assert run.rc == 0, run.err
    roles = by_role(run.calls())
    for c in roles["plan"] + roles["head"] + roles["worker"] + roles["recipe"]:
        asked = [a for a in c["argv"] if a.startswith(("--gres=", "--gpus-per-node=", "--gpus="))]
        assert asked == [asked_for], c["argv"]
    # the recipe step shares the head's devices (--overlap): its probe counts the devices it sees
    assert "--overlap" in roles["recipe"][0]["argv"]
    assert all(not option(c, "gres") and not option(c, "gpus-per-node") for c in roles["check"])


@pytest.mark.parametrize(
    "image",
    [
        "registry.example.com/vlgrpo:0.1.0-npu-a2-cann8.5.0-torch2.8.0-vllm0.13.0-verl0.8.0",
        "docker://registry.example.com:5000/ml/vlgrpo:0.1.0-npu-a2",
        "registry.example.com#vlgrpo:0.1.0-npu-a2",
        "$oauthtoken@nvcr.example.com#team/vlgrpo:0.1.0-gpu",
        "registry.example.com/vlgrpo@sha256:" + "0123456789abcdef" * 4,
        "registry.example.com/vlgrpo:0.1.0-npu-a2@sha256:" + "fedcba9876543210" * 4,
    ],
)
def test_a_registry_reference_reaches_every_step_verbatim(tmp_path, image):
    run = start(tmp_path, IMAGE=image).finish()
    assert run.rc == 0, run.err
    assert {i for c in run.calls() for i in option(c, "container-image")} == {image}


@pytest.mark.parametrize(
    "image, message",
    [
        # the old default: pyxis would import it as docker://vlgrpo+0.1.0-npu-a2.sqsh
        (
            "vlgrpo+0.1.0-npu-a2.sqsh",
            "IMAGE=vlgrpo+0.1.0-npu-a2.sqsh is a bare file name: pyxis takes a value as a "
            "file only when it starts with / or .",
        ),
        (None, "IMAGE is not set: CONTAINER=pyxis runs every step in the vlgrpo image; set IMAGE to the absolute path"),
        (
            "./vlgrpo.sqsh",
            "IMAGE=./vlgrpo.sqsh: a relative path, which pyxis resolves in each step's working folder; "
            "give the absolute path",
        ),
        ("/nonexistent/vlgrpo.sqsh", "IMAGE=/nonexistent/vlgrpo.sqsh: no readable file there on"),
        ("/srv/vlgrpo.tar", "IMAGE=/srv/vlgrpo.tar: an absolute path that is not an enroot image (*.sqsh"),
        (
            "registry.example.com/vlgrpo",
            "IMAGE=registry.example.com/vlgrpo has no tag or digest: pyxis would pull :latest",
        ),
        ("registry.example.com:5000#vlgrpo", "IMAGE=registry.example.com:5000#vlgrpo has no tag or digest"),
        ("registry.example.com/VLGRPO:0.1.0", "IMAGE=registry.example.com/VLGRPO:0.1.0: not a registry reference"),
        ("dockerd://vlgrpo:0.1.0", "IMAGE=dockerd://vlgrpo:0.1.0: scheme dockerd://, but only docker://"),
    ],
)
def test_an_image_pyxis_would_not_find_is_refused_before_any_step(tmp_path, image, message):
    run = start(tmp_path, IMAGE=image).finish()
    assert run.rc == 2, (run.out, run.err)
    assert run.err.startswith("fully-async-grpo.sbatch: error: ") and message in run.err, run.err
    assert "IMAGE=" in run.err  # the fix names the setting
    assert run.calls() == []


def test_a_bare_name_of_a_file_in_the_submit_folder_is_refused(tmp_path):
    (tmp_path / "vlgrpo-image").write_bytes(b"hsqs")  # no .sqsh suffix, but a file here: still not a path to pyxis
    run = start(tmp_path, IMAGE="vlgrpo-image").finish()
    assert run.rc == 2 and "IMAGE=vlgrpo-image is a bare file name" in run.err, run.err
    assert run.calls() == []


@pytest.mark.parametrize(
    "env, message",
    [
        ({"DEVICES_PER_NODE": "0"}, "DEVICES_PER_NODE=0 is not a device count in 1..64"),
        ({"DEVICES_PER_NODE": "4"}, "VLGRPO_ROLLOUT_DEVICES_PER_NODE=8 in"),
        ({"NPU_GRES": "npu,gpu"}, "NPU_GRES=npu,gpu is not a GRES name"),
        ({"CONTAINER_NAME": "vlgrpo:exec"}, "CONTAINER_NAME=vlgrpo:exec: letters, digits"),
    ],
)
def test_device_and_container_settings_are_checked_before_any_step(tmp_path, env, message):
    run = start(
        tmp_path, recipe_lines=("VLGRPO_TRAINER_DEVICES_PER_NODE=4", "VLGRPO_ROLLOUT_DEVICES_PER_NODE=8"), **env
    ).finish()
    assert run.rc == 2, (run.out, run.err)
    assert run.err.startswith("fully-async-grpo.sbatch: error: ") and message in run.err, run.err
    assert run.calls() == []


@pytest.mark.parametrize("container", ["pyxis", "none"])
def test_every_node_reads_the_token_the_head_wrote_in_the_checkpoint_folder(tmp_path, container):
    env = {"CONTAINER": container, "TREE": str(REPO)} if container == "none" else {}
    run = start(tmp_path, **env).finish()
    assert run.rc == 0, run.err
    checks = by_role(run.calls())["check"]
    assert sorted(c["argv"][4] for c in checks) == ["n1", "n2", "n3"]
    seen_at = "/checkpoints" if container == "pyxis" else str(tmp_path / "ckpt")  # the step's own view
    assert {c["argv"][-1] for c in checks} == {f"{seen_at}/.vlgrpo-shared-check.77"}
    assert all(c["argv"][-2] == "cat" for c in checks)
    # they ran before any Ray step, and the token is gone afterwards
    assert max(int(c["n"]) for c in checks) < min(int(c["n"]) for c in run.calls() if c not in checks)
    assert list((tmp_path / "ckpt").iterdir()) == []
    assert "fully-async-grpo.sbatch: CKPT_DIR=" + str(tmp_path / "ckpt") + ": the same folder on n1 n2 n3" in run.out


@pytest.mark.parametrize("container", ["pyxis", "none"])
def test_a_node_without_the_shared_checkpoint_folder_fails_the_job_naming_it(tmp_path, container):
    env = {"CONTAINER": container, "TREE": str(REPO)} if container == "none" else {}
    run = start(tmp_path, STUB_LOCAL_CKPT="n3", **env).finish()
    assert run.rc == 2, (run.out, run.err)
    ckpt = tmp_path / "ckpt"
    assert (
        f"fully-async-grpo.sbatch: error: CKPT_DIR={ckpt} is not shared with n3: the token file the head node "
        "n1 wrote there is not visible on n3 (status 1: cat: "
    ) in run.err, run.err
    assert "mount it there on n3, or set CKPT_DIR to a folder on storage every node shares" in run.err
    assert run.err.count("error: ") == 1  # n1 and n2 see the token: only n3 is named
    roles = by_role(run.calls())
    assert len(roles["check"]) == 3 and not (roles["plan"] + roles["head"] + roles["worker"] + roles["recipe"])
    assert list(ckpt.iterdir()) == []


# ---- the settings files by the one path rule ---------------------------------------------------------------------
OTHER_UID = 65534
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")


def _bash_path_rule(path: str, cwd: Path) -> str:
    """The script's own path_rule_problem, cut out of the file and run by bash: "COMPONENT<TAB>WHY" or ""."""
    text = SBATCH.read_text()
    start_at = text.index("path_rule_problem() {")
    fn = text[start_at : text.index("\n}\n", start_at) + 2]
    out = subprocess.run(
        ["bash", "-c", fn + '\npath_rule_problem "$1"', "_", path], cwd=cwd, capture_output=True, text=True, check=True
    )
    return out.stdout.rstrip("\n")


def _layout(tmp: Path) -> dict[str, Path]:
    """Settings files in folders of every kind the rule tells apart (some given to another uid when root runs this)."""
    tmp.chmod(0o700)
    d = {}
    good = tmp / "good"
    good.mkdir()
    (good / "f").write_text("VLGRPO_TRAINER_NNODES=2\n")
    d["good"] = good / "f"
    for mode, name in ((0o664, "group_w"), (0o646, "other_w")):
        (good / name).write_text("# settings\n")
        (good / name).chmod(mode)
        d[name] = good / name
    for mode, name in ((0o775, "dir_group_w"), (0o777, "dir_other_w"), (0o1777, "dir_sticky")):
        sub = tmp / name
        sub.mkdir()
        sub.chmod(mode)
        (sub / "f").write_text("# settings\n")
        d[name] = sub / "f"
    (tmp / "dir_other_w" / "lnk").symlink_to(good / "f")
    d["link_in_ww"] = tmp / "dir_other_w" / "lnk"
    (good / "to_ww").symlink_to(tmp / "dir_other_w" / "f")
    d["link_to_ww"] = good / "to_ww"
    (good / "rel").symlink_to("f")
    d["link_rel"] = good / "rel"
    (good / "abs_etc").symlink_to("/etc/passwd")
    d["link_etc"] = good / "abs_etc"
    (good / "loop").symlink_to("loop")
    d["link_loop"] = good / "loop"
    d["missing"] = good / "missing"
    d["a_folder"] = good
    d["below_a_file"] = good / "f" / "x"
    d["dotdot"] = tmp / "dir_other_w" / ".." / "good" / "f"
    if os.geteuid() == 0:
        (good / "theirs").write_text("# settings\n")
        os.chown(good / "theirs", OTHER_UID, OTHER_UID)
        d["other_owner"] = good / "theirs"
        (tmp / "dir_sticky" / "theirs").write_text("# settings\n")
        os.chown(tmp / "dir_sticky" / "theirs", OTHER_UID, OTHER_UID)
        d["theirs_in_sticky"] = tmp / "dir_sticky" / "theirs"
        theirs = tmp / "their_dir"
        theirs.mkdir()
        (theirs / "f").write_text("# settings\n")
        os.chown(theirs, OTHER_UID, OTHER_UID)
        d["other_dir"] = theirs / "f"
    return d


def _folder(path: Path) -> Path:
    path.mkdir()
    return path


def test_the_scripts_path_rule_is_vlgrpo_pathrule_case_by_case(tmp_path, monkeypatch):
    """The reference: vlgrpo.pathrule.check_path(kind="file"), the project's one rule; the bash copy must pass and
    refuse the same paths, naming the same component and the same fault."""
    from vlgrpo import pathrule

    cases = _layout(tmp_path)
    cases["relative"] = Path("good/f")
    assert len(cases) >= 18
    monkeypatch.chdir(tmp_path)  # the relative case, for both
    verdicts = {}
    for name, path in cases.items():
        want = pathrule.check_path(str(path), kind="file")
        got = _bash_path_rule(str(path), tmp_path)
        if want is None:
            assert got == "", (name, got)
        else:
            component, _, why = got.partition("\t")
            assert component == want.component, (name, got, want)
            assert why.split()[:3] == want.why.split()[:3], (name, got, want)
        verdicts[name] = want is None
    # the layout holds both outcomes: what passes passes for a reason
    assert {k for k, ok in verdicts.items() if ok} == {
        "good",
        "dir_sticky",
        "link_rel",
        "link_etc",
        "dotdot",
        "relative",
    }


@pytest.mark.parametrize(
    "which, setting",
    [
        ("group_w", "RAY_NODE_ENV"),
        ("other_w", "VLGRPO_ENV"),
        ("dir_group_w", "VLGRPO_ENV"),
        ("dir_other_w", "RAY_NODE_ENV"),
        ("link_in_ww", "VLGRPO_ENV"),
        ("link_to_ww", "RAY_NODE_ENV"),
        pytest.param("other_owner", "RAY_NODE_ENV", marks=ROOT_ONLY),
        pytest.param("theirs_in_sticky", "VLGRPO_ENV", marks=ROOT_ONLY),
        pytest.param("other_dir", "VLGRPO_ENV", marks=ROOT_ONLY),
    ],
)
def test_a_settings_file_another_user_can_change_is_refused_before_any_step(tmp_path, which, setting):
    from vlgrpo import pathrule

    job = tmp_path / "job"
    job.mkdir()
    path = _layout(_folder(tmp_path / "files"))[which]
    problem = pathrule.check_path(str(path), kind="file")
    assert problem is not None  # the reference refuses it too
    run = start(job, **{setting: str(path)}).finish()
    assert run.rc == 2, (run.out, run.err)
    assert run.err.startswith(f"fully-async-grpo.sbatch: error: {setting}={path}: {problem.component} "), run.err
    assert "another user could change the settings this job runs with" in run.err
    assert run.calls() == []


def test_settings_files_of_this_user_in_a_sticky_folder_are_taken(tmp_path):
    files = _layout(_folder(tmp_path / "files"))
    job = tmp_path / "job"
    job.mkdir()
    run = start(job, RAY_NODE_ENV=str(files["dir_sticky"]), VLGRPO_ENV=str(files["link_rel"])).finish()
    assert run.rc == 0, run.err
