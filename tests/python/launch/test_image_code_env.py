"""In an image the children's code locations are the image's (``lib/image-code-env``, written at build by
``python3 -I -m vlgrpo.launch image-record``), CANN's set_env applied; an environment value that names anything
else is refused, naming the variable; an interactive shell of the NPU image that sourced CANN's file itself (what
its ~/.bashrc does) passes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from vlgrpo.launch import entry


def _lib(tmp_path, environ):
    lib = tmp_path / "lib"
    lib.mkdir()
    entry.write_image_code_env(str(lib / entry.IMAGE_CODE_FILE), environ)
    return lib


def _launch(lib, entries, cann=None, monkeypatch=None):
    hooks = entry.Hooks()
    hooks.lib = str(lib)
    if cann is not None:
        monkeypatch.setattr(entry, "IMAGE_BASH_ENV", str(cann))
        entries = [*entries, ("BASH_ENV", str(cann))]
    launch = entry.Launch("fa", [("PATH", "/usr/bin:/bin"), *entries], "/proc/self/environ", True, hooks)
    launch.build_environment()
    launch.image_env()
    # the registry's BASH_ENV check knows only the image's own path, not this test's stand-in file
    launch.problems = [p for p in launch.problems if not p.startswith("BASH_ENV: ")]
    return launch


def test_the_record_the_build_writes_reads_back(tmp_path):
    lib = _lib(tmp_path, {"LD_LIBRARY_PATH": "/usr/local/nvidia/lib64", "CUDA_HOME": "/usr/local/cuda", "HOME": "/x"})
    got = entry.image_code_env(str(lib))
    assert got is not None and set(got) == set(entry.IMAGE_CODE_NAMES)
    assert got["LD_LIBRARY_PATH"] == "/usr/local/nvidia/lib64" and got["CUDA_HOME"] == "/usr/local/cuda"
    assert got["PYTHONPATH"] is None
    # the image build's own command, in a child with an image-like environment
    out = tmp_path / "rec"
    subprocess.run(
        [sys.executable, "-I", "-m", "vlgrpo.launch", "image-record", str(out)],
        env={"PYTHONPATH": "/img/py", "LD_LIBRARY_PATH": "/img/lib", "PATH": os.environ["PATH"]},
        check=True,
    )
    assert "PYTHONPATH=/img/py\n" in out.read_text() and "LD_LIBRARY_PATH=/img/lib\n" in out.read_text()
    assert entry.image_code_env(str(tmp_path / "nothing")) is None


def test_an_interactive_shell_that_sourced_canns_file_passes(tmp_path, monkeypatch):
    lib = _lib(tmp_path, {"LD_LIBRARY_PATH": "/usr/local/Ascend/driver/lib64"})
    cann = tmp_path / "cann-env.sh"
    cann.write_text(
        "export LD_LIBRARY_PATH=/usr/local/Ascend/ascend-toolkit/latest/lib64:$LD_LIBRARY_PATH\n"
        "export PYTHONPATH=/usr/local/Ascend/ascend-toolkit/latest/python/site-packages:$PYTHONPATH\n"
        "export ASCEND_TOOLKIT_HOME=/usr/local/Ascend/ascend-toolkit/latest\n"
    )
    # what ~/.bashrc's `source set_env.sh` left in the shell the user runs the entrypoint from
    held = [
        ("LD_LIBRARY_PATH", "/usr/local/Ascend/ascend-toolkit/latest/lib64:/usr/local/Ascend/driver/lib64"),
        ("PYTHONPATH", "/usr/local/Ascend/ascend-toolkit/latest/python/site-packages:"),
        ("ASCEND_TOOLKIT_HOME", "/usr/local/Ascend/ascend-toolkit/latest"),
    ]
    launch = _launch(lib, held, cann, monkeypatch)
    assert launch.problems == []
    assert launch.env["PYTHONPATH"] == "/usr/local/Ascend/ascend-toolkit/latest/python/site-packages"
    assert launch.env["LD_LIBRARY_PATH"] == held[0][1]


@pytest.mark.parametrize(
    ("name", "value", "foreign"),
    [
        ("LD_LIBRARY_PATH", "/home/u/lib:/usr/local/Ascend/driver/lib64", "/home/u/lib"),
        ("PYTHONPATH", "/home/u/mods", "/home/u/mods"),
        ("ASCEND_TOOLKIT_HOME", "/home/u/cann", "/home/u/cann"),
        ("ASCEND_CUSTOM_OPP_PATH", "/home/u/opp", "/home/u/opp"),
        ("CUDA_HOME", "/home/u/cuda", "/home/u/cuda"),
    ],
)
def test_a_code_location_the_environment_adds_is_refused(tmp_path, monkeypatch, name, value, foreign):
    lib = _lib(tmp_path, {"LD_LIBRARY_PATH": "/usr/local/Ascend/driver/lib64"})
    cann = tmp_path / "cann-env.sh"
    cann.write_text("export ASCEND_TOOLKIT_HOME=/usr/local/Ascend/ascend-toolkit/latest\n")
    launch = _launch(lib, [(name, value)], cann, monkeypatch)
    assert len(launch.problems) == 1, launch.problems
    assert launch.problems[0].startswith(f"{name}: names {foreign!r}, which this image's code locations do not")
    assert foreign not in launch.env.get(name, "")
