"""The one path rule: may this launch trust a path it reads, writes or passes?

The semantics are those of OpenSSH's ``StrictModes`` (``auth.c``: ``secure_filename`` / ``safe_path``) and of
sudo's secure-path check: another user must not be able to change what the path names, now or later.

1. The path is made absolute and every symbolic link on the way is resolved (nested links too, at most 40).
   The folder that holds a link must itself pass, since whoever can write it can point the link elsewhere.
2. The path must exist at check time (a path that does not exist yet can be created by anyone who can write
   its parent, after the check).
3. Every folder that is traversed, from ``/`` down, and the path itself, must be owned by root or by the
   launching uid and carry no group or other write bit. One exception, for the folders above the path: a folder
   with the sticky bit (``/tmp``, mode 1777) is accepted when the entry below it is owned by root or the uid,
   since then only they can rename or remove that entry. The path itself never gets the exception.
4. ``kind="file"`` / ``"dir"``: the path is a regular file / a folder. ``secret=True`` (key files): a regular
   file owned by the launching uid with no group or other permission at all (0600 or 0400).
5. ``sticky_root=True`` (a temporary folder, TMPDIR): the path itself may be a root-owned sticky folder such as
   ``/tmp``, which others may write but where only root and an entry's owner can rename or remove that entry.
6. :func:`check_tree` (a model folder): the folder and every entry below it, links resolved, by rules 1-4.

Standard library only; no file is opened, only ``os.lstat`` and ``os.readlink`` are called.
"""

from __future__ import annotations

import dataclasses
import os
import stat

#: symbolic links followed at most while resolving one path (Linux's own limit, ``MAXSYMLINKS``)
MAX_LINKS = 40
KINDS = ("any", "file", "dir")


@dataclasses.dataclass(frozen=True)
class PathProblem:
    """Why a path fails the rule.

    path: the path as given. component: the path (absolute, links resolved up to there) of the part that fails.
    why: what is wrong with ``component``. fix: one change that makes the path pass.
    """

    path: str
    component: str
    why: str
    fix: str

    def text(self) -> str:
        """``<path>: <why>`` (naming the component when it is not the path itself)."""
        where = self.path if self.component == self.path else f"{self.path}: {self.component}"
        return f"{where} {self.why}"


def _who(uid: int) -> str:
    try:
        import pwd

        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def _owner_problem(path: str, original: str, st: os.stat_result, uid: int) -> PathProblem | None:
    if st.st_uid not in (0, uid):
        return PathProblem(
            original,
            path,
            f"is owned by {_who(st.st_uid)}, not by root or {_who(uid)} (the launching user)",
            f"use a folder of your own, or have its owner hand it over (chown {uid} {path})",
        )
    return None


def _write_problem(path: str, original: str, st: os.stat_result, sticky_ok: bool) -> PathProblem | None:
    mode = stat.S_IMODE(st.st_mode)
    if not mode & 0o022:
        return None
    if sticky_ok and mode & stat.S_ISVTX:
        return None
    who = "every user" if mode & 0o002 else "its group"
    return PathProblem(
        original,
        path,
        f"can be written by {who} (mode {mode:04o})",
        f"chmod go-w {path}, or use a folder only you (or root) can write",
    )


def check_path(
    path: str, *, kind: str = "any", secret: bool = False, uid: int | None = None, sticky_root: bool = False
) -> PathProblem | None:
    """Check ``path`` by the rule of this module; ``None`` when it passes.

    Args:
        path: the path (relative paths are taken from the working directory).
        kind: ``"any"``, ``"file"`` (a regular file) or ``"dir"`` (a folder), checked on the resolved path.
        secret: a key file: also a regular file owned by ``uid`` with mode 0600 or 0400 (no group/other bits).
        uid: the launching user; default ``os.geteuid()``.
        sticky_root: the path itself may be a root-owned sticky folder that others can write (``/tmp``).

    Returns:
        :class:`PathProblem` naming the first component that fails (from ``/`` down), or ``None``.

    Raises:
        ValueError: ``kind`` is not one of :data:`KINDS`, or ``path`` is empty or holds a NUL byte.
    """
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r}: use one of {', '.join(KINDS)}")
    if not path or "\0" in path:
        raise ValueError("path is empty or holds a NUL byte")
    uid = os.geteuid() if uid is None else uid
    original = path
    todo = [p for p in os.path.abspath(path).split("/") if p]
    cur = "/"
    links = 0
    try:
        st = os.lstat(cur)
    except OSError as exc:
        return PathProblem(original, cur, f"cannot be examined ({exc.strerror})", "run with / readable")
    # "/" is a folder above the path unless it is the path itself
    sticky_ok = bool(todo) or (sticky_root and st.st_uid == 0)
    problem = _owner_problem(cur, original, st, uid) or _write_problem(cur, original, st, sticky_ok=sticky_ok)
    if problem:
        return problem
    parent_st = st
    while todo:
        name = todo.pop(0)
        if name == ".":
            continue
        if name == "..":
            cur = os.path.dirname(cur) or "/"
            parent_st = os.lstat(cur)
            continue
        nxt = os.path.join(cur, name)
        try:
            st = os.lstat(nxt)
        except FileNotFoundError:
            return PathProblem(
                original,
                nxt,
                "does not exist (a path created after the check could be anyone's)",
                f"create it first (mkdir -m 0700 {nxt}, or mount it) and check again",
            )
        except OSError as exc:
            return PathProblem(
                original, nxt, f"cannot be examined ({exc.strerror})", "make it readable for the launching user"
            )
        last = not todo
        # the folder above lets others rename or replace this entry unless it is sticky and the entry is ours/root's
        if parent_st.st_mode & stat.S_ISVTX and parent_st.st_mode & 0o022 and st.st_uid not in (0, uid):
            return PathProblem(
                original,
                nxt,
                f"sits in the sticky shared folder {cur} but is owned by {_who(st.st_uid)}, who can replace it",
                "use an entry of your own in that folder",
            )
        if stat.S_ISLNK(st.st_mode):
            links += 1
            if links > MAX_LINKS:
                return PathProblem(
                    original, nxt, f"resolves through more than {MAX_LINKS} symbolic links", "point it at the real path"
                )
            target = os.readlink(nxt)
            base = "/" if target.startswith("/") else cur
            todo = [p for p in target.split("/") if p] + todo
            if base == "/":
                cur = "/"
                parent_st = os.lstat("/")
            continue
        sticky_ok = not last or (sticky_root and st.st_uid == 0)
        problem = _owner_problem(nxt, original, st, uid) or _write_problem(nxt, original, st, sticky_ok=sticky_ok)
        if problem:
            return problem
        if not last and not stat.S_ISDIR(st.st_mode):
            return PathProblem(original, nxt, "is not a folder", f"fix the path {original}")
        cur, parent_st = nxt, st
    if kind == "dir" and not stat.S_ISDIR(parent_st.st_mode):
        return PathProblem(original, cur, "is not a folder", f"point it at a folder (it resolves to {cur})")
    if (kind == "file" or secret) and not stat.S_ISREG(parent_st.st_mode):
        return PathProblem(original, cur, "is not a regular file", f"point it at a file (it resolves to {cur})")
    if secret:
        if parent_st.st_uid != uid:
            return PathProblem(
                original,
                cur,
                f"is owned by {_who(parent_st.st_uid)}; a key file must be the launching user's ({_who(uid)})",
                f"copy it to a file of your own: install -m 0600 {cur} ~/key",
            )
        mode = stat.S_IMODE(parent_st.st_mode)
        if mode & 0o077:
            return PathProblem(
                original,
                cur,
                f"can be read or written by others (mode {mode:04o}); a key file is 0600 or 0400",
                f"chmod 0600 {cur}",
            )
    return None


#: entries :func:`check_tree` looks at, at most (a model release holds a few dozen files)
MAX_TREE_ENTRIES = 100_000


def check_tree(path: str, *, uid: int | None = None) -> PathProblem | None:
    """Check folder ``path`` and every entry below it by :func:`check_path`; ``None`` when all pass.

    What a reader of the folder opens by name (``config.json``, a weight shard, ``sub/x``) is then what the launching
    user or root put there: the folder and its sub-folders cannot gain entries, and no entry can be changed or
    swapped, by anyone else. A link is resolved (its target and the folders above the target must pass); a linked
    folder is walked too, each real folder once. Entries are taken in name order, folder by folder, depth first.

    Args:
        path: the folder (relative paths are taken from the working directory).
        uid: the launching user; default ``os.geteuid()``.

    Returns:
        :class:`PathProblem` of the folder (``path``: the folder as given), or of the first entry that fails (its
        ``path``: that entry), or of a folder that cannot be listed or holds more than :data:`MAX_TREE_ENTRIES`
        entries in all.

    Raises:
        ValueError: as :func:`check_path`.
    """
    problem = check_path(path, kind="dir", uid=uid)
    if problem is not None:
        return problem
    seen: set[tuple[int, int]] = set()
    todo = [os.path.abspath(path)]
    count = 0
    while todo:
        folder = todo.pop()
        try:
            st = os.stat(folder)
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            names = sorted(os.listdir(folder))
        except OSError as exc:
            return PathProblem(
                folder, folder, f"cannot be listed ({exc.strerror})", "make it readable for the launching user"
            )
        below = []
        for name in names:
            count += 1
            if count > MAX_TREE_ENTRIES:
                return PathProblem(
                    path,
                    folder,
                    f"takes the folder past {MAX_TREE_ENTRIES} entries in all, more than this check looks at",
                    "point it at the folder that holds the files themselves",
                )
            entry = os.path.join(folder, name)
            problem = check_path(entry, uid=uid)
            if problem is not None:
                return problem
            if os.path.isdir(entry):
                below.append(entry)
        todo.extend(reversed(below))
    return None


def resolved(path: str) -> str:
    """The absolute path with every link resolved (``os.path.realpath``): what a checked path names."""
    return os.path.realpath(path)
