"""The shape of the preflight: an ordered list of named checks, each declaring its inputs and its finding codes;
the runner times each one, skips one whose inputs are missing with the reason, and a crash is an internal error.

References: the package's own source (every ``Finding("<code>", ...)`` written anywhere in vlgrpo.preflight must be
declared, and every declared code must be written somewhere), and runs on real inputs."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys

import pytest

from preflight_helpers import MODEL_30B, REPO, UPSTREAM_VEOMNI, read_argv, set_override

from vlgrpo.preflight import checks, run_preflight
from vlgrpo.preflight.report import Finding, Report
from vlgrpo.preflight.runner import Check, CheckCrashed, Code, Context, run_checks

PKG = os.path.join(REPO, "python", "src", "vlgrpo", "preflight")
CODE_RE = re.compile(r"^[a-z]+\.[a-z0-9-]+$")


def _codes_written_in_source() -> dict[str, set[str]]:
    """code -> modules, for every string constant inside a ``Finding(...)`` call's first argument."""
    found: dict[str, set[str]] = {}
    for fn in sorted(os.listdir(PKG)):
        if not fn.endswith(".py"):
            continue
        tree = ast.parse(open(os.path.join(PKG, fn), encoding="utf-8").read())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Finding" and node.args:
                for sub in ast.walk(node.args[0]):
                    if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and CODE_RE.match(sub.value):
                        found.setdefault(sub.value, set()).add(fn)
    return found


def _code_literals_outside_the_declarations() -> set[str]:
    found: set[str] = set()
    for fn in sorted(os.listdir(PKG)):
        if fn.endswith(".py") and fn != "checks.py":
            tree = ast.parse(open(os.path.join(PKG, fn), encoding="utf-8").read())
            found |= {
                n.value
                for n in ast.walk(tree)
                if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in checks.CODES
            }
    return found


def test_every_code_in_the_source_is_declared_once_and_every_declared_code_is_used():
    written = _codes_written_in_source()
    assert len(written) > 40
    undeclared = sorted(set(written) - set(checks.CODES))
    assert undeclared == [], undeclared
    # every declared code is written somewhere outside the declarations (a Finding, or a rule table a check uses)
    unused = sorted(set(checks.CODES) - set(written) - _code_literals_outside_the_declarations())
    assert unused == [], unused


def test_checks_declare_known_codes_and_inputs_given_before_them():
    names = [c.name for c in checks.CHECKS]
    assert len(names) == len(set(names))
    available = {"argv", "options", "check_data"}  # what run_preflight puts in the context
    for check in checks.CHECKS:
        assert set(check.codes) <= set(checks.CODES), check.name
        assert set(check.needs) <= available, (check.name, set(check.needs) - available)
        available |= set(check.gives)
    given = {c for check in checks.CHECKS for c in check.codes} | set(checks.RUNNER_CODES)
    assert given == set(checks.CODES)  # every code has a check (or the runner) that gives it
    code_loading = {c.code for c in checks.CODES.values() if c.runs_code}
    assert code_loading == {
        "security.trust-remote-code",
        "security.code-loading",
        "security.target",
        "model.auto-map",
        "model.python-file",
        "model.redirect",
        "model.untrusted",
        "patches.safety-off",
    }


def test_codes_subcommand_lists_every_check_and_code_from_the_declarations():
    proc = subprocess.run(
        [sys.executable, "-m", "vlgrpo", "preflight", "codes", "--json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert [c["check"] for c in doc["checks"]] == [c.name for c in checks.CHECKS]
    assert [r["code"] for r in doc["codes"]] == list(checks.CODES)
    row = next(r for r in doc["codes"] if r["code"] == "security.target")
    assert row["runs_code"] is True and row["checks"] == ["code-loading"] and row["severity"] == "error"
    text = subprocess.run(
        [sys.executable, "-m", "vlgrpo", "preflight", "codes"], capture_output=True, text=True, cwd=REPO, timeout=60
    ).stdout
    assert all(code in text for code in checks.CODES)


def test_each_check_is_timed_and_skipped_checks_name_the_missing_input():
    argv = read_argv(UPSTREAM_VEOMNI)
    report = run_preflight(argv, check_data=False, model_path=MODEL_30B)
    log = {e["check"]: e for e in report.summary["checks"]}
    assert list(log) == [c.name for c in checks.CHECKS]
    for name, e in log.items():
        if e["status"] == "ran":
            assert report.summary["timings_s"][name] == e["seconds"] >= 0
    assert log["data"] == {"check": "data", "status": "skipped", "reason": "check_data: --no-data"}
    assert log["prompt-counter"]["status"] == "skipped"
    skipped = next(ln for ln in report.to_text().splitlines() if ln.startswith("skipped: "))
    assert "prompt-counter (check_data: --no-data); data (check_data: --no-data)" in skipped
    # a value the rules do arithmetic on has the wrong type: every check that needs typed values says why it did not run
    bad = set_override(argv, "data.max_prompt_length", "null")
    report = run_preflight(bad, check_data=False, model_path=MODEL_30B)
    log = {e["check"]: e for e in report.summary["checks"]}
    assert log["value-types"]["status"] == "ran" and report.codes().count("schema.value-type") == 1
    for name in ("veomni-layout", "topology", "model-dir", "lengths", "truncation"):
        assert log[name]["status"] == "skipped"
        assert log[name]["reason"].startswith("typed_work: values of the wrong type (schema.value-type above)")
    assert report.exit_code == 2


def test_runner_crash_undeclared_codes_and_withheld_outputs():
    def give_a(ctx):
        ctx.report.add(Finding("x.declared", "error", "a"))
        ctx.report.add(Finding("x.other", "warning", "b"))

    def boom(ctx):
        raise ZeroDivisionError("in check")

    def never(ctx):  # pragma: no cover - must be skipped
        raise AssertionError("ran without its input")

    report = Report()
    ctx = Context(report, argv=[])
    log = run_checks(
        [Check("a", ("argv",), ("thing",), ("x.declared",), give_a), Check("b", ("thing",), (), (), never)], ctx
    )
    assert log[0]["undeclared"] == ["x.other"] and log[0]["findings"] == 2
    assert log[1] == {"check": "b", "status": "skipped", "reason": "thing: a gave no thing"}
    with pytest.raises(CheckCrashed) as info:
        run_checks([Check("c", ("argv",), (), (), boom)], Context(Report(), argv=[]))
    assert info.value.check == "c" and isinstance(info.value.__cause__, ZeroDivisionError)


def test_a_crash_inside_a_check_is_an_internal_error_naming_the_exception(monkeypatch):
    from vlgrpo.preflight import rules

    def boom(*_a, **_k):
        raise RuntimeError("bug in the logger check")

    monkeypatch.setattr(rules, "check_logger", boom)
    report = run_preflight(read_argv(UPSTREAM_VEOMNI), check_data=False, model_path=MODEL_30B)
    assert report.exit_code == 1
    assert report.internal_error.startswith("RuntimeError: bug in the logger check")
    log = {e["check"]: e for e in report.summary["checks"]}
    assert log["logger"]["status"] == "crashed" and "value-types" not in log  # nothing ran after it


def test_code_severity_is_validated():
    with pytest.raises(ValueError):
        Code("x.y", "fatal", "not a severity")
