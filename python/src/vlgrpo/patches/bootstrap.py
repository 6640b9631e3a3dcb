"""Interpreter-start bootstrap of the runtime patches: :func:`install` (called from ``sitecustomize``).

Standard library only, and only the modules the interpreter has already loaded (``os``, ``sys``): no torch,
transformers, verl, ``logging``, ``importlib.util``/``importlib.abc`` or wrapt at start-up (budget: 5 ms on
``python -c pass``; measured by ``bench/startup.py``). The parts it uses are modules of their own:
:mod:`vlgrpo.patches.state` (switches, state), :mod:`vlgrpo.patches.hooks` (the import hook),
:mod:`vlgrpo.patches.index` (the patch ids and hooked module names, generated from the registry; read only when the
patches are on). The fix modules and the registry are imported only by the engine, on the first hook. The shim then
calls :func:`vlgrpo.patches.chain.chain_sitecustomize`.

What :func:`install` does
-------------------------
1. Reads the switches (:func:`vlgrpo.patches.state.read_switches`, by their registry rows): ``VLGRPO_PATCHES=off``
   disables everything; any other value than ``off`` and ``on`` fails closed: the patches stay on, with a warning
   naming the accepted values (also in strict mode); ``VLGRPO_PATCHES_DISABLED=<id>,<id>`` disables single
   patches; ``VLGRPO_PATCHES_STRICT=1`` makes every other failure raise instead of being logged and recorded. An
   invalid list or strict value is its default (nothing left out; not strict), with a warning.
2. Puts :class:`vlgrpo.patches.hooks.PostImportFinder` at the front of ``sys.meta_path`` and registers a
   post-import hook for every module that an enabled patch targets. Modules already imported when :func:`install`
   runs get their hooks at once.
3. The hooks hand over to :mod:`vlgrpo.patches.engine` (imported lazily, on the first hook), which checks the
   installed code and applies the fixes.

Nothing here may crash the host: a failure is logged once through ``logging`` (imported lazily) and recorded in
:data:`vlgrpo.patches.state.STATE`, unless strict mode is on.
"""

import os
import sys

from vlgrpo.patches import hooks
from vlgrpo.patches.state import OFF_VALUES, ON_VALUES, STATE, log_once, read_switches, strict, switch_problems


def _engine_hook(module):
    from vlgrpo.patches import engine

    engine.on_import(module.__name__)


def install(via="api"):
    """Install the post-import hooks of every enabled patch; idempotent, never raises unless strict.

    Args:
        via: who installed it (recorded in :data:`STATE`): "sitecustomize", "pth", "api" or "cli".

    Returns:
        :data:`STATE`.
    """
    if STATE["installed"] or not STATE["enabled"] and STATE["via"] is not None:
        return STATE
    try:
        STATE["via"] = via
        STATE["strict"] = strict()
        switch, all_off, wanted = read_switches()
        for name, problem in switch_problems().items():
            if name != "VLGRPO_PATCHES":  # (worded below)
                log_once("bad-" + name, 30, f"vlgrpo.patches: {problem} (ignored: its default applies)")
        if all_off:
            STATE["enabled"] = False
            return STATE
        if switch not in ON_VALUES:
            # fail closed, even in strict mode: a bad value in some interpreter's environment keeps the patches on
            # and says so; it never stops that interpreter (the entrypoints refuse the value for a launch)
            msg = (
                f"VLGRPO_PATCHES={os.environ['VLGRPO_PATCHES']!r} is not a known value; the patches stay ON. "
                f"Use {' or '.join(OFF_VALUES)} to switch them off, or on to say so explicitly"
            )
            log_once("bad-switch", 30, "vlgrpo.patches: " + msg)
        from vlgrpo.patches import index  # not when switched off: VLGRPO_PATCHES=off costs nothing more

        STATE["disabled_ids"] = tuple(x for x in wanted if x in index.IDS)
        STATE["unknown_disabled_ids"] = tuple(x for x in wanted if x not in index.IDS)
        if STATE["unknown_disabled_ids"]:
            msg = (
                f"VLGRPO_PATCHES_DISABLED names unknown patch id(s) {', '.join(STATE['unknown_disabled_ids'])}; "
                f"known ids: {', '.join(index.IDS)}"
            )
            if STATE["strict"]:
                raise ValueError(msg)
            log_once("unknown-disabled", 30, "vlgrpo.patches: " + msg)
        modules = []
        for mod, ids in index.TARGET_MODULES.items():
            if any(i not in STATE["disabled_ids"] for i in ids):
                modules.append(mod)
        sys.meta_path.insert(0, hooks.PostImportFinder())
        STATE["installed"] = True
        for mod in modules:
            hooks.register_hook(mod, _engine_hook)
    except Exception as exc:
        log_once("install", 40, f"vlgrpo.patches: install failed: {type(exc).__name__}: {exc}")
        if STATE["strict"]:
            raise
    return STATE
