"""Every fix module has the same parts and is registered once: what a newcomer copying one relies on; a malformed
``RECORD`` is refused with its module and field named."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from vlgrpo.patches import contract, engine, registry

FIXES = Path(__file__).resolve().parents[3] / "python" / "src" / "vlgrpo" / "patches" / "fixes"
MODULES = sorted(f"vlgrpo.patches.fixes.{p.stem}" for p in FIXES.glob("*.py") if p.stem != "__init__")


def test_every_fix_module_is_registered_exactly_once_in_order():
    assert sorted(m.__name__ for m in registry.MODULES) == MODULES, "a fix module is missing from registry.MODULES"
    assert [r.module for r in registry.PATCHES] == [m.__name__ for m in registry.MODULES]
    assert list(registry.IDS) == [importlib.import_module(r.module).RECORD["id"] for r in registry.PATCHES]
    assert len(set(registry.IDS)) == len(registry.IDS)


@pytest.mark.parametrize("name", MODULES)
def test_fix_module_has_the_record_the_detector_and_the_self_check(name):
    module = importlib.import_module(name)
    record = module.RECORD
    assert name.rsplit(".", 1)[1] == record["id"].replace(".", "_"), "a fix module is named after its patch id"
    assert callable(module.is_faulty) and callable(module.verify)
    assert record["detector"] == f"{name}:is_faulty" and record["verify"] == f"{name}:verify"
    assert {
        "id",
        "summary",
        "upstream",
        "applies_when",
        "targets",
        "detector",
        "replacement",
        "verify",
        "recheck_after",
    } <= set(record)
    assert registry.get(record["id"]) == contract.from_dict(record, name), "the registry holds the module's record"
    refs = [record["replacement"]] + [t[2] for t in record["targets"] if len(t) > 2]
    for ref in refs:  # every "module:attribute" the record names resolves (imports torch for some)
        assert callable(engine.resolve(ref)), ref
    if record.get("wraps"):
        assert getattr(engine.resolve(record["replacement"]), "__vlgrpo_code__", None), "a factory lists its codes"


def test_start_up_index_is_the_one_the_registry_generates():
    from vlgrpo.patches import index

    text = (FIXES.parent / "index.py").read_text(encoding="utf-8")
    assert text == registry.index_source(), "vlgrpo/patches/index.py is stale: run `make docs-patches`"
    assert index.IDS == registry.IDS
    assert {m: list(ids) for m, ids in index.TARGET_MODULES.items()} == registry.target_modules()


GOOD = {
    "id": "demo.fix",
    "summary": "s",
    "upstream": "u",
    "applies_when": "a",
    "targets": (("m", "C.f"),),
    "detector": "pkg.mod:detect",
    "replacement": "pkg.mod:f",
    "verify": "pkg.mod:verify",
}


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"detector": None}, "detector", "is missing"),
        ({"replacment": "pkg.mod:f"}, "replacment", "is not a record field"),
        ({"id": "Demo fix"}, "id", "is 'Demo fix'"),
        ({"replacement": "pkg.mod.f"}, "replacement", "'package.module:attribute'"),
        ({"targets": ()}, "targets", "non-empty"),
        ({"targets": (("m",),)}, "targets", "has the entry ('m',)"),
        ({"recheck_after": (("m", "f", "x"),)}, "recheck_after", "(module, function) string pairs"),
        ({"wraps": "yes"}, "wraps", "is 'yes'"),
        ({"summary": 3}, "summary", "a string"),
    ],
)
def test_a_malformed_record_names_its_module_and_field(change, field, words):
    record = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    with pytest.raises(contract.RecordError) as err:
        contract.from_dict(record, "vlgrpo.patches.fixes.demo_fix")
    assert str(err.value).startswith(f"vlgrpo.patches.fixes.demo_fix: RECORD[{field!r}] ") and words in str(err.value)
    assert "fix: " in str(err.value)


def test_a_record_becomes_a_typed_frozen_record():
    rec = contract.from_dict({**GOOD, "targets": (("m", "C.f"), ("n", "g", "pkg.mod:other"))}, "demo_fix")
    assert rec.targets == (contract.Target("m", "C.f"), contract.Target("n", "g", "pkg.mod:other"))
    assert (rec.wraps, rec.safety, rec.recheck_after, rec.title, rec.module) == (False, None, (), "", "demo_fix")
    assert rec.targets[1].ref == "n:g" and rec.targets[1].name == "n.g"
    with pytest.raises(AttributeError):
        rec.id = "other"  # type: ignore[misc]


UPSTREAM = ("torch", "transformers", "verl", "vllm", "veomni", "ray", "numpy")


def _own_wrapping(path: Path) -> list:
    """What a fix module does that :func:`vlgrpo.patches.contract.wrap` is for: ``functools.wraps`` /
    ``update_wrapper``, setting ``__wrapped__``, or assigning an attribute of an upstream module or object it
    imported (``torch.load = ...``, ``setattr(torch, ...)``), each as ``line: text``."""
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported = set()  # names bound to upstream modules or objects
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            imported |= {(a.asname or a.name).split(".")[0] for a in n.names if a.name.split(".")[0] in UPSTREAM}
        elif isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] in UPSTREAM:
            imported |= {a.asname or a.name for a in n.names}
    found = []
    for node in ast.walk(tree):
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, (ast.AugAssign, ast.AnnAssign))
            else []
        )
        for t in targets:
            if isinstance(t, ast.Attribute) and (
                t.attr == "__wrapped__" or isinstance(t.value, ast.Name) and t.value.id in imported
            ):
                found.append(f"{node.lineno}: {ast.unparse(t)} = ...")
        if isinstance(node, ast.Call):
            name = ast.unparse(node.func)
            if name.split(".")[-1] in ("wraps", "update_wrapper") or (
                name == "setattr" and node.args and isinstance(node.args[0], ast.Name) and node.args[0].id in imported
            ):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


@pytest.mark.parametrize("name", MODULES)
def test_fix_module_installs_nothing_itself(name):
    """Every replacement goes through contract.wrap (so vlgrpo.patches.unpatch can undo it): no fix module wraps
    or assigns upstream attributes on its own."""
    path = FIXES / f"{name.rsplit('.', 1)[1]}.py"
    assert _own_wrapping(path) == [], f"{name} installs code itself; use vlgrpo.patches.contract.wrap"


def test_the_own_wrapping_check_sees_each_form(tmp_path):
    bad = tmp_path / "bad_fix.py"
    bad.write_text(
        "import functools\nimport torch\n\ndef make(original):\n    @functools.wraps(original)\n"
        "    def f(*a):\n        return original(*a)\n    f.__wrapped__ = original\n    torch.load = f\n"
        "    setattr(torch, 'save', f)\n    return f\n"
    )
    assert sorted(int(x.split(":")[0]) for x in _own_wrapping(bad)) == [5, 8, 9, 10]
