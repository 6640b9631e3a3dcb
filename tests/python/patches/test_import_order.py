"""Every module of ``vlgrpo.patches``, imported in a fresh interpreter in many orders, gives the same result.

The package has about 30 modules, so all 30! orders cannot run. An order-dependent import needs two modules whose top
levels reach each other (an import cycle) or read each other's state; it shows when one particular module of them
is imported first, or when one comes before the other. So the orders are chosen to cover exactly those:

- each module imported *first*, the others after it in sorted order (every member of any cycle gets to start);
- the sorted order and its reverse (together they put every module before and after every other one);
- 4 seeded shuffles (orders no rule above produces).

Four modules import torch at their top level (a few seconds of CPU per interpreter here): :data:`HEAVY` (kernels
and replacements, which import nothing of ``vlgrpo`` at their top level; the first test checks the list against the
files). The rules run in full over the other modules; the orders over all of them are the sorted one, its reverse
and each heavy module first.

"The same result" is, after the imports: every module's public names and the kind of each, the registry's ids and
target modules, and which ``vlgrpo`` modules are loaded; every import must succeed. tests/python/test_import_graph.py
checks the graph itself (no cycle); this test checks what running the imports does.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from patch_helpers import REPO, run_py

PACKAGE = REPO / "python" / "src" / "vlgrpo" / "patches"
HEAVY = (
    "vlgrpo.patches.moe_experts",
    "vlgrpo.patches.moe_routing",
    "vlgrpo.patches.qwen3_vl_pos_embed",
    "vlgrpo.patches.text_rotary",
)

PROBE = r"""
import importlib, json, sys
order = json.loads(ORDER)
for name in order:
    importlib.import_module(name)
from vlgrpo.patches import registry
result = {name: sorted((k, type(v).__name__) for k, v in vars(sys.modules[name]).items() if not k.startswith("_"))
          for name in order}
result["registry"] = [list(registry.IDS), sorted(registry.target_modules().items())]
result["loaded"] = sorted(m for m in sys.modules if m.startswith("vlgrpo"))
print(json.dumps(result, sort_keys=True))
"""


def _modules() -> list:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = ["vlgrpo", "patches", *path.relative_to(PACKAGE).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        names.append(".".join(parts))
    return names


def _orders(names: list) -> list:
    ordered = sorted(names)
    orders = [[first] + [n for n in ordered if n != first] for first in ordered]
    orders += [ordered, ordered[::-1]]
    rng = random.Random(16)
    for _ in range(4):
        shuffled = ordered[:]
        rng.shuffle(shuffled)
        orders.append(shuffled)
    return orders


def _run(order: list, path=()) -> dict:
    return run_py(f"ORDER = {json.dumps(order)!r}\n" + PROBE, path=path).json


def _same_everywhere(orders: list, path=()) -> None:
    results = [_run(order, path) for order in orders]
    for order, result in zip(orders, results):
        assert result == results[0], f"importing in the order {order} gives another result than {orders[0]}"


def _top_level_imports(path: Path) -> set:
    import ast

    out = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


def test_the_modules_are_those_python_finds_and_heavy_is_those_importing_torch():
    """Independent references for the module list and HEAVY: pkgutil's walk of the package (what the import system
    finds), and each file's top-level imports (ast)."""
    import pkgutil

    import vlgrpo.patches

    found = {"vlgrpo.patches"} | {m.name for m in pkgutil.walk_packages(vlgrpo.patches.__path__, "vlgrpo.patches.")}
    names = _modules()
    assert set(names) == found
    torch_at_top = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        if "torch" in _top_level_imports(path):
            parts = ["vlgrpo", "patches", *path.relative_to(PACKAGE).with_suffix("").parts]
            torch_at_top.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    assert torch_at_top == set(HEAVY), torch_at_top


def test_an_order_dependent_pair_is_caught(tmp_path):
    pkg = tmp_path / "cyc"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from cyc import b\nX = b.Y\n")  # fine when a comes first ...
    (pkg / "b.py").write_text("from cyc import a\nY = 1\n")  # ... AttributeError on a half-run b otherwise
    with pytest.raises(AssertionError, match="partially initialized module"):
        _same_everywhere(_orders(["cyc.a", "cyc.b"]), path=[tmp_path])


def test_light_modules_give_the_same_result_in_every_sampled_order():
    light = [n for n in _modules() if n not in HEAVY]
    _same_everywhere(_orders(light))


@pytest.mark.slow
def test_all_modules_give_the_same_result_with_torch_importers_first_last_and_between():
    ordered = sorted(_modules())
    orders = [ordered, ordered[::-1]] + [[h] + [n for n in ordered if n != h] for h in HEAVY]
    _same_everywhere(orders)
