"""Which verl config keys reach code loading or trust: a sweep of the installed verl's source (not a hand list).

A key "reaches code loading" when its value flows into a call that imports, executes or instantiates what it names,
or into a ``trust_remote_code=`` argument. The sweep reads every ``.py`` file of the installed ``verl`` package with
:mod:`ast` (nothing is imported) and follows values backwards:

- **sinks**: ``importlib.import_module``, ``importlib.util.spec_from_file_location`` / ``find_spec``,
  ``__import__``, ``runpy.run_path`` / ``run_module``, ``exec`` / ``eval``, ``hydra.utils.instantiate`` / ``call``
  (they read the node's ``_target_``), ``hydra.utils.get_class`` / ``get_method`` / ``get_object``, and any call
  with a non-constant ``trust_remote_code=`` keyword;
- **inside a function**: a name is followed to its assignments (``x = cfg.get("path")``, ``for x in xs``, tuple
  unpacking), an attribute, ``.get("k")``, ``getattr(o, "k")``, ``o["k"]`` and ``OmegaConf.select(o, "a.b")`` add
  key segments; any other call is transparent but ends the key (what ``OmegaConf.load(path)`` returns is the
  file's content, not config: the key is ``path``); a lookup with a computed key in a module-level table follows
  the table's writes (``_agent_loop_registry[name] = cfg``);
- **across functions**: a verl function whose parameter reaches a sink is a sink itself (``load_extern_object``,
  ``import_external_libs``, ``load_function_tools_from_path``, ...); every call of it, by name, is followed the
  same way, to a fixed point.

Each flow ends at an access path: the attribute chain below a parameter, ``self`` or a global. It becomes config
keys by the composed config (:func:`keys_in_config`): the keys whose dotted path ends with the longest suffix of the
chain that any key ends with (``self.rollout_config.checkpoint_engine.custom_backend_module`` ->
``actor_rollout_ref.rollout.checkpoint_engine.custom_backend_module``). ``_target_`` below any node counts as soon
as one instantiate sink is found. Over-approximate by design: a key named wrongly is refused, never passed.

Mirrors nothing upstream; reads verl 0.8.0 ``verl/utils/import_utils.py``, ``verl/trainer/ppo/reward.py``,
``verl/workers/config/model.py``, ``verl/checkpoint_engine/base.py``, ``verl/tools/*``,
``verl/experimental/agent_loop/agent_loop.py`` as they are installed.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import re
from collections.abc import Sequence
from typing import Any, Union

#: fully qualified callee -> (positional index, keyword name) of the argument that names code, and whether the
#: sink reads ``_target_`` of it (instantiate/call)
SINKS: dict[str, tuple[int, str, bool]] = {
    "importlib.import_module": (0, "name", False),
    "importlib.util.spec_from_file_location": (1, "location", False),
    "importlib.util.find_spec": (0, "name", False),
    "builtins.__import__": (0, "name", False),
    "runpy.run_path": (0, "path_name", False),
    "runpy.run_module": (0, "mod_name", False),
    "builtins.exec": (0, "source", False),
    "builtins.eval": (0, "source", False),
    "hydra.utils.instantiate": (0, "config", True),
    "hydra.utils.call": (0, "config", True),
    "hydra.utils.get_class": (0, "path", False),
    "hydra.utils.get_method": (0, "path", False),
    "hydra.utils.get_object": (0, "path", False),
}
TRUST_KEYWORD = "trust_remote_code"
#: methods of a string that keep the value's meaning (``fqdn.rsplit(".", 1)``)
_STR_METHODS = {
    "split",
    "rsplit",
    "strip",
    "lstrip",
    "rstrip",
    "lower",
    "upper",
    "replace",
    "format",
    "removeprefix",
    "removesuffix",
    "partition",
    "rpartition",
    "encode",
    "decode",
}
_MAX_DEPTH = 24
#: text that a file with a sink call holds (files without any are parsed only when a flow leads there)
_SINK_TOKENS = (
    "import_module",
    "spec_from_file_location",
    "find_spec",
    "__import__",
    "run_path",
    "run_module",
    "exec(",
    "eval(",
    "instantiate",
    "get_class",
    "get_method",
    "get_object",
    "import call",
    "utils.call",
    TRUST_KEYWORD,
)
_DEF = re.compile(r"^[ \t]*(?:async[ \t]+)?def[ \t]+(\w+)", re.M)
#: calls that convert a config node without changing its keys (the key goes on below them)
_SAME_KEYS = (
    "omega_conf_to_dataclass",
    "to_container",
    "to_object",
    "structured",
    "create",
    "deepcopy",
    "copy",
    "dict",
    "DictConfigWrap",
)


@dataclasses.dataclass(frozen=True)
class Access:
    """A value's origin: ``root`` ("param", "self" or "global"), its name (the parameter, the class of ``self``,
    the global), the key segments below it (``"[]"`` for an element of a list/mapping), and ``closed``: a
    transparent call came after the last segment (later segments are the content of what it returned)."""

    root: str
    name: str
    segs: tuple[str, ...] = ()
    closed: bool = False

    def add(self, *segs: str) -> Access:
        if self.closed:
            return self
        return dataclasses.replace(self, segs=self.segs + segs)

    def close(self) -> Access:
        return dataclasses.replace(self, closed=True)


@dataclasses.dataclass(frozen=True)
class Hit:
    """One flow into a sink: the access path (segments, ``self``'s class when rooted there), the sink
    (``importlib.import_module``, ``trust_remote_code=``, ...), ``target`` (the sink reads ``_target_``) and where
    (path relative to the verl package, line) the flow entered its first sink."""

    segs: tuple[str, ...]
    cls: str | None
    sink: str
    target: bool
    file: str
    line: int
    via: tuple[str, ...] = ()


class _Func:
    """One function (or a module's top level): parameters, local bindings, calls and writes of its own body."""

    def __init__(self, node: ast.FunctionDef | ast.AsyncFunctionDef, module: _Module, cls: str | None) -> None:
        self.node, self.module, self.cls = node, module, cls
        self.qual = f"{module.dotted}.{cls + '.' if cls else ''}{node.name}"
        args = node.args
        self.params = [a.arg for a in args.posonlyargs + args.args]
        self.kwonly = [a.arg for a in args.kwonlyargs]
        self.method = cls is not None and bool(self.params) and self.params[0] in ("self", "cls")
        self.assigns: dict[str, list[tuple[ast.AST, bool]]] = {}
        self.calls: list[ast.Call] = []
        self.stores: list[ast.Assign] = []  # assignments to an attribute or an item

    def see(self, sub: ast.AST) -> None:
        if isinstance(sub, ast.Call):
            self.calls.append(sub)
        elif isinstance(sub, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
            if sub.value is not None:
                for t in targets:
                    self._bind(t, sub.value, False)
            if isinstance(sub, ast.Assign) and any(isinstance(t, (ast.Attribute, ast.Subscript)) for t in targets):
                self.stores.append(sub)
        elif isinstance(sub, (ast.For, ast.AsyncFor, ast.comprehension)):
            self._bind(sub.target, sub.iter, True)
        elif isinstance(sub, (ast.With, ast.AsyncWith)):
            for item in sub.items:
                if item.optional_vars is not None:
                    self._bind(item.optional_vars, item.context_expr, False)
        elif isinstance(sub, ast.NamedExpr):
            self._bind(sub.target, sub.value, False)

    def _bind(self, target: ast.AST, value: ast.AST, element: bool) -> None:
        if isinstance(target, ast.Name):
            self.assigns.setdefault(target.id, []).append((value, element))
        elif isinstance(target, (ast.Tuple, ast.List)):
            for t in target.elts:
                self._bind(t.value if isinstance(t, ast.Starred) else t, value, element)


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef)
#: what a flow has followed already: ``(id of a function, local name)`` or ``("global", name)``
_Seen = frozenset[tuple[Union[int, str], str]]


class _Module:
    def __init__(self, rel: str, tree: ast.Module):
        self.rel, self.tree = rel, tree
        dotted = rel[:-3].replace(os.sep, ".")
        self.dotted = "verl." + (dotted[: -len(".__init__")] if dotted.endswith(".__init__") else dotted)
        self.aliases: dict[str, str] = {}  # local name -> fully qualified
        self.funcs: list[_Func] = []
        self.top = _Func(
            ast.FunctionDef(
                name="<module>",
                args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[]),
                body=[],
                decorator_list=[],
            ),
            self,
            None,
        )
        # one pass: (node, the function it belongs to, the class it is directly in)
        stack: list[tuple[ast.AST, _Func, str | None]] = [(c, self.top, None) for c in ast.iter_child_nodes(tree)]
        while stack:
            node, fn, cls = stack.pop()
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        self.aliases[a.asname] = a.name
                    else:
                        self.aliases.setdefault(a.name.split(".")[0], a.name.split(".")[0])
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    self.aliases[a.asname or a.name] = f"{node.module}.{a.name}"
            if isinstance(node, ast.ClassDef):
                stack += [(c, fn, node.name) for c in ast.iter_child_nodes(node)]
                continue
            if isinstance(node, _SCOPES):
                inner = _Func(node, self, cls)
                self.funcs.append(inner)
                stack += [(c, fn, cls) for c in node.decorator_list]
                stack += [(c, inner, None) for c in node.body]
                continue
            if isinstance(node, ast.Lambda):
                continue
            fn.see(node)
            stack += [(c, fn, cls) for c in ast.iter_child_nodes(node)]

    def qualname(self, expr: ast.AST) -> str | None:
        parts: list[str] = []
        while isinstance(expr, ast.Attribute):
            parts.append(expr.attr)
            expr = expr.value
        if not isinstance(expr, ast.Name):
            return None
        head = self.aliases.get(expr.id)
        if head is None:
            head = f"builtins.{expr.id}" if not parts and expr.id in ("exec", "eval", "__import__") else expr.id
        return ".".join([head] + parts[::-1])


def _callee_name(call: ast.Call) -> str | None:
    f = call.func
    if isinstance(f, ast.Name):
        return f.id
    if isinstance(f, ast.Attribute):
        return f.attr
    return None


class Sweep:
    """The sweep over one installed verl package folder (see the module docstring). ``hits``: every flow found."""

    def __init__(self, verl_dir: str, lazy: bool = True):
        self.verl_dir = verl_dir
        self.texts: dict[str, str] = {}
        for folder, dirs, files in os.walk(verl_dir):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    try:
                        with open(path, encoding="utf-8") as fh:
                            self.texts[os.path.relpath(path, verl_dir)] = fh.read()
                    except (OSError, UnicodeDecodeError):
                        continue
        self.modules: list[_Module] = []
        self.globals_writes: dict[str, list[tuple[_Func, ast.AST]]] = {}
        self.calls: dict[str, list[tuple[_Func, ast.Call]]] = {}
        #: how many functions of each name verl defines (all files, parsed or not)
        self.defcount: dict[str, int] = {}
        for text in self.texts.values():
            for name in _DEF.findall(text):
                self.defcount[name] = self.defcount.get(name, 0) + 1
        self._loaded: set[str] = set()
        self._ensured: set[str] = set()
        # Only files that can matter are parsed: those with a sink's name, then (as the flows need them) those that
        # name a function found to be a sink, a module-level table, or a key segment assigned to.
        for rel, text in self.texts.items():
            if not lazy or any(tok in text for tok in _SINK_TOKENS):
                self._load(rel)
        self._memo: dict[tuple[int, int, int, _Seen], set[Access]] = {}
        self.hits: list[Hit] = []
        self._run()
        for hit in list(self.hits):
            for seg in hit.segs:
                if seg != "[]":
                    self._ensure(seg, assigned=True)
        #: config copies: ``config.reward.custom_reward_function = config.custom_reward_function`` (verl's legacy-key
        #: migration): (target segments, value segments, file, line), both below the same parameter
        self.copies: list[tuple[tuple[str, ...], tuple[str, ...], str, int]] = []
        for m in self.modules:
            for fn in m.funcs:
                for sub in fn.stores:
                    if len(sub.targets) != 1:
                        continue
                    for t in self.origins(fn, sub.targets[0]):
                        if t.root != "param" or len(t.segs) < 2 or t.closed:
                            continue
                        for v in self.origins(fn, sub.value):
                            if v.root == "param" and v.name == t.name and v.segs:
                                self.copies.append((t.segs, v.segs, m.rel, sub.lineno))

    def _load(self, rel: str) -> None:
        if rel in self._loaded:
            return
        self._loaded.add(rel)
        try:
            tree = ast.parse(self.texts[rel], filename=rel)
        except (SyntaxError, ValueError):
            return
        m = _Module(rel, tree)
        self.modules.append(m)
        for fn in m.funcs + [m.top]:
            for sub in fn.stores:
                for t in sub.targets:
                    if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name):
                        self.globals_writes.setdefault(t.value.id, []).append((fn, sub.value))
            for call in fn.calls:
                self.calls.setdefault(_callee_name(call) or "", []).append((fn, call))

    def _ensure(self, name: str, assigned: bool = False) -> None:
        """Parse every file that names ``name`` (as a word; with ``assigned``, only where ``.name`` is assigned)."""
        key = f"{name}={assigned}"
        if key in self._ensured or not name:
            return
        self._ensured.add(key)
        pattern = re.compile(rf"\.{re.escape(name)}\s*=[^=]" if assigned else rf"\b{re.escape(name)}\b")
        for rel, text in self.texts.items():
            if rel not in self._loaded and name in text and pattern.search(text):
                self._load(rel)

    # ---- value origins ----------------------------------------------------------------------------------------
    def origins(self, fn: _Func, expr: ast.AST, depth: int = 0, seen: _Seen = frozenset()) -> set[Access]:
        if depth > _MAX_DEPTH or expr is None:
            return set()
        # remembered per (function, expression, depth, names followed): a result cut short by the depth limit is
        # never reused at a smaller depth
        memo = (id(fn), id(expr), depth, seen)
        if memo not in self._memo:
            self._memo[memo] = self._origins(fn, expr, depth, seen)
        return self._memo[memo]

    def _origins(self, fn: _Func, expr: ast.AST, depth: int, seen: _Seen) -> set[Access]:
        def rec(e: ast.AST) -> set[Access]:
            return self.origins(fn, e, depth + 1, seen)

        if isinstance(expr, ast.Name):
            name = expr.id
            out: set[Access] = set()
            if name in fn.assigns and (id(fn), name) not in seen:
                for value, element in fn.assigns[name]:
                    for a in self.origins(fn, value, depth + 1, seen | {(id(fn), name)}):
                        out.add(a.add("[]") if element else a)
            if name in fn.params or name in fn.kwonly:
                if fn.method and name == fn.params[0]:
                    return out | {Access("self", fn.cls or "")}
                return out | {Access("param", name)}
            return out or {Access("global", name)}
        if isinstance(expr, ast.Attribute):
            return {a.add(expr.attr) for a in rec(expr.value)}
        if isinstance(expr, ast.Subscript):
            sl = expr.slice
            if isinstance(sl, ast.Slice):  # text[a:b]: a transformation of the value
                return {a.close() for a in rec(expr.value)}
            if isinstance(sl, ast.Constant) and isinstance(sl.value, str):
                return {a.add(sl.value) for a in rec(expr.value)}
            base = rec(expr.value)
            out = set()
            for a in base:
                if a.root == "global" and not a.segs and ("global", a.name) not in seen:
                    if a.name in fn.module.top.assigns or a.name in fn.module.aliases:  # a module-level table
                        self._ensure(a.name)
                    for wfn, value in self.globals_writes.get(a.name, []):
                        out |= self.origins(wfn, value, depth + 1, seen | {("global", a.name)})
                else:
                    out.add(a.add("[]"))
            return out
        if isinstance(expr, ast.Call):
            return self._call_origins(fn, expr, depth, seen)
        if isinstance(expr, ast.BoolOp):
            return set().union(*(rec(v) for v in expr.values))
        if isinstance(expr, ast.IfExp):
            return rec(expr.body) | rec(expr.orelse)
        if isinstance(expr, ast.JoinedStr):
            return set().union(set(), *(rec(v.value) for v in expr.values if isinstance(v, ast.FormattedValue)))
        if isinstance(expr, ast.BinOp):
            return {a.close() for a in rec(expr.left) | rec(expr.right)}
        if isinstance(expr, (ast.Tuple, ast.List, ast.Set)):
            return set().union(set(), *(rec(e) for e in expr.elts))
        if isinstance(expr, ast.Starred):
            return rec(expr.value)
        if isinstance(expr, ast.NamedExpr):
            return rec(expr.value)
        if isinstance(expr, ast.Await):
            return rec(expr.value)
        return set()

    def _call_origins(self, fn: _Func, call: ast.Call, depth: int, seen: _Seen) -> set[Access]:
        def rec(e: ast.AST) -> set[Access]:
            return self.origins(fn, e, depth + 1, seen)

        f = call.func
        const = [a.value for a in call.args[1:2] if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        if (
            isinstance(f, ast.Attribute)
            and f.attr == "get"
            and call.args
            and isinstance(call.args[0], ast.Constant)
            and isinstance(call.args[0].value, str)
        ):
            out = {a.add(call.args[0].value) for a in rec(f.value)}
            return out | set().union(set(), *(rec(d) for d in call.args[1:2]))  # the default too
        if isinstance(f, ast.Name) and f.id == "getattr" and len(call.args) >= 2 and const:
            return {a.add(const[0]) for a in rec(call.args[0])} | set().union(set(), *(rec(d) for d in call.args[2:3]))
        q = fn.module.qualname(f) or ""
        if q.endswith("OmegaConf.select") and len(call.args) >= 2 and const:
            return {a.add(*const[0].split(".")) for a in rec(call.args[0])}
        if isinstance(f, ast.Attribute) and f.attr in _STR_METHODS:
            return {a.close() for a in rec(f.value)}
        if (_callee_name(call) or "") in _SAME_KEYS and call.args:
            return rec(call.args[0])
        # any other call: transparent, and the key ends here
        out = set()
        for arg in list(call.args) + [k.value for k in call.keywords]:
            out |= {a.close() for a in rec(arg)}
        return out

    def _calls(self, caller: _Func, call: ast.Call, callee: _Func) -> bool:
        """Does ``call`` (in ``caller``) call ``callee``? A plain name by the caller module's imports (or a function of
        that module); ``self.f`` within the class; ``module.f`` by the import; ``obj.f`` only when verl defines one
        function of that name."""
        f = call.func
        init = callee.node.name == "__init__"
        want = callee.qual[: -len(".__init__")] if init else callee.qual
        if isinstance(f, ast.Name):
            return (caller.module.aliases.get(f.id) or f"{caller.module.dotted}.{f.id}") == want
        if not isinstance(f, ast.Attribute):
            return False
        if (
            isinstance(f.value, ast.Name)
            and f.value.id in ("self", "cls")
            and caller.cls == callee.cls
            and caller.module is callee.module
        ):
            return True
        if caller.module.qualname(f) == want:
            return True
        return not init and self.defcount.get(callee.node.name, 0) == 1 and not callee.node.name.startswith("__")

    # ---- sinks and the fixed point ----------------------------------------------------------------------------
    def _run(self) -> None:
        func_sinks: dict[str, set[str]] = {}
        pending: list[tuple[str, str, tuple[str, ...], bool, str, str, int, _Func, tuple[str, ...]]] = []

        def record(
            fn: _Func,
            expr: ast.AST,
            suffix: tuple[str, ...],
            target: bool,
            sink: str,
            file: str,
            line: int,
            via: tuple[str, ...] = (),
        ) -> None:
            for a in self.origins(fn, expr):
                segs = a.segs if a.closed else a.segs + suffix
                if a.root == "param":
                    name = fn.qual
                    func_sinks.setdefault(name, set()).add(a.name)
                    pending.append((name, a.name, segs, target, sink, file, line, fn, via))
                elif a.root == "self":
                    self.hits.append(Hit(segs, a.name, sink, target, file, line, via))

        for calls in list(self.calls.values()):
            for fn, sub in list(calls):
                m = fn.module
                q = m.qualname(sub.func)
                if q in SINKS:
                    pos, kw, target = SINKS[q]
                    arg = (
                        sub.args[pos]
                        if len(sub.args) > pos
                        else next((k.value for k in sub.keywords if k.arg == kw), None)
                    )
                    if arg is not None:
                        record(fn, arg, ("_target_",) if target else (), target, q, m.rel, sub.lineno)
                for k in sub.keywords:
                    if k.arg == TRUST_KEYWORD and not isinstance(k.value, ast.Constant):
                        record(fn, k.value, (), False, "trust_remote_code=", m.rel, sub.lineno)
        done: set[tuple[str, str, tuple[str, ...]]] = set()
        while pending:
            name, param, segs, target, sink, file, line, owner, via = pending.pop()
            if (name, param, segs) in done:
                continue
            done.add((name, param, segs))
            index = owner.params.index(param) if param in owner.params else None
            if index is not None and owner.method:
                index -= 1
            callers = 0
            self._ensure(owner.node.name if owner.node.name != "__init__" else owner.cls or "")
            for fn, sub in list(
                self.calls.get(owner.node.name if owner.node.name != "__init__" else owner.cls or "", [])
            ):
                if not self._calls(fn, sub, owner):
                    continue
                callers += 1
                arg = next((k.value for k in sub.keywords if k.arg == param), None)
                if (
                    arg is None
                    and index is not None
                    and 0 <= index < len(sub.args)
                    and not any(isinstance(a, ast.Starred) for a in sub.args[: index + 1])
                ):
                    arg = sub.args[index]
                if arg is not None:
                    record(
                        fn,
                        arg,
                        segs,
                        target,
                        sink,
                        file,
                        line,
                        via + (f"{fn.module.rel}:{sub.lineno} {owner.node.name}({param})",),
                    )
            if not callers and segs:
                # an entry point verl's own code never calls (a Hydra main, a Ray actor method): the keys below the
                # parameter are the config's
                self.hits.append(Hit(segs, None, sink, target, file, line, via))
        self.func_sinks = func_sinks


def _config_keys(cfg: Any, prefix: str = "") -> list[str]:
    """Every dotted key of a composed config (mappings only; list elements are values of their key)."""
    from omegaconf import DictConfig

    out = []
    for k in cfg.keys():
        key = f"{prefix}.{k}" if prefix else str(k)
        out.append(key)
        node = cfg._get_node(k)
        if isinstance(node, DictConfig) and not node._is_none() and not node._is_missing():
            out += _config_keys(node, key)
    return out


def _targets(cfg: Any, prefix: str = "") -> dict[str, list[str]]:
    """class name -> dotted keys of the nodes whose ``_target_`` names a class of that name."""
    from omegaconf import DictConfig

    out: dict[str, list[str]] = {}
    for key in _config_keys(cfg):
        if key.endswith("._target_"):
            value = cfg
            try:
                for part in key.split("."):
                    value = value._get_node(part)
                value = value._value()
            except Exception:
                continue
            if isinstance(value, str):
                out.setdefault(value.rsplit(".", 1)[-1], []).append(key[: -len("._target_")])
    del DictConfig
    return out


@dataclasses.dataclass(frozen=True)
class CodeKey:
    """A config key whose value reaches code loading or trust; ``hit``: the evidence (file, line, sink)."""

    key: str
    hit: Hit


def keys_in_config(
    hits: list[Hit], cfg: Any, copies: Sequence[tuple[tuple[str, ...], tuple[str, ...], str, int]] = ()
) -> dict[str, Hit]:
    """Map the sweep's access paths onto ``cfg`` (a composed verl config): dotted key -> the first hit that
    names it (see the module docstring). A hit whose chain ends in ``_target_`` maps to every ``_target_`` key.
    ``copies`` (:attr:`Sweep.copies`): a key verl copies into a code key (or into a node above one) is a code key
    too."""
    keys = _config_keys(cfg)
    by_tail: dict[tuple[str, ...], list[str]] = {}
    for k in keys:
        parts = tuple(k.split("."))
        for i in range(len(parts)):
            by_tail.setdefault(parts[i:], []).append(k)
    anchors = _targets(cfg)
    out: dict[str, Hit] = {}
    for hit in sorted(hits, key=lambda h: (h.file, h.line, h.segs)):
        segs = tuple(s for s in hit.segs if s != "[]")
        if not segs:
            continue
        if segs[-1] == "_target_":
            for k in keys:
                if k.endswith("._target_") or k == "_target_":
                    out.setdefault(k, hit)
            continue
        found: list[str] = []
        if hit.cls and hit.cls in anchors:
            found = [f"{a}.{'.'.join(segs)}" for a in anchors[hit.cls] if f"{a}.{'.'.join(segs)}" in keys]
        if not found and hit.cls is None and segs in by_tail:
            found = by_tail[segs]
        if not found:
            # the attribute right below self is the object's own (self.config...), not a config segment
            start = 1 if hit.cls is not None and len(segs) > 1 else 0
            for i in range(start, len(segs)):
                if segs[i:] in by_tail:
                    found = by_tail[segs[i:]]
                    break
        for k in found:
            out.setdefault(k, hit)
    for _ in range(3):
        for t_segs, v_segs, file, line in copies:
            t_keys, v_keys = _match(t_segs, by_tail), _match(v_segs, by_tail)
            for code in list(out):
                for t in t_keys:
                    if code == t or code.startswith(t + "."):
                        for v in v_keys:
                            new = v + code[len(t) :]
                            if new in keys and new not in out:
                                h = out[code]
                                out[new] = dataclasses.replace(h, via=h.via + (f"{file}:{line} copied into {t}",))
    return out


def _match(segs: tuple[str, ...], by_tail: dict[tuple[str, ...], list[str]]) -> list[str]:
    segs = tuple(x for x in segs if x != "[]")
    return by_tail.get(segs, [])


_CACHE: dict[str, Sweep] = {}


def sweep(verl_dir: str | None = None) -> Sweep:
    """The sweep of ``verl_dir`` (default: the installed verl package), cached for this process."""
    if verl_dir is None:
        from .launch import verl_package_dir

        verl_dir = verl_package_dir()
    if verl_dir not in _CACHE:
        _CACHE[verl_dir] = Sweep(verl_dir)
    return _CACHE[verl_dir]
