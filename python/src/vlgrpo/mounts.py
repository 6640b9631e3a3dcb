"""What holds a folder, and whether this process runs in a container: the mount table, read once for the launch
and for the checkpoint checks.

Mount facts come from ``/proc/self/mountinfo`` (proc(5): field 5 the mount point with the kernel's octal escapes
``\\040 \\011 \\012 \\134``, the field after ``-`` the type, then the source); the deepest mount holding the path wins,
and of two at the same point the later one. "In a container" is a marker file (``/.dockerenv``,
``/run/.containerenv``) or, for runtimes that leave none (Kubernetes with containerd or CRI-O), a root file system
that is a container layer or RAM (:data:`LAYER_ROOT_FS`). A checkpoint folder in a container must be a mount of its
own of a file-system type that holds a volume (:data:`VOLUME_FS`): anything else vanishes with the container or the
node. Standard library only, and nothing beyond ``os`` (the launcher imports it at every launch).
"""

from __future__ import annotations

import os

MOUNTINFO = "/proc/self/mountinfo"
CONTAINER_MARKERS = ("/.dockerenv", "/run/.containerenv")
#: root file-system types that mean "the container's own layer" (or a RAM root that vanishes likewise)
LAYER_ROOT_FS = frozenset(("overlay", "fuse-overlayfs", "fuse.fuse-overlayfs", "aufs", "tmpfs", "ramfs"))
#: file-system types that hold a checkpoint volume: disk and network/cluster file systems (an allowlist: tmpfs,
#: ramfs, devtmpfs, hugetlbfs, overlay, aufs, proc, sysfs, ... vanish with the container or the node, or are no volume)
VOLUME_FS = frozenset(
    (
        "ext2",
        "ext3",
        "ext4",
        "xfs",
        "btrfs",
        "zfs",
        "f2fs",
        "jfs",
        "nfs",
        "nfs4",
        "lustre",
        "gpfs",
        "ceph",
        "cephfs",
        "fuse.ceph",
        "beegfs",
        "glusterfs",
        "fuse.glusterfs",
        "cifs",
        "smb3",
        "virtiofs",
        "wekafs",
        "fuse.juicefs",
        "fuse.s3fs",
        "fuse.gcsfuse",
    )
)
VOLUME_FS_WORDS = (
    "ext4, xfs, btrfs, zfs, f2fs, nfs/nfs4, lustre, gpfs, cephfs, beegfs, glusterfs, cifs, virtiofs, wekafs"
)


class Mount:
    """One mountinfo line: ``point`` (unescaped), ``fstype``, ``source`` (e.g. ``/dev/loop3``). Compared by value."""

    __slots__ = ("point", "fstype", "source")

    def __init__(self, point: str, fstype: str, source: str) -> None:
        self.point, self.fstype, self.source = point, fstype, source

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mount) and (self.point, self.fstype, self.source) == (
            other.point,
            other.fstype,
            other.source,
        )

    def __hash__(self) -> int:
        return hash((self.point, self.fstype, self.source))

    def __repr__(self) -> str:
        return f"Mount(point={self.point!r}, fstype={self.fstype!r}, source={self.source!r})"


def unescape(field: str) -> str:
    """A mountinfo field with the kernel's ``\\NNN`` octal escapes decoded."""
    out, i = [], 0
    while i < len(field):
        c = field[i]
        octal = field[i + 1 : i + 4]
        if c == "\\" and len(octal) == 3 and all(ch in "01234567" for ch in octal):
            out.append(chr(int(octal, 8)))
            i += 4
        else:
            out.append(c)
            i += 1
    return "".join(out)


def read_mounts(mountinfo: str = MOUNTINFO) -> list[Mount]:
    """Every mount of ``mountinfo`` in file order. Raises OSError when it cannot be read."""
    out = []
    with open(mountinfo, encoding="utf-8", errors="surrogateescape") as fh:
        for line in fh:
            fields = line.split()
            if "-" not in fields or len(fields) < 5:
                continue
            dash = fields.index("-")
            if dash + 2 >= len(fields):
                continue
            out.append(Mount(unescape(fields[4]), fields[dash + 1], unescape(fields[dash + 2])))
    return out


def mount_of(path: str, mounts: list[Mount]) -> Mount | None:
    """The mount holding the real path ``path``: the longest mount point that is ``path`` or a parent of it, the
    later of two equal ones."""
    best = None
    for m in mounts:
        inside = m.point == "/" or path == m.point or path.startswith(m.point.rstrip("/") + "/")
        if inside and (best is None or len(m.point) >= len(best.point)):
            best = m
    return best


def in_container(markers: tuple[str, ...] | list[str] = CONTAINER_MARKERS, mountinfo: str = MOUNTINFO) -> bool:
    """True inside Docker/Podman (a marker file exists) and in containers that leave no marker: there the root file
    system (the last mount at ``/``) is a container layer or RAM (:data:`LAYER_ROOT_FS`). False when the mount table
    cannot be read."""
    if any(os.path.exists(m) for m in markers):
        return True
    try:
        roots = [m for m in read_mounts(mountinfo) if m.point == "/"]
    except OSError:
        return False
    return bool(roots) and roots[-1].fstype in LAYER_ROOT_FS


def real(path: str) -> str:
    """``path`` with every symlink resolved when it exists (``realpath -e``), else ``path`` as given."""
    try:
        return os.path.realpath(path, strict=True) if path else path
    except (OSError, RuntimeError):
        return path
