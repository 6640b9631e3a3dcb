"""verl issue #6615: ``rollout.weight_sync_dp_rank`` on verl v0.8.0's real sender (``ServerAdapter.__init__``) and
receiver (``vLLMColocateWorkerExtension._get_zmq_handle``) code, per device (scenarios/weight_sync_handles.py, vLLM
a stand-in whose per-worker state is set as vLLM 0.13.0 / vllm-ascend 0.13.0 set it). What a user checks: every
trainer rank's socket name has exactly one vLLM worker bound to it, on the same device, and no worker binds a name
no trainer rank sends to."""

from __future__ import annotations

import json

import pytest

from patch_helpers import REPO, SCENARIOS, make_shim_dir, run_py
from vlgrpo.patches.fixes import rollout_weight_sync_dp_rank as fix

SCRIPT = SCENARIOS / "weight_sync_handles.py"
PATCH = "rollout.weight_sync_dp_rank"
VERL_091 = REPO / ".cache" / "verl-0.9.1" / "verl" / "workers" / "rollout" / "vllm_rollout" / "utils.py"

#: the issue's case, then other layouts the same naming meets: CUDA (vLLM offsets local_rank itself), TP=2 DP=4,
#: DP across two nodes, two replicas per node, DP = 1, and an engine whose local DP rank vLLM left unset
CASES = [
    {"name": "npu_tp4_dp2", "tp": 4, "dp": 2, "nodes": 1, "devices": 8, "platform": "npu"},
    {"name": "cuda_tp4_dp2", "tp": 4, "dp": 2, "nodes": 1, "devices": 8, "platform": "cuda"},
    {"name": "npu_tp2_dp4", "tp": 2, "dp": 4, "nodes": 1, "devices": 8, "platform": "npu"},
    {"name": "npu_tp4_dp4_two_nodes", "tp": 4, "dp": 4, "nodes": 2, "devices": 8, "platform": "npu"},
    {"name": "npu_tp2_dp2_two_replicas", "tp": 2, "dp": 2, "nodes": 1, "devices": 8, "platform": "npu"},
    {"name": "npu_tp8_dp1", "tp": 8, "dp": 1, "nodes": 2, "devices": 8, "platform": "npu"},
    {
        "name": "npu_tp4_dp2_dp_local_unset",
        "tp": 4,
        "dp": 2,
        "nodes": 1,
        "devices": 8,
        "platform": "npu",
        "dp_local_none": True,
    },
]


def _run(tmp_path, shim_dir, disabled: bool) -> dict:
    env = {"VLGRPO_TEST_TMP": str(tmp_path), "VLGRPO_TEST_CASES": json.dumps(CASES)}
    if disabled:
        env["VLGRPO_PATCHES_DISABLED"] = PATCH
    out = run_py(SCRIPT, path=[shim_dir], env=env, timeout=600).json
    assert out is not None and "crash" not in out, out
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The scenario with the patch and with it switched off (one interpreter each, verl imported once)."""
    shim, tmp = make_shim_dir(tmp_path_factory.mktemp("shim")), tmp_path_factory.mktemp("dist")
    return {"patched": _run(tmp, shim, False), "unpatched": _run(tmp, shim, True)}


def matched(case: dict) -> bool:
    """Every device's receiver binds exactly the name its sender connects to, once."""
    senders, receivers = case["senders"], case["receivers"]
    return set(senders) == set(receivers) and all(receivers[d] == [senders[d]] for d in senders)


def test_6615_unpatched_tp4_dp2_on_ascend_two_receivers_share_a_name_and_senders_4_to_7_get_none(runs):
    out = runs["unpatched"]
    assert out["status"][0] == "disabled"
    case = out["cases"]["npu_tp4_dp2"]
    bound = [name for names in case["receivers"].values() for name in names]
    assert len(bound) == 8 and len(set(bound)) == 4  # rank-0..3, each bound twice
    orphans = sorted(d for d, name in case["senders"].items() if name not in bound)
    assert orphans == ["0:4", "0:5", "0:6", "0:7"]
    assert not matched(case)


def test_6615_patched_the_8_receiver_names_equal_the_8_sender_names_device_by_device(runs):
    out = runs["patched"]
    status, reason = out["status"]
    assert status == "applied" and "issue #6615" in reason
    case = out["cases"]["npu_tp4_dp2"]
    assert len(case["senders"]) == 8 and len(set(case["senders"].values())) == 8
    assert matched(case), case
    assert case["receivers"]["0:5"] == ["ipc:///tmp/rl-colocate-zmq-02000000-replica-0-rank-5.sock"]


@pytest.mark.parametrize("name", [c["name"] for c in CASES[1:]])
def test_other_layouts_match_with_the_patch(runs, name):
    assert matched(runs["patched"]["cases"][name]), runs["patched"]["cases"][name]


@pytest.mark.parametrize(
    "name,unpatched_ok",
    [
        ("cuda_tp4_dp2", True),
        ("npu_tp8_dp1", True),
        ("npu_tp2_dp4", False),
        ("npu_tp4_dp4_two_nodes", False),
        ("npu_tp2_dp2_two_replicas", False),
    ],
)
def test_unpatched_layouts_the_fault_reaches_and_those_it_does_not(runs, name, unpatched_ok):
    # CUDA: vLLM offsets local_rank itself, so verl 0.8.0 is right there and the patch changes nothing;
    # DP = 1: unchanged
    assert matched(runs["unpatched"]["cases"][name]) is unpatched_ok
    if unpatched_ok:
        assert runs["unpatched"]["cases"][name] == runs["patched"]["cases"][name]


def test_detector_on_verl_080_and_on_verl_091_which_carries_the_fix():
    import importlib.util
    from pathlib import Path

    verl = Path(importlib.util.find_spec("verl").origin).parent  # the pinned verl 0.8.0 of the venv, not imported
    src_080 = (verl / "workers/rollout/vllm_rollout/utils.py").read_text()
    faulty, reason = fix.is_faulty(None, src_080)
    assert faulty and "self.local_rank only" in reason
    if not VERL_091.is_file():
        pytest.fail(f"verl 0.9.1 is not installed in {VERL_091.parents[4]}; run `make verl-0.9.1`")
    faulty, reason = fix.is_faulty(None, VERL_091.read_text())
    assert not faulty and "data-parallel rank" in reason


def test_receiver_rank_reference_values():
    from types import SimpleNamespace as NS

    pc = NS(
        data_parallel_size=2,
        data_parallel_rank_local=1,
        tensor_parallel_size=4,
        pipeline_parallel_size=1,
        world_size=4,
        nnodes_within_dp=1,
    )
    assert [fix.receiver_rank(r, pc) for r in range(4)] == [4, 5, 6, 7]  # Ascend: engine-local ranks
    assert [fix.receiver_rank(r, pc) for r in range(4, 8)] == [4, 5, 6, 7]  # CUDA: already offset
    assert fix.receiver_rank(3, NS(data_parallel_size=1)) == 3 and fix.receiver_rank(2, None) == 2
    fallback = NS(
        data_parallel_size=4,
        data_parallel_rank_local=None,
        data_parallel_rank=3,
        data_parallel_size_local=2,
        tensor_parallel_size=4,
        pipeline_parallel_size=1,
        world_size=4,
    )
    assert fix.receiver_rank(1, fallback) == 5  # DP rank 3 is the second engine of its node


def test_verify_passes():
    fix.verify()
