"""Status rows, the patch table of docs/patches.md and the README's summary (back :func:`vlgrpo.patches.status`
and the CLI)."""

from __future__ import annotations

import importlib

from vlgrpo.patches import bootstrap, engine, registry
from vlgrpo.patches.state import ABSENT, APPLIED, DISABLED, FAILED, NOT_NEEDED, PENDING, STATE, disabled_reason, enabled

_ORDER = (FAILED, APPLIED, NOT_NEEDED, ABSENT, PENDING)


def _import_targets() -> dict:
    errors = {}
    for record in registry.PATCHES:
        if not enabled(record.id):
            continue
        for module_name in [t.module for t in record.targets] + [m for m, _ in record.recheck_after]:
            if module_name in errors:
                continue
            try:
                importlib.import_module(module_name)
            except Exception as exc:  # ImportError, or anything the module body raises
                errors[module_name] = f"{type(exc).__name__}: {exc}"
    return errors


def status(verify: bool = False, import_targets: bool = True) -> list:
    """See :func:`vlgrpo.patches.status`."""
    if not STATE["installed"]:
        bootstrap.install(via="status")
    import_errors = _import_targets() if import_targets and STATE["enabled"] else {}
    if STATE["enabled"]:
        engine.ensure_all(event="status")
    rows = []
    for record in registry.PATCHES:
        targets = []
        for module_name, path in ((t.module, t.path) for t in record.targets):
            if not enabled(record.id):
                res = {"status": DISABLED, "reason": disabled_reason(record.id), "original": None}
            elif module_name in import_errors:
                res = {
                    "status": ABSENT,
                    "reason": f"import {module_name} failed: {import_errors[module_name]}",
                    "original": None,
                }
            else:
                res = engine.RESULTS.get(
                    (record.id, module_name, path),
                    {"status": PENDING, "reason": "module not imported", "original": None},
                )
            targets.append(
                {
                    "target": f"{module_name}.{path}",
                    "status": res["status"],
                    "reason": res["reason"],
                    "original": res.get("original"),
                }
            )
        if not enabled(record.id):
            overall, reason = DISABLED, targets[0]["reason"]
        else:
            overall = next(s for s in _ORDER + (PENDING,) if any(t["status"] == s for t in targets))
            reason = "; ".join(f"{t['target']}: {t['reason']}" for t in targets if t["status"] == overall)
            others = [f"{t['target']}: {t['status']} ({t['reason']})" for t in targets if t["status"] != overall]
            if others:
                reason += " | other targets: " + "; ".join(others)
        row = {
            "id": record.id,
            "status": overall,
            "reason": reason,
            "summary": record.summary,
            "upstream": record.upstream,
            "targets": targets,
            "verify": None,
        }
        if verify and enabled(record.id):
            try:
                engine.resolve(record.verify)()
                row["verify"] = "ok"
            except Exception as exc:
                msg = f"{type(exc).__name__}: {exc}"
                if overall in (APPLIED, FAILED):
                    row["verify"] = f"failed: {msg}"
                    if overall == APPLIED:
                        row["status"], row["reason"] = FAILED, f"verify failed: {msg}"
                else:
                    # The fix is not live in this interpreter (installed code not faulty, or target absent): its
                    # tiny-input self-test is built for the faulty library version and may not run on this one.
                    row["verify"] = f"n/a ({overall}; the self-test does not run on this library version: {msg})"
        rows.append(row)
    return rows


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def markdown_table() -> str:
    """The full patch table of docs/patches.md (id, what it fixes, targets, upstream reference, when it applies),
    from the registry."""
    lines = ["| id | what it fixes | upstream | applies when |", "|---|---|---|---|"]
    for r in registry.PATCHES:
        targets = "<br>".join(f"`{t.name}`" for t in r.targets)
        lines.append(
            f"| `{r.id}` | {_cell(r.summary)}<br>targets: {targets} | {_cell(r.upstream)} | {_cell(r.applies_when)} |"
        )
    lines.append("")
    lines.append(
        "Switches: `VLGRPO_PATCHES=off` (all), `VLGRPO_PATCHES_DISABLED=<id>,<id>`, "
        "`VLGRPO_PATCHES_STRICT=1` (raise instead of log). Check a process: "
        "`python -m vlgrpo patches status --verify`."
    )
    return "\n".join(lines)


def markdown_summary() -> str:
    """The README's short patch table (id and one-line title of each record), from the registry.

    Raises ``KeyError`` naming the patch id when a record has no ``title``.
    """
    lines = ["| patch | what goes wrong without it (field case) |", "|---|---|"]
    for r in registry.PATCHES:
        if not r.title:
            raise KeyError(
                f"patch record {r.id} has no 'title' (one line: what goes wrong, and the field case "
                f"code); add it to {r.module or 'its fixes/ module'}"
            )
        lines.append(f"| `{r.id}` | {_cell(r.title)} |")
    return "\n".join(lines)
