"""Every registered fix applied and undone in this interpreter (``vlgrpo.patches.apply`` / ``unpatch`` /
``original``).

The reference for "undone" is the object bound at each target *before* the fix was applied, taken here: after
:func:`vlgrpo.patches.unpatch` the target is that very object again (identity), nothing of ours is left on the
owner, and the re-check wrappers the fix installed are gone. The targets are the real upstream code: transformers
4.57.6, verl 0.8.0 (packages the CPU test environment lacks, such as vLLM's zmq/msgspec/fastapi, are automatic
stand-ins, as in the scenarios), vLLM 0.13.0's sources. The test is parametrized over the registry, so a new fix
whose replacement cannot be undone fails here.
"""

from __future__ import annotations

import json
import sys
import types

import pytest
from patch_helpers import REPO, SCENARIOS, VEOMNI, run_py

import vlgrpo.patches as P
from vlgrpo.patches import contract, engine, registry, state

VLLM = REPO / ".cache" / "vllm-0.13.0"
#: what the verl targets import but the CPU test environment lacks (they come with vLLM / the trainer images)
STAND_INS = ("vllm", "zmq", "msgspec", "uvicorn", "fastapi", "cachetools", "peft", "accelerate", "tensordict", "cupy")
#: what vLLM 0.13.0's scheduler imports but the CPU test environment lacks (scenarios/vllm_encoder_cache.py)
VLLM_STAND_INS = (
    "openai_harmony",
    "xgrammar",
    "diskcache",
    "fastapi",
    "llguidance",
    "cpuinfo",
    "msgspec",
    "cbor2",
    "gguf",
    "zmq",
    "blake3",
    "sniffio",
    "torchvision",
)
#: packages (besides the stand-ins) whose modules this file's imports add and takes out again afterwards
CLEANED = ("vllm", "veomni")


def _stub_modules():
    if str(SCENARIOS) not in sys.path:
        sys.path.insert(0, str(SCENARIOS))
    import stub_modules

    return stub_modules


class _Constants(types.ModuleType):
    """``cupy.cuda.nccl``'s constants, read by ray.util.collective at import."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return abs(hash(name)) % 1000


class _Struct:
    def __init_subclass__(cls, **kwargs):
        pass


def _verl_stand_ins(mod):
    if mod.__name__ == "vllm":
        mod.__version__ = "0.13.0"
    if mod.__name__ == "cupy.cuda":
        mod.nccl = _Constants("cupy.cuda.nccl")


def _vllm_stand_ins(mod):
    if mod.__name__ == "msgspec":
        mod.Struct = _Struct
        mod.field = lambda default=None, default_factory=None, **kwargs: default


def _prepare(record, tmp_path):
    """Make the record's target and re-check modules importable here (stand-ins, vLLM's and VeOmni's sources) as
    the scenarios do."""
    stubs = _stub_modules()
    modules = {t.module for t in record.targets}
    if any(m.startswith("vllm.") for m in modules):
        if not (VLLM / ".installed").is_file():
            pytest.fail(f"vLLM 0.13.0's sources are not in {VLLM}; run `make vllm-0.13.0` (make test-python does)")
        sys.path[:0] = [str(VLLM / "src"), str(VLLM / "deps")]
        sys.meta_path.append(stubs.StubFinder(VLLM_STAND_INS, _vllm_stand_ins))
        sys.modules["vllm.tokenizers.mistral"] = stubs.AutoStubModule("vllm.tokenizers.mistral")
    elif any(m.startswith("verl.") and not m.startswith("verl.models.") for m in modules):
        stubs.vllm_distribution(tmp_path)
        sys.meta_path.append(stubs.StubFinder(STAND_INS, _verl_stand_ins))
    if any(m.startswith("veomni.") for m, _ in record.recheck_after):  # VeOmni's sources (scenarios/veomni_block.py)
        if not (VEOMNI / "veomni").is_dir():
            pytest.fail(f"VeOmni 0.1.9a5 is not installed in {VEOMNI}; run `make veomni-0.1.9a5`")
        sys.path.insert(0, str(VEOMNI))
        sys.meta_path.append(stubs.StubFinder(["psutil"]))


@pytest.fixture
def isolated(request, tmp_path):
    """Only the record under test is checked while it runs (the others are held back as if undone); afterwards the
    import path, the finders, the engine's state are as before and the stand-ins, vLLM and VeOmni are no longer
    imported (the real verl and transformers modules imported here stay)."""
    record = request.param
    path, meta_path, modules = list(sys.path), list(sys.meta_path), set(sys.modules)
    unpatched, results = state.STATE["unpatched_ids"], dict(engine.RESULTS)
    for other in registry.IDS:
        if other != record.id:
            state.set_unpatched(other, True)
    try:
        _prepare(record, tmp_path)
        yield record
    finally:
        P.unpatch(record.id)
        state.STATE["unpatched_ids"] = unpatched
        engine.RESULTS.clear()
        engine.RESULTS.update(results)
        sys.path[:], sys.meta_path[:] = path, meta_path
        stand_in = _stub_modules().AutoStubModule
        for name in set(sys.modules) - modules:
            if name.split(".")[0] in CLEANED or isinstance(sys.modules[name], stand_in):
                del sys.modules[name]


def _import(name):
    """The module, or the error importing it raised (``None`` on success)."""
    import importlib

    try:
        importlib.import_module(name)
        return None
    except Exception as exc:  # reported as the reason of the skip
        return f"{type(exc).__name__}: {exc}"


def _owner(target):
    owner = sys.modules[target.module]
    for part in target.path.split(".")[:-1]:
        owner = getattr(owner, part)
    return owner, target.path.split(".")[-1]


def _bound(target):
    owner, attr = _owner(target)
    return getattr(owner, attr)


def _in_dict(target):
    owner, attr = _owner(target)
    return attr in getattr(owner, "__dict__", {})


@pytest.mark.parametrize("isolated", registry.PATCHES, ids=lambda r: r.id, indirect=True)
def test_unpatch_binds_the_original_again_in_this_interpreter(isolated):
    record = isolated
    modules = {t.module for t in record.targets} | {m for m, _ in record.recheck_after}
    errors = {m: e for m in sorted(modules) if (e := _import(m)) is not None}
    present = [t for t in record.targets if t.module not in errors]
    before = {}
    for t in present:
        try:
            before[t] = _bound(t)
        except AttributeError:  # this version has no such attribute: reported "target absent"
            continue
        if engine.ours(before[t]):  # an interpreter whose hooks applied it at import: start from the original
            P.unpatch(record.id)
            before[t] = _bound(t)
        assert engine.ours(before[t]) is None, t
    had = {t: _in_dict(t) for t in before}
    rechecks = {(m, f): getattr(sys.modules[m], f) for m, f in record.recheck_after if m in sys.modules}

    statuses = P.apply(record.id)
    assert "failed" not in statuses.values(), {
        k: engine.RESULTS[k]["reason"] for k in engine.RESULTS if k[0] == record.id
    }
    applied = [t for t in before if statuses[t.name] == "applied"]
    if not applied:
        assert errors, f"{record.id}: no target applied though every target module imports: {statuses}"
        pytest.skip(
            f"{record.id}: no target is faulty here; its other target modules do not import: "
            + "; ".join(f"{m} ({e})" for m, e in errors.items())
        )
    for t in applied:
        now = _bound(t)
        assert now is not before[t] and engine.ours(now) == record.id, t
        assert now.__wrapped__ is before[t] and P.original(t.ref) is before[t]
        assert (now.__name__, now.__qualname__) == (before[t].__name__, before[t].__qualname__)
    for (m, f), fn in rechecks.items():
        assert getattr(sys.modules[m], f).__vlgrpo_recheck__ and P.original(f"{m}:{f}") is fn
    assert set(rechecks) == {r for r in record.recheck_after if r[0] not in errors}

    restored = P.unpatch(record.id)
    assert {t.ref for t in applied} <= set(restored)
    for t, obj in before.items():
        assert _bound(t) is obj, f"{t.name} is not the original again"
        assert _in_dict(t) == had[t], f"{t.name}: the owner's own attributes changed"
        assert P.original(t.ref) is obj
    for (m, f), fn in rechecks.items():
        assert getattr(sys.modules[m], f) is fn, f"the re-check wrapper of {m}.{f} is still installed"
    assert P.unpatch(record.id) == [], "unpatch is not idempotent"
    assert all(engine.RESULTS[(record.id, t.module, t.path)]["status"] == "disabled" for t in applied)

    again = P.apply(record.id)  # and back: the same fix, applied the way it was the first time
    assert all(again[t.name] == "applied" and engine.ours(_bound(t)) == record.id for t in applied)
    P.unpatch(record.id)
    assert all(_bound(t) is before[t] for t in applied)


def test_the_torch_load_guard_of_checkpoint_manifest_is_undone_with_it():
    torch = pytest.importorskip("torch")
    from vlgrpo.patches.fixes import checkpoint_manifest as fix

    unpatched = state.STATE["unpatched_ids"]
    load = contract.original("torch:load")
    load = torch.load if load is contract.MISSING else load
    try:
        P.unpatch("checkpoint.manifest")
        assert torch.load is load
        with fix.weights_only_loads():
            assert torch.load is not load and torch.load.__wrapped__ is load
            assert P.original("torch:load") is load
        assert "torch:load" in P.unpatch("checkpoint.manifest")
        assert torch.load is load
        with fix.weights_only_loads():  # installed again on the next use
            assert torch.load.__vlgrpo_guard__
    finally:
        P.unpatch("checkpoint.manifest")
        state.STATE["unpatched_ids"] = unpatched
    assert torch.load is load


def test_unknown_id_and_malformed_target_are_named():
    with pytest.raises(ValueError, match=r"unknown patch id 'qwen3_vl\.nope'; known: qwen3_vl\.vision_pos_embed, "):
        P.unpatch("qwen3_vl.nope")
    with pytest.raises(ValueError, match="unknown patch id 'nope'"):
        P.apply("nope")
    with pytest.raises(ValueError, match="is not 'module:attribute.path'"):
        P.original("json.dumps")
    assert P.original("json:dumps") is json.dumps  # never patched: what is bound now


def test_status_reports_an_undone_patch_as_disabled_until_applied_again():
    code = (
        "import json\nimport vlgrpo.patches as P\nP.install()\n"
        "from transformers.models.qwen3_vl_moe import modeling_qwen3_vl_moe as m\n"
        "pid = 'qwen3_vl_moe.router_dtype'\n"
        "def row():\n    return {r['id']: r for r in P.status(import_targets=False)}[pid]\n"
        "first = row()['status']\nP.unpatch(pid)\nundone = row()\nP.apply(pid)\n"
        "print(json.dumps([first, undone['status'], undone['reason'], row()['status'],"
        " m.Qwen3VLMoeTextSparseMoeBlock.forward.__vlgrpo_patch__]))"
    )
    first, undone, reason, again, marker = run_py(code).json
    assert (first, undone, again, marker) == ("applied", "disabled", "applied", "qwen3_vl_moe.router_dtype")
    assert "undone in this process by vlgrpo.patches.unpatch('qwen3_vl_moe.router_dtype')" in reason
