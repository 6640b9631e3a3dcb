"""The import hook: run registered post-import hooks right after a target module executed (stdlib only).

:class:`PostImportFinder` sits at the front of ``sys.meta_path``. For a module name that has hooks
(:func:`register_hook`), it asks the other finders for the spec and wraps the loader so that the hooks run right
after the module body executed, before the importer binds any name from it. Any other name costs one dict lookup.
Modules already imported when a hook is registered get it at once. A hook that raises is logged once and recorded
in :data:`vlgrpo.patches.state.STATE` (``hook_errors``), unless strict mode is on: the module itself imports
normally.

Mirrors the post-import-hook idea of wrapt (``register_post_import_hook``) and dd-trace-py's ``ModuleWatchdog``,
written here on plain ``importlib`` machinery. Imported at interpreter start: only ``sys`` and
:mod:`vlgrpo.patches.state`.
"""

import sys

from vlgrpo.patches.state import STATE, log_once, strict

_HOOKS = {}  # module name -> list of callables(module)
_PENDING = set()  # hooked module names whose hooks have not run yet (see _sweep)
_RUNNING = [0]  # depth of run_hooks calls in progress: no sweep from imports the hooks themselves make


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
        log_once(
            ("hook", module_name),
            40,
            f"vlgrpo.patches: post-import hook for {module_name} failed: "
            f"{type(exc).__name__}: {exc} (the module itself imported normally)",
        )
        if strict():
            raise
