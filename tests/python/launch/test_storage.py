"""Where the checkpoints go, and whether this is a container (vlgrpo.mounts, vlgrpo.launch.recipes
check_checkpoint_dir, vlgrpo.launch.childenv protected), in process.

The mount tables are written here in proc(5) mountinfo syntax (the kernel's own format, octal escapes included),
so each case states the machine it describes; the end-to-end cases (the real entrypoint, exit 2) are in
tests/bats/node-checks.bats and tests/bats/edges.bats.
"""

from __future__ import annotations

import pytest

from vlgrpo import mounts
from vlgrpo.launch import childenv, recipes


def _table(tmp_path, *lines):
    f = tmp_path / "mountinfo"
    f.write_text(
        "".join(f"{i + 20} 1 0:{i} / {point} rw - {fs} {src} rw\n" for i, (point, fs, src) in enumerate(lines))
    )
    return str(f)


def _st(tmp_path, mountinfo, markers=(), dry_run=False, plan=""):
    st = recipes.State()
    st.mountinfo, st.markers, st.dry_run = mountinfo, list(markers), dry_run
    st.values = {"PLAN_DEVICES_PER_NODE": plan}
    return st


def test_a_container_is_a_marker_file_or_a_layer_root(tmp_path):
    marker = tmp_path / ".dockerenv"
    plain = _table(tmp_path, ("/", "ext4", "/dev/vda1"))
    assert not mounts.in_container((str(marker),), plain)
    marker.touch()
    assert mounts.in_container((str(marker),), plain)
    for fs in ("overlay", "fuse-overlayfs", "aufs", "tmpfs"):
        assert mounts.in_container((), _table(tmp_path, ("/", "ext4", "/dev/vda1"), ("/", fs, fs))), fs
    # the last root mount counts (an overlay mounted over the host's root)
    assert not mounts.in_container((), _table(tmp_path, ("/", "overlay", "overlay"), ("/", "ext4", "/dev/vda1")))
    assert not mounts.in_container((), str(tmp_path / "no-such-table"))


def test_mount_points_with_escapes_are_the_real_folder_names(tmp_path):
    table = _table(tmp_path, ("/", "overlay", "overlay"), ("/mnt/my\\040vol", "ext4", "/dev/sdb1"))
    m = mounts.mount_of("/mnt/my vol/ckpt", mounts.read_mounts(table))
    assert m is not None and m.point == "/mnt/my vol" and m.fstype == "ext4"
    assert mounts.unescape("a\\011b\\012c\\134d\\0") == "a\tb\nc\\d\\0"


@pytest.mark.parametrize(
    "fs, refused",
    [
        ("ext4", False),
        ("xfs", False),
        ("nfs4", False),
        ("tmpfs", True),
        ("overlay", True),
        ("ramfs", True),
        ("hugetlbfs", True),
    ],
)
def test_in_a_container_the_checkpoint_folder_is_a_volume_mount(tmp_path, fs, refused):
    ck = tmp_path / "ckpt"
    ck.mkdir()
    st = _st(tmp_path, _table(tmp_path, ("/", "overlay", "overlay"), (str(ck), fs, "/dev/sdb1")), ["/"])
    recipes.check_checkpoint_dir(st, "VLGRPO_CHECKPOINT_DIR", str(ck))
    assert bool(st.problems) == refused
    if refused:
        assert st.problems[0].startswith(
            f"VLGRPO_CHECKPOINT_DIR: {ck} is on a {fs} mount ({ck}) that does not outlive the container"
        )
    assert not list(ck.iterdir())  # the write probe is gone


def test_the_containers_own_layer_is_refused_and_only_warned_in_a_planning_dry_run(tmp_path):
    ck = tmp_path / "ckpt"
    ck.mkdir()
    table = _table(tmp_path, ("/", "overlay", "overlay"))
    st = _st(tmp_path, table, ["/"])
    recipes.check_checkpoint_dir(st, "VLGRPO_CHECKPOINT_DIR", str(ck))
    assert st.problems == [
        f"VLGRPO_CHECKPOINT_DIR: {ck} is inside the container's own file system, so checkpoints "
        f"vanish with the container; fix: mount a host or shared volume there (docker run -v "
        f"HOST_DIR:{ck}, or a compose volume)"
    ]
    plan = _st(tmp_path, table, ["/"], dry_run=True, plan="8")
    recipes.check_checkpoint_dir(plan, "VLGRPO_CHECKPOINT_DIR", str(ck))
    assert plan.problems == [] and plan.notes[0].startswith("warning: VLGRPO_CHECKPOINT_DIR: ")
    # outside a container nothing but the write is checked
    host = _st(tmp_path, _table(tmp_path, ("/", "ext4", "/dev/vda1"), (str(ck), "tmpfs", "tmpfs")))
    recipes.check_checkpoint_dir(host, "VLGRPO_CHECKPOINT_DIR", str(ck))
    assert host.problems == []


def test_an_unwritable_folder_and_an_unreadable_table(tmp_path):
    st = _st(tmp_path, _table(tmp_path, ("/", "ext4", "/dev/vda1")))
    recipes.check_checkpoint_dir(st, "VLGRPO_CHECKPOINT_DIR", "/proc")  # no file can be made there, root or not
    assert st.problems[0].startswith("VLGRPO_CHECKPOINT_DIR: /proc is not writable by uid ")
    ck = tmp_path / "ckpt"
    ck.mkdir()
    st = _st(tmp_path, str(tmp_path / "gone"), [str(tmp_path)])
    recipes.check_checkpoint_dir(st, "VLGRPO_CHECKPOINT_DIR", str(ck))
    assert "inside a container, and " in st.problems[0] and "is unreadable" in st.problems[0]


def test_the_protected_folders_are_the_checkpoint_folder_and_its_volume(tmp_path):
    vol = tmp_path / "vol"
    ck = vol / "ckpt"
    ck.mkdir(parents=True)
    link = tmp_path / "ck-link"
    link.symlink_to(ck)
    table = _table(tmp_path, ("/", "overlay", "overlay"), (str(vol), "xfs", "/dev/sdb"))
    assert childenv.protected(str(link), ["/"], table) == (str(ck), str(vol))
    assert childenv.protected(str(ck), [], _table(tmp_path, ("/", "ext4", "/dev/vda1"), (str(vol), "xfs", "x"))) == (
        str(ck),
    )
    assert childenv.protected(str(tmp_path / "missing"), ["/"], table) == ()
    assert childenv.protected("", ["/"], table) == ()
