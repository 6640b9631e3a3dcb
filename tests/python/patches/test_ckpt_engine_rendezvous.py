"""C11: the checkpoint engine's rendezvous (first weight sync of the fully-async trainer) is bounded
(``checkpoint_engine.rendezvous_timeout``).

verl v0.8.0's real ``NCCLCheckpointEngine.init_process_group`` runs in fresh interpreters with the sitecustomize
shim; ``ray.util.collective`` is replaced by a real torch.distributed gloo group over a TCP store on loopback
(scenarios/ckpt_engine_rendezvous.py). "Unreachable peer": rank 1 of 2 while nobody hosts the store (rank 0 never
starts), with a one-hour torch timeout, so only the patch can end it."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from patch_helpers import REPO, SCENARIOS, run_py

from vlgrpo.patches.fixes import checkpoint_engine_rendezvous_timeout as fix
from vlgrpo.patches.source import find_function

SCRIPT = SCENARIOS / "ckpt_engine_rendezvous.py"
VERL = Path(__import__("verl").__file__).parent


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_peer_ends_within_the_bound_naming_the_stage(shim_dir):
    start = time.monotonic()
    code = (
        f"import runpy, sys; sys.argv = ['x', '1', '2', '{_free_port()}']; "
        f"runpy.run_path({str(SCRIPT)!r}, run_name='__main__')"
    )
    out = run_py(code, path=[shim_dir], env={fix.TIMEOUT_ENV: "4"}, timeout=120, check=False)
    wall = time.monotonic() - start
    assert out.json is not None, out.stderr[-3000:]
    assert "crash" not in out.json, out.json.get("crash")
    assert out.json["status"][0] == "applied" and "issue #6967" in out.json["status"][1]
    kind, message = out.json["error"]
    assert kind == "RendezvousTimeout"
    assert "checkpoint-engine rendezvous" in message and "rank 1 of 2" in message and "'ckpt'" in message
    assert "#6967" in message and fix.TIMEOUT_ENV in message
    assert 4.0 <= out.json["elapsed"] < 10.0, out.json["elapsed"]
    assert wall < 90, wall


@pytest.fixture
def scenario_argv():
    def argv(rank, world, port):
        return [sys.executable, str(SCRIPT), str(rank), str(world), str(port)]

    return argv


def _popen(args, shim_dir, env):
    import os

    full = {k: v for k, v in os.environ.items() if not k.startswith("VLGRPO_") and k != "PYTHONPATH"}
    full.update(env, PYTHONPATH=str(shim_dir))
    return subprocess.Popen(args, env=full, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_unpatched_engine_waits_past_the_bound(shim_dir, scenario_argv):
    """The fault on the unpatched code: the same call is still waiting well after the bound the patch keeps."""
    proc = _popen(
        scenario_argv(1, 2, _free_port()),
        shim_dir,
        {"VLGRPO_PATCHES_DISABLED": "checkpoint_engine.rendezvous_timeout", fix.TIMEOUT_ENV: "2"},
    )
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            proc.communicate(timeout=25)  # import (~10 s under load) + 2 s bound + margin
    finally:
        proc.kill()
        proc.communicate()


def test_healthy_late_peer_is_not_cut_off(shim_dir, scenario_argv):
    """Both ranks patched, rank 1 starting 3 s after rank 0: the rendezvous completes on both sides."""
    port = _free_port()
    env = {fix.TIMEOUT_ENV: "90"}
    first = _popen(scenario_argv(0, 2, port), shim_dir, env)
    time.sleep(3)
    second = _popen(scenario_argv(1, 2, port), shim_dir, env)
    outs = []
    for proc in (first, second):
        stdout, stderr = proc.communicate(timeout=150)
        lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
        assert lines, stderr[-3000:]
        outs.append(json.loads(lines[-1]))
    for out in outs:
        assert "crash" not in out, out.get("crash")
        assert out["status"][0] == "applied"
        assert out.get("ok") is True, out.get("error")


def test_detector_reads_verl_080_sources():
    nccl = find_function(
        (VERL / "checkpoint_engine" / "nccl_checkpoint_engine.py").read_text(),
        "NCCLCheckpointEngine.init_process_group",
    )
    hccl = find_function(
        (VERL / "checkpoint_engine" / "hccl_checkpoint_engine.py").read_text(),
        "HCCLCheckpointEngine.init_process_group",
    )
    assert fix.is_faulty(nccl) == (True, fix.is_faulty(nccl)[1]) and "init_collective_group" in fix.is_faulty(nccl)[1]
    assert fix.is_faulty(hccl)[0] is True and "stateless_init_process_group" in fix.is_faulty(hccl)[1]


FIXED = """
class NCCLCheckpointEngine:
    def init_process_group(self, rank, world_size, master_metadata):
        if rank < 0:
            return

        def _init():
            if self.rebuild_group or not collective.is_group_initialized(self.group_name):
                collective.init_collective_group(world_size, rank, "nccl", self.group_name)
            collective.barrier(self.group_name)

        run_group_init_with_timeout(_init, timeout_s=get_init_timeout_s())
"""


def test_not_applied_where_the_rendezvous_is_already_bounded():
    """verl PR #7045's shape (the same calls through a bounded helper) is left alone, as is unrelated code."""
    faulty, reason = fix.is_faulty(find_function(FIXED, "NCCLCheckpointEngine.init_process_group"))
    assert faulty is False and "already bounds" in reason
    assert fix.is_faulty(find_function("def f(self, rank):\n    return rank\n", "f"))[0] is False


def test_bad_timeout_value_names_the_variable():
    with pytest.raises(ValueError, match=fix.TIMEOUT_ENV):
        fix.timeout_s({fix.TIMEOUT_ENV: "soon"})
    assert fix.timeout_s({}) == fix.DEFAULT_TIMEOUT_S == 600.0


def test_verify_passes():
    fix.verify()
