"""Findings and the report that ``python -m vlgrpo preflight`` prints.

A :class:`Finding` is one problem: what is wrong, where (argv position, Hydra key, file, row), why it
matters and the fix. Severity ``error`` makes the run fail (exit 2); ``warning`` is printed but does not
change the exit code (used for facts that depend on the machine the check runs on, e.g. a CUDA-only
module that cannot be imported on a CPU build host).

Only the standard library is imported here, so the report can be built and printed without verl.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

ERROR = "error"
WARNING = "warning"

#: Version of the JSON document written by ``--json`` (bump on incompatible changes).
JSON_SCHEMA_VERSION = 1


@dataclasses.dataclass
class Where:
    """Location of a finding. Every field is optional.

    position: index into the complete launch argv (0 is the interpreter, 1 ``-m``, 2 the module, 3.. the
        Hydra arguments); equals the 0-based line number of the ``--argv-file``.
    override: the override text exactly as given at ``position``.
    key: the dotted Hydra config key (``+``/``++`` stripped).
    file: a file path (model folder file, parquet file).
    row: 0-based row index inside ``file``.
    """

    position: int | None = None
    override: str | None = None
    key: str | None = None
    file: str | None = None
    row: int | None = None

    def render(self) -> str:
        parts = []
        if self.position is not None:
            parts.append(f"argv[{self.position}]")
        if self.override is not None:
            parts.append(repr(self.override))
        elif self.key is not None:
            parts.append(self.key)
        if self.override is not None and self.key is not None and not _mentions_key(self.override, self.key):
            parts.append(f"(key {self.key})")
        if self.file is not None:
            parts.append(self.file + (f" row {self.row}" if self.row is not None else ""))
        elif self.row is not None:
            parts.append(f"row {self.row}")
        return " ".join(parts) if parts else "-"

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


def _mentions_key(override: str, key: str) -> bool:
    return override.lstrip("+~").split("=", 1)[0] == key


@dataclasses.dataclass
class Finding:
    """One problem found by preflight.

    code: stable identifier, ``<area>.<name>`` (e.g. ``schema.unknown-key``, ``rules.max-model-len``).
    severity: ``"error"`` (fails the run) or ``"warning"``.
    what: one sentence naming the problem.
    where: :class:`Where`.
    why: what goes wrong at run time if it is left in (and the upstream source of the rule).
    fix: the exact change to make.
    setting: the ``VLGRPO_*`` setting(s) through which a user of the entrypoints makes that change, when one owns
        a Hydra key of the fix (filled in after the checks by :mod:`vlgrpo.preflight.setting_names`), else ``""``.
    """

    code: str
    severity: str
    what: str
    where: Where = dataclasses.field(default_factory=Where)
    why: str = ""
    fix: str = ""
    setting: str = ""
    #: True when this finding is about code the launch would run although its code is not declared ``runs_code``
    #: (``rules.checkpoint-untrusted`` with the patch checkpoint.manifest switched off): never waived.
    runs_code: bool = False

    def line(self) -> str:
        """One line: ``ERROR [code] where: what — why — fix: ... — setting: ...``."""
        text = f"{self.severity.upper()} [{self.code}] {self.where.render()}: {self.what}"
        if self.why:
            text += f" -- why: {self.why}"
        if self.fix:
            text += f" -- fix: {self.fix}"
        if self.setting:
            text += f" -- setting: {self.setting}"
        from vlgrpo.text import one_line

        return one_line(" ".join(text.split("\n")))

    def as_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "severity": self.severity,
            "what": self.what,
            "where": self.where.as_dict(),
            "why": self.why,
            "fix": self.fix,
            "setting": self.setting,
        }


@dataclasses.dataclass
class Report:
    """Result of :func:`vlgrpo.preflight.run_preflight`.

    findings: every :class:`Finding`, in check order.
    summary: facts for humans and the demo (verl version, config name, module, token budget, ...).
    internal_error: set when a check itself crashed (exit code 1); the traceback text.
    """

    findings: list[Finding] = dataclasses.field(default_factory=list)
    summary: dict[str, Any] = dataclasses.field(default_factory=dict)
    internal_error: str | None = None

    def add(self, finding: Finding) -> None:
        self.findings.append(finding)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == ERROR]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == WARNING]

    @property
    def ok(self) -> bool:
        return not self.errors and self.internal_error is None

    @property
    def exit_code(self) -> int:
        """0 clean (warnings allowed), 2 at least one error finding, 1 internal error."""
        if self.internal_error is not None:
            return 1
        return 2 if self.errors else 0

    def codes(self) -> list[str]:
        return [f.code for f in self.findings]

    def as_dict(self) -> dict[str, Any]:
        return {
            "schema_version": JSON_SCHEMA_VERSION,
            "ok": self.ok,
            "exit_code": self.exit_code,
            "summary": self.summary,
            "findings": [f.as_dict() for f in self.findings],
            "internal_error": self.internal_error,
        }

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=2, sort_keys=False, default=str)

    def summary_lines(self) -> list[str]:
        """Short human summary (what the demo prints)."""
        s = self.summary
        lines = [
            f"verl {s.get('verl_version', '?')} | module {s.get('module', '?')} | config {s.get('config_name', '?')}"
            + (f" | model_engine {s['model_engine']}" if s.get("model_engine") else ""),
        ]
        budget = s.get("token_budget")
        if budget:
            lines.append(
                "token budget: max_prompt_length {max_prompt_length} + max_response_length {max_response_length}"
                " = {needed} <= max_model_len {max_model_len}".format(
                    **{
                        k: budget.get(k, "?")
                        for k in ("max_prompt_length", "max_response_length", "needed", "max_model_len")
                    }
                )
            )
        data = s.get("data") or {}
        for split, info in data.items():
            if not isinstance(info, dict) or "rows" not in info:
                continue
            largest = info.get("largest_prompt") or {}
            lines.append(
                f"data {split}: {info['rows']} rows, largest prompt {largest.get('tokens', '?')} tokens "
                f"({largest.get('image_tokens', 0)} image tokens, row {largest.get('row', '?')}) "
                f"vs max_prompt_length {info.get('max_prompt_length', '?')}; over budget: {info.get('over_budget', 0)}"
            )
        if s.get("counted_with"):
            lines.append(f"token counts: {s['counted_with']}")
        cache = data.get("count_cache") if isinstance(data.get("count_cache"), dict) else None
        if cache:
            lines.append(
                f"count cache: {cache.get('state')}"
                + (f" ({cache['dir']})" if cache.get("dir") else "")
                + f"; rows reused {cache.get('rows_reused', 0)}, counted {cache.get('rows_counted', 0)}"
            )
        skipped = [f"{e['check']} ({e['reason']})" for e in s.get("checks") or [] if e.get("status") == "skipped"]
        if skipped:
            lines.append("skipped: " + "; ".join(skipped))
        lines.append(
            f"result: {len(self.errors)} error(s), {len(self.warnings)} warning(s)"
            + (" -- internal error" if self.internal_error else "")
        )
        return lines

    def to_text(self) -> str:
        out = [f.line() for f in self.findings]
        if self.internal_error:
            out.append("INTERNAL ERROR: " + self.internal_error.strip().splitlines()[0])
        out += self.summary_lines()
        return "\n".join(out)
