"""TMPDIR: the launch writes its working folder, the checked overrides and the preflight's argv there, so a folder
whose owner is another user (who may rename or delete every entry, sticky bit or not) is refused, and so are the
folders above it that fail the one path rule; /tmp (root's, sticky) and a folder of the launching user pass."""

from __future__ import annotations

import os

import pytest

from vlgrpo import environment


def _tmpdir_row():
    return next(r for r in environment.rows() if r.name == "TMPDIR")


def test_tmp_and_an_own_folder_pass(tmp_path):
    import tempfile

    row = _tmpdir_row()
    assert environment.check_value(row, "/tmp") == ""
    own = tmp_path / "t"
    own.mkdir(mode=0o700)
    assert environment.check_value(row, str(own)) == ""
    # the common case: a folder of one's own made straight in the sticky /tmp (mktemp -d)
    made = tempfile.mkdtemp(prefix="vlgrpo-tmpdir-", dir="/tmp")
    try:
        assert environment.check_value(row, made) == ""
    finally:
        os.rmdir(made)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand a folder to another uid")
@pytest.mark.parametrize("mode", [0o1777, 0o0755, 0o0700])
def test_a_folder_owned_by_another_user_is_refused_whatever_its_mode(tmp_path, mode):
    other = tmp_path / "other"
    other.mkdir()
    os.chown(other, 65534, 65534)
    other.chmod(mode)
    tmp_path.chmod(0o755)
    why = environment.check_value(_tmpdir_row(), str(other))
    assert "owned by uid 65534" in why and "can replace" in why, why


def test_a_group_writable_folder_of_ones_own_is_refused(tmp_path):
    shared = tmp_path / "g"
    shared.mkdir()
    shared.chmod(0o0775)
    why = environment.check_value(_tmpdir_row(), str(shared))
    # the one path rule's words: who can write it (its group, every user)
    assert "can be written by its group (mode 0775)" in why and "can replace" in why, why


def test_a_sticky_folder_passes_only_when_root_owns_it(tmp_path):
    # a sticky folder lets others create entries; only root's (/tmp) is a temporary folder, not one of the user's
    sticky = tmp_path / "s"
    sticky.mkdir()
    sticky.chmod(0o1777)
    uid = os.geteuid()
    if uid == 0:
        assert environment.check_value(_tmpdir_row(), str(sticky)) == ""
    else:
        why = environment.check_value(_tmpdir_row(), str(sticky))
        assert "can be written by every user (mode 1777)" in why, why


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand a folder to another uid")
def test_a_sticky_folder_of_another_user_and_a_link_to_a_writable_folder_are_refused(tmp_path):
    tmp_path.chmod(0o755)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    theirs.chmod(0o1777)
    os.chown(theirs, 12345, 12345)
    why = environment.check_value(_tmpdir_row(), str(theirs))
    assert "owned by uid 12345" in why and "can replace" in why, why
    # a link whose folder others can write: they can point it elsewhere
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    (tmp_path / "mine").mkdir(mode=0o700)
    os.symlink(tmp_path / "mine", shared / "link")
    why = environment.check_value(_tmpdir_row(), str(shared / "link"))
    assert why.startswith("lies below ") and f"{shared} can be written by every user" in why, why


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand a folder to another uid")
def test_a_folder_below_another_users_folder_is_refused(tmp_path):
    parent = tmp_path / "theirs"
    parent.mkdir()
    os.chown(parent, 65534, 65534)
    parent.chmod(0o755)
    mine = parent / "mine"
    mine.mkdir(mode=0o700)
    os.chown(mine, 0, 0)
    why = environment.check_value(_tmpdir_row(), str(mine))
    assert why.startswith("lies below ") and "owned by" in why, why
