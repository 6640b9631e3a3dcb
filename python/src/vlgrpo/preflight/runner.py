"""A small runner for the preflight's ordered list of named checks.

A :class:`Check` declares what it reads (``needs``: names of values in the :class:`Context`), what it adds
(``gives``) and the finding codes it can report (``codes``, each declared once as a :class:`Code`). The runner
runs the checks in order; a check whose inputs are missing is skipped with the reason the producer gave for the
missing value (e.g. ``typed_work: values of the wrong type (schema.value-type)``); every check is timed.

Only the standard library is imported here, so the declarations can be listed (``python -m vlgrpo preflight
codes``) without verl.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable

from .report import ERROR, WARNING, Report

#: severities a code may declare: always an error, always a warning, or either (the check decides, e.g. an
#: over-budget row is a warning when verl drops it and an error when it reaches the rollout)
EITHER = "error/warning"


@dataclasses.dataclass(frozen=True)
class Code:
    """One finding code, declared once.

    code: ``<area>.<name>``, e.g. ``schema.unknown-key``.
    severity: :data:`~vlgrpo.preflight.report.ERROR`, :data:`~vlgrpo.preflight.report.WARNING` or :data:`EITHER`.
    summary: one line for the code list (``python -m vlgrpo preflight codes``).
    runs_code: True for findings about settings or files that would make a process import or execute code it
        was not shipped with (B17: ``trust_remote_code``, a module path, a ``_target_``, ``auto_map``). Properties
        every finding of a code shares belong here, next to this one (e.g. whether a switch such as
        ``VLGRPO_PREFLIGHT=warn`` may downgrade it).
    """

    code: str
    severity: str
    summary: str
    runs_code: bool = False

    def __post_init__(self) -> None:
        if self.severity not in (ERROR, WARNING, EITHER):
            raise ValueError(f"{self.code}: severity {self.severity!r} is not error, warning or {EITHER}")


@dataclasses.dataclass(frozen=True)
class Check:
    """One named step of the preflight.

    name: stable identifier (the key of its timing in ``summary["timings_s"]``).
    needs: names of :class:`Context` values the check reads; it is skipped when one is missing.
    gives: names of values it adds with :meth:`Context.give` (or declines with :meth:`Context.withhold`).
    codes: finding codes it can report (declared in the runner's code table).
    run: ``run(ctx) -> None``.
    doc: one line: what it checks and the upstream source it mirrors.
    """

    name: str
    needs: tuple[str, ...]
    gives: tuple[str, ...]
    codes: tuple[str, ...]
    run: Callable[["Context"], None]
    doc: str = ""


class Context:
    """The values the checks read and give, by name, with the reason for each one that is missing.

    ``ctx["work"]`` reads a value (KeyError when missing); ``ctx.get(name)`` returns None instead;
    ``ctx.give(name, value)`` adds one; ``ctx.withhold(name, reason)`` records why it is not there.
    ``ctx.report`` and ``ctx.summary`` are the report being built and its summary dict.
    """

    def __init__(self, report: Report, **values: Any):
        self.report = report
        self.summary = report.summary
        self._values: dict[str, Any] = {}
        self._absent: dict[str, str] = {}
        for name, value in values.items():
            self.give(name, value)

    def give(self, name: str, value: Any) -> None:
        self._values[name] = value
        self._absent.pop(name, None)

    def withhold(self, name: str, reason: str) -> None:
        self._values.pop(name, None)
        self._absent[name] = reason

    def __contains__(self, name: str) -> bool:
        return name in self._values

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self._values.get(name, default)

    def missing_reason(self, name: str) -> str:
        return self._absent.get(name, "not given")


class CheckCrashed(Exception):
    """A check raised: ``check`` is its name, ``__cause__`` the exception."""

    def __init__(self, check: str):
        super().__init__(check)
        self.check = check


def run_checks(checks: list[Check] | tuple[Check, ...], ctx: Context) -> list[dict[str, Any]]:
    """Run ``checks`` in order on ``ctx``.

    Records ``ctx.summary["timings_s"][name]`` (seconds, 3 decimals) for each check that ran and returns one
    entry per check: ``{"check", "status": "ran"|"skipped", "seconds"|"reason", "findings"}``. A finding whose
    code the check did not declare is kept and listed under ``"undeclared"`` in its entry. A declared ``gives``
    name the check neither gave nor withheld is withheld with ``"<check> gave no <name>"``.

    Raises:
        CheckCrashed: a check raised; the original exception is ``__cause__`` (the runs so far are in
            ``ctx.summary["checks"]``). The caller decides what a crash means (:mod:`vlgrpo.preflight.api`:
            an internal error, exit 1).
    """
    timings = ctx.summary.setdefault("timings_s", {})
    log: list[dict[str, Any]] = []
    ctx.summary["checks"] = log
    for check in checks:
        missing = [n for n in check.needs if n not in ctx]
        if missing:
            reason = "; ".join(f"{n}: {ctx.missing_reason(n)}" for n in missing)
            log.append({"check": check.name, "status": "skipped", "reason": reason})
            for name in check.gives:
                if name not in ctx._absent:
                    ctx.withhold(name, f"{check.name} did not run")
            continue
        before = len(ctx.report.findings)
        t0 = time.perf_counter()
        entry: dict[str, Any] = {"check": check.name, "status": "ran"}
        log.append(entry)
        try:
            check.run(ctx)
        except Exception as exc:
            entry["status"] = "crashed"
            raise CheckCrashed(check.name) from exc
        finally:
            entry["seconds"] = timings[check.name] = round(time.perf_counter() - t0, 3)
            new = ctx.report.findings[before:]
            entry["findings"] = len(new)
            undeclared = sorted({f.code for f in new} - set(check.codes))
            if undeclared:
                entry["undeclared"] = undeclared
        for name in check.gives:
            if name not in ctx and name not in ctx._absent:
                ctx.withhold(name, f"{check.name} gave no {name}")
    return log


def code_table(
    codes: dict[str, Code], checks: list[Check] | tuple[Check, ...], extra_givers: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """One row per declared code: code, severity, summary, runs_code and the checks that can give it."""
    givers: dict[str, list[str]] = {c: [] for c in codes}
    for check in checks:
        for c in check.codes:
            givers.setdefault(c, []).append(check.name)
    for c, who in (extra_givers or {}).items():
        givers.setdefault(c, []).append(who)
    return [
        {
            "code": c.code,
            "severity": c.severity,
            "summary": c.summary,
            "runs_code": c.runs_code,
            "checks": givers.get(c.code, []),
        }
        for c in codes.values()
    ]
