"""Layouts that fit: with no Ray address (RAY_ADDRESS unset or ``local``, as the entrypoints export it without
VLGRPO_RAY_ADDRESS) ``ray.init()`` starts a Ray on this node alone, so the sum of ``nnodes x n_gpus_per_node`` over
verl's resource pools must fit this node's devices; otherwise the placement groups of the rest never get placed and
verl waits forever. A planning count (``--devices-source plan``, the entrypoint's VLGRPO_PLAN_DEVICES_PER_NODE) is a
plan for other machines: a warning naming the Ray cluster it needs."""

from __future__ import annotations

import pytest
from preflight_helpers import set_override

from vlgrpo.preflight import cli, run_preflight


def _layout(report):
    return [f for f in report.findings if f.code == "rules.layout-local"]


def _argv(fixed_argv, tn, td, rn, rd):
    argv = fixed_argv
    for key, value in (
        ("trainer.nnodes", tn),
        ("trainer.n_gpus_per_node", td),
        ("rollout.nnodes", rn),
        ("rollout.n_gpus_per_node", rd),
    ):
        argv = set_override(argv, key, str(value))
    return argv


@pytest.mark.parametrize("address", [None, "", "local"])
def test_one_plus_one_node_of_16_on_one_16_device_node_without_ray_address_is_refused(fixed_argv, monkeypatch, address):
    if address is None:
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
    else:
        monkeypatch.setenv("RAY_ADDRESS", address)
    report = run_preflight(_argv(fixed_argv, 1, 16, 1, 16), check_data=False, devices_per_node=16)
    (hit,) = _layout(report)
    assert hit.severity == "error" and report.exit_code == 2
    assert "needs 32 devices on 2 node(s)" in hit.what and "has 16" in hit.what
    assert "VLGRPO_RAY_ADDRESS" in hit.fix and "fewer nodes" in hit.fix


def test_layouts_that_fit_one_node_pass_and_a_cluster_address_lifts_the_rule(fixed_argv, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "local")
    # 1x8 + 1x8 = 16 on 16: both pools fit one node (verl places one placement group per node of a pool)
    assert not _layout(run_preflight(_argv(fixed_argv, 1, 8, 1, 8), check_data=False, devices_per_node=16))
    # the veomni-sized 2 x 8 trainer + 1 x 8 rollout = 24 on 16: refused; on 32: fits
    argv = _argv(fixed_argv, 2, 8, 1, 8)
    assert [f.severity for f in _layout(run_preflight(argv, check_data=False, devices_per_node=16))] == ["error"]
    assert not _layout(run_preflight(argv, check_data=False, devices_per_node=32))
    # the shipped 2+2 x 16 layout onto a cluster: not this rule's business (vlgrpo cluster wait counts the nodes)
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert not _layout(run_preflight(fixed_argv, check_data=False, devices_per_node=16))


def test_a_planning_count_warns_with_the_cluster_it_needs(fixed_argv, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "local")
    report = run_preflight(fixed_argv, check_data=False, devices_per_node=16, devices_source="plan", purpose="plan")
    (hit,) = _layout(report)
    assert hit.severity == "warning" and report.exit_code == 0
    assert "needs a Ray cluster of 4 node(s) x 16 devices" in hit.what and "= 64 devices" in hit.what
    assert report.summary["topology"]["cluster_needed"] == {"nodes": 4, "devices_per_node": 16}
    with pytest.raises(ValueError, match="devices_source"):
        run_preflight(fixed_argv, check_data=False, devices_source="guess")


def test_the_cli_takes_the_source_and_refuses_a_local_layout_with_exit_2(fixed_argv, tmp_path, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "local")
    path = tmp_path / "argv"
    path.write_text("\n".join(_argv(fixed_argv, 1, 16, 1, 16)) + "\n")
    base = ["--argv-file", str(path), "--no-data", "--devices-per-node", "16"]
    assert cli.main(base) == 2
    assert cli.main(base + ["--devices-source", "plan", "--purpose", "plan"]) == 0
    with pytest.raises(SystemExit) as exc:
        cli.main(base + ["--devices-source", "cluster"])
    assert exc.value.code == 2
