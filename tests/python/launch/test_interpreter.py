"""The launcher's check of the code it runs in (vlgrpo.launch.settings.interpreter_problems): the interpreter, every
sys.path entry and the entrypoints' lib folder, each by the one path rule. The reference is the modes the test
sets with os.chmod (a folder 0777 / g+w can be written by another user; 0755 cannot), not the path rule's code.
The shims' side (the interpreter chosen by absolute path, nothing run from PATH) is tests/bats/shim.bats.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from vlgrpo.launch import settings


def test_the_test_interpreter_and_its_path_pass(tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    lib.mkdir(mode=0o755)
    assert settings.interpreter_problems(str(lib), "") == []


@pytest.mark.parametrize(
    ("mode", "who"), [(0o777, "every user"), (0o775, "its group"), (0o757, "every user"), (0o1777, "every user")]
)
def test_a_sys_path_entry_others_can_write_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: int, who: str
) -> None:
    shared = tmp_path / "shared-site"
    shared.mkdir()
    os.chmod(shared, mode)
    monkeypatch.setattr(sys, "path", [*sys.path, str(shared)])
    got = settings.interpreter_problems("", "/opt/venv/bin/python3")
    assert len(got) == 1, got
    assert got[0].startswith(f"VLGRPO_PYTHON: the sys.path entry {shared} can be written by {who}")
    assert "; fix: " in got[0]


def test_a_sys_path_entry_inside_a_writable_folder_or_through_a_link_names_the_component(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    open_dir = tmp_path / "open"
    (open_dir / "site").mkdir(parents=True)
    os.chmod(open_dir, 0o777)
    link = tmp_path / "site-link"
    link.symlink_to(open_dir / "site")
    for entry in (open_dir / "site", link):
        monkeypatch.setattr(sys, "path", [str(entry)])
        got = settings.interpreter_problems("", "")
        assert len(got) == 1, got
        assert got[0].startswith(
            f"the interpreter: the sys.path entry {entry}: {open_dir} can be written by every user"
        )


def test_missing_sys_path_entries_are_skipped_and_the_lib_folder_is_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "path", [str(tmp_path / "python311.zip"), ""])
    lib = tmp_path / "lib"
    lib.mkdir()
    assert settings.interpreter_problems(str(lib), "") == []
    os.chmod(lib, 0o770)
    got = settings.interpreter_problems(str(lib), "")
    assert got and got[0].startswith(f"the interpreter: the entrypoints' lib folder {lib} can be written by its group")
    (tmp_path / "file").write_text("")
    got = settings.interpreter_problems(str(tmp_path / "file"), "")
    assert got and "lib folder" in got[0]


def test_an_interpreter_in_a_folder_others_can_write_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "python3"
    exe.write_text("")
    os.chmod(exe, 0o755)
    os.chmod(bindir, 0o777)
    monkeypatch.setattr(sys, "executable", str(exe))
    monkeypatch.setattr(sys, "path", [])
    got = settings.interpreter_problems("", str(exe))
    assert got == [
        f"VLGRPO_PYTHON: the interpreter {exe}: {bindir} can be written by every user (mode 0777); fix: "
        "make it and the folders above writable only by root or you (chmod go-w), or install the vlgrpo package in "
        "a Python that is and name it by VLGRPO_PYTHON"
    ]
