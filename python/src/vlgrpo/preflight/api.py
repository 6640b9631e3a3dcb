"""``run_preflight``: the checks of :data:`vlgrpo.preflight.checks.CHECKS` on one launch argv, in order."""

from __future__ import annotations

import time
import traceback

from .report import ERROR, Finding, Report, Where


#: what the checked argv is for: exec'd now, or planned (the entrypoint's dry run)
PURPOSES = ("launch", "plan")
DEVICES_SOURCES = ("node", "plan")


def run_preflight(
    argv: list[str],
    *,
    check_data: bool = True,
    model_path: str | None = None,
    devices_per_node: int | None = None,
    progress: bool = False,
    purpose: str = "launch",
    vllm_rules: str = "mirror",
    cache_dir: str | None = None,
    devices_source: str = "node",
) -> Report:
    """Check a complete launch argv against the installed verl, the model folder and the data.

    Args:
        argv: the exact argv the entrypoint will exec: ``["python3", "-m", <module>, <hydra args>...]``.
        check_data: read the parquet files and count every row's prompt tokens (``--no-data`` turns it off).
        model_path: check this model folder instead of ``actor_rollout_ref.model.path`` (e.g. the host path of
            a folder the container sees elsewhere).
        devices_per_node: accelerators per node for the topology check; None counts them on this machine
            and skips the check when there are none.
        devices_source: ``"node"`` (default: ``devices_per_node`` is this node's) or ``"plan"`` (a planning count for
            other machines: a layout larger than one node without a Ray address is a warning, not an error).
        progress: show a progress bar on stderr while counting tokens.
        purpose: ``"launch"`` (the argv is about to be exec'd) or ``"plan"`` (the entrypoint's dry run, planning):
            less free space than one checkpoint is an error for a launch, a warning for a plan.
        vllm_rules: ``"mirror"`` (default) applies vLLM 0.13.0's engine-config rules as vlgrpo mirrors them (no vLLM
            import); ``"vllm"`` runs vLLM's own config classes in this process (needs vLLM installed; 3-8 s of import
            on a 2-core machine).
        cache_dir: the folder of the token-count cache (:mod:`vlgrpo.preflight.count_cache`); None (default):
            ``<trainer.default_local_dir>/.vlgrpo-preflight-cache`` when that is an absolute path; ``""``: no cache.

    Raises:
        ValueError: ``purpose`` is neither ``"launch"`` nor ``"plan"``.

    Returns:
        :class:`vlgrpo.preflight.report.Report` (``exit_code`` 0 clean, 2 findings, 1 internal error).
        ``summary["checks"]`` lists every check (ran with its seconds, or skipped with the reason) and
        ``summary["timings_s"]`` the seconds of each check that ran plus ``total``. Never raises for bad input;
        a crash inside a check is caught into ``report.internal_error``.
    """
    from .checks import CHECKS
    from .runner import CheckCrashed, Context, run_checks

    if purpose not in PURPOSES:
        raise ValueError(f"purpose={purpose!r}: use one of {', '.join(PURPOSES)}")
    if devices_source not in DEVICES_SOURCES:
        raise ValueError(f"devices_source={devices_source!r}: use one of {', '.join(DEVICES_SOURCES)}")
    report = Report()
    report.summary["timings_s"] = {}
    t0 = time.perf_counter()
    ctx = Context(
        report,
        argv=list(argv),
        options={
            "model_path": model_path,
            "devices_per_node": devices_per_node,
            "progress": progress,
            "purpose": purpose,
            "vllm_rules": vllm_rules,
            "cache_dir": cache_dir,
            "devices_source": devices_source,
        },
    )
    if check_data:
        ctx.give("check_data", True)
    else:
        ctx.withhold("check_data", "--no-data")
    try:
        run_checks(CHECKS, ctx)
    except CheckCrashed as crash:
        _crash_to_report(crash, report)
    from .setting_names import name_settings

    name_settings(report, list(argv))
    report.summary["timings_s"]["total"] = round(time.perf_counter() - t0, 3)
    return report


def _crash_to_report(crash: Exception, report: Report) -> None:
    """A check raised: a key verl reads was deleted (``schema.required-key``, exit 2), else an internal error."""
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError

    exc = crash.__cause__ or crash
    if isinstance(exc, (ConfigAttributeError, ConfigKeyError)) and getattr(exc, "full_key", None):
        # a key verl reads (and these checks read) was removed with '~' or never existed
        report.add(
            Finding(
                "schema.required-key",
                ERROR,
                f"{exc.full_key} is read by verl but missing from the composed config",
                Where(key=str(exc.full_key)),
                "verl raises the same error after Ray start",
                f"do not delete {exc.full_key} (remove its '~' override)",
            )
        )
        return
    first = str(exc).splitlines()[0] if str(exc) else ""
    report.internal_error = f"{type(exc).__name__}: {first}\n" + "".join(
        traceback.format_exception(type(exc), exc, exc.__traceback__)
    )
