"""No import cycle in python/src: no module imports (directly or through others) a module that imports it back.

The graph is read from the source with :mod:`ast` (nothing is imported): an edge A -> B for every ``import B`` /
``from B import x`` anywhere in A, function-level (lazy) imports included, since a lazy import back is still a
cycle in the design. ``from P import x`` is an edge to the module ``P.x`` when that is a module of python/src, else
to ``P``. Relative imports are resolved against A's package. The implicit import of a parent package
(``import a.b`` runs ``a/__init__.py``) is not an edge: every submodule would otherwise be tied to its package.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "python" / "src"


def _modules() -> dict:
    """``{dotted module name: path}`` of every .py file under python/src (``pkg/__init__.py`` -> ``pkg``)."""
    out = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _edges(name: str, path: Path, known: dict) -> set:
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:  # `import a.b.c` of a name defined in a.b: the module a.b
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def _cycles(graph: dict) -> list:
    """Strongly connected components with more than one module (Tarjan's algorithm, iterative)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _graph() -> dict:
    known = _modules()
    return {name: _edges(name, path, known) for name, path in known.items()}


def test_the_graph_sees_the_imports_it_must():
    graph = _graph()
    assert "vlgrpo.patches.state" in graph["vlgrpo.patches.engine"]  # a top-level `from ... import`
    assert "vlgrpo.patches.engine" in graph["vlgrpo.patches.bootstrap"]  # a lazy import inside a function
    assert "vlgrpo.patches.fixes.rollout_vision_placeholder_ban" in graph["vlgrpo.patches.registry"]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]  # the check can fail


def test_no_module_in_python_src_imports_one_that_imports_it_back():
    graph = _graph()
    cycles = _cycles(graph)
    detail = []
    for component in cycles:
        members = set(component)
        detail.append("; ".join(f"{a} -> {', '.join(sorted(graph[a] & members))}" for a in component))
    assert not cycles, "import cycles in python/src:\n" + "\n".join(detail)
