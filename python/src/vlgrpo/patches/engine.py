"""Check and apply the registered patches (imported lazily, on the first post-import hook or status call).

For every target of every enabled record (see :mod:`vlgrpo.patches.registry`), :func:`ensure_all` looks at the
attribute bound *now* (the final bound function after verl's monkey patch, its NPU layer and ours ran) and
decides one of (the names are defined in :mod:`vlgrpo.patches.state`):

- ``applied``: the bound function is our replacement (installed now or earlier; applying twice is a no-op);
- ``not needed``: the detector found the installed code already fixed;
- ``target absent``: the module is not importable / does not define the attribute (nothing is created);
- ``disabled``: switched off through ``VLGRPO_PATCHES`` / ``VLGRPO_PATCHES_DISABLED``;
- ``failed``: detection, replacement or verification raised (reason recorded, logged once);
- ``pending``: only without ``import_targets``: the target module has not been imported in this process.

Every replacement is installed through :func:`vlgrpo.patches.contract.wrap` (also the re-check wrappers), which
keeps what was bound before: :func:`unpatch` puts it back in this interpreter and :func:`apply` applies the
patch again; :func:`original` answers the unpatched object of a target.

Nothing here raises into the host program unless ``VLGRPO_PATCHES_STRICT=1``.
"""

from __future__ import annotations

import importlib
import sys
import threading
from typing import Any

from vlgrpo.patches import contract, registry, state
from vlgrpo.patches.contract import FixRecord
from vlgrpo.patches.state import ABSENT, APPLIED, DISABLED, FAILED, NOT_NEEDED, PENDING

#: (patch id, module, attribute path) -> {"status", "reason", "target", "original"}
RESULTS: dict = {}
_LOCK = threading.RLock()
_DETECT_CACHE: dict = {}
#: (module, function) of an installed re-check wrapper -> ids of the enabled records that asked for it
_RECHECK_USERS: dict = {}


def resolve(ref: str):
    """Import ``"package.module:attr.sub"`` and return the object."""
    mod_name, _, attr = ref.partition(":")
    obj = importlib.import_module(mod_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def ours(func):
    """The patch id if ``func`` is one of our replacements (marker *and* code object), else ``None``.

    The code check matters: ``functools.wraps`` copies ``__dict__``, so a wrapper that another library builds
    around our function (verl's router fix does) carries our marker without being our code.
    """
    pid = getattr(func, "__vlgrpo_patch__", None)
    if pid is None:
        return None
    try:
        replacement = resolve(registry.get(pid).replacement)
    except Exception:
        return None
    codes = getattr(replacement, "__vlgrpo_code__", None) or getattr(replacement, "__code__", None)
    codes = codes if isinstance(codes, tuple) else (codes,)
    code = getattr(func, "__code__", None)
    return pid if code is not None and any(code is c for c in codes) else None


def _code_key(func) -> tuple:
    """The code objects of ``func`` and of each function under it (``__wrapped__``): one decorator's code (Ray's
    actor-method tracing wrapper ``_resume_span``) is shared by every method it wraps, so it alone names none."""
    key: list = []
    while func is not None and len(key) < 16:
        code = getattr(func, "__code__", None)
        key.append(code if code is not None else id(func))
        func = getattr(func, "__wrapped__", None)
    return tuple(key)


def _detect(detector: str, patch_id: str, func):
    key = (detector, patch_id, _code_key(func))
    if key not in _DETECT_CACHE:
        _DETECT_CACHE[key] = tuple(resolve(detector)(func))
    return _DETECT_CACHE[key]


def _record(record, module_name, path, status, reason, original=None, fresh=False):
    target = f"{module_name}.{path}"
    RESULTS[(record.id, module_name, path)] = {
        "status": status,
        "reason": reason,
        "target": target,
        "original": original,
        "fresh": fresh,
    }
    return status


def _fail(record, module_name, path, exc):
    reason = f"{type(exc).__name__}: {exc}"
    _record(record, module_name, path, FAILED, reason)
    state.log_once(
        ("fail", record.id, module_name, path),
        40,
        f"patch {record.id} failed on {module_name}.{path}: {reason} "
        f"(left unpatched; set VLGRPO_PATCHES_STRICT=1 to raise)",
    )
    if state.strict():
        raise


def check_target(
    record: FixRecord, module_name: str, path: str, apply: bool = True, detector: str | None = None
) -> str:
    """Check one target (only if its module is already imported) and apply the replacement if faulty."""
    if not state.enabled(record.id):
        return _record(record, module_name, path, DISABLED, state.disabled_reason(record.id))
    module = sys.modules.get(module_name)
    if module is None:
        return _record(record, module_name, path, PENDING, "module not imported in this process")
    try:
        owner, attr = module, path
        parts = path.split(".")
        for part in parts[:-1]:
            if not hasattr(owner, part):
                return _record(record, module_name, path, ABSENT, f"{module_name} has no attribute {part!r}")
            owner = getattr(owner, part)
        attr = parts[-1]
        current = getattr(owner, attr, None)
        if current is None:
            return _record(
                record, module_name, path, ABSENT, f"{'.'.join([module_name] + parts[:-1])} has no attribute {attr!r}"
            )
        original = f"{getattr(current, '__module__', '?')}.{getattr(current, '__qualname__', attr)}"
        owner_id = ours(current)
        if owner_id == record.id:
            wrapped = getattr(current, "__wrapped__", None)
            orig = f"{getattr(wrapped, '__module__', '?')}.{getattr(wrapped, '__qualname__', '?')}"
            earlier = RESULTS.get((record.id, module_name, path), {})
            reason = (
                earlier["reason"] if earlier.get("status") == APPLIED else f"replaced {orig} by {record.replacement}"
            )
            return _record(record, module_name, path, APPLIED, reason, orig)
        if owner_id is not None:
            return _record(
                record,
                module_name,
                path,
                NOT_NEEDED,
                f"bound to vlgrpo patch {owner_id}, which does not have this fault",
                original,
            )
        faulty, reason = _detect(detector or record.detector, record.id, current)
        if not faulty:
            return _record(record, module_name, path, NOT_NEEDED, reason, original)
        if not apply:
            return _record(record, module_name, path, PENDING, f"faulty, not applied yet: {reason}", original)
        replacement = resolve(record.replacement)
        if record.wraps:  # a factory: replacement(original) -> the function to install
            replacement = replacement(current)
        contract.wrap(owner, attr, replacement, patch_id=record.id, target=f"{module_name}:{path}")
        return _record(
            record,
            module_name,
            path,
            APPLIED,
            f"{reason}; replaced {original} by {record.replacement}",
            original,
            fresh=True,
        )
    except Exception as exc:
        _fail(record, module_name, path, exc)
        return FAILED


def _wrap_recheck(record: FixRecord, module_name: str, func_name: str) -> None:
    """Wrap ``module_name.func_name`` (once; :func:`vlgrpo.patches.contract.wrap`) so that every record is
    re-checked right after it returns; ``record`` is one of the records that asked for it."""
    module = sys.modules.get(module_name)
    fn = getattr(module, func_name, None) if module is not None else None
    if fn is None:
        return
    _RECHECK_USERS.setdefault((module_name, func_name), set()).add(record.id)
    if getattr(fn, "__vlgrpo_recheck__", False):
        return

    def recheck_after(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        finally:
            ensure_all(event=f"after {module_name}.{func_name}")

    recheck_after.__vlgrpo_recheck__ = True
    contract.wrap(module, func_name, recheck_after, patch_id=record.id, target=f"{module_name}:{func_name}")


def ensure_all(event: str = "", only: tuple = ()) -> list:
    """Check every target of every enabled record among the imported modules; apply where faulty.

    ``only``: the ids of the records to check (default: all of them).

    Returns the list of ``"id -> module.attr"`` strings newly applied by this call and logs them as one line
    (INFO, logger ``vlgrpo.patches``) that also names every patch active in the process so far, so the last such
    line of a process is its complete picture.
    """
    newly = []
    with _LOCK:
        for record in registry.PATCHES:
            if not state.enabled(record.id) or only and record.id not in only:
                continue
            for module_name, func_name in record.recheck_after:
                try:
                    _wrap_recheck(record, module_name, func_name)
                except Exception as exc:
                    _fail(record, module_name, func_name, exc)
            for target in record.targets:
                key = (record.id, target.module, target.path)
                status = check_target(record, target.module, target.path, detector=target.detector)
                if status == APPLIED and RESULTS[key]["fresh"]:
                    newly.append(f"{record.id} -> {target.name}")
    if newly:
        active = sorted({pid for (pid, _, _), res in RESULTS.items() if res["status"] == APPLIED})
        state.log_once(
            ("applied", event, tuple(newly)),
            20,
            f"applied {', '.join(newly)}"
            + (f" ({event})" if event else "")
            + f"; active in this process: {', '.join(active)}",
        )
    return newly


def on_import(module_name: str) -> None:
    """Post-import hook entry point (registered by :func:`vlgrpo.patches.bootstrap.install`)."""
    ensure_all(event=f"import {module_name}")


def unpatch(patch_id: str) -> list:
    """Undo patch ``patch_id`` in this interpreter (see :func:`vlgrpo.patches.unpatch`).

    Returns:
        The ``"module:path"`` of every attribute whose original is bound again (empty when nothing was patched).

    Raises:
        ValueError: ``patch_id`` is not a registered id (the message lists the known ones).
    """
    if patch_id not in registry.IDS:
        raise ValueError(f"vlgrpo.patches.unpatch: unknown patch id {patch_id!r}; known: {', '.join(registry.IDS)}")
    record = registry.get(patch_id)
    with _LOCK:
        state.set_unpatched(patch_id, True)
        rechecks = {f"{m}:{f}" for m, f in _RECHECK_USERS}
        mine = [t for t, e in contract.INSTALLED.items() if e.patch_id == patch_id and t not in rechecks]
        restored = [t for t in mine if contract.restore(t)]
        for key, users in list(_RECHECK_USERS.items()):
            users -= {u for u in users if not state.enabled(u)}  # patch_id among them: it is not enabled now
            if users:  # another enabled record still wants the re-check: the wrapper stays
                continue
            del _RECHECK_USERS[key]
            target = f"{key[0]}:{key[1]}"
            if contract.restore(target):
                restored.append(target)
        for key in [k for k in RESULTS if k[0] == patch_id]:
            module_name, path = key[1], key[2]
            _record(record, module_name, path, DISABLED, state.disabled_reason(patch_id))
    return restored


def apply(patch_id: str) -> dict:
    """Apply patch ``patch_id`` again after :func:`unpatch` (or for the first time), as the post-import hooks do:
    check each target whose module is imported and replace it where faulty (see :func:`vlgrpo.patches.apply`).

    Returns:
        ``{"module.path": status}`` for every target of the record.

    Raises:
        ValueError: ``patch_id`` is not a registered id.
    """
    if patch_id not in registry.IDS:
        raise ValueError(f"vlgrpo.patches.apply: unknown patch id {patch_id!r}; known: {', '.join(registry.IDS)}")
    record = registry.get(patch_id)
    with _LOCK:
        state.set_unpatched(patch_id, False)
        if not state.enabled(patch_id):  # the switches still say off
            for target in record.targets:
                check_target(record, target.module, target.path)
        ensure_all(event=f"apply {patch_id}", only=(patch_id,))
        return {t.name: RESULTS[(patch_id, t.module, t.path)]["status"] for t in record.targets}


def original(target: str) -> Any:
    """The unpatched object of ``target`` (``"module:path"``; see :func:`vlgrpo.patches.original`)."""
    if ":" not in target:
        raise ValueError(
            f"vlgrpo.patches.original: target {target!r} is not 'module:attribute.path' (for example "
            "'transformers.models.qwen3_vl.modeling_qwen3_vl:Qwen3VLVisionModel.forward')"
        )
    found = contract.original(target)
    return resolve(target) if found is contract.MISSING else found
