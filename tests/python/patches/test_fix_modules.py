"""Every fix module has the same parts and is registered once: what a newcomer copying one relies on."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from vlgrpo.patches import engine, registry

FIXES = Path(__file__).resolve().parents[3] / "python" / "src" / "vlgrpo" / "patches" / "fixes"
MODULES = sorted(f"vlgrpo.patches.fixes.{p.stem}" for p in FIXES.glob("*.py") if p.stem != "__init__")


def test_every_fix_module_is_registered_exactly_once_in_order():
    records = [importlib.import_module(name).RECORD for name in MODULES]
    assert sorted(map(id, registry.PATCHES)) == sorted(map(id, records)), "a fix module is missing from registry.PATCHES"
    assert len(set(registry.IDS)) == len(registry.IDS)


@pytest.mark.parametrize("name", MODULES)
def test_fix_module_has_the_record_the_detector_and_the_self_check(name):
    module = importlib.import_module(name)
    record = module.RECORD
    assert name.rsplit(".", 1)[1] == record["id"].replace(".", "_"), "a fix module is named after its patch id"
    assert callable(module.is_faulty) and callable(module.verify)
    assert record["detector"] == f"{name}:is_faulty" and record["verify"] == f"{name}:verify"
    assert {"id", "summary", "upstream", "applies_when", "targets", "detector", "replacement", "verify",
            "recheck_after"} <= set(record)
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
