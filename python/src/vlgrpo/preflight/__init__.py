"""Preflight: check a verl launch argv against the installed verl, the model folder and the data.

Python API (imports verl only when called)::

    from vlgrpo.preflight import run_preflight
    report = run_preflight(["python3", "-m", "verl.experimental.fully_async_policy.fully_async_main", ...])
    report.exit_code   # 0 clean, 2 findings, 1 internal error
    report.findings    # list[Finding]: code, severity, what, where (position/override/key/file/row), why, fix
    report.summary     # verl_version, module, config_name, token_budget, data, timings_s, ...
    print(report.to_text()); report.to_json()

CLI: ``python -m vlgrpo preflight --argv-file FILE [--json] [--no-data] [--model-path P]``.

Finding codes (severity error unless marked W; "E/W": warning when verl would only drop data):

- launch: ``launch.argv``, ``launch.unsupported-flag``, ``launch.hydra-override`` (W)
- schema (Hydra compose of the installed verl): ``schema.syntax``, ``schema.duplicate-key``,
  ``schema.unknown-key``, ``schema.missing-plus``, ``schema.plus-on-existing``, ``schema.delete-missing``,
  ``schema.bad-group``, ``schema.rejected``, ``schema.compose``, ``schema.list-as-string``,
  ``schema.dict-as-string``, ``schema.bool-as-string``, ``schema.number-as-string``, ``schema.missing-value``,
  ``schema.required-key``, ``schema.value-type``
- verl's own checks: ``verl.dataclass``, ``verl.validate-config``, ``verl.assert``, ``verl.interpolation``,
  ``verl.reward-migration``
- cross-field rules: ``rules.logger``, ``rules.max-model-len``, ``rules.max-model-len-mismatch``,
  ``rules.max-position-embeddings``, ``rules.veomni-layout``, ``rules.veomni-version`` (W when VeOmni is
  absent), ``rules.veomni-build`` (VeOmni cannot build the folder's model on meta or run one image forward), ``rules.devices-per-node``, ``rules.devices-unused`` (W), ``rules.image-truncation``, ``rules.checkpoint-backend``,
  ``rules.checkpoint-backend-import`` (W), ``rules.vision-token-ban`` (W), ``rules.vision-token-mask`` (W)
- no user code (B17): ``security.trust-remote-code``, ``security.code-loading``, ``security.target``
- model folder: ``model.missing``, ``model.bad-json``, ``model.auto-map``, ``model.python-file``,
  ``model.no-config``, ``model.type``, ``model.no-tokenizer``, ``model.no-processor``,
  ``model.no-chat-template`` (W)
- data: ``data.missing``, ``data.unreadable``, ``data.columns``, ``data.row``, ``data.image-exceeds-budget``
  (E/W), ``data.over-budget`` (E/W), ``data.all-rows-dropped``, ``data.data-source``, ``data.reward-import`` (W), ``data.empty``,
  ``data.not-checked`` (W)
"""

from __future__ import annotations

from .report import ERROR, WARNING, Finding, Report, Where

__all__ = ["run_preflight", "Report", "Finding", "Where", "ERROR", "WARNING"]


def run_preflight(argv, **kwargs):  # noqa: ANN001, ANN201 - see vlgrpo.preflight.api.run_preflight
    """See :func:`vlgrpo.preflight.api.run_preflight`."""
    from .api import run_preflight as _run

    return _run(argv, **kwargs)
