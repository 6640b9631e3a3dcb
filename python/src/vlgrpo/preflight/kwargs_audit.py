"""Audit of settings that never take effect (field case C08's kind, and B08's): a sweep of the installed verl's own
source with :mod:`ast`.

Two kinds of place are found:

``swallowed``  a call from verl into VeOmni, vLLM or transformers passing a keyword the callee takes in
               ``**kwargs`` and never reads: the value is accepted and ignored. The callee is resolved through verl's
               imports (``from veomni.x import f``, ``import vllm``, re-exports in ``__init__``, class ``__init__``
               and methods through the bases); ``**kwargs`` forwarded with ``**`` to another function of the same
               package is followed; ``kwargs.get("k")`` / ``pop`` / ``["k"]`` / ``"k" in kwargs`` read ``k``; any
               other use of the mapping counts as reading every key (undecided, never a finding).
``drops``      a verl function that builds arguments from ``<mapping>.items()`` (appends or assigns by the key)
               and skips a pair by its value (``continue`` under a test of the value, or an append only under
               one): the values it drops never reach the callee (verl 0.8.0's ``build_cli_args_from_config`` drops ``False``, ``None`` and empty lists: B08).

:func:`sweep` returns both lists and the counts; :func:`reachable` maps a swallowed keyword whose value is a field
of one of verl's config dataclasses (``self.engine_config.mixed_precision``) to the Hydra keys of the composed
config that hold it. The preflight check ``kwargs-audit`` (``rules.setting-swallowed``) refuses an argv that sets
such a key. Run it alone: ``python -m vlgrpo.preflight.kwargs_audit [--callee veomni=<dir> ...]`` (JSON).
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict, Union

if TYPE_CHECKING:
    from .report import Report
    from .rules import Locator

#: the packages whose functions verl calls and which the sweep reads
CALLEES = ("veomni", "vllm", "transformers")
#: how the reports name each callee
DISPLAY = {"veomni": "VeOmni", "vllm": "vLLM", "transformers": "transformers"}
#: upstream fixes known for a swallowed keyword (citation only; the sweep finds the places itself)
KNOWN_FIXES = {("build_parallelize_model", "enable_mixed_precision"): "verl PR #6644"}

#: a function definition in a parsed module
FuncNode = Union[ast.FunctionDef, ast.AsyncFunctionDef]
#: what :meth:`_Resolver.resolve` finds: ``(module, file, its tree, the function or class node)``
Found = tuple[str, str, ast.Module, Union[FuncNode, ast.ClassDef]]
#: ``(verl folder, {callee package: folder holding it, or None when not installed})``
Roots = tuple[Union[str, None], dict[str, Union[str, None]]]


@dataclass
class Swallowed:
    """A keyword verl passes that the callee absorbs: where (verl file, line, function), the callee (qualified name,
    file, line), the keyword and verl's value expression (source text)."""

    verl_file: str
    line: int
    verl_function: str
    callee: str
    callee_file: str
    callee_line: int
    keyword: str
    value: str
    holder_types: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


@dataclass
class Drop:
    """A verl loop that skips ``(key, value)`` pairs by value: file, line, function, and the value tests (source)."""

    verl_file: str
    line: int
    verl_function: str
    tests: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class SweepResult(TypedDict):
    """What :func:`sweep` returns."""

    swallowed: list[Swallowed]
    undecided: int
    calls: int
    drops: list[Drop]
    callees: dict[str, str]


class _Package:
    """Parsed modules of one package root (``root/<name>/...``), read on demand."""

    def __init__(self, name: str, root: str) -> None:
        self.name, self.root = name, root
        self._trees: dict[str, tuple[str | None, ast.Module | None]] = {}

    def module_file(self, module: str) -> str | None:
        base = os.path.join(self.root, *module.split("."))
        for path in (base + ".py", os.path.join(base, "__init__.py")):
            if os.path.isfile(path):
                return path
        return None

    def tree(self, module: str) -> tuple[str | None, ast.Module | None]:
        if module not in self._trees:
            path = self.module_file(module)
            tree = None
            if path:
                try:
                    with open(path, encoding="utf-8") as fh:
                        tree = ast.parse(fh.read())
                except (OSError, SyntaxError, ValueError):
                    tree = None
            self._trees[module] = (path, tree)
        return self._trees[module]


def _bindings(tree: ast.AST, module: str, is_pkg: bool) -> dict[str, str]:
    """Top-level import bindings of a module: local name -> dotted target."""
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    out[a.asname] = a.name
                else:
                    out[a.name.split(".")[0]] = a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = module.split(".")
                base = parts if is_pkg else parts[:-1]
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                src = ".".join(base + ([node.module] if node.module else []))
            else:
                src = node.module or ""
            for a in node.names:
                if a.name != "*":
                    out[a.asname or a.name] = f"{src}.{a.name}"
    return out


def _dotted(expr: ast.expr) -> str | None:
    parts: list[str] = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if isinstance(expr, ast.Name):
        parts.append(expr.id)
        return ".".join(reversed(parts))
    return None


class _Resolver:
    def __init__(self, packages: dict[str, _Package]) -> None:
        self.packages = packages

    def _pkg(self, dotted: str) -> _Package | None:
        return self.packages.get(dotted.split(".")[0])

    def resolve(self, dotted: str, depth: int = 0) -> Found | None:
        """``(module, node, qualname)`` of the function or class ``dotted`` names, or None."""
        pkg = self._pkg(dotted)
        if pkg is None or depth > 8:
            return None
        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):
            module = ".".join(parts[:cut])
            path, tree = pkg.tree(module)
            if tree is None or path is None:
                continue
            rest = parts[cut:]
            if not rest:
                return None
            return self._in_module(pkg, module, path, tree, rest, depth)
        return None

    def _in_module(
        self, pkg: _Package, module: str, path: str, tree: ast.Module, rest: list[str], depth: int
    ) -> Found | None:
        name = rest[0]
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
                return self._member(pkg, module, path, tree, node, rest[1:], depth)
        for node in tree.body:  # NAME = other_name (an alias)
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and getattr(node.targets[0], "id", None) == name:
                target = _dotted(node.value)
                if target:
                    binds = _bindings(tree, module, path.endswith("__init__.py"))
                    head = binds.get(target.split(".")[0])
                    full = (head + target[len(target.split(".")[0]) :]) if head else f"{module}.{target}"
                    return self.resolve(".".join([full] + rest[1:]), depth + 1)
        binds = _bindings(tree, module, path.endswith("__init__.py"))
        if name in binds:
            return self.resolve(".".join([binds[name]] + rest[1:]), depth + 1)
        return None

    def _member(
        self,
        pkg: _Package,
        module: str,
        path: str,
        tree: ast.Module,
        node: FuncNode | ast.ClassDef,
        rest: list[str],
        depth: int,
    ) -> Found | None:
        if not rest:
            return (module, path, tree, node)
        if not isinstance(node, ast.ClassDef):
            return None
        return self.method(module, path, tree, node, rest[0], depth)

    def method(
        self, module: str, path: str, tree: ast.Module, cls: ast.ClassDef, name: str, depth: int = 0
    ) -> Found | None:
        for item in cls.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == name:
                return (module, path, tree, item)
        binds = _bindings(tree, module, path.endswith("__init__.py"))
        for base in cls.bases:
            dotted = _dotted(base)
            if not dotted:
                continue
            head = dotted.split(".")[0]
            full = binds[head] + dotted[len(head) :] if head in binds else f"{module}.{dotted}"
            found = self.resolve(full, depth + 1)
            if found and isinstance(found[3], ast.ClassDef):
                hit = self.method(found[0], found[1], found[2], found[3], name, depth + 1)
                if hit:
                    return hit
        return None


def _params(fn: FuncNode) -> tuple[set[str], str | None]:
    a = fn.args
    names = {p.arg for p in a.posonlyargs + a.args + a.kwonlyargs}
    return names, (a.kwarg.arg if a.kwarg else None)


def _kwargs_uses(fn: FuncNode, kw: str) -> tuple[set[object], list[ast.AST | None], bool]:
    """``(read literal keys, forwarded calls, other use)`` of the ``**kw`` mapping inside ``fn``."""
    read: set[object] = set()
    forwards: list[ast.AST | None] = []
    other = False
    parents: dict[ast.AST, ast.AST] = {}
    for node in ast.walk(fn):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    for node in ast.walk(fn):
        if not (isinstance(node, ast.Name) and node.id == kw):
            continue
        parent = parents.get(node)
        if isinstance(parent, ast.keyword) and parent.arg is None:
            forwards.append(parents.get(parent))
            continue
        if isinstance(parent, ast.Attribute) and parent.attr in ("get", "pop", "setdefault"):
            call = parents.get(parent)
            if isinstance(call, ast.Call) and call.args and isinstance(call.args[0], ast.Constant):
                read.add(call.args[0].value)
                continue
        if isinstance(parent, ast.Subscript) and isinstance(parent.slice, ast.Constant):
            read.add(parent.slice.value)
            continue
        if isinstance(parent, ast.Compare) and isinstance(parent.left, ast.Constant) and node in parent.comparators:
            read.add(parent.left.value)
            continue
        if isinstance(parent, ast.Delete):
            continue
        other = True
    return read, forwards, other


def absorbs(resolver: _Resolver, found: Found, key: str, depth: int = 0) -> bool | None:
    """True: ``key`` passed to the function ``found`` lands in its ``**kwargs`` and is never read (here or where
    it is forwarded); False: read, a named parameter, or refused (no ``**kwargs``); None: cannot tell."""
    module, path, tree, fn = found
    if isinstance(fn, ast.ClassDef):
        init = resolver.method(module, path, tree, fn, "__init__")
        if init is None:
            return False  # a dataclass or object.__init__: unknown keywords raise TypeError
        return absorbs(resolver, init, key, depth)
    names, kw = _params(fn)
    if key in names or kw is None:
        return False
    if depth > 6:
        return None
    read, forwards, other = _kwargs_uses(fn, kw)
    if key in read:
        return False
    if other:
        return None
    verdicts: list[bool | None] = []
    binds = _bindings(tree, module, path.endswith("__init__.py"))
    for call in forwards:
        target = _dotted(call.func) if isinstance(call, ast.Call) else None
        if not target:
            verdicts.append(None)
            continue
        head = target.split(".")[0]
        if head == "self" or head == "super":
            verdicts.append(None)
            continue
        full = binds[head] + target[len(head) :] if head in binds else f"{module}.{target}"
        hit = resolver.resolve(full)
        verdicts.append(absorbs(resolver, hit, key, depth + 1) if hit else None)
    if not verdicts:
        return True
    if any(v is False for v in verdicts):
        return False
    if any(v is None for v in verdicts):
        return None
    return True


def _verl_modules(verl_root: str) -> Iterator[tuple[str, str]]:
    base = os.path.join(verl_root, "verl")
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, verl_root)[:-3].replace(os.sep, ".")
                yield (rel[: -len(".__init__")] if rel.endswith(".__init__") else rel), path


def _functions(tree: ast.Module) -> list[tuple[str, FuncNode, ast.ClassDef | None]]:
    """``(qualname, function node, enclosing class node or None)`` of every function of a module."""
    out: list[tuple[str, FuncNode, ast.ClassDef | None]] = []

    def visit(body: list[ast.stmt], prefix: str, cls: ast.ClassDef | None) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                visit(node.body, f"{prefix}{node.name}.", node)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out.append((prefix + node.name, node, cls))
                visit(node.body, f"{prefix}{node.name}.", cls)

    visit(tree.body, "", None)
    return out


def _holder_types(value: ast.expr, fn: FuncNode, cls: ast.ClassDef | None) -> tuple[str, ...]:
    """Class names annotating the object a keyword's value is read from: ``self.<holder>.<field>`` -> the annotation
    of ``<holder>`` in the enclosing class's ``__init__`` (or of the function's own parameter ``<holder>``)."""
    dotted = _dotted(value)
    if not dotted or dotted.count(".") < 1:
        return ()
    parts = dotted.split(".")
    holder = parts[-2]
    candidates: list[FuncNode] = [fn]
    if cls is not None:
        candidates += [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"]
    names: list[str] = []
    for f in candidates:
        for p in f.args.posonlyargs + f.args.args + f.args.kwonlyargs:
            if p.arg == holder and p.annotation is not None:
                for n in ast.walk(p.annotation):
                    if isinstance(n, (ast.Name, ast.Attribute)):
                        names.append(n.id if isinstance(n, ast.Name) else n.attr)
    return tuple(dict.fromkeys(n for n in names if n[:1].isupper() and n not in ("Optional", "Union")))


def _emits_key(loop: ast.For, key: str) -> bool:
    """The loop builds arguments from its key: an ``append``/``extend`` or a subscript assignment that uses it."""
    for node in ast.walk(loop):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("append", "extend")
        ):
            if any(isinstance(n, ast.Name) and n.id == key for a in node.args for n in ast.walk(a)):
                return True
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Subscript) and isinstance(t.slice, ast.Name) and t.slice.id == key for t in node.targets
        ):
            return True
    return False


def _tests_value(test: ast.expr, name: str) -> bool:
    """``test`` looks at the value itself (truthiness, ``is None``, a comparison), not only at its type
    (``isinstance(v, ...)``)."""
    if isinstance(test, ast.Call) and getattr(test.func, "id", None) == "isinstance":
        return False
    if isinstance(test, ast.Name):
        return test.id == name
    if isinstance(test, ast.UnaryOp):
        return _tests_value(test.operand, name)
    if isinstance(test, ast.BoolOp):
        return any(_tests_value(v, name) for v in test.values)
    if isinstance(test, ast.Compare):
        return any(isinstance(n, ast.Name) and n.id == name for n in [test.left] + test.comparators)
    return False


def _drops(fn: FuncNode) -> list[str]:
    """The value tests of ``for k, v in X.items()`` loops in ``fn`` that skip a pair (``continue`` under a test of
    ``v``) or only emit it under one."""
    tests: list[str] = []
    for loop in ast.walk(fn):
        if not (
            isinstance(loop, ast.For)
            and isinstance(loop.target, ast.Tuple)
            and len(loop.target.elts) == 2
            and isinstance(loop.iter, ast.Call)
            and isinstance(loop.iter.func, ast.Attribute)
            and loop.iter.func.attr == "items"
        ):
            continue
        key, value = loop.target.elts
        if not (isinstance(value, ast.Name) and isinstance(key, ast.Name)):
            continue
        if not _emits_key(loop, key.id):
            continue
        for node in ast.walk(loop):
            if isinstance(node, ast.If) and _tests_value(node.test, value.id):
                skips = any(isinstance(n, ast.Continue) for b in node.body for n in ast.walk(b))
                truthy_only = (
                    isinstance(node.test, ast.Name)
                    and not node.orelse
                    and any(
                        isinstance(n, ast.Call)
                        and isinstance(n.func, ast.Attribute)
                        and n.func.attr in ("append", "extend")
                        for b in node.body
                        for n in ast.walk(b)
                    )
                )
                if skips or truthy_only:
                    tests.append(ast.unparse(node.test))
    return tests


def sweep(verl_root: str, callee_roots: dict[str, str | None]) -> SweepResult:
    """Sweep verl (the folder holding ``verl/``) against the callee packages ``{name: folder holding <name>/}``.

    Returns ``{"swallowed": [Swallowed], "undecided": int (keywords whose fate the sweep cannot tell),
    "calls": int (verl calls into the callees with keywords), "drops": [Drop], "callees": {name: root}}``."""
    packages = {name: _Package(name, root) for name, root in callee_roots.items() if root}
    resolver = _Resolver(packages)
    swallowed: list[Swallowed] = []
    drops: list[Drop] = []
    undecided, calls = 0, 0
    for module, path in _verl_modules(verl_root):
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
            if not any(name in text for name in packages) and ".items()" not in text:
                continue  # neither calls a callee nor loops over a mapping
            tree = ast.parse(text)
        except (OSError, SyntaxError, ValueError):
            continue
        binds = _bindings(tree, module, path.endswith("__init__.py"))
        rel = os.path.relpath(path, verl_root)
        for qualname, fn, cls in _functions(tree):
            tests = _drops(fn)
            if tests:
                drops.append(Drop(rel, fn.lineno, qualname, tests))
            local = dict(binds)
            for node in ast.walk(fn):  # imports inside the function
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    local.update(
                        _bindings(ast.Module(body=[node], type_ignores=[]), module, path.endswith("__init__.py"))
                    )
            for call in ast.walk(fn):
                if not isinstance(call, ast.Call) or not any(k.arg for k in call.keywords):
                    continue
                target = _dotted(call.func)
                if not target or target.split(".")[0] not in local:
                    continue
                head = target.split(".")[0]
                full = local[head] + target[len(head) :]
                if full.split(".")[0] not in packages:
                    continue
                found = resolver.resolve(full)
                if found is None:
                    continue
                calls += 1
                for kw in call.keywords:
                    if kw.arg is None:
                        continue
                    verdict = absorbs(resolver, found, kw.arg)
                    if verdict is None:
                        undecided += 1
                    elif verdict:
                        cmod, cpath, _, cnode = found
                        swallowed.append(
                            Swallowed(
                                rel,
                                call.lineno,
                                qualname,
                                f"{cmod}.{cnode.name}",
                                os.path.relpath(cpath, packages[full.split(".")[0]].root),
                                cnode.lineno,
                                kw.arg,
                                ast.unparse(kw.value),
                                _holder_types(kw.value, fn, cls),
                            )
                        )
    return {
        "swallowed": swallowed,
        "undecided": undecided,
        "calls": calls,
        "drops": drops,
        "callees": {n: p.root for n, p in packages.items()},
    }


_CACHE: dict[tuple[str, tuple[tuple[str, str], ...]], SweepResult] = {}
#: bump when the stored form of a sweep changes (the key also covers this module's source)
SWEEP_CACHE_VERSION = 1
#: the preflight cache's namespace for sweeps (:class:`vlgrpo.preflight.count_cache.CountCache`)
SWEEP_NAMESPACE = "kwargs-sweep"


def _process_key(verl_root: str, callee_roots: dict[str, str | None]) -> tuple[str, tuple[tuple[str, str], ...]]:
    """The in-process cache's key of a sweep: the verl folder and the sorted ``(callee, folder or "")`` pairs."""
    return verl_root, tuple(sorted((k, v or "") for k, v in callee_roots.items()))


def sweep_cache_key(verl_root: str, callee_roots: dict[str, str | None]) -> str:
    """Hex SHA-256 of everything :func:`sweep`'s result depends on: the folders, this module's source, the Python
    version, and the relative path, size and mtime (ns) of every ``.py`` file of verl and of each callee package
    (a reinstall, an upgrade or an edited file changes it). About 0.2 s for 2,500 files on the 2-core machine."""
    import hashlib
    import json
    import sys

    h = hashlib.sha256()
    callees = list(_process_key(verl_root, callee_roots)[1])
    h.update(json.dumps([SWEEP_CACHE_VERSION, verl_root, callees, sys.version]).encode())
    with open(os.path.abspath(__file__), "rb") as fh:
        h.update(hashlib.sha256(fh.read()).digest())
    for name, root in [("verl", verl_root), *callees]:
        if not root:
            continue
        top = os.path.join(root, name)
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames.sort()
            for f in sorted(filenames):
                if f.endswith(".py"):
                    path = os.path.join(dirpath, f)
                    try:
                        st = os.stat(path)
                    except OSError:
                        continue
                    h.update(f"{os.path.relpath(path, root)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _stored(result: SweepResult) -> dict[str, Any]:
    return {
        "swallowed": [s.as_dict() for s in result["swallowed"]],
        "undecided": result["undecided"],
        "calls": result["calls"],
        "drops": [d.as_dict() for d in result["drops"]],
        "callees": result["callees"],
    }


def _restored(body: dict[str, Any]) -> SweepResult | None:
    """The :class:`SweepResult` of a stored body, or None when it is not one (the caller sweeps again)."""
    try:
        swallowed = [Swallowed(**{**d, "holder_types": tuple(d["holder_types"])}) for d in body["swallowed"]]
        drops = [Drop(**d) for d in body["drops"]]
        undecided, calls, callees = body["undecided"], body["calls"], body["callees"]
    except (KeyError, TypeError):
        return None
    if not (isinstance(undecided, int) and isinstance(calls, int) and isinstance(callees, dict)):
        return None
    return {"swallowed": swallowed, "undecided": undecided, "calls": calls, "drops": drops, "callees": callees}


def cached_sweep(verl_root: str, callee_roots: dict[str, str | None], cache: Any = None) -> SweepResult:
    """:func:`sweep`, once per process for the same folders, and across processes through ``cache`` (the
    preflight's verified cache, :class:`vlgrpo.preflight.count_cache.CountCache`, or None) under
    :func:`sweep_cache_key`: an entry that is absent, fails the cache's HMAC or is not a sweep's is swept again."""
    key = _process_key(verl_root, callee_roots)
    if key not in _CACHE:
        digest = sweep_cache_key(verl_root, callee_roots) if cache is not None else ""
        entry = cache.get(SWEEP_NAMESPACE, digest) if cache is not None else None
        result = _restored(entry) if entry is not None else None
        if result is None:
            result = sweep(verl_root, callee_roots)
            if cache is not None:
                try:
                    cache.put(SWEEP_NAMESPACE, digest, _stored(result))
                except OSError:
                    pass  # a full or read-only volume: the next preflight sweeps again
        _CACHE[key] = result
    return _CACHE[key]


def reachable(item: Swallowed, cfg: Any) -> list[str]:
    """Hydra keys of the composed config ``cfg`` (an OmegaConf node) that hold the value ``item`` passes: nodes whose
    ``_target_`` names one of the value's holder classes, plus the value's field name, where that key exists."""
    from omegaconf import DictConfig

    if not item.holder_types:
        return []
    field_name = item.value.split(".")[-1]
    keys: list[str] = []

    def walk(node: Any, prefix: str) -> None:
        if not isinstance(node, DictConfig):
            return
        target = node.get("_target_") if "_target_" in node else None
        if isinstance(target, str) and target.rsplit(".", 1)[-1] in item.holder_types and field_name in node:
            keys.append(f"{prefix}{field_name}")
        for key in node.keys():
            try:
                child = node._get_node(key)
            except Exception:  # an unresolvable node holds no keys for this
                continue
            if isinstance(child, DictConfig):
                walk(child, f"{prefix}{key}.")

    walk(cfg, "")
    return keys


def default_roots() -> Roots:
    """``(verl folder, {callee: folder})`` of the installed packages, found without importing them."""
    import importlib.util

    def folder(name: str) -> str | None:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            return None
        if spec is None or not spec.submodule_search_locations:
            return None
        return os.path.dirname(list(spec.submodule_search_locations)[0])

    return folder("verl"), {name: folder(name) for name in CALLEES}


def package_version(root: str, name: str) -> str:
    """The version in ``<root>/<name>-<version>.dist-info`` (how pip installs it), or ``"?"``."""
    try:
        for entry in sorted(os.listdir(root)):
            if entry.startswith(f"{name}-") and entry.endswith(".dist-info"):
                return entry[len(name) + 1 : -len(".dist-info")]
    except OSError:
        pass
    return "?"


def check_swallowed_settings(
    work: Any, report: Report, loc: Locator, roots: Roots | None = None, cache: Any = None
) -> dict[str, Any]:
    """C08: an ERROR ``rules.setting-swallowed`` for every key the argv sets whose value verl passes as a keyword the
    callee swallows (found by :func:`sweep` over the installed verl and callees, or ``roots`` =
    ``(verl folder, {callee: folder})``). Returns the summary: the sweep's counts and the reachable keys."""
    from .report import ERROR, Finding

    verl_root, callee_roots = roots or default_roots()
    if not verl_root:
        return {"skipped": "verl is not installed here"}
    hits = cache.hits if cache is not None else 0
    known = _process_key(verl_root, callee_roots) in _CACHE
    result = cached_sweep(verl_root, callee_roots, cache)
    reached: dict[str, str] = {}
    summary: dict[str, Any] = {
        "swallowed": len(result["swallowed"]),
        "undecided": result["undecided"],
        "calls": result["calls"],
        "drops": len(result["drops"]),
        "reachable": reached,
        "cache": "this process" if known else "off" if cache is None else ("reused" if cache.hits > hits else "swept"),
    }
    for item in result["swallowed"]:
        package = item.callee.split(".")[0]
        version = package_version(callee_roots.get(package) or "", package)
        shown = DISPLAY.get(package, package)
        fix = KNOWN_FIXES.get((item.callee.rsplit(".", 1)[-1], item.keyword))
        for key in reachable(item, work):
            reached[key] = f"{item.callee}({item.keyword}=...)"
            if not loc.given(key):
                continue
            report.add(
                Finding(
                    "rules.setting-swallowed",
                    ERROR,
                    f"{key} never takes effect: verl passes it as {item.keyword}={item.value} ({item.verl_file}:{item.line}) "
                    f"to {shown} {version}'s {item.callee} ({item.callee_file}:{item.callee_line}), which takes "
                    f"{item.keyword} in **kwargs and never reads it, so {shown}'s own default runs"
                    + (f" ({fix} passes it under the name the callee reads)" if fix else ""),
                    loc.where(key),
                    "the run differs from the launch: the setting is accepted and silently ignored",
                    "drop the override (the callee's default runs either way)"
                    + (f", or use a verl with {fix}" if fix else ""),
                )
            )
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="python -m vlgrpo.preflight.kwargs_audit", description=__doc__.split("\n")[0])
    parser.add_argument("--verl", help="folder holding verl/ (default: the installed one)")
    parser.add_argument(
        "--callee",
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="folder holding NAME/ (default: the installed package)",
    )
    args = parser.parse_args(argv)
    verl_root, roots = default_roots()
    verl_root = args.verl or verl_root
    if not verl_root:
        parser.error("verl is not installed here: give --verl DIR (the folder holding verl/)")
    for item in args.callee:
        name, _, root = item.partition("=")
        roots[name] = root
    result = sweep(verl_root, roots)
    print(
        json.dumps(
            {
                "swallowed": [s.as_dict() for s in result["swallowed"]],
                "undecided": result["undecided"],
                "calls": result["calls"],
                "drops": [d.as_dict() for d in result["drops"]],
                "callees": result["callees"],
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
