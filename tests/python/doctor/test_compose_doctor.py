"""The compose doctor services start the doctor through the recipes' environment filter (entrypoints/doctor.sh).

Each ``*-doctor`` service's entrypoint, as compose.yaml writes it (``/opt/vlgrpo`` read as this checkout), runs
with what an env file can put in the container's environment: a ``BASH_ENV`` naming a script, a ``PYTHONPATH``
folder holding a ``sitecustomize.py``, a ``RAY_ADDRESS`` the doctor's Ray check would join. The ``python3`` first on
PATH is a stand-in that records the doctor's argv and environment, then starts this venv's interpreter the way the
doctor's would start (no -I: a ``sitecustomize.py`` on its PYTHONPATH runs), and is this venv's Python for every
other call (the filter's own helpers).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
COMPOSE = yaml.safe_load((REPO / "compose.yaml").read_text())
DOCTORS = sorted(name for name in COMPOSE["services"] if name.endswith("-doctor"))


def run_service(tmp: Path, service: str, **env: str) -> tuple[subprocess.CompletedProcess, Path]:
    entry = [a.replace("/opt/vlgrpo/", f"{REPO}/") for a in COMPOSE["services"][service]["entrypoint"]]
    bindir, rec = tmp / "bin", tmp / "rec"
    bindir.mkdir()
    rec.mkdir()
    stub = bindir / "python3"
    stub.write_text(f"""#!/bin/sh
case " $* " in
  *" -m vlgrpo doctor"*) env >{rec}/env; printf '%s\\n' "$@" >{rec}/argv; exec {sys.executable} -c pass ;;
esac
exec {sys.executable} "$@"
""")
    stub.chmod(0o755)
    base = {
        "PATH": f"{bindir}:/usr/bin:/bin",
        "HOME": str(tmp),
        "VLGRPO_MODEL_PATH": "/models/m",
        "VLGRPO_LR": "1e-6",
        "VLGRPO_EP_SIZE": "2",
    }  # the recipes' env file: the doctor takes one of these
    base.update(env)
    out = subprocess.run(entry, env=base, capture_output=True, text=True, timeout=120)
    return out, rec


@pytest.mark.parametrize("service", DOCTORS)
def test_the_doctor_runs_in_the_built_environment(tmp_path, service):
    out, rec = run_service(tmp_path, service, NCCL_DEBUG="INFO", SOME_TOKEN="x")
    assert out.returncode == 0, out.stderr
    assert (rec / "argv").read_text().split() == ["-P", "-s", "-m", "vlgrpo", "doctor"]
    env = dict(line.split("=", 1) for line in (rec / "env").read_text().splitlines() if "=" in line)
    assert env["VLGRPO_MODEL_PATH"] == "/models/m" and env["NCCL_DEBUG"] == "INFO"
    assert env["PYTHONSAFEPATH"] == "1" and env["PYTHONNOUSERSITE"] == "1"
    assert not {"VLGRPO_LR", "VLGRPO_EP_SIZE", "SOME_TOKEN"} & set(env)  # the recipes' settings, an unlisted name


@pytest.mark.parametrize("service", DOCTORS)
def test_a_bash_env_from_the_env_file_neither_runs_nor_passes(tmp_path, service):
    mark, evil = tmp_path / "ran", tmp_path / "evil.sh"
    evil.write_text(f"touch {mark}\n")
    out, rec = run_service(tmp_path, service, BASH_ENV=str(evil))
    assert not mark.exists(), "BASH_ENV ran"
    assert out.returncode == 2, out.stderr
    assert any(line.startswith("doctor.sh: error: BASH_ENV: ") for line in out.stderr.splitlines()), out.stderr
    assert not (rec / "argv").exists()


@pytest.mark.parametrize("service", DOCTORS)
def test_a_pythonpath_from_the_env_file_does_not_reach_the_doctor(tmp_path, service):
    mark, py = tmp_path / "ran", tmp_path / "ww" / "py"
    py.mkdir(parents=True)
    (py / "sitecustomize.py").write_text(f"open({str(mark)!r}, 'w').close()\n")
    out, rec = run_service(tmp_path, service, PYTHONPATH=str(py))
    assert out.returncode == 0, out.stderr
    assert not mark.exists(), "the sitecustomize.py of PYTHONPATH ran"
    env = (rec / "env").read_text().splitlines()
    assert not [line for line in env if line.startswith("PYTHONPATH=")]


@pytest.mark.parametrize("service", DOCTORS)
def test_a_ray_address_from_the_env_file_is_refused(tmp_path, service):
    out, rec = run_service(tmp_path, service, RAY_ADDRESS="127.0.0.7:6390")
    assert out.returncode == 2, out.stderr
    assert (
        "doctor.sh: error: RAY_ADDRESS: set (value not shown): the doctor's Ray check would join that cluster"
        in out.stderr
    )
    assert "127.0.0.7" not in out.stderr
    assert not (rec / "argv").exists()


@pytest.mark.parametrize("service", DOCTORS[:1])
def test_an_exported_function_from_the_environment_is_refused(tmp_path, service):
    # bash -p imports no function from the environment; the filter refuses one, since every bash the doctor's
    # checks start would run it in place of the command of that name
    mark = tmp_path / "ran"
    out, rec = run_service(tmp_path, service, **{"BASH_FUNC_python3%%": f"() {{ touch {mark}; }}"})
    assert not mark.exists()
    assert out.returncode == 2, out.stderr
    assert "doctor.sh: error: BASH_FUNC_python3%%: an exported shell function" in out.stderr, out.stderr
    assert not (rec / "argv").exists()
