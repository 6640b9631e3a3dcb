"""Override values computed at run time (vlgrpo.preflight.rules.check_interpolations).

The attack list's preflight case: an argv file with ``trainer.experiment_name=${oc.env:SECRET_X}`` was accepted
with 0 errors; verl would copy the secret into tracker names. The reference is OmegaConf itself: the same value
in a config resolves to the secret when read.
"""

from __future__ import annotations

import pytest
from preflight_helpers import MODEL_30B, set_override

from vlgrpo.preflight import run_preflight
from vlgrpo.preflight.rules import interpolations


@pytest.mark.parametrize(
    "text,kinds",
    [
        ("${oc.env:SECRET_X}", [("resolver", "oc.env")]),
        ("exp_${oc.env:X,default}", [("resolver", "oc.env")]),
        ("${oc.decode:${oc.env:Y}}", [("resolver", "oc.decode"), ("resolver", "oc.env")]),
        ("run-${now:%H%M}", [("resolver", "now")]),
        ("${data.max_prompt_length}", [("node", "${data.max_prompt_length}")]),
        ("\\${oc.env:X}", []),
        ("plain_name", []),
    ],
)
def test_omegaconf_grammar_classifies(text, kinds):
    assert interpolations(text) == kinds


def test_the_canary_fires_in_omegaconf(monkeypatch):
    from omegaconf import OmegaConf

    monkeypatch.setenv("SECRET_X", "hunter2")
    assert OmegaConf.create({"name": "${oc.env:SECRET_X}"}).name == "hunter2"


@pytest.mark.parametrize("value", ["${oc.env:SECRET_X}", "'${oc.env:SECRET_X}'", "exp-${oc.env:SECRET_X}"])
def test_resolver_in_an_override_is_an_error(fixed_argv, monkeypatch, value):
    monkeypatch.setenv("SECRET_X", "hunter2")
    argv = set_override(fixed_argv, "trainer.experiment_name", value)
    report = run_preflight(argv, check_data=False, model_path=MODEL_30B, devices_per_node=16)
    hits = [f for f in report.findings if f.code == "security.resolver"]
    assert report.exit_code == 2 and len(hits) == 1 and "oc.env" in hits[0].what
    assert "hunter2" not in report.to_text()


def test_resolver_inside_a_list_and_a_node_interpolation(fixed_argv):
    argv = set_override(fixed_argv, "trainer.logger", "[console,'${oc.env:HOME}']")
    argv = set_override(argv, "trainer.experiment_name", "${trainer.project_name}")
    report = run_preflight(argv, check_data=False, model_path=MODEL_30B, devices_per_node=16)
    codes = [f.code for f in report.findings]
    assert "security.resolver" in codes and "security.interpolation" in codes
