"""C10's kind: environment values the pinned stack asserts on or rejects at start -- an AST sweep of vLLM 0.13.0
(.cache), verl and torch (the .venv), and the preflight's refusal of a value the job would get where the recipe's
settings reach the rejecting code (C10: ``expandable_segments:True`` with vLLM sleep mode)."""

from __future__ import annotations

import os
from collections import Counter

import pytest
from preflight_helpers import REPO, UPSTREAM_VEOMNI, read_argv, set_override

from vlgrpo.preflight import env_audit

VLLM = os.path.join(REPO, ".cache", "vllm-0.13.0", "src")
SLEEP = "actor_rollout_ref.rollout.enable_sleep_mode"


@pytest.fixture(scope="module")
def roots():
    if not os.path.isdir(os.path.join(VLLM, "vllm")):
        pytest.fail(f"vLLM 0.13.0's sources are not in {VLLM}; run `make vllm-0.13.0` (make test-python does)")
    return dict(env_audit.default_roots(), vllm=VLLM)


@pytest.fixture(scope="module")
def pinned(roots):
    return env_audit.sweep(roots)


def _cumem(pinned):
    hits = [s for s in pinned["sites"] if s.file == os.path.join("vllm", "device_allocator", "cumem.py")]
    assert len(hits) == 1, [s.as_dict() for s in pinned["sites"] if s.package == "vllm"]
    return hits[0]


def test_sweep_of_the_pinned_stack_finds_c10_and_reports_its_counts(pinned, roots, capsys):
    sites = pinned["sites"]
    reach = Counter(env_audit.reach(s.variable) for s in sites)
    gated = [s for s in sites if s.gates]
    with capsys.disabled():
        print(
            f"\nenv audit of {', '.join(sorted(roots))}: {pinned['files']} files read, {len(sites)} assert/raise "
            f"sites on environment values ({dict(Counter(s.package for s in sites))}); variable passed by the "
            f"launch: {dict(reach)}; gated by a setting: {len(gated)}"
        )
        for s in sites:
            if env_audit.reach(s.variable) == "passed":
                print(
                    f"  passed: {s.package} {s.file}:{s.line} {s.variable}: {s.kind} {s.test[:70]}"
                    + (f" [gates: {'; '.join(s.gates)}]" if s.gates else "")
                )
    site = _cumem(pinned)
    assert site.variable == "PYTORCH_CUDA_ALLOC_CONF" and site.kind == "assert" and site.cls == "CuMemAllocator"
    assert "Expandable segments are not compatible with memory pool" in site.message
    gates = [g.split(": ", 1)[1] for g in site.gates]
    assert gates and set(gates) == {"self.vllm_config.model_config.enable_sleep_mode"}, site.gates
    assert env_audit.reach("PYTORCH_CUDA_ALLOC_CONF") == "passed" and env_audit.reach("PYTORCH_ALLOC_CONF") == "passed"


@pytest.mark.parametrize(
    "value, accepted",
    [
        ("expandable_segments:True", False),
        ("max_split_size_mb:512,expandable_segments:True", False),
        ("expandable_segments:False", True),
        ("max_split_size_mb:512", True),
    ],
)
def test_the_site_is_evaluated_as_vllms_assert_would(pinned, value, accepted):
    """Against vLLM 0.13.0's own assertion: its test compiled from the source and run on the value."""
    site = _cumem(pinned)
    assert env_audit.evaluate(site, value) is accepted
    conf = value  # the name the assertion reads in CuMemAllocator.__init__
    assert eval(compile(site.test, "cumem.py", "eval"), {}, {site.bound: conf}) is accepted


@pytest.fixture
def vllm_on_path(monkeypatch):
    monkeypatch.syspath_prepend(VLLM)  # found by importlib.util.find_spec, as the installed vLLM would be


def test_c10_preflight_refuses_expandable_segments_with_sleep_mode_both_names(vllm_on_path, monkeypatch):
    from vlgrpo.preflight import run_preflight

    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    monkeypatch.setenv("PYTORCH_ALLOC_CONF", "expandable_segments:True")
    report = run_preflight(read_argv(UPSTREAM_VEOMNI), check_data=False)
    hits = {f.where.key: f.line() for f in report.findings if f.code == "rules.env-rejected"}
    assert set(hits) == {"PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"}, [f.line() for f in report.findings]
    for variable, line in hits.items():
        assert f"{SLEEP}=True" in line and "vLLM 0.13.0" in line and variable in line, line
        assert "Expandable segments are not compatible with memory pool" in line
    assert "torch reads PYTORCH_ALLOC_CONF" in hits["PYTORCH_ALLOC_CONF"]
    assert report.exit_code == 2


def test_c10_not_reported_without_sleep_mode_or_with_a_harmless_value(vllm_on_path, monkeypatch):
    from vlgrpo.preflight import run_preflight

    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    monkeypatch.setenv("PYTORCH_ALLOC_CONF", "max_split_size_mb:512")
    report = run_preflight(set_override(read_argv(UPSTREAM_VEOMNI), f"+{SLEEP}", "False"), check_data=False)
    assert not [f for f in report.findings if f.code == "rules.env-rejected"], [f.line() for f in report.findings]
    assert report.summary["env_audit"]["sites_on_set_variables"] >= 1


def test_the_variables_a_finding_can_come_from_are_the_committed_ones(pinned):
    """check_env_values sweeps only when one of EVALUABLE_VARIABLES is set: the list must be what the pinned sources
    give (sites whose test evaluate() can run)."""
    from vlgrpo.preflight import env_audit

    found = {
        s.variable
        for s in pinned["sites"]
        if env_audit.evaluate(s, "x") is not None or env_audit.evaluate(s, "") is not None
    }
    assert found == set(env_audit.EVALUABLE_VARIABLES)


def test_no_sweep_when_none_of_them_is_set(roots):
    from omegaconf import OmegaConf

    from vlgrpo.preflight import env_audit
    from vlgrpo.preflight.report import Report

    work = OmegaConf.create({"actor_rollout_ref": {"rollout": {"name": "vllm", "enable_sleep_mode": True}}})
    out = env_audit.check_env_values(work, Report(), environ={"PATH": "/usr/bin", "CI": "true"}, roots=roots)
    assert out["files"] == 0 and "skipped" in out
