"""The patch contract: what a fix declares (:class:`FixRecord`, read from its module's ``RECORD`` dict by
:func:`from_dict`) and the one way its code gets into an upstream object and out again (:func:`wrap`,
:func:`restore`, :func:`original`).

Every object a patch installs goes through :func:`wrap`: the engine's replacement of each faulty target, the
re-check wrappers around verl's monkey patch, and what a fix installs later itself (``checkpoint.manifest``'s
``torch.load`` guard). :func:`wrap` keeps what was bound before, so :func:`restore` puts back exactly that object
(or removes the attribute again where it came from a base class) in this interpreter, and :func:`original` answers
the unpatched object of a target. This is the patch/unpatch pair of dd-trace-py's and gevent's monkey-patch APIs,
written here on plain attribute access (nothing copied from them).

Imported by the registry and the engine (not at interpreter start: :mod:`vlgrpo.patches.bootstrap` reads
:mod:`vlgrpo.patches.index`). Standard library only; it imports no other module of the package.
"""

from __future__ import annotations

import dataclasses
import threading
import types
from typing import Any, Callable

#: The fields of a fix module's ``RECORD`` dict (their meaning: :mod:`vlgrpo.patches.registry`).
REQUIRED = ("id", "summary", "upstream", "applies_when", "targets", "detector", "replacement", "verify")
OPTIONAL = ("title", "wraps", "safety", "recheck_after")


class RecordError(ValueError):
    """A fix module's ``RECORD`` is malformed; the message names the module, the field and the fix."""


@dataclasses.dataclass(frozen=True)
class Target:
    """One target of a fix: the attribute ``path`` (dotted, resolved when checked) of module ``module``;
    ``detector`` (``"module:function"``) overrides the record's detector for it."""

    module: str
    path: str
    detector: str | None = None

    @property
    def name(self) -> str:
        """``module.path``, as the status rows name it."""
        return f"{self.module}.{self.path}"

    @property
    def ref(self) -> str:
        """``module:path``, as :func:`original` and :func:`vlgrpo.patches.engine.resolve` take it."""
        return f"{self.module}:{self.path}"


@dataclasses.dataclass(frozen=True)
class FixRecord:
    """The typed record of one runtime patch (fields: :mod:`vlgrpo.patches.registry`); ``module`` is the fix
    module that declared it (named in errors)."""

    id: str
    summary: str
    upstream: str
    applies_when: str
    targets: tuple[Target, ...]
    detector: str
    replacement: str
    verify: str
    title: str = ""
    wraps: bool = False
    safety: str | None = None
    recheck_after: tuple[tuple[str, str], ...] = ()
    module: str = ""


def _ref(value: object) -> bool:
    """True for a ``"package.module:attribute"`` string."""
    if not isinstance(value, str) or value.count(":") != 1:
        return False
    mod, attr = value.split(":")
    return all(p.isidentifier() for p in mod.split(".")) and all(p.isidentifier() for p in attr.split("."))


def _names(value: object, size: tuple[int, ...]) -> bool:
    return isinstance(value, (tuple, list)) and len(value) in size and all(isinstance(v, str) and v for v in value)


def from_dict(record: object, module: str) -> FixRecord:
    """The :class:`FixRecord` of ``record``, the ``RECORD`` dict of fix module ``module``.

    Raises:
        RecordError: ``record`` is not a dict, lacks a field of :data:`REQUIRED`, has a field outside
            :data:`REQUIRED` + :data:`OPTIONAL`, or a field of the wrong form; the message names ``module``, the
            field, what is wrong and what it should be.
    """

    def bad(field: str, problem: str, want: str) -> RecordError:
        return RecordError(
            f"{module}: RECORD[{field!r}] {problem}; fix: make it {want} (the record fields: vlgrpo.patches.registry)"
        )

    if not isinstance(record, dict):
        raise RecordError(
            f"{module}: RECORD is a {type(record).__name__}, not a dict; fix: define RECORD = {{...}} "
            "with the fields of vlgrpo.patches.registry"
        )
    for field in REQUIRED:
        if field not in record:
            raise bad(field, "is missing", "present")
    for field in record:
        if field not in REQUIRED + OPTIONAL:
            raise bad(field, "is not a record field", f"one of {', '.join(REQUIRED + OPTIONAL)} (or remove it)")
    pid = record["id"]
    if not (isinstance(pid, str) and pid and all(p.isidentifier() for p in pid.split("."))):
        raise bad("id", f"is {pid!r}", "dotted lowercase words such as 'qwen3_vl.vision_pos_embed'")
    for field in ("summary", "upstream", "applies_when", "title"):
        if not isinstance(record.get(field, ""), str):
            raise bad(field, f"is a {type(record[field]).__name__}", "a string")
    for field in ("detector", "replacement", "verify"):
        if not _ref(record[field]):
            raise bad(field, f"is {record[field]!r}", "a 'package.module:attribute' string")
    targets = record["targets"]
    if not isinstance(targets, (tuple, list)) or not targets:
        raise bad("targets", f"is {targets!r}", "a non-empty tuple of (module, attribute path[, detector]) tuples")
    for t in targets:
        if not _names(t, (2, 3)) or (len(t) == 3 and not _ref(t[2])):
            raise bad(
                "targets",
                f"has the entry {t!r}",
                "(module, attribute path) or (module, attribute path, 'module:detector') strings",
            )
    recheck = record.get("recheck_after", ())
    if not isinstance(recheck, (tuple, list)) or not all(_names(r, (2,)) for r in recheck):
        raise bad("recheck_after", f"is {recheck!r}", "a tuple of (module, function) string pairs")
    if not isinstance(record.get("wraps", False), bool):
        raise bad("wraps", f"is {record['wraps']!r}", "True (the replacement is a factory) or absent")
    safety = record.get("safety")
    if safety is not None and not (isinstance(safety, str) and safety):
        raise bad("safety", f"is {safety!r}", "one line saying what happens without the patch, or absent")
    return FixRecord(
        id=pid,
        summary=record["summary"],
        upstream=record["upstream"],
        applies_when=record["applies_when"],
        targets=tuple(Target(*t) for t in targets),
        detector=record["detector"],
        replacement=record["replacement"],
        verify=record["verify"],
        title=record.get("title", ""),
        wraps=record.get("wraps", False),
        safety=safety,
        recheck_after=tuple((m, f) for m, f in recheck),
        module=module,
    )


# ---- installing and undoing -------------------------------------------------------------------------------------

MISSING = object()
_LOCK = threading.RLock()


@dataclasses.dataclass(frozen=True)
class Installed:
    """What :func:`wrap` put in place: ``owner.attr`` is ``installed`` (for ``patch_id``); before, it was
    ``original`` (looked up) and ``raw`` the entry of ``owner.__dict__`` (``None`` with ``inherited``: the attribute
    came from a base class, so :func:`restore` deletes it again)."""

    patch_id: str
    target: str
    owner: Any
    attr: str
    original: Any
    installed: Any
    raw: Any
    inherited: bool


#: ``"module:path"`` -> :class:`Installed`, for every target a patch has replaced in this interpreter.
INSTALLED: dict[str, Installed] = {}


def _copy(func: Any, original: Any, patch_id: str, target: str) -> types.FunctionType:
    """A per-target copy of ``func`` that looks like ``original`` (``__name__``, ``__qualname__``, ``__doc__``,
    as :func:`functools.update_wrapper` sets them, without the original's ``__dict__``) and carries
    ``__wrapped__`` (``original``), ``__vlgrpo_patch__`` (the id) and ``__vlgrpo_target__``."""
    new = types.FunctionType(func.__code__, func.__globals__, func.__name__, func.__defaults__, func.__closure__)
    new.__kwdefaults__ = func.__kwdefaults__
    new.__dict__.update(func.__dict__)
    new.__module__ = func.__module__
    new.__annotations__ = dict(getattr(func, "__annotations__", {}))
    new.__name__ = getattr(original, "__name__", func.__name__)
    new.__qualname__ = getattr(original, "__qualname__", func.__qualname__)
    new.__doc__ = getattr(original, "__doc__", func.__doc__)
    new.__wrapped__ = original
    new.__vlgrpo_patch__ = patch_id
    new.__vlgrpo_target__ = target
    return new


def wrap(owner: Any, attr: str, replacement: Callable[..., Any], *, patch_id: str, target: str) -> types.FunctionType:
    """Bind a copy of function ``replacement`` as ``owner.attr`` for patch ``patch_id`` and record what was there.

    The one helper every fix's code is installed through (see the module docstring). ``target`` is its
    ``"module:path"`` (the key of :data:`INSTALLED`). Wrapping a target that is already ours for ``patch_id``
    replaces only the installed copy; the recorded original stays the first one.

    Returns:
        The installed copy (see :func:`_copy`).

    Raises:
        AttributeError: ``owner`` has no ``attr``.
        RuntimeError: the assignment did not take effect (a property, a read-only attribute).
    """
    with _LOCK:
        current = getattr(owner, attr)
        before = INSTALLED.get(target)
        mine = before is not None and before.patch_id == patch_id and current is before.installed
        original = before.original if mine and before is not None else current
        namespace = getattr(owner, "__dict__", {})
        raw = namespace.get(attr, MISSING)
        new = _copy(replacement, original, patch_id, target.replace(":", "."))
        setattr(owner, attr, new)
        if getattr(owner, attr) is not new:
            raise RuntimeError(f"setting {target.replace(':', '.')} did not take effect")
        if mine and before is not None:
            INSTALLED[target] = dataclasses.replace(before, installed=new)
        else:
            INSTALLED[target] = Installed(
                patch_id, target, owner, attr, current, new, None if raw is MISSING else raw, raw is MISSING
            )
        return new


def restore(target: str) -> bool:
    """Put back what :func:`wrap` replaced at ``target`` (``"module:path"``) and forget it.

    Only when ``owner.attr`` is still the object :func:`wrap` installed: a later rebind by someone else (verl's
    monkey patch, a test) is left alone. Names another module bound from the target while it was patched
    (``from m import f``) keep the replacement, as with any monkey patch.

    Returns:
        True when the original is bound again, False when nothing of ours was there.
    """
    with _LOCK:
        entry = INSTALLED.pop(target, None)
        if entry is None or getattr(entry.owner, entry.attr, None) is not entry.installed:
            return False
        if entry.inherited:
            delattr(entry.owner, entry.attr)
        else:
            setattr(entry.owner, entry.attr, entry.raw)
        return True


def original(target: str) -> Any:
    """The object ``target`` (``"module:path"``) was bound to before a patch replaced it; ``MISSING`` when no
    patch of this interpreter replaced it (or it was rebound since; see :func:`vlgrpo.patches.original`)."""
    with _LOCK:
        entry = INSTALLED.get(target)
        if entry is None or getattr(entry.owner, entry.attr, None) is not entry.installed:
            return MISSING
        return entry.original
