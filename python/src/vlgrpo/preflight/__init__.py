"""Preflight: check a verl launch argv against the installed verl, the model folder and the data.

Python API (imports verl only when called)::

    from vlgrpo.preflight import run_preflight
    report = run_preflight(["python3", "-m", "verl.experimental.fully_async_policy.fully_async_main", ...])
    report.exit_code   # 0 clean, 2 findings, 1 internal error
    report.findings    # list[Finding]: code, severity, what, where (position/override/key/file/row), why, fix
    report.summary     # verl_version, module, config_name, token_budget, data, timings_s, ...
    print(report.to_text()); report.to_json()

CLI: ``python -m vlgrpo preflight --argv-file FILE [--json] [--no-data] [--model-path P]``.

The checks run in order (:data:`vlgrpo.preflight.checks.CHECKS`), each declaring its inputs and the finding
codes it can report; every code is declared once in :data:`vlgrpo.preflight.checks.CODES`.
``python -m vlgrpo preflight codes`` prints both lists.
"""

from __future__ import annotations

from typing import Any

from .report import ERROR, WARNING, Finding, Report, Where

__all__ = ["run_preflight", "Report", "Finding", "Where", "ERROR", "WARNING"]


def run_preflight(argv: list[str], **kwargs: Any) -> Report:
    """See :func:`vlgrpo.preflight.api.run_preflight`."""
    from .api import run_preflight as _run

    return _run(argv, **kwargs)
