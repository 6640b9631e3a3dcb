"""Start-up behaviour of the sitecustomize shim + bootstrap, each case in a fresh interpreter (field case B18)."""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
from pathlib import Path

from patch_helpers import REPO, SHIM, run_py

from vlgrpo.patches import registry

MOE = "transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe"
HEAVY = ("torch", "transformers", "verl", "numpy", "logging", "inspect", "ast", "dis", "wrapt", "importlib.util")

REPORT = r"""
import json, sys
from transformers.models.qwen3_vl_moe import modeling_qwen3_vl_moe as m
import vlgrpo.patches as P
fwd = m.Qwen3VLMoeTextSparseMoeBlock.forward
rows = {r["id"]: r for r in P.status(import_targets=False)}
print(json.dumps({
    "patched_by": getattr(fwd, "__vlgrpo_patch__", None),
    "wrapped": getattr(getattr(fwd, "__wrapped__", None), "__module__", None),
    "loader": type(m.__loader__).__name__, "spec_loader": type(m.__spec__.loader).__name__,
    "router": rows["qwen3_vl_moe.router_dtype"]["status"], "router_reason": rows["qwen3_vl_moe.router_dtype"]["reason"],
    "via": __import__("vlgrpo.patches.state").patches.state.STATE["via"],
}))
"""


def test_startup_imports_only_the_stdlib(shim_dir):
    proc = run_py("import sys, json; print(json.dumps(sorted(sys.modules)))", path=[shim_dir])
    mods = set(proc.json)
    assert "vlgrpo.patches.bootstrap" in mods, "the shim did not load the bootstrap"
    assert not [m for m in HEAVY if m in mods], f"heavy modules at start-up: {[m for m in HEAVY if m in mods]}"
    assert not [m for m in mods if m.startswith("vlgrpo.patches.fixes") or m == "vlgrpo.patches.registry"], (
        "the fix modules load at start-up: bootstrap.install must read vlgrpo.patches.index only"
    )
    finder = run_py("import sys; print([type(f).__name__ for f in sys.meta_path][0])", path=[shim_dir])
    assert finder.stdout.strip() == "PostImportFinder"


def test_patch_applies_when_target_imported_after_startup(shim_dir):
    proc = run_py(REPORT, path=[shim_dir])
    out = proc.json
    assert out["via"] == "sitecustomize"
    assert out["patched_by"] == "qwen3_vl_moe.router_dtype"
    assert out["wrapped"] == MOE, "original forward must be kept as __wrapped__"
    assert out["router"] == "applied"
    assert "scattered into zeros_like(router_logits)" in out["router_reason"]
    # the loader proxy is gone once the module executed
    assert out["loader"] == out["spec_loader"] == "SourceFileLoader"
    # one log line per process naming what was applied (stderr, through logging)
    applied = [
        ln
        for ln in proc.stderr.splitlines()
        if "vlgrpo.patches: applied" in ln and "qwen3_vl_moe.router_dtype ->" in ln
    ]
    assert len(applied) == 1, proc.stderr


def test_patch_applies_when_target_imported_before_install():
    code = (
        "from transformers.models.qwen3_vl_moe import modeling_qwen3_vl_moe as m\n"
        "orig = m.Qwen3VLMoeTextSparseMoeBlock.forward\n"
        "import vlgrpo.patches as P; P.install(); P.install()\n"  # twice: no-op
        "f = m.Qwen3VLMoeTextSparseMoeBlock.forward\n"
        "import json; print(json.dumps([getattr(f, '__vlgrpo_patch__', None), f.__wrapped__ is orig, "
        "getattr(f.__wrapped__, '__vlgrpo_patch__', None)]))"
    )
    assert run_py(code).json == ["qwen3_vl_moe.router_dtype", True, None]


def test_consumer_binding_a_module_function_gets_the_replacement(tmp_path):
    # verl's monkey patch does `from verl.models.transformers.qwen3_vl import fast_pos_embed_interpolate`: the
    # replacement must be in place before any importer binds the name. Same mechanism, synthetic record.
    (tmp_path / "demo_target.py").write_text("def f(x):\n    return x + 1  # FAULTY\n")
    (tmp_path / "demo_fix.py").write_text(
        "def f(x):\n    return x + 2\n"
        "def detect(fn):\n    import inspect\n    return ('FAULTY' in inspect.getsource(fn.__code__), 'marker')\n"
    )
    (tmp_path / "demo_consumer.py").write_text("from demo_target import f\n")
    code = (
        "from vlgrpo.patches import contract, registry\n"
        "registry.PATCHES = registry.PATCHES + (contract.from_dict({'id': 'demo', 'summary': '', 'upstream': '',"
        " 'applies_when': '',"
        " 'targets': (('demo_target', 'f'),), 'detector': 'demo_fix:detect', 'replacement': 'demo_fix:f',"
        " 'verify': 'demo_fix:f', 'recheck_after': ()}, 'demo_fix'),)\n"
        "registry.IDS = registry.IDS + ('demo',)\n"
        "from vlgrpo.patches import index\n"
        "index.IDS, index.TARGET_MODULES = registry.IDS, registry.target_modules()\n"
        "import vlgrpo.patches as P; P.install()\n"
        "import demo_consumer, demo_target\n"
        "print(demo_consumer.f(0), demo_target.f(0), demo_target.f.__wrapped__(0))"
    )
    assert run_py(code, path=[tmp_path]).stdout.split() == ["2", "2", "1"]


def test_preexisting_sitecustomize_is_chained(shim_dir, tmp_path):
    other = tmp_path / "vendor"
    other.mkdir()
    marker = tmp_path / "vendor-ran.txt"
    (other / "sitecustomize.py").write_text(
        f"import sys\nopen({str(marker)!r}, 'w').write(__name__ + ' ' + __file__)\nVENDOR = 1\n"
    )
    code = (
        "import sitecustomize, sys, json; from vlgrpo.patches import state as b; "
        "print(json.dumps([sitecustomize.__file__, b.STATE['chained_sitecustomize'], "
        "sys.modules['vlgrpo_chained_sitecustomize'].VENDOR]))"
    )
    out = run_py(code, path=[shim_dir, other]).json
    assert out[0] == str(shim_dir / "sitecustomize.py")
    assert out[1] == str(other / "sitecustomize.py")
    assert out[2] == 1
    assert marker.read_text().startswith("vlgrpo_chained_sitecustomize ")


def test_failing_chained_sitecustomize_does_not_crash(shim_dir, tmp_path):
    other = tmp_path / "vendor"
    other.mkdir()
    (other / "sitecustomize.py").write_text("raise RuntimeError('vendor boom')\n")
    proc = run_py("print('alive')", path=[shim_dir, other])
    assert proc.stdout.strip() == "alive"
    assert "vendor boom" in proc.stderr
    strict = run_py("print('alive')", path=[shim_dir, other], env={"VLGRPO_PATCHES_STRICT": "1"}, check=False)
    assert "vendor boom" in strict.stderr  # strict re-raises; Python reports the sitecustomize error


def _make_venv(tmp_path: Path) -> tuple[Path, Path]:
    """A bare venv (no pip) that sees this repo's vlgrpo and the dev venv's packages through a .pth."""
    venv = tmp_path / "img"
    subprocess.run(
        [getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", str(venv)],
        check=True,
        capture_output=True,
    )
    py = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    (site / "_dev.pth").write_text(f"{REPO / 'python' / 'src'}\n{sysconfig.get_paths()['purelib']}\n")
    return py, site


def _run(py, code, env=None, path=()):
    import os

    e = {k: v for k, v in os.environ.items() if not k.startswith("VLGRPO_") and k != "PYTHONPATH"}
    e["PYTHONPATH"] = os.pathsep.join(map(str, path))
    e.update(env or {})
    return subprocess.run([str(py), "-c", code], env=e, capture_output=True, text=True, timeout=120)


def test_install_sitecustomize_into_an_image_like_venv(tmp_path):
    py, site = _make_venv(tmp_path)
    # Debian's/Ubuntu's own python3 has /usr/lib/python3.X/sitecustomize.py (apport) ahead of site-packages: then
    # that one is what Python imports, before and after the install, and the patches load through the .pth (B18).
    shadow = _run(py, "import importlib.util as u; s = u.find_spec('sitecustomize'); print(s.origin if s else '')")
    shadow = shadow.stdout.strip()
    vendor = site / "sitecustomize.py"
    vendor.write_text("VENDOR_IN_PLACE = True\n")  # e.g. a base image's own sitecustomize in site-packages
    res = _run(py, "import sys; from vlgrpo.patches import cli; sys.exit(cli.main(['install-sitecustomize']))")
    assert res.returncode == 0, res.stderr
    assert (site / "vlgrpo_orig_sitecustomize.py").read_text() == "VENDOR_IN_PLACE = True\n"
    assert (site / "sitecustomize.py").read_text() == SHIM.read_text()
    code = (
        "import sitecustomize, sys, json; from vlgrpo.patches import state as b; "
        "print(json.dumps([sitecustomize.__file__, b.STATE['installed'], b.STATE['chained_sitecustomize'], "
        "sys.modules['vlgrpo_chained_sitecustomize'].VENDOR_IN_PLACE, 'torch' in sys.modules]))"
    )
    if shadow:  # the interpreter's own sitecustomize comes first on sys.path
        code = (
            "import sitecustomize, json; from vlgrpo.patches import state as b; "
            "print(json.dumps([sitecustomize.__file__, b.STATE['installed'], b.STATE['via']]))"
        )
        res = _run(py, code)
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout) == [shadow, True, "pth"]
        return
    res = _run(py, code)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out == [str(site / "sitecustomize.py"), True, str(site / "vlgrpo_orig_sitecustomize.py"), True, False]


def test_shadowing_sitecustomize_still_gets_patches_through_pth(tmp_path):
    # apport / conda case (B18): another sitecustomize earlier on sys.path is the one Python imports.
    py, site = _make_venv(tmp_path)
    assert _run(py, "from vlgrpo.patches import cli; cli.main(['install-sitecustomize'])").returncode == 0
    apport = tmp_path / "usr-lib-python3"
    apport.mkdir()
    (apport / "sitecustomize.py").write_text("APPORT = True\n")
    code = (
        "import sitecustomize, json; from vlgrpo.patches import state as b\n"
        "from transformers.models.qwen3_vl_moe import modeling_qwen3_vl_moe as m\n"
        "print(json.dumps([getattr(sitecustomize, 'APPORT', False), b.STATE['via'], "
        "getattr(m.Qwen3VLMoeTextSparseMoeBlock.forward, '__vlgrpo_patch__', None)]))"
    )
    res = _run(py, code, path=[apport])
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout.splitlines()[-1]) == [True, "pth", "qwen3_vl_moe.router_dtype"]


FAIL = r"""
import dataclasses, json, sys
from vlgrpo.patches import registry
registry.PATCHES = tuple(dataclasses.replace(r, replacement="vlgrpo.patches.no_such_module:forward")  # a failing patch
                         if r.id == "qwen3_vl_moe.router_dtype" else r for r in registry.PATCHES)
import vlgrpo.patches as P
P.install()
from transformers.models.qwen3_vl_moe import modeling_qwen3_vl_moe as m
row = {r["id"]: r for r in P.status(import_targets=False)}["qwen3_vl_moe.router_dtype"]
print(json.dumps([row["status"], row["reason"], getattr(m.Qwen3VLMoeTextSparseMoeBlock.forward, "__vlgrpo_patch__", None),
                  m.Qwen3VLMoeTextSparseMoeBlock.__name__]))
"""


def test_failing_patch_leaves_target_import_working():
    proc = run_py(FAIL)
    status, reason, patched, name = proc.json
    assert status == "failed" and "no_such_module" in reason
    assert patched is None and name == "Qwen3VLMoeTextSparseMoeBlock"
    failures = [ln for ln in proc.stderr.splitlines() if "qwen3_vl_moe.router_dtype failed" in ln]
    assert len(failures) == 1, proc.stderr  # logged once, although status re-checked it
    strict = run_py(FAIL, env={"VLGRPO_PATCHES_STRICT": "1"}, check=False)
    assert strict.returncode != 0 and "No module named 'vlgrpo.patches.no_such_module'" in strict.stderr


def test_switch_off_installs_nothing(shim_dir):
    code = (
        "import json, sys\nimport vlgrpo.patches as P\n"
        "rows = {r['id']: r['status'] for r in P.status(import_targets=False)}\n"
        "print(json.dumps([rows, [type(f).__name__ for f in sys.meta_path]]))"
    )
    rows, finders = run_py(code, path=[shim_dir], env={"VLGRPO_PATCHES": "off"}).json
    assert set(rows.values()) == {"disabled"} and tuple(rows) == registry.IDS
    assert "PostImportFinder" not in finders
    # that the classes then stay unpatched is asserted in test_vision_wiring / test_npu_routing (VLGRPO_PATCHES=off)


def test_switch_disable_one_patch(shim_dir):
    code = (
        "import json\nfrom transformers.models.qwen3_vl_moe import modeling_qwen3_vl_moe as m\n"
        "import vlgrpo.patches as P\nrows = {r['id']: r['status'] for r in P.status(import_targets=False)}\n"
        "print(json.dumps([rows, getattr(m.Qwen3VLMoeTextSparseMoeBlock.forward, '__vlgrpo_patch__', None),"
        "getattr(m.Qwen3VLMoeVisionModel.fast_pos_embed_interpolate, '__vlgrpo_patch__', None)]))"
    )
    rows, router, vision = run_py(
        code, path=[shim_dir], env={"VLGRPO_PATCHES_DISABLED": "qwen3_vl_moe.router_dtype"}
    ).json
    assert rows["qwen3_vl_moe.router_dtype"] == "disabled" and router is None
    assert rows["qwen3_vl.vision_pos_embed"] == "applied" and vision == "qwen3_vl.vision_pos_embed"
    # the train-routing patch still checks the (unpatched, transformers) block: no training guard there
    assert rows["npu.qwen3_vl_moe.train_routing"] == "not needed"


def test_an_invalid_disabled_list_leaves_every_patch_on_and_says_so(shim_dir):
    # the registry's ids rule (the entrypoints refuse these values): spaces, an empty item, upper case
    code = "import vlgrpo.patches as P; print(P.bootstrap_state()['disabled_ids'])"
    for value in (" qwen3_vl_moe.router_dtype ,", "qwen3_vl_moe.router_dtype,", "Qwen3_vl_moe.router_dtype"):
        proc = run_py(code, path=[shim_dir], env={"VLGRPO_PATCHES_DISABLED": value})
        assert proc.returncode == 0 and proc.stdout.strip() == "()", (value, proc.stderr)
        assert "VLGRPO_PATCHES_DISABLED: " in proc.stderr and "(ignored: its default applies)" in proc.stderr


def test_unknown_disabled_id_is_named(shim_dir):
    proc = run_py("print('alive')", path=[shim_dir], env={"VLGRPO_PATCHES_DISABLED": "qwen3_vl_moe.router_dtyp"})
    assert proc.stdout.strip() == "alive"
    assert "VLGRPO_PATCHES_DISABLED names unknown patch id(s) qwen3_vl_moe.router_dtyp" in proc.stderr
    assert "known ids: qwen3_vl.vision_pos_embed" in proc.stderr


def test_shim_text_matches_installer():
    from vlgrpo.patches import cli

    assert cli.shim_source() == SHIM.read_text()


def test_find_next_sitecustomize_order_symlinks_and_own_copies(tmp_path):
    from vlgrpo.patches import chain

    ours, before, copy, foreign = (tmp_path / n for n in ("ours", "before", "copy", "foreign"))
    for d in (ours, before, copy, foreign):
        d.mkdir()
    (ours / "sitecustomize.py").write_text(SHIM.read_text())
    (before / "sitecustomize.py").write_text("X = 1\n")  # before ours: Python would have imported it instead
    (copy / "sitecustomize.py").write_text(SHIM.read_text())  # another copy of our shim: skipped
    (foreign / "sitecustomize.py").write_text("Y = 1\n")
    link = tmp_path / "link-to-ours"
    link.symlink_to(ours)
    own = str(ours / "sitecustomize.py")
    assert chain.find_next_sitecustomize(own, [str(before), str(ours), str(copy), str(foreign)]) == str(
        foreign / "sitecustomize.py"
    )
    # sys.path names our directory through a symlink (e.g. venv lib64 -> lib)
    assert chain.find_next_sitecustomize(own, [str(link), str(foreign)]) == str(foreign / "sitecustomize.py")
    assert chain.find_next_sitecustomize(own, [str(ours), str(copy)]) is None
    assert chain.find_next_sitecustomize(own, [str(foreign)]) is None  # ours not on the path at all


def test_spawned_worker_processes_load_the_patches_too(shim_dir):
    # vLLM workers and Ray actors are fresh interpreters (spawn): they get the bootstrap from sitecustomize as well
    code = (
        "import json, multiprocessing as mp\n"
        "def probe(q):\n"
        "    import sys, vlgrpo.patches as P\n"
        "    q.put([P.bootstrap_state()['via'], type(sys.meta_path[0]).__name__, 'torch' in sys.modules])\n"
        "if __name__ == '__main__':\n"
        "    ctx = mp.get_context('spawn'); q = ctx.Queue(); p = ctx.Process(target=probe, args=(q,))\n"
        "    p.start(); res = q.get(timeout=60); p.join()\n"
        "    print(json.dumps(res))\n"
    )
    script = shim_dir.parent / "spawn_probe.py"
    script.write_text(code)
    assert run_py(script, path=[shim_dir]).json == ["sitecustomize", "PostImportFinder", False]


def test_absent_target_is_reported_never_created(tmp_path):
    (tmp_path / "demo_absent.py").write_text("class Block:\n    pass\n")
    (tmp_path / "demo_fix2.py").write_text("def f(self):\n    return 2\ndef detect(fn):\n    return True, 'x'\n")
    code = (
        "import json\nfrom vlgrpo.patches import contract, registry\n"
        "registry.PATCHES = registry.PATCHES + (contract.from_dict({'id': 'demo', 'summary': '', 'upstream': '',"
        " 'applies_when': '',"
        " 'targets': (('demo_absent', 'Block.forward'), ('demo_absent', 'Missing.forward'),"
        " ('demo_not_installed', 'f')), 'detector': 'demo_fix2:detect', 'replacement': 'demo_fix2:f',"
        " 'verify': 'demo_fix2:f', 'recheck_after': ()}, 'demo_fix2'),)\n"
        "registry.IDS = registry.IDS + ('demo',)\n"
        "from vlgrpo.patches import index\n"
        "index.IDS, index.TARGET_MODULES = registry.IDS, registry.target_modules()\n"
        "import vlgrpo.patches as P\n"
        "row = {r['id']: r for r in P.status()}['demo']\n"
        "import demo_absent\n"
        "print(json.dumps([row['status'], [t['status'] for t in row['targets']], [t['reason'] for t in row['targets']],"
        " hasattr(demo_absent.Block, 'forward'), hasattr(demo_absent, 'Missing')]))"
    )
    # the real patches are switched off so that status() imports only the demo targets (fast)
    status, statuses, reasons, has_forward, has_missing = run_py(
        code, path=[tmp_path], env={"VLGRPO_PATCHES_DISABLED": ",".join(registry.IDS)}
    ).json
    assert status == "target absent" and statuses == ["target absent"] * 3
    assert "demo_absent.Block has no attribute 'forward'" in reasons[0]
    assert "demo_absent has no attribute 'Missing'" in reasons[1]
    assert "No module named 'demo_not_installed'" in reasons[2]
    assert has_forward is False and has_missing is False
