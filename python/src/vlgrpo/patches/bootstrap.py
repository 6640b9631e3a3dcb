"""Interpreter-start bootstrap of the runtime patches (imported from ``sitecustomize``).

Standard library only, and only the modules the interpreter has already loaded (``os``, ``sys``): no torch,
transformers, verl, ``logging``, ``importlib.util``/``importlib.abc`` or wrapt at start-up (budget: 5 ms on
``python -c pass``; measured by ``bench/startup.py``).

What :func:`install` does
-------------------------
1. Reads the switches: ``VLGRPO_PATCHES=off`` (also ``0``/``false``/``no``) disables everything (any other value
   than those and ``on``/``1``/``true``/``yes`` keeps them on with a warning naming the accepted values);
   ``VLGRPO_PATCHES_DISABLED=<id>,<id>`` disables single patches; ``VLGRPO_PATCHES_STRICT=1`` makes every
   failure raise instead of being logged and recorded.
2. Puts a small finder at the front of ``sys.meta_path``. For a module name that a patch targets, it asks the
   other finders for the spec and wraps the loader so that the registered post-import hooks run right after
   the module body executed, before the importer binds any name from it. Any other name costs one dict
   lookup. Modules already imported when :func:`install` runs get their hooks at once.
3. The hooks hand over to :mod:`vlgrpo.patches.engine` (imported lazily, on the first hook), which checks the
   installed code and applies the fixes.

Nothing here may crash the host: each hook runs guarded; a failure is logged once through ``logging``
(imported lazily) and recorded in :data:`STATE`, unless strict mode is on.

Mirrors the post-import-hook idea of wrapt (``register_post_import_hook``) and dd-trace-py's
``ModuleWatchdog``, written here on plain ``importlib`` machinery.
"""

import os
import sys

_OFF_VALUES = ("off", "0", "false", "no", "disable", "disabled")
_ON_VALUES = ("", "on", "1", "true", "yes", "enable", "enabled")

#: Process-wide state, read by :func:`vlgrpo.patches.status`.
STATE = {
    "installed": False,  # finder on sys.meta_path
    "via": None,  # "sitecustomize", "pth", "api", "cli"
    "enabled": True,  # False under VLGRPO_PATCHES=off
    "disabled_ids": (),  # from VLGRPO_PATCHES_DISABLED
    "unknown_disabled_ids": (),
    "strict": False,
    "chained_sitecustomize": None,  # path of the pre-existing sitecustomize we executed
    "chain_error": None,
    "hook_errors": [],  # (module, "ExcType: message") of hooks that raised outside the engine's own guard
    "late_hooks": [],  # target modules another finder/loader imported past ours; hooked on the next import
}

KEPT_NAME = "vlgrpo_orig_sitecustomize.py"
_HOOKS = {}  # module name -> list of callables(module)
_PENDING = set()  # hooked module names whose hooks have not run yet (see _sweep)
_RUNNING = [0]  # depth of run_hooks calls in progress: no sweep from imports the hooks themselves make
_LOGGED = set()


def strict() -> bool:
    """True when ``VLGRPO_PATCHES_STRICT`` is set to a true value (1/true/yes/on)."""
    return os.environ.get("VLGRPO_PATCHES_STRICT", "").strip().lower() in ("1", "true", "yes", "on")


def read_switches():
    """The patch switches as :func:`install` reads them: ``(switch, all_off, disabled)`` with ``switch`` the
    lower-cased ``VLGRPO_PATCHES`` value, ``all_off`` whether it switches every patch off, and ``disabled`` the ids
    listed in ``VLGRPO_PATCHES_DISABLED`` (a tuple, known or not). Also read by the preflight."""
    switch = os.environ.get("VLGRPO_PATCHES", "on").strip().lower()
    raw = os.environ.get("VLGRPO_PATCHES_DISABLED", "")
    return switch, switch in _OFF_VALUES, tuple(x.strip() for x in raw.split(",") if x.strip())


def log_once(key, level, message):
    """Log ``message`` once per ``key`` on the ``vlgrpo.patches`` logger (imports ``logging`` lazily)."""
    if key in _LOGGED:
        return
    _LOGGED.add(key)
    try:
        from vlgrpo.patches import _log

        prefix = "" if message.startswith("vlgrpo.patches") else "vlgrpo.patches: "
        _log.logger().log(level, prefix + message)
    except Exception:  # logging itself must not break the host
        pass


class _HookedLoader:
    """Loader proxy: runs the original loader, restores it on the module, then runs the post-import hooks (of this
    module when it is a target; then those of targets another finder imported past ours, see ``_sweep``)."""

    def __init__(self, loader, name, hooked=True):
        self._vlgrpo_loader = loader
        self._vlgrpo_name = name
        self._vlgrpo_hooked = hooked

    def create_module(self, spec):
        create = getattr(self._vlgrpo_loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module):
        loader = self._vlgrpo_loader
        if self._vlgrpo_hooked:
            _PENDING.discard(self._vlgrpo_name)
        try:  # make the module look exactly as if we had never been there
            module.__loader__ = loader
            if getattr(module, "__spec__", None) is not None:
                module.__spec__.loader = loader
        except Exception:
            pass
        loader.exec_module(module)
        if self._vlgrpo_hooked:
            run_hooks(self._vlgrpo_name, module)
        if _PENDING and not _RUNNING[0]:
            _sweep()

    def __getattr__(self, name):  # get_resource_reader, get_filename, is_package, ...
        return getattr(self._vlgrpo_loader, name)


class PostImportFinder:
    """``sys.meta_path`` finder that only intercepts module names with registered post-import hooks.

    Another library may later put its own finder in front of ours (``sys.meta_path.insert(0, ...)``) and resolve a
    target module without asking the finders behind it. Two guards keep the hooks running then, both on the next
    import that reaches this finder: it moves itself back to the front (it only wraps loaders of target modules
    and asks the other finders in their order, so their behaviour is unchanged), and when a target module got
    imported past it (fully executed: ``__spec__`` set and not ``_initializing``), it wraps the loader of the
    module being imported now too, and runs that target's hooks right *after* this module executed. Hooks never
    run inside ``find_spec`` itself: they import modules, and one of them may be the module being looked up
    (it would then be executed twice).
    """

    def __init__(self):
        self._busy = set()

    def find_spec(self, fullname, path=None, target=None):
        meta_path = sys.meta_path
        if meta_path and meta_path[0] is not self:
            self._to_front(meta_path)
        hooked = fullname in _HOOKS
        if not (hooked or _PENDING and not _RUNNING[0] and _late_pending()) or fullname in self._busy:
            return None
        self._busy.add(fullname)
        try:
            spec = None
            for finder in list(sys.meta_path):
                if finder is self or isinstance(finder, PostImportFinder):
                    continue
                find = getattr(finder, "find_spec", None)
                if find is None:
                    continue
                spec = find(fullname, path, target)
                if spec is not None:
                    break
        finally:
            self._busy.discard(fullname)
        if spec is None:
            return None
        loader = spec.loader
        if loader is not None and hasattr(loader, "exec_module") and not isinstance(loader, _HookedLoader):
            spec.loader = _HookedLoader(loader, fullname, hooked)
        return spec

    def invalidate_caches(self):
        pass

    def _to_front(self, meta_path):
        # Removing and re-inserting keeps the positions of the finders after us unchanged, so an import that is
        # iterating sys.meta_path right now neither skips nor repeats a finder.
        try:
            meta_path.remove(self)
            meta_path.insert(0, self)
        except ValueError:
            pass



def _finished(name):
    """The module ``name`` if it is imported and done executing, else ``None``. importlib marks a spec
    ``_initializing`` while its loader runs; a legacy ``load_module()`` leaves ``__spec__`` unset until it returned."""
    module = sys.modules.get(name)
    spec = getattr(module, "__spec__", None)
    if module is None or spec is None or getattr(spec, "_initializing", False):
        return None
    return module


def _late_pending():
    """True when a hooked module was imported past our finder and its hooks have not run yet."""
    modules = sys.modules
    for name in tuple(_PENDING):  # a copy: another thread may change the set
        if name in modules and _finished(name) is not None:
            return True
    return False


def _sweep():
    """Run the hooks of every hooked module imported past our finder (called after a module finished executing)."""
    for name in tuple(_PENDING):
        module = _finished(name)
        if module is None:
            continue
        _PENDING.discard(name)
        STATE["late_hooks"].append(name)
        run_hooks(name, module)


_FINDER = None


def register_hook(module_name, hook):
    """Run ``hook(module)`` right after ``module_name`` is imported (at once if it already is)."""
    _HOOKS.setdefault(module_name, []).append(hook)
    module = sys.modules.get(module_name)
    if module is not None:
        _call_hook(module_name, hook, module)
    else:
        _PENDING.add(module_name)


def run_hooks(module_name, module):
    """Run every hook registered for ``module_name`` (called by the loader proxy after the module body)."""
    _RUNNING[0] += 1
    try:
        for hook in list(_HOOKS.get(module_name, ())):
            _call_hook(module_name, hook, module)
    finally:
        _RUNNING[0] -= 1


def _call_hook(module_name, hook, module):
    try:
        hook(module)
    except Exception as exc:
        STATE["hook_errors"].append((module_name, f"{type(exc).__name__}: {exc}"))
        log_once(("hook", module_name), 40, f"vlgrpo.patches: post-import hook for {module_name} failed: "
                 f"{type(exc).__name__}: {exc} (the module itself imported normally)")
        if strict():
            raise


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
    global _FINDER
    if STATE["installed"] or not STATE["enabled"] and STATE["via"] is not None:
        return STATE
    try:
        STATE["via"] = via
        STATE["strict"] = strict()
        switch, all_off, wanted = read_switches()
        if all_off:
            STATE["enabled"] = False
            return STATE
        if switch not in _ON_VALUES:
            msg = (f"VLGRPO_PATCHES={os.environ['VLGRPO_PATCHES']!r} is not a known value; the patches stay ON. "
                   f"Use one of {', '.join(_OFF_VALUES)} to switch them off, or on/1/true to say so explicitly")
            if STATE["strict"]:
                raise ValueError(msg)
            log_once("bad-switch", 30, "vlgrpo.patches: " + msg)
        from vlgrpo.patches import registry

        STATE["disabled_ids"] = tuple(x for x in wanted if x in registry.IDS)
        STATE["unknown_disabled_ids"] = tuple(x for x in wanted if x not in registry.IDS)
        if STATE["unknown_disabled_ids"]:
            msg = (f"VLGRPO_PATCHES_DISABLED names unknown patch id(s) {', '.join(STATE['unknown_disabled_ids'])}; "
                   f"known ids: {', '.join(registry.IDS)}")
            if STATE["strict"]:
                raise ValueError(msg)
            log_once("unknown-disabled", 30, "vlgrpo.patches: " + msg)
        modules = []
        for mod, ids in registry.target_modules().items():
            if any(i not in STATE["disabled_ids"] for i in ids):
                modules.append(mod)
        _FINDER = PostImportFinder()
        sys.meta_path.insert(0, _FINDER)
        STATE["installed"] = True
        for mod in modules:
            register_hook(mod, _engine_hook)
    except Exception as exc:
        log_once("install", 40, f"vlgrpo.patches: install failed: {type(exc).__name__}: {exc}")
        if STATE["strict"]:
            raise
    return STATE


def _is_our_shim(path):
    try:
        with open(path, "rb") as fh:
            return b"vlgrpo-sitecustomize-shim" in fh.read(4096)
    except OSError:
        return False


def find_next_sitecustomize(own_file, search_path=None):
    """Return the path of the next ``sitecustomize.py`` on ``sys.path`` after the directory of ``own_file``.

    A ``vlgrpo_orig_sitecustomize.py`` next to ours (the file ``install-sitecustomize`` found in its place)
    comes first. Directories before ours are not searched (Python would have imported that one instead of ours);
    copies of our own shim are skipped. ``None`` when there is none. Paths are compared as absolute paths, and
    through symlinks (``realpath``) only when that finds no match, to keep start-up cheap.
    """
    search_path = sys.path if search_path is None else search_path
    own_dir = os.path.dirname(os.path.abspath(own_file))
    kept = os.path.join(own_dir, KEPT_NAME)  # a foreign one that install-sitecustomize moved aside
    if os.path.isfile(kept):
        return kept
    for resolve in (os.path.abspath, os.path.realpath):
        own = resolve(own_dir)
        entries = [resolve(e or os.getcwd()) for e in search_path if isinstance(e, str)]
        if own in entries:
            break
    else:
        return None
    for entry in entries[entries.index(own) + 1:]:
        if entry == own:
            continue
        candidate = os.path.join(entry, "sitecustomize.py")
        if os.path.isfile(candidate) and not _is_our_shim(candidate):
            return candidate
    return None


def chain_sitecustomize(own_file):
    """Execute the ``sitecustomize`` that ours shadows (apport, conda, vendor images; field case B18).

    The chained file runs as module ``vlgrpo_chained_sitecustomize`` (also in ``sys.modules``). Its errors are
    reported like Python reports a failing ``sitecustomize`` (one line on stderr) and recorded; strict mode
    re-raises.
    """
    try:
        path = find_next_sitecustomize(own_file)
        if path is None:
            return None
        module = type(sys)("vlgrpo_chained_sitecustomize")
        module.__file__ = path
        sys.modules["vlgrpo_chained_sitecustomize"] = module
        with open(path, "rb") as fh:
            code = compile(fh.read(), path, "exec")
        STATE["chained_sitecustomize"] = path
        exec(code, module.__dict__)
        return path
    except Exception as exc:
        STATE["chain_error"] = f"{type(exc).__name__}: {exc}"
        if strict():
            raise
        try:
            sys.stderr.write(f"vlgrpo.patches: error in chained sitecustomize {STATE['chained_sitecustomize']}: "
                             f"{type(exc).__name__}: {exc}\n")
        except Exception:
            pass
        return None
