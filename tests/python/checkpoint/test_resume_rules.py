"""The resume decision against verl's own code, and the checkpoint folder against other users.

- The tracker (the attack list's tracker case: "1", 63 spaces, "2"): every answer of
  ``vlgrpo.checkpoint.resume.resume_folder(..., "auto")`` is compared with verl v0.8.0's own
  ``verl.utils.checkpoint.checkpoint_manager.find_latest_ckpt_path`` on the same folder: the same folder, or a
  refusal where verl would raise at start or read another number than the text spells.
- The checkpoint folder (its world-writable folder case): a folder another user can write makes ``resume-check`` exit 2 instead
  of answering "fresh start" after that user moved the tracker away.
- One-line messages (its path-with-a-newline case): a newline or an escape sequence in a path is printed escaped.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from vlgrpo.checkpoint import resume
from vlgrpo.checkpoint.manifest import CheckpointRefused


def _verl_function():
    """verl v0.8.0's ``find_latest_ckpt_path`` (and the tracker-name helper it calls), compiled from the installed
    ``verl/utils/checkpoint/checkpoint_manager.py`` itself: importing the module pulls in verl's FSDP engine (peft,
    ...), which this CPU venv lacks; the two functions need only ``os`` and ``torch.distributed``."""
    import ast
    import importlib.util

    import torch

    spec = importlib.util.find_spec("verl")
    path = os.path.join(os.path.dirname(spec.origin), "utils", "checkpoint", "checkpoint_manager.py")
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    wanted = {"find_latest_ckpt_path", "get_checkpoint_tracker_filename"}
    body = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in wanted]
    assert {n.name for n in body} == wanted, "verl's checkpoint_manager.py no longer defines them"
    ns = {"os": os, "torch": torch}
    exec(compile(ast.Module(body=body, type_ignores=[]), path, "exec"), ns)
    return ns["find_latest_ckpt_path"]


def verl_answer(root):
    find_latest_ckpt_path = _verl_function()
    try:
        return ("ok", find_latest_ckpt_path(str(root)))
    except Exception as exc:  # verl raises at start
        return ("raises", type(exc).__name__)


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "ckpt"
    r.mkdir(mode=0o700)
    for step in (1, 2, 5, 10, 12):
        (r / f"global_step_{step}").mkdir()
    return r


@pytest.mark.parametrize("text", [b"5", b" 5\n", b"12\r\n", b"\t10 ", b"05"])
def test_plain_trackers_resume_the_folder_verl_resumes(root, text):
    (root / resume.TRACKER).write_bytes(text)
    kind, folder = verl_answer(root)
    assert kind == "ok"
    assert resume.resume_folder(str(root), "auto") == folder


@pytest.mark.parametrize("text", [b"1" + b" " * 63 + b"2", b"", b"0x10", b"5/../x", b"\xff5", b"1.0", b"5\x00"])
def test_trackers_verl_cannot_read_are_refused(root, text):
    (root / resume.TRACKER).write_bytes(text)
    assert verl_answer(root)[0] == "raises"
    with pytest.raises(CheckpointRefused, match="not a step number verl can read"):
        resume.resume_folder(str(root), "auto")


@pytest.mark.parametrize(
    "text,verl_reads", [(b"+5", 5), (b"1_0", 10), ("\u0665".encode(), 5), ("\uff11\uff12".encode(), 12)]
)
def test_trackers_verl_reads_as_another_number_are_refused(root, text, verl_reads):
    (root / resume.TRACKER).write_bytes(text)
    kind, folder = verl_answer(root)
    assert kind == "ok" and folder == str(root / f"global_step_{verl_reads}")
    with pytest.raises(CheckpointRefused, match=f"which verl reads as {verl_reads}"):
        resume.resume_folder(str(root), "auto")


def test_huge_tracker_is_refused(root):
    (root / resume.TRACKER).write_bytes(b" " * 5000 + b"5")
    assert verl_answer(root) == ("ok", str(root / "global_step_5"))  # verl reads it all
    with pytest.raises(CheckpointRefused, match="larger than 4096 bytes"):
        resume.resume_folder(str(root), "auto")


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "vlgrpo", "checkpoint", *args], capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o1777])
def test_a_folder_others_can_write_is_refused_not_a_fresh_start(root, mode):
    (root / resume.TRACKER).write_text("5")
    os.chmod(root, mode)
    with pytest.raises(CheckpointRefused, match="not safe from other users"):
        resume.resume_folder(str(root), "auto")
    # what the other user can then do: move the tracker away; the answer must still not be "fresh start"
    os.rename(root / resume.TRACKER, root.parent / "moved")
    r = _cli("resume-check", "--checkpoint-dir", str(root), "--mode", "auto")
    assert r.returncode == 2 and "not safe from other users" in r.stderr and "fresh start" not in r.stdout
    assert resume.resume_folder(str(root), "disable") is None  # no resume, nothing to protect


def test_a_missing_folder_is_judged_by_its_parent(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    with pytest.raises(CheckpointRefused, match="not safe from other users"):
        resume.resume_folder(str(shared / "new"), "auto")
    own = tmp_path / "own"
    own.mkdir(mode=0o700)
    assert resume.resume_folder(str(own / "new"), "auto") is None  # verl starts fresh and creates it


def test_folder_of_another_uid_is_refused(root):
    os.chown(root, 65534, 65534)
    try:
        with pytest.raises(CheckpointRefused, match="owned by uid 65534"):
            resume.resume_folder(str(root), "auto", uid=os.geteuid())
    finally:
        os.chown(root, os.geteuid(), os.getegid())


@pytest.mark.parametrize(
    "name,shown",
    [
        ("j\nglobal_step_2", "j\\nglobal_step_2"),
        ("a\rb", "a\\rb"),
        ("x\x1b[2Jy", "x\\x1b[2Jy"),
        ("p\u2028q", "p\\u2028q"),
        ("r\u202eevil", "r\\u202eevil"),
    ],
)
def test_paths_in_messages_stay_on_one_line(root, name, shown):
    r = _cli("verify", str(root) + "/" + name)
    assert r.returncode == 2
    assert len(r.stderr.rstrip("\n").splitlines()) == 1 and shown in r.stderr
    assert "\x1b" not in r.stderr and "\r" not in r.stderr
