"""The CLI: exit codes, one line per finding, --json schema, standalone overrides after --."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from preflight_helpers import MODEL_30B, REPO, UPSTREAM_VEOMNI

from vlgrpo.preflight import cli
from vlgrpo.preflight.report import Finding, Report, Where


def test_argv_file_json_subprocess(tmp_path, fixed_argv):
    """The real command line, as the entrypoints' dry run calls it (``--purpose plan``: this machine's disk holds
    less than one 30B checkpoint, an error for a launch and a warning for a plan)."""
    path = tmp_path / "argv"
    path.write_text("\n".join(fixed_argv) + "\n", encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "vlgrpo", "preflight", "--purpose", "plan", "--argv-file", str(path), "--json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    doc = json.loads(proc.stdout)
    assert proc.returncode == doc["exit_code"] == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert doc["schema_version"] == 1 and doc["ok"] is True
    assert doc["summary"]["verl_version"] == "0.8.0"
    assert doc["summary"]["config_name"] == "fully_async_ppo_trainer"
    assert doc["summary"]["data"]["train"]["rows"] == 20
    for f in doc["findings"]:
        assert set(f) == {"code", "severity", "what", "where", "why", "fix", "setting"} and f["severity"] == "warning"


def test_findings_exit_2_one_line_each(tmp_path, capsys):
    argv = open(UPSTREAM_VEOMNI, encoding="utf-8").read().splitlines()
    argv += ["data.max_prompt_length=1024", "+data.truncation=left"]
    path = tmp_path / "argv"
    path.write_text("\n".join(argv), encoding="utf-8")
    rc = cli.main(["--argv-file", str(path), "--no-data", "--model-path", MODEL_30B])
    out = capsys.readouterr().out.splitlines()
    assert rc == 2
    dup = [line for line in out if line.startswith("ERROR [schema.duplicate-key]")]
    assert len(dup) == 2 and all(f"argv[{len(argv) - 2}]" in line or f"argv[{len(argv) - 1}]" in line for line in dup)
    assert any(
        line.startswith("ERROR [schema.plus-on-existing]") and "fix: remove the '+': data.truncation=left" in line
        for line in out
    )
    assert out[-1].startswith("result: ")
    assert any(line.startswith("verl 0.8.0 | module verl.trainer.main_ppo | config ppo_trainer") for line in out)


def test_standalone_overrides_after_dashdash(capsys):
    rc = cli.main(
        [
            "--no-data",
            "--module",
            "verl.trainer.main_ppo",
            "--json",
            "--",
            "data.max_prompt_length=1024",
            "data.max_prompt_length=1024",
            f"actor_rollout_ref.model.path={MODEL_30B}",
        ]
    )
    doc = json.loads(capsys.readouterr().out)
    assert rc == 2
    dup = [f for f in doc["findings"] if f["code"] == "schema.duplicate-key"]
    assert dup[0]["where"] == {
        "position": 4,
        "override": "data.max_prompt_length=1024",
        "key": "data.max_prompt_length",
    }


def test_bad_argv_is_exit_2(tmp_path, capsys):
    path = tmp_path / "argv"
    path.write_text("bash\n-c\ntrue\n", encoding="utf-8")
    assert cli.main(["--argv-file", str(path)]) == 2
    assert "[launch.argv]" in capsys.readouterr().out
    assert cli.main(["--argv-file", str(tmp_path / "missing")]) == 2


def test_internal_error_is_exit_1(monkeypatch, tmp_path, capsys):
    from vlgrpo.preflight import schema

    def boom(*_a, **_k):
        raise RuntimeError("bug in a check")

    monkeypatch.setattr(schema, "compose_config", boom)
    rc = cli.main(["--no-data", "--", f"actor_rollout_ref.model.path={MODEL_30B}"])
    assert rc == 1
    assert "INTERNAL ERROR: RuntimeError: bug in a check" in capsys.readouterr().out


def test_report_line_format():
    r = Report()
    r.add(
        Finding(
            "schema.unknown-key",
            "error",
            "key 'a.b' does not exist",
            Where(position=7, override="a.b=1", key="a.b"),
            "Hydra stops",
            "remove it",
        )
    )
    assert r.findings[0].line() == (
        "ERROR [schema.unknown-key] argv[7] 'a.b=1': key 'a.b' does not exist -- why: Hydra stops -- fix: remove it"
    )
    assert r.exit_code == 2 and not r.ok
    assert os.linesep not in r.findings[0].line()
