"""TORCH_LOGS reaches every torch process: only names torch registers pass (vlgrpo.environment ``torchlogs``).

Reference: the installed torch's own parser (``torch._logging._internal._parse_log_settings``) and its registry of
log and artifact names. A name torch does not register is looked up as a module: a dotted one imports its parent
package in every process that imports torch (shown here with a canary package), ``help`` makes every ``import
torch`` raise.
"""

from __future__ import annotations

import sys

import pytest

from vlgrpo import environment

torch_logging = pytest.importorskip("torch._logging._internal")


def _problem(value: str) -> str:
    got = environment.check_values([f"TORCH_LOGS={value}"], "fa")
    return "; ".join(why for name, why, _fix in got if name == "TORCH_LOGS")


def _torch_parses(value: str) -> bool:
    torch_logging._parse_log_settings.cache_clear()
    try:
        torch_logging._parse_log_settings(value)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize(
    "value", ["+dynamo", "recompiles,graph_breaks", "-inductor,+aot", "all", "output_code", "dynamo, aot", ""]
)
def test_registered_names_pass_and_torch_takes_them(value):
    assert _problem(value) == ""
    assert _torch_parses(value)


def test_every_name_the_registry_allows_is_one_the_installed_torch_registers():
    row = environment.env_row("TORCH_LOGS", "fa")
    assert row is not None and row.type == "torchlogs"
    reg = torch_logging.log_registry
    for name in row.allowed.split():
        assert name == "all" or reg.is_log(name) or reg.is_artifact(name), name


def test_a_dotted_name_imports_a_module_in_torch_and_is_refused(tmp_path, monkeypatch):
    # the exploit, shown with torch itself: a package on sys.path whose import leaves a canary
    pkg = tmp_path / "vlgrpo_canary_pkg"
    pkg.mkdir()
    canary = tmp_path / "imported"
    (pkg / "__init__.py").write_text(f"open({str(canary)!r}, 'w').close()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        _torch_parses("vlgrpo_canary_pkg.sub")
    finally:
        sys.modules.pop("vlgrpo_canary_pkg", None)
    assert canary.exists(), "torch did not import the package the name names"
    assert "dotted name" in _problem("vlgrpo_canary_pkg.sub")


@pytest.mark.parametrize(
    "value, fragment",
    [
        ("antigravity.x", "dotted name"),
        ("+os.path", "dotted name"),
        ("dynamo,json.tool", "dotted name"),
        ("help", "help"),
        ("+help", "help"),
        ("antigravity", "does not register"),
        ("dynamo,", "does not register"),
    ],
)
def test_other_names_are_refused_and_torch_would_not_take_them_cleanly(value, fragment):
    assert fragment in _problem(value)
    if "." not in value:  # (a dotted one would import its package here)
        assert not _torch_parses(value) or value == "antigravity"


def test_a_ray_job_config_gets_the_same_rule():
    doc = '{"runtime_env": {"env_vars": {"TORCH_LOGS": "antigravity.x"}}}'
    probs = environment.check_ray_job_config(doc, "fa")
    assert any("TORCH_LOGS" in p[1] and "dotted name" in p[1] for p in probs), probs
