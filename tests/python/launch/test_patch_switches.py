"""The patch switches are read in every interpreter by the rule the launch applies: what an entrypoint refuses,
a worker that got the value another way (a Ray job's runtime_env) ignores, with a warning, keeping the default."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from vlgrpo import environment
from vlgrpo.launch import settings
from vlgrpo.patches import state

VALUES = {
    "VLGRPO_PATCHES": ["on", "off", "OFF", "Off", " off", "off ", "no", "0", "false", "disabled", "on,off", "é"],
    "VLGRPO_PATCHES_DISABLED": ["qwen3_vl_moe.router_dtype", "a.b,c-d", " a", "a,", ",a", "A", "a,,b", "a b", "x" * 65],
    "VLGRPO_PATCHES_STRICT": ["1", "true", "True", "0", "false", "yes", "on", "TRUE", "2"],
}


def test_every_switch_is_a_setting_of_each_entrypoint_and_has_no_default():
    # no default: an interpreter with no switch set needs no registry row (nothing read at start-up)
    for name in state.SWITCHES:
        for owner in ("fa", "vo", "node", "patches"):
            row = environment.setting_row(name, owner)
            assert row is not None, (name, owner)
            assert row.default == "", f"{name} has a default: state._switch must then read it when unset"


@pytest.mark.parametrize("name", state.SWITCHES)
def test_a_value_the_launch_refuses_is_ignored_with_a_warning(name, monkeypatch):
    for other in state.SWITCHES:
        monkeypatch.delenv(other, raising=False)
    row = next(r for r in settings.owner_settings("fa") if r.name == name)
    for value in VALUES[name]:
        monkeypatch.setenv(name, value)
        _, refused = settings.check(row, value, "/")
        switch, all_off, disabled = state.read_switches()
        strict = state.strict()
        problem = state.switch_problems().get(name)
        assert bool(problem) == bool(refused), (value, problem, refused)
        if refused:  # the default: patches on, none left out, not strict
            assert (all_off, disabled, strict) == (False, (), False), value
        elif name == "VLGRPO_PATCHES":
            assert all_off == (value == "off")
        elif name == "VLGRPO_PATCHES_DISABLED":
            assert disabled == tuple(value.split(","))
        else:
            assert strict == (value in ("1", "true", "True"))


def test_no_switch_set_reads_no_registry():
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLGRPO_")}
    code = (
        "import sys, json; from vlgrpo.patches import state; r = state.read_switches(); s = state.strict(); "
        "print(json.dumps([r, s, 'vlgrpo.environment' in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert json.loads(out) == [["", False, []], False, False]
