"""vlgrpo.rehearse without a cluster: the worker-group layout and the weight-sync ranks against verl 0.8.0's own
functions (executed from the pinned source where the module cannot be imported here: fastapi, peft, zmq and
cupy are not in this venv), the CLI's input checks, and the probe's verdict on C06 / C12 views."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest

from vlgrpo import cluster, rehearse

verl = pytest.importorskip("verl")
VERL = Path(verl.__file__).parent


def pinned_function(relpath: str, name: str, namespace: dict, cls: str | None = None):
    """The function ``name`` (a method of ``cls``) of the pinned verl file, compiled from its own source."""
    tree = ast.parse((VERL / relpath).read_text())
    body = tree.body
    if cls:
        body = next(n for n in body if isinstance(n, ast.ClassDef) and n.name == cls).body
    node = next(n for n in body if isinstance(n, ast.FunctionDef) and n.name == name)
    node.decorator_list = []
    exec(compile(ast.Module([node], []), str(VERL / relpath), "exec"), namespace)
    return namespace[name]


def test_trainer_pool_is_verls_create_resource_pool_manager():
    from omegaconf import OmegaConf
    from verl.single_controller.ray import ResourcePoolManager
    from verl.trainer.ppo.utils import Role

    create = pinned_function(
        "experimental/separation/utils.py",
        "create_resource_pool_manager",
        {"ResourcePoolManager": ResourcePoolManager, "Role": Role},
    )
    for tn, td in ((1, 8), (2, 4), (3, 16)):
        cfg = OmegaConf.create(
            {"trainer": {"nnodes": tn, "n_gpus_per_node": td}, "rollout": {"nnodes": 1, "n_gpus_per_node": 8}}
        )
        manager = create(cfg, [Role.Actor, Role.Rollout])
        groups, sync = rehearse.layout(
            ["python3", "-m", rehearse.FULLY_ASYNC, f"trainer.nnodes={tn}", f"trainer.n_gpus_per_node={td}"], 9, 9
        )
        assert list(groups[0].process_on_nodes) == manager.resource_pool_spec["trainer_pool"]
        assert groups[0].max_colocate_count == manager.max_colocate_count and sync


def test_rollout_replicas_follow_verls_rollout_replica():
    # verl 0.8.0 workers/rollout/replica.py RolloutReplica.__init__ (world size, per-node share, node count)
    init = pinned_function(
        "workers/rollout/replica.py",
        "__init__",
        {
            "omega_conf_to_dataclass": lambda c: c,
            "RolloutConfig": object,
            "DictConfig": object,
            "HFModelConfig": object,
            "RolloutMode": object,
            "RayResourcePool": object,
            "ActorHandle": object,
        },
        cls="RolloutReplica",
    )
    for rn, rd, tp, dp in ((1, 8, 2, 1), (2, 8, 8, 2), (1, 4, 4, 1), (2, 2, 4, 1)):
        replica = SimpleNamespace()
        init(
            replica,
            0,
            SimpleNamespace(tensor_model_parallel_size=tp, data_parallel_size=dp, pipeline_model_parallel_size=1),
            None,
            gpus_per_node=rd,
        )
        groups, _ = rehearse.layout(
            [
                "python3",
                "-m",
                rehearse.FULLY_ASYNC,
                f"rollout.nnodes={rn}",
                f"rollout.n_gpus_per_node={rd}",
                f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp}",
                f"actor_rollout_ref.rollout.data_parallel_size={dp}",
            ],
            9,
            9,
        )
        rollouts = [g for g in groups if g.role == "rollout"]
        # workers/rollout/llm_server.py _initialize_llm_servers: rollout.nnodes x n_gpus_per_node // replica world size
        assert len(rollouts) == rn * rd // replica.world_size
        assert all(g.process_on_nodes == (replica.gpus_per_replica_node,) * replica.nnodes for g in rollouts)
        assert all(g.max_colocate_count == 2 and not g.bin_pack for g in rollouts)  # init_standalone


def test_weight_sync_ranks_are_verls_build_topology():
    build = pinned_function(
        "checkpoint_engine/nccl_checkpoint_engine.py", "build_topology", {}, cls="NCCLCheckpointEngine"
    )
    for t, r in ((1, 1), (4, 8), (16, 3)):
        trainer, rollout = build(None, t, r, [{"m": 0}] * t)
        mine = rehearse.sync_topology(t, r)
        assert mine[0] == trainer["rank"] and mine[1] == rollout["rank"]
        assert set(trainer["world_size"]) == set(rollout["world_size"]) == {mine[2]}


def test_main_ppo_and_the_default_call_have_one_colocated_group_and_no_weight_sync():
    groups, sync = rehearse.layout(
        ["python3", "-m", rehearse.MAIN_PPO, "trainer.nnodes=2", "trainer.n_gpus_per_node=16"], 1, 1
    )
    assert [(g.process_on_nodes, g.bin_pack) for g in groups] == [((16, 16), True)] and not sync
    groups, sync = rehearse.layout(None, 3, 8)
    assert [g.process_on_nodes for g in groups] == [(8, 8, 8)] and not sync


@pytest.mark.parametrize(
    "text, words",
    [
        (
            "python3\n-m\nverl.experimental.fully_async_policy.fully_async_main\ntrainer.nnodes=two\n",
            "trainer.nnodes='two' in the argv is not an integer",
        ),
        (
            "python3\n-m\nverl.experimental.fully_async_policy.fully_async_main\nrollout.n_gpus_per_node=3\n"
            "actor_rollout_ref.rollout.tensor_model_parallel_size=2\n",
            "do not split into replicas",
        ),
    ],
)
def test_a_bad_argv_file_is_a_usage_error_naming_the_setting(tmp_path, capsys, text, words):
    path = tmp_path / "argv"
    path.write_text(text)
    rc = cluster.main(
        [
            "probe",
            "--address",
            "127.0.0.1:1",
            "--resource",
            "NPU",
            "--nodes",
            "1",
            "--per-node",
            "1",
            "--argv-file",
            str(path),
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "--argv-file" in err and words in err, err
    rc = cluster.main(
        [
            "probe",
            "--address",
            "127.0.0.1:1",
            "--resource",
            "NPU",
            "--nodes",
            "1",
            "--per-node",
            "1",
            "--argv-file",
            str(tmp_path / "missing"),
        ]
    )
    assert rc == 2 and "No such file" in capsys.readouterr().err


def view(env: dict, visible: int, kind: str = "device") -> cluster.View:
    return cluster.View(kind, "10.0.0.7", "n7", "h7", visible, "stand-in", env, 0, "")


def test_judge_names_the_list_c06_and_c12():
    noset = {
        "ASCEND_RT_VISIBLE_DEVICES": "8,9,10,11,12,13,14,15",
        "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES": "1",
    }
    line = cluster.judge(view(noset, 8), "npu", 8)
    assert line.startswith("10.0.0.7: an actor holding 1 NPU: ASCEND_RT_VISIBLE_DEVICES=8,9,10,11,12,13,14,15 with")
    assert "set_device(8)" in line
    c12 = {"ASCEND_RT_VISIBLE_DEVICES": "0,1,3,4", "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES": "1"}
    line = cluster.judge(view(c12, 3), "npu", 4)
    assert "names 4 devices but the runtime exposes 3" in line and "the list is at fault" in line
    line = cluster.judge(view({"ASCEND_RT_VISIBLE_DEVICES": "0,1,3,4"}, 3, kind="driver"), "npu", 4)
    assert "names 4 devices but the runtime exposes 3" in line
    assert cluster.judge(view({"ASCEND_RT_VISIBLE_DEVICES": "0,1,2,3"}, 4), "npu", 4) == ""


def test_rehearse_and_no_rehearse_exclude_each_other(capsys):
    rc = cluster.main(
        [
            "probe",
            "--address",
            "127.0.0.1:1",
            "--resource",
            "NPU",
            "--nodes",
            "1",
            "--per-node",
            "1",
            "--rehearse",
            "--no-rehearse",
        ]
    )
    assert rc == 2 and "exclude each other" in capsys.readouterr().err
