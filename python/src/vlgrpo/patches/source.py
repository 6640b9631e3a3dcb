"""Shared helpers of the detectors: read the installed code itself, by parsing a function's source with :mod:`ast`.

Version numbers are deliberately not used: verl gates its router fix at transformers <= 4.57.3, yet 4.57.4-4.57.6
carry the same line (field case B03); verl's NPU layer rebinds the block class, so what matters is the final
bound ``forward`` (B04). Each fix's own detector (``is_faulty`` in :mod:`vlgrpo.patches.fixes`) is built from these.

A detector takes a function (its ``__code__`` locates the source, so ``__wrapped__`` chains are *not* followed) or an
already parsed ``ast.FunctionDef`` (tests run them on source files of other releases), and returns
``(faulty: bool, reason: str)``. ``OSError``/``TypeError`` propagate when no source is available.

Not imported at interpreter start (it imports :mod:`ast` and :mod:`inspect`): the fix modules import it inside
their detectors.
"""

from __future__ import annotations

import ast
import inspect
import textwrap


def function_node(obj) -> ast.FunctionDef:
    """Parse ``obj`` (a function, or an ``ast.FunctionDef`` returned as is) into its ``FunctionDef`` node.

    Line numbers of the returned node are those of the file defining ``obj`` (so a detector's "line N" points at the
    installed source, as for a node found by :func:`find_function` in a whole module)."""
    if isinstance(obj, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return obj
    code = getattr(obj, "__code__", None)
    if code is None:
        raise TypeError(f"cannot inspect {obj!r}: not a Python function")
    lines, first = inspect.getsourcelines(code)
    tree = ast.parse(textwrap.dedent("".join(lines)))
    if first > 1:
        ast.increment_lineno(tree, first - 1)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return node
    raise TypeError(f"source of {obj!r} holds no function definition")


def find_function(source: str, qualname: str) -> ast.FunctionDef:
    """Return the ``FunctionDef`` (or ``AsyncFunctionDef``) of ``qualname`` (``"Class.method"`` or ``"func"``) in module ``source``."""
    body = ast.parse(source).body
    parts = qualname.split(".")
    for i, part in enumerate(parts):
        wanted = (ast.FunctionDef, ast.AsyncFunctionDef) if i == len(parts) - 1 else ast.ClassDef
        match = [n for n in body if isinstance(n, wanted) and n.name == part]
        if not match:
            raise KeyError(f"{qualname} not found in source")
        node = match[-1]  # the last definition wins, as at run time
        body = node.body
    return node


def name_of(node):
    """``node.id`` when ``node`` is an ``ast.Name``, else ``None``."""
    return node.id if isinstance(node, ast.Name) else None


def ordered(node):
    """All descendants of ``node`` sorted by source position."""
    nodes = [n for n in ast.walk(node) if hasattr(n, "lineno")]
    return sorted(nodes, key=lambda n: (n.lineno, n.col_offset))


def routing_scatters(fn):
    """Yield ``(call, dest, src)`` for every ``torch.zeros_like(<dest>).scatter_(dim, index, <src>)``."""
    for node in ast.walk(fn):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("scatter_", "scatter")
        ):
            continue
        base = node.func.value
        if not (isinstance(base, ast.Call) and base.args):
            continue
        callee = base.func.attr if isinstance(base.func, ast.Attribute) else name_of(base.func)
        if callee != "zeros_like":
            continue
        src = node.args[2] if len(node.args) >= 3 else next((k.value for k in node.keywords if k.arg == "src"), None)
        yield node, name_of(base.args[0]), name_of(src) if src is not None else None


def mentions(node, attrs=(), names=()) -> bool:
    """True when ``node`` (or a node below it) is an attribute named in ``attrs`` or a variable named in ``names``."""
    for n in ast.walk(node):
        if isinstance(n, ast.Attribute) and n.attr in attrs:
            return True
        if isinstance(n, ast.Name) and n.id in names:
            return True
    return False


def unwrap_named(obj, *code_names):
    """Follow ``__wrapped__`` while ``obj``'s code is named one of ``code_names`` (a known decorator's inner
    function: Ray's actor-method tracing wrapper ``_resume_span``, verl's ``rollout_trace_op`` ``async_wrapper``);
    our own replacements are never unwrapped this way. Returns the innermost such function (or ``obj``)."""
    while getattr(getattr(obj, "__code__", None), "co_name", "") in code_names and hasattr(obj, "__wrapped__"):
        obj = obj.__wrapped__
    return obj
