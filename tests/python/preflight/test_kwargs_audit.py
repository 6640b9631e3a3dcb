"""C08's kind: settings verl passes as keywords its callee swallows in ``**kwargs``, and values verl's argument builders
drop -- an AST sweep of the pinned verl (the .venv) against VeOmni 0.1.9a5 (.cache), vLLM 0.13.0 (.cache) and
transformers (the .venv), and the preflight's refusal of an argv that sets a reachable one."""

from __future__ import annotations

import ast
import inspect
import os
import shutil
import sys

import pytest
from preflight_helpers import REPO, UPSTREAM_VEOMNI, read_argv, set_override

from vlgrpo.preflight import kwargs_audit as audit

VEOMNI = os.path.join(REPO, ".cache", "veomni-0.1.9a5")
VLLM = os.path.join(REPO, ".cache", "vllm-0.13.0", "src")
KEY = "actor_rollout_ref.actor.veomni.mixed_precision"


@pytest.fixture(scope="module")
def roots():
    for path, target in ((VEOMNI, "veomni-0.1.9a5"), (VLLM, "vllm-0.13.0")):
        if not os.path.isdir(path):
            pytest.fail(f"{path} is missing; run `make {target}` (make test-python does)")
    verl_root, callees = audit.default_roots()
    callees.update(veomni=VEOMNI, vllm=VLLM)
    return verl_root, callees


@pytest.fixture(scope="module")
def pinned(roots):
    return audit.sweep(*roots)


def test_sweep_of_the_pinned_stack_finds_c08_and_reports_its_counts(pinned, roots, capsys):
    swallowed = pinned["swallowed"]
    with capsys.disabled():
        print(
            f"\nkwargs audit of verl -> VeOmni/vLLM/transformers: {pinned['calls']} calls with keywords resolved, "
            f"{len(swallowed)} keyword(s) swallowed, {pinned['undecided']} undecided (forwarded or read as a "
            f"whole), {len(pinned['drops'])} argument builder(s) dropping values"
        )
        for s in swallowed:
            print(f"  swallowed: {s.verl_file}:{s.line} {s.callee}({s.keyword}={s.value})")
        for d in pinned["drops"]:
            print(f"  drops: {d.verl_file}:{d.line} {d.verl_function} skips when {' / '.join(d.tests)}")
    c08 = [s for s in swallowed if s.keyword == "enable_mixed_precision"]
    assert len(c08) == 1, [s.as_dict() for s in swallowed]
    assert c08[0].callee == "veomni.distributed.torch_parallelize.build_parallelize_model"
    assert c08[0].verl_file == os.path.join("verl", "workers", "engine", "veomni", "transformer_impl.py")
    assert c08[0].value == "self.engine_config.mixed_precision" and c08[0].holder_types == ("VeOmniEngineConfig",)
    assert pinned["calls"] >= 20
    # B08's builder is among the drops: verl 0.8.0's build_cli_args_from_config skips None, False and []
    assert any(d.verl_function == "build_cli_args_from_config" for d in pinned["drops"])


def test_python_itself_binds_the_keyword_to_veomnis_kwargs(pinned):
    """Independent of the sweep's parameter reading: Python's own signature binding of VeOmni 0.1.9a5's
    ``build_parallelize_model`` (compiled from its source, body replaced) puts the keyword into ``**kwargs``."""
    item = [s for s in pinned["swallowed"] if s.keyword == "enable_mixed_precision"][0]
    with open(os.path.join(VEOMNI, item.callee_file), encoding="utf-8") as fh:
        tree = ast.parse(fh.read())
    fn = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "build_parallelize_model"][0]
    a = fn.args
    for arg in a.posonlyargs + a.args + a.kwonlyargs + ([a.vararg] if a.vararg else []) + [a.kwarg]:
        arg.annotation = None
    a.defaults = [ast.Constant(None) for _ in a.defaults]
    a.kw_defaults = [ast.Constant(None) if d is not None else None for d in a.kw_defaults]
    fn.body, fn.decorator_list, fn.returns = [ast.Pass()], [], None
    scope: dict = {}
    exec(compile(ast.fix_missing_locations(ast.Module(body=[fn], type_ignores=[])), "veomni", "exec"), scope)
    bound = inspect.signature(scope["build_parallelize_model"]).bind(object(), enable_mixed_precision=False)
    assert bound.arguments["kwargs"] == {"enable_mixed_precision": False}
    assert "mixed_precision" in bound.signature.parameters  # the name VeOmni reads (verl PR #6644 passes it)


def _tree_with(tmp_path, src_root, rel, old, new):
    dst = tmp_path / os.path.basename(src_root.rstrip(os.sep))
    target = dst / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(os.path.join(src_root, rel), target)
    text = target.read_text()
    assert old in text
    target.write_text(text.replace(old, new))
    return str(dst)


def test_a_callee_that_reads_the_keyword_is_not_a_finding(roots, tmp_path):
    verl_root, callees = roots
    rel = os.path.join("veomni", "distributed", "torch_parallelize.py")
    variant = _tree_with(
        tmp_path,
        VEOMNI,
        rel,
        "    parallel_state = get_parallel_state()\n",
        "    parallel_state = get_parallel_state()\n"
        "    mixed_precision = kwargs.pop('enable_mixed_precision', mixed_precision)\n",
    )
    for name in os.listdir(VEOMNI):  # the rest of VeOmni as it is
        if not os.path.exists(os.path.join(variant, name)):
            os.symlink(os.path.join(VEOMNI, name), os.path.join(variant, name))
    for name in os.listdir(os.path.join(VEOMNI, "veomni")):
        if not os.path.exists(os.path.join(variant, "veomni", name)):
            os.symlink(os.path.join(VEOMNI, "veomni", name), os.path.join(variant, "veomni", name))
    for name in os.listdir(os.path.join(VEOMNI, "veomni", "distributed")):
        if not os.path.exists(os.path.join(variant, "veomni", "distributed", name)):
            os.symlink(
                os.path.join(VEOMNI, "veomni", "distributed", name),
                os.path.join(variant, "veomni", "distributed", name),
            )
    result = audit.sweep(verl_root, dict(callees, veomni=variant))
    assert not [s for s in result["swallowed"] if s.keyword == "enable_mixed_precision"]


def test_verl_with_pr_6644s_keyword_is_not_a_finding(roots, tmp_path):
    verl_root, callees = roots
    rel = os.path.join("verl", "workers", "engine", "veomni", "transformer_impl.py")
    fixed = _tree_with(
        tmp_path,
        verl_root,
        rel,
        "enable_mixed_precision=self.engine_config.mixed_precision",
        "mixed_precision=self.engine_config.mixed_precision",
    )
    assert audit.sweep(fixed, callees)["swallowed"] == []
    unfixed = _tree_with(tmp_path / "u", verl_root, rel, "enable_mixed_precision=", "enable_mixed_precision=")
    assert [s.keyword for s in audit.sweep(unfixed, callees)["swallowed"]] == ["enable_mixed_precision"]


@pytest.fixture
def veomni_on_path(monkeypatch):
    monkeypatch.syspath_prepend(VEOMNI)  # found by importlib.util.find_spec, as an installed VeOmni would be


def test_c08_preflight_refuses_the_setting_naming_veomni_and_the_fix(veomni_on_path):
    from vlgrpo.preflight import run_preflight

    argv = set_override(read_argv(UPSTREAM_VEOMNI), KEY, "False")
    report = run_preflight(argv, check_data=False)
    hits = [f for f in report.findings if f.code == "rules.setting-swallowed"]
    assert len(hits) == 1, [f.line() for f in report.findings]
    line = hits[0].line()
    assert KEY in line and "VeOmni 0.1.9a5" in line and "verl PR #6644" in line and "enable_mixed_precision" in line
    assert hits[0].where.position == argv.index(f"{KEY}=False")
    assert report.exit_code == 2
    reach = report.summary["kwargs_audit"]["reachable"]
    assert KEY in reach and "actor_rollout_ref.ref.veomni.mixed_precision" in reach


def test_c08_not_reported_when_the_argv_leaves_the_setting_alone(veomni_on_path):
    from vlgrpo.preflight import run_preflight

    argv = set_override(read_argv(UPSTREAM_VEOMNI), KEY, None)
    report = run_preflight(argv, check_data=False)
    assert not [f for f in report.findings if f.code == "rules.setting-swallowed"]
    assert report.summary["kwargs_audit"]["swallowed"] == 1


def test_cli_prints_the_sweep(roots):
    import subprocess

    verl_root, _ = roots
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "vlgrpo.preflight.kwargs_audit",
            "--verl",
            verl_root,
            "--callee",
            f"veomni={VEOMNI}",
            "--callee",
            f"vllm={VLLM}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    import json

    out = json.loads(proc.stdout)
    assert [s["keyword"] for s in out["swallowed"]] == ["enable_mixed_precision"]


# ---- the sweep across preflights: the verified cache beside the checkpoints ------------------------------------


def _as_dicts(result):
    return (
        [s.as_dict() for s in result["swallowed"]],
        [d.as_dict() for d in result["drops"]],
        result["undecided"],
        result["calls"],
    )


def test_a_stored_sweep_is_reused_and_equals_a_fresh_one(roots, pinned, tmp_path, monkeypatch):
    from vlgrpo.preflight.count_cache import open_cache_dir

    monkeypatch.setattr(audit, "_CACHE", {})
    cache = open_cache_dir(str(tmp_path / "cache"))
    first = audit.cached_sweep(*roots, cache=cache)
    assert cache.hits == 0 and audit.SWEEP_NAMESPACE in os.listdir(cache.root)
    monkeypatch.setattr(audit, "_CACHE", {})  # a second preflight process
    again = audit.cached_sweep(*roots, cache=open_cache_dir(cache.root))
    assert _as_dicts(again) == _as_dicts(first) == _as_dicts(pinned)
    assert [s.keyword for s in again["swallowed"]] == ["enable_mixed_precision"]  # C08 survives the round trip


@pytest.mark.parametrize("how", ["tampered body", "not a sweep (valid HMAC)", "truncated"])
def test_a_bad_stored_sweep_is_swept_again_not_trusted(roots, pinned, tmp_path, monkeypatch, how):
    from vlgrpo.preflight.count_cache import open_cache_dir

    monkeypatch.setattr(audit, "_CACHE", {})
    cache = open_cache_dir(str(tmp_path / "cache"))
    audit.cached_sweep(*roots, cache=cache)
    key = audit.sweep_cache_key(*roots)
    entry = os.path.join(cache.root, audit.SWEEP_NAMESPACE, key + ".json")
    data = open(entry, "rb").read()
    if how == "tampered body":  # the finding removed: the HMAC no longer matches
        data = data.replace(b'"enable_mixed_precision"', b'"enable_mixed_precisioN"')
    elif how == "truncated":
        data = data[: len(data) // 2]
    if how == "not a sweep (valid HMAC)":
        cache.put(audit.SWEEP_NAMESPACE, key, {"swallowed": "none", "drops": [], "undecided": 0, "calls": 0})
    else:
        with open(entry, "wb") as fh:
            fh.write(data)
    monkeypatch.setattr(audit, "_CACHE", {})
    reader = open_cache_dir(cache.root)
    got = audit.cached_sweep(*roots, cache=reader)
    assert _as_dicts(got) == _as_dicts(pinned)
    assert reader.hits == (1 if how == "not a sweep (valid HMAC)" else 0)


def test_the_sweep_key_follows_every_source_file(tmp_path):
    pkg = tmp_path / "root" / "verl"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "a.py").write_text("x = 1\n")
    (pkg / "sub" / "b.py").write_text("y = 2\n")
    (pkg / "data.yaml").write_text("k: v\n")
    root = str(tmp_path / "root")
    base = audit.sweep_cache_key(root, {"vllm": None})
    assert audit.sweep_cache_key(root, {"vllm": None}) == base
    (pkg / "data.yaml").write_text("k: w\n")  # not Python: the sweep never reads it
    assert audit.sweep_cache_key(root, {"vllm": None}) == base
    st = os.stat(pkg / "sub" / "b.py")
    os.utime(pkg / "sub" / "b.py", ns=(st.st_atime_ns, st.st_mtime_ns + 1))  # an edit in the same second
    touched = audit.sweep_cache_key(root, {"vllm": None})
    (pkg / "c.py").write_text("")  # a new module
    added = audit.sweep_cache_key(root, {"vllm": None})
    assert len({base, touched, added, audit.sweep_cache_key(root, {"vllm": root})}) == 4
