"""Is the checkpoint folder on storage that keeps a checkpoint? (an ext4 image on RAM passed for a
1 TB disk, and its kind)

A 30B checkpoint is hundreds of GB written over minutes; it must land on a disk that outlives the process, the
container and the node's next reboot. :func:`storage_problem` follows the folder's mount to the storage under it:

- the folder's file system is RAM (tmpfs, ramfs): lost at reboot, bounded by memory;
- its device is a RAM disk: ``/dev/zramN`` (compressed RAM), ``/dev/ramN`` (brd);
- its device is a loop device (``/dev/loopN``): the file behind it (``/sys/block/loopN/loop/backing_file``) is
  followed to its own mount, and judged the same way (an ext4 image on ``/dev/shm`` passes for a 1 TB disk); a
  backing file on a container's own layer (overlay, aufs) vanishes with the container. The space a loop file
  system reports is capped by what the backing file system has free (a sparse image overstates it).

Mount facts come from ``/proc/self/mountinfo`` through :mod:`vlgrpo.mounts` (the deepest mount holding the path
wins, and of two at the same point the later one). Standard library only.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil

from vlgrpo.mounts import Mount, mount_of, read_mounts

RAM_FS = ("tmpfs", "ramfs")
LAYER_FS = ("overlay", "fuse-overlayfs", "aufs")
MAX_DEPTH = 4  # loop devices stacked on loop devices, at most


@dataclasses.dataclass(frozen=True)
class Storage:
    """What holds a folder: ``chain`` the mounts from the folder down to the last storage followed,
    ``problem`` why a checkpoint would be lost there (``""`` when none), ``free_bytes`` the space a save can use
    (the loop file system's free space capped by its backing file system's), or None when not measured."""

    chain: tuple[Mount, ...]
    problem: str
    free_bytes: int | None


def _free(path: str) -> int | None:
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def storage_problem(
    path: str, *, mountinfo: str = "/proc/self/mountinfo", sys_root: str = "/sys", depth: int = 0
) -> Storage:
    """Follow the storage under ``path`` (a folder or file that exists) and say whether a checkpoint survives there.

    ``mountinfo`` and ``sys_root`` are where the mount table and sysfs are read (tests give a made-up tree).
    Never raises for an unreadable table: the answer is then "not measured" (``problem`` ``""``, free None).
    """
    real = os.path.realpath(path)
    try:
        mounts = read_mounts(mountinfo)
    except OSError:
        return Storage((), "", None)
    m = mount_of(real, mounts)
    if m is None:
        return Storage((), "", None)
    free = _free(real)
    if m.fstype in RAM_FS:
        return Storage(
            (m,), f"{real} is on a {m.fstype} mount ({m.point}): RAM, lost at reboot and bounded by memory", free
        )
    dev = os.path.basename(m.source)
    if re.fullmatch(r"zram[0-9]+", dev):
        return Storage((m,), f"{real} is on {m.source}, a compressed RAM disk (zram): lost at reboot", free)
    if re.fullmatch(r"ram[0-9]+", dev):
        return Storage((m,), f"{real} is on {m.source}, a RAM disk (brd): lost at reboot", free)
    if re.fullmatch(r"loop[0-9]+", dev) and depth < MAX_DEPTH:
        try:
            with open(
                os.path.join(sys_root, "block", dev, "loop", "backing_file"), encoding="utf-8", errors="surrogateescape"
            ) as fh:
                backing = fh.read().rstrip("\n")
        except OSError:
            return Storage((m,), "", free)
        backing = backing.removesuffix(" (deleted)")
        under = storage_problem(backing, mountinfo=mountinfo, sys_root=sys_root, depth=depth + 1)
        sub = under.chain[0] if under.chain else None
        if under.problem:
            return Storage(
                (m,) + under.chain,
                f"{real} is on {m.source}, a loop device whose image {backing} lies "
                f"where a checkpoint is lost: {under.problem}",
                free,
            )
        if sub is not None and sub.fstype in LAYER_FS:
            return Storage(
                (m,) + under.chain,
                f"{real} is on {m.source}, a loop device whose image {backing} lies "
                f"on the container's own layer ({sub.fstype}): it vanishes with the container",
                free,
            )
        capped = free if under.free_bytes is None or free is None else min(free, under.free_bytes)
        return Storage((m,) + under.chain, "", capped)
    return Storage((m,), "", free)
