"""Start-up edge cases found by trying to break the loader (each in a fresh interpreter; synthetic targets, fast).

- another library puts its own finder at the front of ``sys.meta_path`` after ours and resolves a target module
  without asking the finders behind it: the hooks must still run;
- a ``VLGRPO_PATCHES`` value that is neither on nor off is named, not silently taken as on;
- strict mode re-raising an install error must not skip the ``sitecustomize`` that ours shadows.
"""

from __future__ import annotations

from patch_helpers import run_py

DEMO = ("from vlgrpo.patches import registry\n"
        "registry.PATCHES = registry.PATCHES + ({'id': 'demo', 'summary': '', 'upstream': '', 'applies_when': '',"
        " 'targets': (('demo_target', 'f'),), 'detector': 'demo_fix:detect', 'replacement': 'demo_fix:f',"
        " 'verify': 'demo_fix:f', 'recheck_after': ()},)\n"
        "registry.IDS = registry.IDS + ('demo',)\n")


def _demo_files(tmp_path):
    (tmp_path / "demo_target.py").write_text("def f(x):\n    return x + 1  # FAULTY\n")
    (tmp_path / "demo_fix.py").write_text(
        "def f(x):\n    return x + 2\n"
        "def detect(fn):\n    import inspect\n    return ('FAULTY' in inspect.getsource(fn.__code__), 'marker')\n")
    (tmp_path / "demo_other.py").write_text("X = 1\n")


GREEDY = DEMO + r"""
import importlib.machinery, json, sys
import vlgrpo.patches as P
P.install()

class Greedy:  # resolves the target itself through PathFinder: the finders behind it are never asked
    def find_spec(self, name, path=None, target=None):
        if name == "demo_target":
            return importlib.machinery.PathFinder.find_spec(name, path, target)
        return None

sys.meta_path.insert(0, Greedy())
import demo_target
import demo_other  # the next import reaches our finder
print(json.dumps([demo_target.f(0), type(sys.meta_path[0]).__name__, type(sys.meta_path[1]).__name__,
                  P.bootstrap_state().get("late_hooks"), getattr(demo_target.f, "__vlgrpo_patch__", None)]))
"""


def test_foreign_finder_inserted_in_front_does_not_skip_the_hooks(tmp_path):
    _demo_files(tmp_path)
    value, first, second, late, patched = run_py(GREEDY, path=[tmp_path]).json
    assert (value, patched) == (2, "demo"), "the target imported by a finder in front of ours stayed unpatched"
    assert (first, second) == ("PostImportFinder", "Greedy")
    assert late == ["demo_target"]


def test_foreign_finder_in_front_then_target_import_goes_through_ours(tmp_path):
    # after any import moved our finder back to the front, the target's own import runs its hooks at once
    _demo_files(tmp_path)
    code = GREEDY.replace("import demo_target\nimport demo_other", "import demo_other\nimport demo_target")
    value, first, _, late, patched = run_py(code, path=[tmp_path]).json
    assert (value, patched, first) == (2, "demo", "PostImportFinder")
    assert not late  # hooked by our loader, not by the sweep


def test_unknown_switch_value_is_named(shim_dir):
    code = "from vlgrpo.patches import bootstrap as b; print(b.STATE['enabled'], b.STATE['installed'])"
    proc = run_py(code, path=[shim_dir], env={"VLGRPO_PATCHES": "none"})
    assert proc.stdout.split() == ["True", "True"]  # kept on ...
    assert "VLGRPO_PATCHES='none' is not a known value; the patches stay ON" in proc.stderr  # ... and said so
    assert "off, 0, false, no" in proc.stderr
    strict = run_py(code, path=[shim_dir], env={"VLGRPO_PATCHES": "none", "VLGRPO_PATCHES_STRICT": "1"})
    assert "ValueError: VLGRPO_PATCHES='none' is not a known value" in strict.stderr
    for value in (" OFF ", "Off", "0", "false"):
        assert run_py(code, path=[shim_dir], env={"VLGRPO_PATCHES": value}).stdout.split() == ["False", "False"]
    for value in ("on", " 1 ", "TRUE", ""):
        proc = run_py(code, path=[shim_dir], env={"VLGRPO_PATCHES": value})
        assert proc.stdout.split() == ["True", "True"] and "not a known value" not in proc.stderr


def test_strict_install_error_still_runs_the_shadowed_sitecustomize(shim_dir, tmp_path):
    vendor = tmp_path / "vendor"
    vendor.mkdir()
    (vendor / "sitecustomize.py").write_text("print('vendor sitecustomize ran')\n")
    proc = run_py("print('alive')", path=[shim_dir, vendor],
                  env={"VLGRPO_PATCHES_STRICT": "1", "VLGRPO_PATCHES_DISABLED": "no.such.patch"})
    assert proc.stdout.split("\n")[:2] == ["vendor sitecustomize ran", "alive"]
    assert "unknown patch id(s) no.such.patch" in proc.stderr  # strict still reports the install error
