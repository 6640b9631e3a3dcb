"""Start-up edge cases found by trying to break the loader (each in a fresh interpreter; synthetic targets, fast).

- another library puts its own finder at the front of ``sys.meta_path`` after ours and resolves a target module
  without asking the finders behind it: the hooks must still run;
- a ``VLGRPO_PATCHES`` value that is neither on nor off is named, not silently taken as on;
- strict mode re-raising an install error must not skip the ``sitecustomize`` that ours shadows;
- a target loaded by a finder whose loader has only the legacy ``load_module()`` (nothing to wrap) is hooked on the
  next import;
- those late hooks run after the next module executed, never inside an import lookup (no module executed twice).
- a sitecustomize the installer moved aside keeps running when vlgrpo is gone, and installing into a venv never
  changes whether the venv's own sitecustomize runs (Debian's /usr/lib/python3.11/sitecustomize.py shadows it).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from patch_helpers import REPO, run_py

DEMO = (
    "from vlgrpo.patches import contract, registry\n"
    "registry.PATCHES = registry.PATCHES + (contract.from_dict({'id': 'demo', 'summary': '', 'upstream': '',"
    " 'applies_when': '', 'targets': (('demo_target', 'f'),), 'detector': 'demo_fix:detect',"
    " 'replacement': 'demo_fix:f', 'verify': 'demo_fix:f', 'recheck_after': ()}, 'demo_fix'),)\n"
    "registry.IDS = registry.IDS + ('demo',)\n"
    "from vlgrpo.patches import index\n"  # what `make docs-patches` would write for this registry
    "index.IDS, index.TARGET_MODULES = registry.IDS, registry.target_modules()\n"
)


def _demo_files(tmp_path):
    (tmp_path / "demo_target.py").write_text("def f(x):\n    return x + 1  # FAULTY\n")
    (tmp_path / "demo_fix.py").write_text(
        "def f(x):\n    return x + 2\n"
        "def detect(fn):\n    import inspect\n    return ('FAULTY' in inspect.getsource(fn.__code__), 'marker')\n"
    )
    (tmp_path / "demo_other.py").write_text("X = 1\n")


GREEDY = (
    DEMO
    + r"""
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
)


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
    code = "from vlgrpo.patches import state as b; print(b.STATE['enabled'], b.STATE['installed'])"
    proc = run_py(code, path=[shim_dir], env={"VLGRPO_PATCHES": "none"})
    assert proc.stdout.split() == ["True", "True"]  # kept on ...
    assert "VLGRPO_PATCHES='none' is not a known value; the patches stay ON" in proc.stderr  # ... and said so
    assert "Use off to switch them off" in proc.stderr
    assert run_py(code, path=[shim_dir], env={"VLGRPO_PATCHES": "off"}).stdout.split() == ["False", "False"]
    for value in ("on", ""):
        proc = run_py(code, path=[shim_dir], env={"VLGRPO_PATCHES": value})
        assert proc.stdout.split() == ["True", "True"] and "not a known value" not in proc.stderr
    # the registry's enum is exact, as the entrypoints apply it: other spellings of off keep the patches on, said so
    for value in (" OFF ", "Off", " off", " ON "):
        proc = run_py(code, path=[shim_dir], env={"VLGRPO_PATCHES": value})
        assert proc.stdout.split() == ["True", "True"], value
        assert f"VLGRPO_PATCHES={value!r} is not a known value; the patches stay ON" in proc.stderr, value


def test_a_switch_value_the_entrypoints_refuse_fails_closed_in_any_interpreter(shim_dir):
    """A Ray worker can get ``VLGRPO_PATCHES=no`` from a job's runtime_env, past the entrypoint that refuses it:
    the registry's enum is ``on off``, and every other value keeps the patches on (a warning), in strict mode too
    (a bad switch never stops the interpreter that reads it)."""
    code = (
        "from vlgrpo.patches import state as b; print(b.STATE['enabled'], b.STATE['installed'], b.read_switches()[1])"
    )
    for value in ("no", "0", "false", "disable", "disabled", "NO", "of", "off,on"):
        for extra in ({}, {"VLGRPO_PATCHES_STRICT": "1"}):
            proc = run_py(code, path=[shim_dir], env={"VLGRPO_PATCHES": value, **extra})
            assert proc.returncode == 0 and proc.stdout.split() == ["True", "True", "False"], (
                value,
                extra,
                proc.stderr,
            )
            assert "is not a known value; the patches stay ON" in proc.stderr, value
            assert "ValueError" not in proc.stderr


def test_strict_install_error_still_runs_the_shadowed_sitecustomize(shim_dir, tmp_path):
    vendor = tmp_path / "vendor"
    vendor.mkdir()
    (vendor / "sitecustomize.py").write_text("print('vendor sitecustomize ran')\n")
    proc = run_py(
        "print('alive')",
        path=[shim_dir, vendor],
        env={"VLGRPO_PATCHES_STRICT": "1", "VLGRPO_PATCHES_DISABLED": "no.such.patch"},
    )
    assert proc.stdout.split("\n")[:2] == ["vendor sitecustomize ran", "alive"]
    assert "unknown patch id(s) no.such.patch" in proc.stderr  # strict still reports the install error


LEGACY = (
    DEMO
    + r"""
import importlib.util, json, sys
import vlgrpo.patches as P
P.install()

class LegacyLoader:  # only the old load_module() protocol: the finder cannot wrap it
    def __init__(self, path):
        self.path = path

    def load_module(self, name):
        module = type(sys)(name)
        module.__file__, module.__loader__ = self.path, self
        sys.modules[name] = module
        exec(compile(open(self.path).read(), self.path, "exec"), module.__dict__)
        return module

class LegacyFinder:
    def find_spec(self, name, path=None, target=None):
        if name == "demo_target":
            return importlib.util.spec_from_loader(name, LegacyLoader(sys.argv[1]))
        return None

sys.meta_path.insert(1, LegacyFinder())  # behind ours, in front of the path finder
import demo_target
import demo_other
print(json.dumps([demo_target.f(0), P.bootstrap_state().get("late_hooks")]))
"""
)


def test_target_loaded_by_a_legacy_loader_is_hooked_on_the_next_import(tmp_path):
    _demo_files(tmp_path)
    script = tmp_path / "legacy.py"
    script.write_text(LEGACY)
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLGRPO_")}
    env["PYTHONPATH"] = str(tmp_path)
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "demo_target.py")],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[-2] == '[2, ["demo_target"]]'


def test_legacy_loaded_target_is_not_hooked_half_executed(tmp_path):
    # the target's body imports another module before it defines f: the hooks must wait until it finished
    _demo_files(tmp_path)
    (tmp_path / "demo_target.py").write_text("import demo_first\n\ndef f(x):\n    return x + 1  # FAULTY\n")
    (tmp_path / "demo_first.py").write_text("Y = 1\n")
    script = tmp_path / "legacy.py"
    script.write_text(LEGACY)
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLGRPO_")}
    env["PYTHONPATH"] = str(tmp_path)
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "demo_target.py")],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[-2] == '[2, ["demo_target"]]'


TWO_LATE = (
    DEMO.replace("'targets': (('demo_target', 'f'),)", "'targets': (('demo_target', 'f'), ('demo_target2', 'f'))")
    + r"""
import importlib.machinery, json, sys
import vlgrpo.patches as P
P.install()

class Greedy:
    def find_spec(self, name, path=None, target=None):
        if name.startswith("demo_target"):
            return importlib.machinery.PathFinder.find_spec(name, path, target)
        return None

sys.meta_path.insert(0, Greedy())
import demo_target, demo_target2
assert "vlgrpo.patches.engine" not in sys.modules
import demo_other  # the late hooks import the engine (and what it imports) from here
print(json.dumps([demo_target.f(0), demo_target2.f(0), P.bootstrap_state()["hook_errors"]]))
"""
)


def test_late_hooks_do_not_run_inside_an_import_lookup(tmp_path):
    # Two targets imported past our finder; the hooks of the first import the engine, whose own imports must not
    # start the second one's hooks half-way (engine partially initialised) nor execute any module twice.
    _demo_files(tmp_path)
    (tmp_path / "demo_target2.py").write_text("def f(x):\n    return x + 1  # FAULTY\n")
    for env in ({}, {"VLGRPO_PATCHES_STRICT": "1"}):
        proc = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", TWO_LATE],
            env={
                **{k: v for k, v in os.environ.items() if not k.startswith("VLGRPO_")},
                "PYTHONPATH": str(tmp_path),
                **env,
            },
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert proc.stdout.strip().splitlines()[-1] == "[2, 2, []]"
        # -X importtime prints one line per module execution
        executed = [ln for ln in proc.stderr.splitlines() if ln.split("|")[-1].strip() == "vlgrpo.patches.engine"]
        assert len(executed) == 1, executed


def _bare_python(tmp_path):
    """A venv of the base interpreter without pip and without vlgrpo (as an image after `pip uninstall vlgrpo`)."""
    venv = tmp_path / "img"
    subprocess.run(
        [getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", str(venv)],
        check=True,
        capture_output=True,
    )
    py = str(venv / "bin" / "python")
    site = subprocess.run(
        [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return py, Path(site)


VENDOR = "import builtins\nbuiltins.VENDOR_RAN = __name__\n"
PROBE = "import builtins, sys; print(getattr(builtins, 'VENDOR_RAN', None), 'vlgrpo' in sys.modules)"


def _env(*path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLGRPO_") and k != "PYTHONPATH"}
    return {**env, "PYTHONPATH": os.pathsep.join(str(p) for p in path)} if path else env


def test_shim_without_vlgrpo_still_runs_the_sitecustomize_it_moved_aside(tmp_path):
    # install-sitecustomize kept a foreign sitecustomize as vlgrpo_orig_sitecustomize.py; when vlgrpo is later
    # uninstalled (the shim stays: pip does not own it), that file must keep running as it did before us. The
    # directory is first on sys.path (PYTHONPATH), so the shim is the sitecustomize Python imports whatever the base
    # interpreter ships (Debian's own /usr/lib/python3.11/sitecustomize.py comes before any venv's site-packages).
    py, _ = _bare_python(tmp_path)
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(VENDOR)
    src = REPO / "python" / "src"
    assert subprocess.run([py, "-c", PROBE], env=_env(site), capture_output=True, text=True).stdout.split() == [
        "sitecustomize",
        "False",
    ], "the vendor file is not the imported sitecustomize before the install"
    subprocess.run(
        [py, "-m", "vlgrpo", "patches", "install-sitecustomize", "--site-packages", str(site), "--no-pth"],
        check=True,
        capture_output=True,
        env=_env(site, src),
    )
    assert (site / "vlgrpo_orig_sitecustomize.py").read_text() == VENDOR
    with_vlgrpo = subprocess.run([py, "-c", PROBE], env=_env(site, src), capture_output=True, text=True)
    assert with_vlgrpo.stdout.split() == ["vlgrpo_chained_sitecustomize", "True"], with_vlgrpo.stderr
    without = subprocess.run([py, "-c", PROBE], env=_env(site), capture_output=True, text=True)  # vlgrpo gone
    assert without.returncode == 0 and without.stderr == "", without.stderr
    assert without.stdout.split() == ["vlgrpo_chained_sitecustomize", "False"]


def test_install_into_a_venv_keeps_whether_its_own_sitecustomize_ran(tmp_path):
    # The image-like case: the shim goes into a venv's site-packages, where a vendor sitecustomize already is. If
    # that file ran before the install, it runs after it (chained), with vlgrpo and after vlgrpo is gone; if the
    # base interpreter's own sitecustomize shadowed it (Debian: /usr/lib/python3.11/sitecustomize.py), it did not
    # run before and must not start running now (B18: the host behaves as before; the patches load through the .pth).
    py, site = _bare_python(tmp_path)
    (site / "sitecustomize.py").write_text(VENDOR)
    before = subprocess.run([py, "-c", PROBE], env=_env(), capture_output=True, text=True).stdout.split()
    ran_before = before[0] != "None"
    src = REPO / "python" / "src"
    subprocess.run(
        [py, "-m", "vlgrpo", "patches", "install-sitecustomize"], check=True, capture_output=True, env=_env(src)
    )
    expected = "vlgrpo_chained_sitecustomize" if ran_before else "None"
    with_vlgrpo = subprocess.run([py, "-c", PROBE], env=_env(src), capture_output=True, text=True)
    assert with_vlgrpo.stdout.split() == [expected, "True"], (before, with_vlgrpo.stderr)
    without = subprocess.run([py, "-c", PROBE], env=_env(), capture_output=True, text=True)
    assert without.returncode == 0 and without.stderr == "", without.stderr
    assert without.stdout.split() == [expected, "False"], before
