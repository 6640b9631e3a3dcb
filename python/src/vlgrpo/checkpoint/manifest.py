"""Manifests of a verl checkpoint folder: written by each writer at save, verified before verl loads anything.

Layout. Every writer of a ``global_step_N`` folder records the files it wrote in one manifest part at the top of
that folder, ``vlgrpo-manifest-<part>.json`` (e.g. ``vlgrpo-manifest-actor-rank-00003.json`` for FSDP rank 3,
``vlgrpo-manifest-rollouter.json`` for ``data.pt``, ``vlgrpo-manifest-trusted.json`` for a folder the user trusted
with ``python -m vlgrpo checkpoint trust``). A part is JSON::

    {"format": 1, "kind": "vlgrpo-checkpoint-manifest", "part": "actor-rank-00003", "step": 5,
     "verl_version": "0.8.0", "uid": 1000, "created": 1764576000.0,
     "files": {"actor/model_world_size_16_rank_3.pt": {"size": 123, "sha256": "<64 hex>"}, ...}}

Paths are relative to the ``global_step_N`` folder, ``/``-separated, never absolute, never ``..``.

Verification (:func:`verify`), cheapest first, refuses (:class:`CheckpointRefused`, naming the file) when:

1. the folder has no manifest part (a checkpoint written before vlgrpo's patch, or by another tool): the message
   carries the ``python -m vlgrpo checkpoint trust DIR`` command to run after checking it;
2. a part is not a regular file owned by the checking uid with no group/other write bit, is not valid JSON of this
   format, names another step than the folder's ``N``, was written by another uid, or lists a bad path;
3. anything under the folder is a symlink or not a regular file/directory, is owned by another uid, is group- or
   world-writable (directories too: a writable directory lets another user swap files), is listed in no part or in
   two, or has another size than its part says; a listed file is missing;
4. the sha256 of a file the caller is about to read (``read=``) differs from its part. Each rank hashes only the
   files it reads, several at a time (``hashlib`` releases the GIL on large buffers).

Standard library only (it runs inside verl's workers before ``torch.load``).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypedDict, Union

#: a path argument: ``str`` or anything ``os.fspath`` turns into one (``pathlib.Path``)
StrPath = Union[str, "os.PathLike[str]"]

FORMAT = 1
KIND = "vlgrpo-checkpoint-manifest"
PREFIX = "vlgrpo-manifest-"
SUFFIX = ".json"
CHUNK = 8 << 20  # bytes read per hashlib.update call
TRUST_COMMAND = "python -m vlgrpo checkpoint trust"


class Listed(TypedDict):
    """One file of :func:`inventory`'s answer: its manifest entry and the part (file name) that lists it."""

    size: int
    sha256: str
    part: str


class Verified(TypedDict):
    """:func:`verify`'s answer: files listed, the relative paths hashed, their bytes."""

    files: int
    hashed: list[str]
    bytes_hashed: int


class CheckpointRefused(RuntimeError):
    """A checkpoint folder (or a file in it) that must not be loaded. ``path`` names the file, ``reason`` what is
    wrong, ``fix`` what to do. ``str()`` is the full message. The CLI and the preflight exit 2 on it."""

    def __init__(self, path: StrPath, reason: str, fix: str) -> None:
        self.path, self.reason, self.fix = str(path), reason, fix
        super().__init__(f"vlgrpo checkpoint: refused {self.path}: {reason}. {fix}")


def part_name(name: str) -> str:
    """File name of the manifest part ``name`` (``[A-Za-z0-9._-]+``). Raises ``ValueError`` otherwise."""
    if not name or any(not (c.isalnum() or c in "._-") for c in name):
        raise ValueError(f"manifest part name {name!r}: use letters, digits, '.', '_' or '-'")
    return PREFIX + name + SUFFIX


def is_manifest(name: str) -> bool:
    """True for a manifest part's file name (top level of a ``global_step_N`` folder)."""
    return name.startswith(PREFIX) and name.endswith(SUFFIX)


def is_step_number(text: str) -> bool:
    """True for the ``N`` verl writes in ``global_step_N``: 1-18 ASCII digits (``str.isdigit`` alone also takes
    superscripts, Arabic-Indic and fullwidth digits, which ``int`` then refuses or reads as another number)."""
    return 1 <= len(text) <= 18 and text.isascii() and text.isdigit()


def step_of(step_dir: StrPath) -> int:
    """``N`` of a ``.../global_step_N`` folder. Raises :class:`CheckpointRefused` for another name."""
    base = os.path.basename(os.path.normpath(os.fspath(step_dir)))
    digits = base[len("global_step_") :]
    if not base.startswith("global_step_") or not is_step_number(digits):
        raise CheckpointRefused(step_dir, "is not a global_step_N folder", "point at .../global_step_N")
    return int(digits)


def sha256_file(path: StrPath, chunk: int = CHUNK) -> str:
    """Hex sha256 of the file at ``path``, read in ``chunk``-byte pieces (``OSError`` if unreadable)."""
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as fh:
        buf = bytearray(chunk)
        view = memoryview(buf)
        while True:
            n = fh.readinto(buf)
            if not n:
                break
            h.update(view[:n])
    return h.hexdigest()


def _hash_all(paths: list[str], workers: int) -> dict[str, str]:
    """``{path: sha256}`` for ``paths``, ``workers`` files at a time."""
    if not paths:
        return {}
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(paths)))) as pool:
        return dict(zip(paths, pool.map(sha256_file, paths)))


def _default_workers() -> int:
    return max(1, min(8, os.cpu_count() or 1))


def _rel(step_dir: str, path: str) -> str:
    rel = os.path.relpath(os.path.abspath(path), os.path.abspath(step_dir))
    if rel.startswith("..") or os.path.isabs(rel):
        raise ValueError(f"{path} is not inside {step_dir}")
    return rel.replace(os.sep, "/")


def _drop_write_bits(path: str) -> None:
    """Remove group/other write permission (a umask of 002 leaves them; verification refuses them)."""
    mode = os.lstat(path).st_mode
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        os.chmod(path, stat.S_IMODE(mode) & ~(stat.S_IWGRP | stat.S_IWOTH))


def write_part(
    step_dir: StrPath,
    files: Iterable[StrPath],
    part: str,
    *,
    verl_version: str | None = None,
    workers: int | None = None,
) -> str:
    """Hash ``files`` (paths inside ``step_dir``) and write the manifest part ``part`` for them atomically.

    Also drops group/other write bits of those files and of the folders between them and ``step_dir`` (verification
    refuses them). Returns the part's path. Raises ``ValueError`` for a path outside ``step_dir``, ``OSError`` for an
    unreadable file. The step comes from the folder's name.
    """
    step_dir = os.fspath(step_dir)
    step = step_of(step_dir)
    entries: dict[str, dict[str, int | str]] = {}
    paths = [os.fspath(f) for f in files]
    digests = _hash_all(paths, workers or _default_workers())
    for path in paths:
        rel = _rel(step_dir, path)
        _drop_write_bits(path)
        parent = os.path.dirname(os.path.abspath(path))
        while len(parent) >= len(os.path.abspath(step_dir)):
            _drop_write_bits(parent)
            parent = os.path.dirname(parent)
        entries[rel] = {"size": os.lstat(path).st_size, "sha256": digests[path]}
    doc: dict[str, object] = {
        "format": FORMAT,
        "kind": KIND,
        "part": part,
        "step": step,
        "verl_version": verl_version,
        "uid": os.getuid(),
        "created": time.time(),
        "files": dict(sorted(entries.items())),
    }
    target = os.path.join(step_dir, part_name(part))
    tmp = f"{target}.tmp.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1)
        fh.write("\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, target)
    return target


def check_owned(path: StrPath, st: os.stat_result, uid: int, what: str = "file") -> None:
    """Refuse (:class:`CheckpointRefused`) a ``path`` whose ``os.lstat`` result ``st`` shows another owner than
    ``uid`` or a group/other write bit; ``what`` names it in the message."""
    if st.st_uid != uid:
        raise CheckpointRefused(
            path,
            f"{what} is owned by uid {st.st_uid}, not by uid {uid} that runs this job",
            "only files this user wrote are loaded; remove the folder, or check it and "
            f"`chown -R {uid}` it, then run `{TRUST_COMMAND} <global_step_N>`",
        )
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise CheckpointRefused(
            path,
            f"{what} is group- or world-writable (mode {stat.S_IMODE(st.st_mode):04o})",
            "another user could have replaced it; check it, `chmod go-w` it, then run "
            f"`{TRUST_COMMAND} <global_step_N>`",
        )


def _load_part(path: str, step: int, uid: int) -> dict[str, Any]:
    """The checked JSON document of the manifest part at ``path`` (``files`` maps relative paths to entries with an
    ``int`` size and a 64-character ``sha256``). Raises :class:`CheckpointRefused`."""
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        raise CheckpointRefused(path, "manifest is not a regular file", "remove it")
    check_owned(path, st, uid, "manifest")
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError, RecursionError) as exc:  # RecursionError: JSON nested deeper than the stack
        raise CheckpointRefused(
            path,
            f"manifest is unreadable ({type(exc).__name__}: {exc})",
            f"check the folder, remove the manifest and run `{TRUST_COMMAND}`",
        ) from None
    files: object = doc.get("files") if isinstance(doc, dict) else None
    if (
        not isinstance(doc, dict)
        or doc.get("kind") != KIND
        or doc.get("format") != FORMAT
        or not isinstance(files, dict)
    ):
        raise CheckpointRefused(
            path,
            f"is not a vlgrpo manifest of format {FORMAT}",
            f"check the folder, remove the file and run `{TRUST_COMMAND}`",
        )
    if doc.get("step") != step:
        raise CheckpointRefused(
            path,
            f"manifest is for step {doc.get('step')!r}, the folder is global_step_{step}",
            f"a manifest copied from another checkpoint; check the folder and run `{TRUST_COMMAND}`",
        )
    if doc.get("uid") != uid:
        raise CheckpointRefused(
            path,
            f"manifest was written by uid {doc.get('uid')!r}, this job runs as uid {uid}",
            f"run the job as the user that wrote the checkpoint, or check it and run `{TRUST_COMMAND}`",
        )
    for rel, entry in files.items():
        parts = rel.split("/")
        if (
            not isinstance(rel, str)
            or rel.startswith("/")
            or any(p in ("", ".", "..") for p in parts)
            or not isinstance(entry, dict)
            or not isinstance(entry.get("size"), int)
            or not isinstance(entry.get("sha256"), str)
            or len(entry["sha256"]) != 64
        ):
            raise CheckpointRefused(path, f"manifest lists a bad entry {rel!r}", f"run `{TRUST_COMMAND}` again")
    return doc


def inventory(step_dir: StrPath, uid: int | None = None) -> dict[str, Listed]:
    """The cheap checks (1-3 of the module doc) of ``step_dir``: no hashing.

    Returns ``{relpath: {"size", "sha256", "part"}}`` of every file the manifests list. Raises
    :class:`CheckpointRefused` naming the first offending file.
    """
    step_dir = os.path.abspath(os.fspath(step_dir))
    uid = os.getuid() if uid is None else uid
    step = step_of(step_dir)
    try:
        st = os.lstat(step_dir)
    except OSError as exc:
        raise CheckpointRefused(step_dir, f"cannot be read ({exc.strerror})", "check the path") from None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise CheckpointRefused(
            step_dir,
            "is a symlink or not a directory",
            "point at the real global_step_N folder inside the checkpoint folder",
        )
    check_owned(step_dir, st, uid, "folder")
    names = sorted(os.listdir(step_dir))
    parts = [n for n in names if is_manifest(n)]
    if not parts:
        raise CheckpointRefused(
            step_dir,
            "has no vlgrpo manifest (written before vlgrpo's checkpoint patch, or by "
            "another tool), so nothing shows that this job's user wrote what is in it",
            f"check where it came from, then run `{TRUST_COMMAND} {step_dir}` once",
        )
    listed: dict[str, Listed] = {}
    for name in parts:
        doc = _load_part(os.path.join(step_dir, name), step, uid)
        for rel, entry in doc["files"].items():
            if rel in listed:
                raise CheckpointRefused(
                    os.path.join(step_dir, rel),
                    f"is listed in two manifests ({listed[rel]['part']} and {name})",
                    f"run `{TRUST_COMMAND}` again",
                )
            listed[rel] = {"size": entry["size"], "sha256": entry["sha256"], "part": name}
    seen: set[str] = set()
    for root, dirs, files in os.walk(step_dir):
        for name in sorted(dirs + files):
            path = os.path.join(root, name)
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                raise CheckpointRefused(
                    path,
                    "is a symlink (it could point anywhere)",
                    f"replace it by the file it points to, check it and run `{TRUST_COMMAND}`",
                )
            check_owned(path, st, uid, "folder" if stat.S_ISDIR(st.st_mode) else "file")
            if stat.S_ISDIR(st.st_mode):
                continue
            if not stat.S_ISREG(st.st_mode):
                raise CheckpointRefused(path, "is not a regular file", "remove it")
            rel = _rel(step_dir, path)
            if root == step_dir and is_manifest(name):
                continue
            entry = listed.get(rel)
            if entry is None:
                raise CheckpointRefused(
                    path,
                    "is in no manifest (added after the checkpoint was written)",
                    f"remove it, or check it and run `{TRUST_COMMAND} {step_dir}`",
                )
            if st.st_size != entry["size"]:
                raise CheckpointRefused(
                    path,
                    f"has {st.st_size} bytes, its manifest {entry['part']} says {entry['size']} (changed or cut short)",
                    "resume from an earlier checkpoint, or restore the file",
                )
            seen.add(rel)
    missing = sorted(set(listed) - seen)
    if missing:
        raise CheckpointRefused(
            os.path.join(step_dir, missing[0]),
            f"is listed in {listed[missing[0]]['part']} but missing",
            "resume from an earlier checkpoint, or restore the file",
        )
    return listed


def verify(
    step_dir: StrPath, read: Iterable[str] = (), *, uid: int | None = None, workers: int | None = None
) -> Verified:
    """Check ``step_dir`` (:func:`inventory`), then the sha256 of each file of ``read`` (relative paths) that this
    caller is about to load. Returns ``{"files": n_listed, "hashed": [relpaths], "bytes_hashed": n}``.

    Raises :class:`CheckpointRefused` naming the first offending file; a file of ``read`` that the manifests do not
    list is refused too.
    """
    step_dir = os.path.abspath(os.fspath(step_dir))
    listed = inventory(step_dir, uid)
    rels = [r.replace(os.sep, "/") for r in read]
    for rel in rels:
        if rel not in listed:
            raise CheckpointRefused(
                os.path.join(step_dir, rel),
                "is to be loaded but is in no manifest",
                f"check the folder and run `{TRUST_COMMAND} {step_dir}`",
            )
    paths = [os.path.join(step_dir, rel) for rel in rels]
    digests = _hash_all(paths, workers or _default_workers())
    for rel, path in zip(rels, paths):
        if digests[path] != listed[rel]["sha256"]:
            raise CheckpointRefused(
                path,
                f"changed since it was written (sha256 {digests[path][:16]}..., its "
                f"manifest {listed[rel]['part']} says {listed[rel]['sha256'][:16]}...)",
                "resume from an earlier checkpoint; do not trust this one without knowing why",
            )
    return {"files": len(listed), "hashed": rels, "bytes_hashed": sum(listed[r]["size"] for r in rels)}


def trust(step_dir: StrPath, *, verl_version: str | None = None, workers: int | None = None) -> str:
    """Write ``vlgrpo-manifest-trusted.json`` for every file of ``step_dir`` not listed yet (after the user checked
    the folder). Files must be regular, owned by this uid; symlinks are refused. Returns the part's path.

    Raises :class:`CheckpointRefused` like :func:`inventory` for symlinks, foreign owners and non-regular files.
    """
    step_dir = os.path.abspath(os.fspath(step_dir))
    uid = os.getuid()
    step_of(step_dir)
    st = os.lstat(step_dir)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise CheckpointRefused(step_dir, "is a symlink or not a directory", "point at the real folder")
    if st.st_uid != uid:
        check_owned(step_dir, st, uid, "folder")
    already: dict[str, object] = {}
    for name in os.listdir(step_dir):
        if is_manifest(name) and name != part_name("trusted"):
            already.update(_load_part(os.path.join(step_dir, name), step_of(step_dir), uid)["files"])
    todo: list[str] = []
    for root, dirs, files in os.walk(step_dir):
        for name in sorted(dirs + files):
            path = os.path.join(root, name)
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                raise CheckpointRefused(path, "is a symlink", "replace it by the file it points to")
            if st.st_uid != uid:
                check_owned(path, st, uid, "file")
            if stat.S_ISDIR(st.st_mode):
                _drop_write_bits(path)
                continue
            if root == step_dir and is_manifest(name):
                continue
            if not stat.S_ISREG(st.st_mode):
                raise CheckpointRefused(path, "is not a regular file", "remove it")
            if _rel(step_dir, path) not in already:
                todo.append(path)
    _drop_write_bits(step_dir)
    return write_part(step_dir, todo, "trusted", verl_version=verl_version, workers=workers)
