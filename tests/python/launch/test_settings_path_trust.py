"""The one path rule on the paths verl reads and writes, at the settings step: VLGRPO_MODEL_PATH, VLGRPO_TRAIN_FILE /
VLGRPO_VAL_FILE and VLGRPO_CHECKPOINT_DIR are refused (exit 2, before anything runs) when another user can change
what they name: a folder or file every user can write, a group-writable folder above, one owned by another uid, a link
through a folder others can write. The reference for "another user can change it" is the kernel: for each hostile
form, uid 12345 (``setpriv``) renames the path or creates an entry in it; the accepted forms (root's 0755, the user's
0700, a private folder straight in the sticky /tmp) stop it. Needs root (chown, setpriv)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from vlgrpo.launch import settings

REPO = Path(__file__).resolve().parents[3]
OTHER = 12345
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root (chown) and setpriv to act as another user"
)

# what the other user tries on the path: rename it (or its link) away, or add an entry to the folder it names
ATTACK = (
    "import os, sys\n"
    "p = sys.argv[1]\n"
    "try:\n"
    "    os.rename(p, p + '.x'); os.rename(p + '.x', p); print('renamed')\n"
    "except OSError: pass\n"
    "real = os.path.realpath(p)\n"
    "if os.path.isdir(real):\n"
    "    try:\n"
    "        open(os.path.join(real, 'planted.py'), 'x').close(); os.unlink(os.path.join(real, 'planted.py'))\n"
    "        print('planted')\n"
    "    except OSError: pass\n"
    "else:\n"
    "    try:\n"
    "        open(real, 'a').close(); print('written')\n"
    "    except OSError: pass\n"
    "    try:\n"
    "        d = os.path.dirname(real); os.rename(real, real + '.x'); os.rename(real + '.x', real); print('swapped')\n"
    "    except OSError: pass\n"
)


def _other_user_can_change(path: str) -> bool:
    """The kernel's answer: uid 12345 renames ``path`` or what it resolves to, plants a file in the folder it names,
    or writes the file it names. Renaming a component above is the same kind of change (test_pathrule covers it);
    here the failing component is always the path, its link or the folder right above."""
    for p in (path, os.path.dirname(os.path.realpath(path))):
        out = subprocess.run(
            ["setpriv", f"--reuid={OTHER}", f"--regid={OTHER}", "--clear-groups", sys.executable, "-c", ATTACK, p],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        if out.strip() and (p == path or "planted" in out):
            return True
    return False


@pytest.fixture
def base(tmp_path_factory):
    """A root-owned 0755 folder the other user can reach (pytest's folders above it made 0755 as well)."""
    d = tmp_path_factory.mktemp("trust")
    for p in (d, *d.parents):  # pytest-of-root, pytest-N and (under xdist) popen-gwN
        if str(p).startswith("/tmp/") and os.stat(p).st_uid == 0:
            os.chmod(p, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _tree(base: Path) -> dict[str, Path]:
    """A model folder, two data files and a checkpoint folder in ``base`` (0755 folders, 0644 files, root's)."""
    base.chmod(0o755)
    model = base / "model"
    model.mkdir(mode=0o755)
    for name in ("config.json", "tokenizer_config.json", "model-00001-of-00001.safetensors"):
        (model / name).write_text("{}")
        (model / name).chmod(0o644)
    data = base / "data"
    data.mkdir(mode=0o755)
    for name in ("train.parquet", "test.parquet"):
        (data / name).write_bytes(b"PAR1")
        (data / name).chmod(0o644)
    ckpt = base / "ckpt"
    ckpt.mkdir(mode=0o755)
    return {
        "VLGRPO_MODEL_PATH": model,
        "VLGRPO_TRAIN_FILE": data / "train.parquet",
        "VLGRPO_VAL_FILE": data / "test.parquet",
        "VLGRPO_CHECKPOINT_DIR": ckpt,
    }


def _env(paths: dict[str, Path]) -> dict[str, str]:
    return {name: str(p) for name, p in paths.items()}


def _line(env: dict[str, str], name: str) -> str:
    lines = [p for p in settings.read_settings("fa", env, "/").problems if p.split(":")[0] == name]
    assert len(lines) <= 1, lines
    return lines[0] if lines else ""


def _hostile(kind: str, target: Path, base: Path) -> tuple[Path, Path, str]:
    """Make ``target`` hostile in the way ``kind`` names; returns (the path to set, the failing component, its why)."""
    if kind == "world-writable":
        target.chmod(0o777 if target.is_dir() else 0o666)
        return target, target, f"can be written by every user (mode {0o777 if target.is_dir() else 0o666:04o})"
    if kind == "group-writable parent":
        target.parent.chmod(0o775)
        os.chown(target.parent, 0, OTHER)  # the other user's group
        return target, target.parent, "can be written by its group (mode 0775)"
    if kind == "another uid":
        os.chown(target, OTHER, OTHER)
        return target, target, f"is owned by uid {OTHER}"
    if kind == "link into a writable place":
        shared = base / "shared"
        shared.mkdir()
        shared.chmod(0o777)
        moved = shared / target.name
        target.rename(moved)
        link = base / "link"
        link.symlink_to(moved)
        return link, shared, "can be written by every user (mode 0777)"
    raise ValueError(kind)


HOSTILE = ("world-writable", "group-writable parent", "another uid", "link into a writable place")
INPUTS = ("VLGRPO_MODEL_PATH", "VLGRPO_TRAIN_FILE", "VLGRPO_CHECKPOINT_DIR")


@pytest.mark.parametrize("name", INPUTS)
@pytest.mark.parametrize("kind", HOSTILE)
def test_a_path_another_user_can_change_is_refused_naming_the_setting_component_and_fix(base, name, kind):
    paths = _tree(base)
    assert _line(_env(paths), name) == ""
    given, component, why = _hostile(kind, paths[name], base)
    assert _other_user_can_change(str(given)), "the kernel must let uid 12345 change it (the reference)"
    env = _env({**paths, name: given})
    line = _line(env, name)
    where = f"{given}" if component == given else f"{given}: {component}"
    assert line.startswith(f"{name}: {where} {why}"), line
    assert "another user could change what the launch reads or writes there" in line, line
    fix = line.split("; fix: ", 1)[1]
    assert str(component) in fix, line
    # exactly the settings whose path goes through the failing component are refused
    through = [n for n, v in env.items() if v == str(given) or (os.path.realpath(v) + "/").startswith(f"{component}/")]
    assert [p.split(":")[0] for p in settings.read_settings("fa", env, "/").problems] == through


@pytest.mark.parametrize("mode", [0o755, 0o700])
def test_root_owned_0755_and_private_0700_paths_pass(base, mode):
    paths = _tree(base)
    for p in (*paths.values(), paths["VLGRPO_TRAIN_FILE"].parent):  # the data folder
        p.chmod(mode if p.is_dir() else mode & 0o644)
    env = _env(paths)
    for name in env:
        assert not _other_user_can_change(str(paths[name])), name
        assert _line(env, name) == "", name


def test_a_private_folder_straight_in_the_sticky_tmp_passes(tmp_path):
    # what mktemp -d gives (the bats fixtures' folders): /tmp is root's and sticky, the folder 0700 and root's
    made = Path(tempfile.mkdtemp(prefix="vlgrpo-trust-", dir="/tmp"))
    try:
        paths = _tree(made)
        made.chmod(0o700)
        env = _env(paths)
        assert all(_line(env, name) == "" for name in env)
    finally:
        shutil.rmtree(made)


def test_the_entrypoint_refuses_them_with_exit_2_before_anything_runs(base, tmp_path):
    paths = _tree(base)
    paths["VLGRPO_MODEL_PATH"].chmod(0o777)
    os.chown(paths["VLGRPO_TRAIN_FILE"], OTHER, OTHER)
    paths["VLGRPO_CHECKPOINT_DIR"].chmod(0o777)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "python3").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    (bindir / "python3").chmod(0o755)
    env = _env(paths)
    proc = subprocess.run(
        [str(REPO / "entrypoints/fully-async-grpo.sh"), "--dry-run"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PATH": f"{bindir}:/usr/bin:/bin", **env},
    )
    assert proc.returncode == 2, proc.stderr
    lines = settings.read_settings("fa", env, str(tmp_path)).problems
    assert [line.split(":")[0] for line in lines] == list(INPUTS)
    assert proc.stderr.splitlines() == [f"fully-async-grpo.sh: error: {line}" for line in lines] + [
        f"fully-async-grpo.sh: {len(lines)} configuration problem(s); nothing was started (see --help)"
    ]
