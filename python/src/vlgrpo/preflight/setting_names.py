"""Name the ``VLGRPO_*`` setting behind a Hydra key in the fix of a finding.

A user of the entrypoints sets ``VLGRPO_MAX_PROMPT_LENGTH``, not ``data.max_prompt_length``: a fix line that
names only the Hydra key sends them looking for a key they cannot set. After the checks ran, every finding whose
fix (or whose location) names a Hydra key that a setting of the launched recipe owns gets that setting in its
``setting`` field (printed after the fix: ``-- setting: VLGRPO_MAX_PROMPT_LENGTH sets data.max_prompt_length``),
from the ``hydra`` column of the launch registry (:mod:`vlgrpo.environment`, ``environment.tsv``). The fix itself
is unchanged.

Standard library only.
"""

from __future__ import annotations

import re

from .report import Report

#: the recipe entrypoints' modules (argv[2]) -> the registry owner whose settings fill that recipe's template
MODULE_OWNERS = {
    "verl.experimental.fully_async_policy.fully_async_main": ("fa",),
    "verl.trainer.main_ppo": ("vo",),
}
_KEY = re.compile(r"(?<![\w.])\+{0,2}([a-z_][a-z0-9_]*(?:\.[a-z0-9_]+)+)")


def owners_of(key: str, owners: tuple[str, ...]) -> list[str]:
    """The ``VLGRPO_*`` setting names, of the registry ``owners`` (``fa``, ``vo``), whose Hydra keys include
    ``key`` (a dotted Hydra key without ``+``), in registry order, each once."""
    from vlgrpo import environment

    names: list[str] = []
    for owner in owners:
        for row in environment.settings(owner):
            if key in row.hydra.split(";") and row.name not in names:
                names.append(row.name)
    return names


def name_settings(report: Report, argv: list[str]) -> None:
    """Fill ``setting`` of each finding of ``report`` whose fix names a Hydra key a setting owns (the dotted keys
    in the fix text, else ``where.key``) and does not name a ``VLGRPO_*`` variable itself.

    ``argv`` is the checked launch argv; its module (``argv[2]``) picks the recipe's settings
    (:data:`MODULE_OWNERS`), else those of both recipes. A broken registry leaves the findings as they are.
    """
    module = argv[2] if len(argv) > 2 else ""
    owners = MODULE_OWNERS.get(module, ("fa", "vo"))
    try:
        for finding in report.findings:
            if not finding.fix or "VLGRPO_" in finding.fix:
                continue
            keys = _KEY.findall(finding.fix) or ([finding.where.key] if finding.where.key else [])
            parts: list[str] = []
            for key in dict.fromkeys(k.lstrip("+") for k in keys):
                names = owners_of(key, owners)
                if names:
                    parts.append(f"{' or '.join(names)} sets {key}")
            if parts:
                finding.setting = "; ".join(parts)
    except (OSError, ValueError):
        return
