"""A local, verified cache for the preflight: prompt-token counts of data rows (and other small JSON results).

Where: ``--cache-dir DIR`` of ``python -m vlgrpo preflight``, else ``<trainer.default_local_dir>/.vlgrpo-preflight-cache``
(beside the checkpoints; an absolute ``trainer.default_local_dir`` only -- a relative one depends on the trainer's
working directory). Nothing is read from or written to a folder that fails :func:`open_cache_dir`'s trust check.

Trust check (local, small; the same for the folder and every folder or file inside it): not a symlink, owned by
this user or root, not writable by group or others. A folder that fails is refused (``data.count-cache`` warning,
the data are counted without the cache). Folders are created with mode 0700, files with 0600.

Entries: one file per key, ``<namespace>/<key>.json``: a header line ``vlgrpo-cache 1 <hmac>`` then the JSON body.
``<hmac>`` is HMAC-SHA256 of the body with the folder's own random key (``key``, 32 bytes, mode 0600, created
once with ``O_EXCL``). An entry whose header, HMAC, JSON, key or namespace does not match is not trusted: the
caller recomputes it (a tampered or corrupt entry is recounted). Writes go to an ``O_EXCL`` temporary file in the
same folder, then :func:`os.replace`, so a reader sees the old entry or the new one, never half of one.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import stat
from typing import Any

#: folder name under trainer.default_local_dir
DEFAULT_DIRNAME = ".vlgrpo-preflight-cache"
_MAGIC = "vlgrpo-cache 1"
_KEY_FILE = "key"


class CacheRefused(Exception):
    """The cache folder (or a file in it) fails the trust check; the message says which path and why."""


def _trusted(st: os.stat_result, path: str, kind: str) -> None:
    if stat.S_ISLNK(st.st_mode):
        raise CacheRefused(f"{path} is a symlink")
    if kind == "dir" and not stat.S_ISDIR(st.st_mode):
        raise CacheRefused(f"{path} is not a folder")
    if kind == "file" and not stat.S_ISREG(st.st_mode):
        raise CacheRefused(f"{path} is not a regular file")
    if st.st_uid not in (os.getuid(), 0):
        raise CacheRefused(f"{path} is owned by uid {st.st_uid}, not by this user ({os.getuid()}) or root")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise CacheRefused(f"{path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})")


def _trusted_dir(path: str, create: bool) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if not create:
            raise CacheRefused(f"{path} does not exist") from None
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        st = os.lstat(path)
    _trusted(st, path, "dir")


class CountCache:
    """A trusted cache folder (see the module docstring). Build it with :func:`open_cache_dir`.

    ``get(namespace, key) -> dict | None`` (None: absent or not trusted; ``rejected`` counts the latter),
    ``put(namespace, key, body)``, ``list(namespace) -> [key, ...]`` (newest first). ``hits``/``misses``/``rejected``
    count what ``get`` returned, for the report's summary and the tests.
    """

    def __init__(self, root: str):
        self.root = root
        self.hits = self.misses = self.rejected = 0
        self._key = self._load_key()

    def _load_key(self) -> bytes:
        path = os.path.join(self.root, _KEY_FILE)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "wb") as fh:
                fh.write(os.urandom(32))
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as fh:
            _trusted(os.fstat(fh.fileno()), path, "file")
            key = fh.read()
        if len(key) != 32:
            raise CacheRefused(f"{path} is not a 32-byte key (remove it to start a new cache)")
        return key

    def _mac(self, body: bytes) -> str:
        return hmac.new(self._key, body, hashlib.sha256).hexdigest()

    def _folder(self, namespace: str, create: bool) -> str:
        if not namespace.replace("-", "").replace("_", "").isalnum():
            raise ValueError(f"namespace {namespace!r}: letters, digits, - and _ only")
        path = os.path.join(self.root, namespace)
        _trusted_dir(path, create)
        return path

    def get(self, namespace: str, key: str) -> dict[str, Any] | None:
        """The body stored under ``key``, or None (absent, or refused: not a trusted file, bad HMAC, bad JSON, or its
        recorded key/namespace differ)."""
        _check_key(key)
        try:
            folder = self._folder(namespace, create=False)
            fd = os.open(os.path.join(folder, key + ".json"), os.O_RDONLY | os.O_NOFOLLOW)
        except (CacheRefused, FileNotFoundError):
            self.misses += 1
            return None
        except OSError:  # ELOOP: a symlink
            self.rejected += 1
            return None
        with os.fdopen(fd, "rb") as fh:
            try:
                _trusted(os.fstat(fh.fileno()), fh.name, "file")
            except CacheRefused:
                self.rejected += 1
                return None
            data = fh.read()
        head, sep, body = data.partition(b"\n")
        parts = head.decode("ascii", "replace").rsplit(" ", 1)
        ok = sep and len(parts) == 2 and parts[0] == _MAGIC and hmac.compare_digest(parts[1], self._mac(body))
        try:
            value = json.loads(body) if ok else None
        except ValueError:
            value = None
        if not isinstance(value, dict) or value.get("_key") != key or value.get("_namespace") != namespace:
            self.rejected += 1
            return None
        self.hits += 1
        return value

    def put(self, namespace: str, key: str, body: dict[str, Any]) -> None:
        """Store ``body`` (JSON-serialisable dict) under ``key``, atomically (O_EXCL temp file + rename)."""
        _check_key(key)
        folder = self._folder(namespace, create=True)
        payload = json.dumps({**body, "_key": key, "_namespace": namespace}, separators=(",", ":")).encode()
        tmp = os.path.join(folder, f".tmp-{key}-{os.urandom(6).hex()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(f"{_MAGIC} {self._mac(payload)}\n".encode("ascii") + payload)
            os.replace(tmp, os.path.join(folder, key + ".json"))
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    def list(self, namespace: str, limit: int = 16) -> list[str]:
        """Keys stored in ``namespace``, newest first (at most ``limit``)."""
        try:
            folder = self._folder(namespace, create=False)
            entries = [e for e in os.scandir(folder) if e.name.endswith(".json") and not e.name.startswith(".")]
        except (CacheRefused, OSError):
            return []
        entries.sort(key=lambda e: e.stat(follow_symlinks=False).st_mtime_ns, reverse=True)
        return [e.name[:-5] for e in entries[:limit]]

    def stats(self) -> dict[str, Any]:
        return {"dir": self.root, "hits": self.hits, "misses": self.misses, "rejected": self.rejected}


def _check_key(key: str) -> None:
    if not key or not all(c in "0123456789abcdef" for c in key):
        raise ValueError(f"cache key {key!r}: lowercase hex only")


def open_cache_dir(path: str) -> CountCache:
    """The cache in ``path`` (created with mode 0700 if missing; its parent folder must exist: the preflight never
    creates a checkpoint root or any other folder above its own).

    Raises:
        CacheRefused: ``path`` (or its ``key`` file) is a symlink, not owned by this user or root, or writable by
            group/others; or it cannot be created (the message says why).
    """
    path = os.path.abspath(path)
    if not os.path.isdir(os.path.dirname(path)):
        raise CacheRefused(f"{os.path.dirname(path)} does not exist (the preflight creates only the cache folder)")
    try:
        _trusted_dir(path, create=True)
        return CountCache(path)
    except OSError as exc:
        raise CacheRefused(f"{path}: {exc.strerror or exc}") from None


def default_cache_dir(default_local_dir: Any) -> str | None:
    """``<trainer.default_local_dir>/.vlgrpo-preflight-cache`` for an absolute path, else None."""
    if isinstance(default_local_dir, str) and os.path.isabs(default_local_dir):
        return os.path.join(default_local_dir, DEFAULT_DIRNAME)
    return None


def file_sha256(path: str) -> str:
    """Hex SHA-256 of a file's content (read in 1 MiB blocks)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while True:
            block = fh.read(1 << 20)
            if not block:
                break
            h.update(block)
    return h.hexdigest()
