"""The checkpoint folder's storage: RAM, RAM disks and loop images on RAM are named (vlgrpo.checkpoint.volume).

Made-up mount tables and sysfs trees give each kind; one test loop-mounts a real ext4 image kept on /dev/shm (the
attack list's 1 TB image on RAM, smaller) and one on disk, as root with losetup, and reads the kernel's own answer.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from vlgrpo.checkpoint.volume import read_mounts, storage_problem


def _table(tmp_path, lines, loops=None):
    mi = tmp_path / "mountinfo"
    mi.write_text(
        "".join(f"{i + 20} 1 0:{i} / {point} rw - {fs} {src} rw\n" for i, (point, fs, src) in enumerate(lines))
    )
    sys_root = tmp_path / "sys"
    for dev, backing in (loops or {}).items():
        d = sys_root / "block" / dev / "loop"
        d.mkdir(parents=True)
        (d / "backing_file").write_text(backing + "\n")
    return str(mi), str(sys_root)


@pytest.fixture
def ckpt(tmp_path):
    d = tmp_path / "ckpt"
    d.mkdir()
    return d


def _ask(ckpt, tmp_path, lines, loops=None):
    mi, sys_root = _table(tmp_path, lines, loops)
    return storage_problem(str(ckpt), mountinfo=mi, sys_root=sys_root)


def test_plain_disk_is_fine(ckpt, tmp_path):
    before = shutil.disk_usage(ckpt).free
    s = _ask(ckpt, tmp_path, [("/", "ext4", "/dev/vda")])
    after = shutil.disk_usage(ckpt).free
    # the free space of the folder's own file system, read while other tests (xdist workers) write to the same disk:
    # within what changed around the call, plus a few blocks
    slack = 1 << 20
    assert s.problem == "" and min(before, after) - slack <= s.free_bytes <= max(before, after) + slack, (
        before,
        s,
        after,
    )


@pytest.mark.parametrize("fs", ["tmpfs", "ramfs"])
def test_folder_on_ram(ckpt, tmp_path, fs):
    s = _ask(ckpt, tmp_path, [("/", "ext4", "/dev/vda"), (str(ckpt), fs, fs)])
    assert f"on a {fs} mount" in s.problem


@pytest.mark.parametrize("dev,what", [("/dev/zram0", "zram"), ("/dev/ram1", "brd")])
def test_ram_disks(ckpt, tmp_path, dev, what):
    s = _ask(ckpt, tmp_path, [("/", "ext4", "/dev/vda"), (str(ckpt), "ext4", dev)])
    assert what in s.problem


@pytest.mark.parametrize("fs,word", [("tmpfs", "tmpfs"), ("ramfs", "ramfs"), ("overlay", "container")])
def test_loop_image_on_ram_or_the_container_layer(ckpt, tmp_path, fs, word):
    s = _ask(
        ckpt,
        tmp_path,
        [("/", "ext4", "/dev/vda"), ("/dev/shm", fs, fs), (str(ckpt), "ext4", "/dev/loop3")],
        {"loop3": "/dev/shm/ckpt.img"},
    )
    assert "loop device" in s.problem and word in s.problem and "/dev/shm/ckpt.img" in s.problem


def test_loop_on_loop_on_ram(ckpt, tmp_path):
    s = _ask(
        ckpt,
        tmp_path,
        [
            ("/", "ext4", "/dev/vda"),
            ("/dev/shm", "tmpfs", "tmpfs"),
            ("/mnt/a", "ext4", "/dev/loop1"),
            (str(ckpt), "ext4", "/dev/loop2"),
        ],
        {"loop2": "/mnt/a/inner.img", "loop1": "/dev/shm/a.img"},
    )
    assert s.problem.count("loop device") == 2 and "tmpfs" in s.problem


def test_later_mount_at_the_same_point_wins(ckpt, tmp_path):
    s = _ask(
        ckpt, tmp_path, [("/", "ext4", "/dev/vda"), (str(ckpt), "ext4", "/dev/vdb"), (str(ckpt), "tmpfs", "tmpfs")]
    )
    assert "tmpfs" in s.problem


def test_escaped_mount_points(tmp_path):
    d = tmp_path / "my ckpt"
    d.mkdir()
    mi = tmp_path / "mi"
    mi.write_text(
        f"20 1 0:1 / / rw - ext4 /dev/vda rw\n21 20 0:2 / {str(d).replace(' ', chr(92) + '040')} rw - tmpfs tmpfs rw\n"
    )
    assert read_mounts(str(mi))[1].point == str(d)
    assert "tmpfs" in storage_problem(str(d), mountinfo=str(mi)).problem


def test_unreadable_table_is_not_measured(ckpt):
    s = storage_problem(str(ckpt), mountinfo="/nonexistent/mountinfo")
    assert s.problem == "" and s.free_bytes is None


def _can_loop():
    return (
        os.geteuid() == 0
        and shutil.which("losetup")
        and os.path.exists("/usr/sbin/mkfs.ext4")
        and os.path.isdir("/dev/shm")
    )


@pytest.mark.skipif(not _can_loop(), reason="needs root, losetup, mkfs.ext4 and /dev/shm")
@pytest.mark.parametrize("on_ram", [True, False])
def test_real_loop_mount(tmp_path, on_ram):
    where = "/dev/shm" if on_ram else str(tmp_path)
    img = os.path.join(where, f"vlgrpo-test-{os.getpid()}-{on_ram}.img")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    # a sparse image larger than the disk under it (on disk: 1 TiB, more than this machine has free)
    size = (64 << 30) if on_ram else max(1 << 40, 2 * shutil.disk_usage(where).free)
    with open(img, "wb") as fh:
        fh.truncate(size)
    dev = ""
    try:
        subprocess.run(
            ["/usr/sbin/mkfs.ext4", "-q", "-F", "-O", "^has_journal", "-E", "lazy_itable_init=1", img],
            check=True,
            capture_output=True,
        )
        r = subprocess.run(["losetup", "-f", "--show", img], capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"no loop device here: {r.stderr.strip()}")
        dev = r.stdout.strip()
        r = subprocess.run(["mount", dev, str(mnt)], capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount here: {r.stderr.strip()}")
        s = storage_problem(str(mnt))
        if on_ram:
            assert "loop device" in s.problem and "tmpfs" in s.problem, s
        else:
            assert s.problem == ""
            # the backing file system caps the space a save can use: the sparse image reports more than the disk has
            loop_free, disk_free = shutil.disk_usage(str(mnt)).free, shutil.disk_usage(where).free
            assert loop_free > disk_free
            assert abs(s.free_bytes - disk_free) < (256 << 20), (s.free_bytes, disk_free, loop_free)
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)
        if dev:
            subprocess.run(["losetup", "-d", dev], capture_output=True)
        os.unlink(img)
