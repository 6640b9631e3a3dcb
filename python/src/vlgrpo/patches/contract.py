"""The patch contract: what a fix declares (:class:`FixRecord`, read from its module's ``RECORD`` dict by
:func:`from_dict`).

Imported by the registry and the engine (not at interpreter start: :mod:`vlgrpo.patches.bootstrap` reads
:mod:`vlgrpo.patches.index`). Standard library only; it imports no other module of the package.
"""

from __future__ import annotations

import dataclasses

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
    return (isinstance(value, (tuple, list)) and len(value) in size and all(isinstance(v, str) and v for v in value))


def from_dict(record: object, module: str) -> FixRecord:
    """The :class:`FixRecord` of ``record``, the ``RECORD`` dict of fix module ``module``.

    Raises:
        RecordError: ``record`` is not a dict, lacks a field of :data:`REQUIRED`, has a field outside
            :data:`REQUIRED` + :data:`OPTIONAL`, or a field of the wrong form; the message names ``module``, the
            field, what is wrong and what it should be.
    """
    def bad(field: str, problem: str, want: str) -> RecordError:
        return RecordError(f"{module}: RECORD[{field!r}] {problem}; fix: make it {want} "
                           "(the record fields: vlgrpo.patches.registry)")

    if not isinstance(record, dict):
        raise RecordError(f"{module}: RECORD is a {type(record).__name__}, not a dict; fix: define RECORD = {{...}} "
                          "with the fields of vlgrpo.patches.registry")
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
            raise bad("targets", f"has the entry {t!r}",
                      "(module, attribute path) or (module, attribute path, 'module:detector') strings")
    recheck = record.get("recheck_after", ())
    if not isinstance(recheck, (tuple, list)) or not all(_names(r, (2,)) for r in recheck):
        raise bad("recheck_after", f"is {recheck!r}", "a tuple of (module, function) string pairs")
    if not isinstance(record.get("wraps", False), bool):
        raise bad("wraps", f"is {record['wraps']!r}", "True (the replacement is a factory) or absent")
    safety = record.get("safety")
    if safety is not None and not (isinstance(safety, str) and safety):
        raise bad("safety", f"is {safety!r}", "one line saying what happens without the patch, or absent")
    return FixRecord(
        id=pid, summary=record["summary"], upstream=record["upstream"], applies_when=record["applies_when"],
        targets=tuple(Target(*t) for t in targets), detector=record["detector"], replacement=record["replacement"],
        verify=record["verify"], title=record.get("title", ""), wraps=record.get("wraps", False), safety=safety,
        recheck_after=tuple((m, f) for m, f in recheck), module=module)
