"""The environment step of the launch (vlgrpo.launch.childenv), in process: which inherited variables a launch's
children get, and the refusal a user sees for the others.

The reference for every name's fate is the registry file itself, read here with the csv module and the stdlib's
fnmatch (not vlgrpo.environment): a row's kind says what happens to a variable (refused with a value -> a problem,
pass -> passed, pass-on-request or no row -> passed only when VLGRPO_PASS_ENV names it, drop or another
entrypoint's value -> dropped). Names are shown as bash's ``printf %q`` shows them (bash is the reference). The
end-to-end behaviour (the same lines from the real entrypoints, exit 2) is in tests/bats/environment.bats and
child-env.bats.
"""

from __future__ import annotations

import csv
import fnmatch
import os
import subprocess
from pathlib import Path

import pytest

from vlgrpo.launch import childenv

REPO = Path(__file__).resolve().parents[3]
REGISTRY = REPO / "python/src/vlgrpo/environment.tsv"


def _rows():
    with open(REGISTRY, encoding="utf-8", newline="") as fh:
        lines = [ln for ln in fh if ln.strip() and not ln.startswith("#")]
    return [r for r in csv.DictReader(lines, delimiter="\t", quoting=csv.QUOTE_NONE)]


def _reference_kind(name, owner):
    """The kind of the row that applies to ``name`` for ``owner``: an exact row (this entrypoint's set row first),
    else the longest matching pattern; None without one."""
    exact, pats = None, []
    for r in _rows():
        if r["kind"] == "setting" or (r["kind"] == "set" and owner not in r["owner"].split(",")):
            continue
        if "*" in r["name"]:
            pats.append(r)
        elif r["name"] == name and (exact is None or r["kind"] == "set"):
            exact = r
    if exact:
        return exact
    for r in sorted(pats, key=lambda r: (len(r["name"]), r["name"].encode()), reverse=True):
        if fnmatch.fnmatchcase(name, r["name"]):
            return r
    return None


def _bash_q(value):
    out = subprocess.run(
        ["bash", "-c", 'printf "%q" "$1"', "_", value.encode("utf-8", "surrogateescape")],
        capture_output=True,
        check=True,
        env={"LC_ALL": "C", "PATH": os.environ["PATH"]},
    ).stdout
    return out.decode("utf-8", "surrogateescape")


def _classify(entries, owner="fa", pass_env="", held=None):
    held = dict(entries) if held is None else held
    return childenv.classify(owner, list(entries), held, pass_env)


def _names(kind, owner="fa"):
    return [
        r["name"]
        for r in _rows()
        if r["kind"] == kind and "*" not in r["name"] and (kind != "set" or owner in r["owner"].split(","))
    ]


# ---- each kind of row, every exact name of it ---------------------------------------------------------------


@pytest.mark.parametrize("owner", ["fa", "vo", "node", "doctor"])
def test_every_pass_row_passes_and_every_drop_row_is_dropped(owner):
    for kind in ("pass", "drop"):
        names = [n for n in _names(kind) if _reference_kind(n, owner)["kind"] == kind]
        assert len(names) >= 10, kind
        got = _classify([(n, "") for n in names], owner)
        assert (got.passed if kind == "pass" else got.dropped) == names, kind
        assert not got.problems


@pytest.mark.parametrize("owner", ["fa", "vo", "node", "doctor"])
def test_a_refused_row_with_a_value_stops_the_launch_naming_the_variable(owner):
    # (a VLGRPO_* name is the settings step's: one that is no setting is refused there, with a "did you mean")
    refused = [
        r
        for r in _rows()
        if r["kind"] == "refused"
        and "*" not in r["name"]
        and not r["name"].startswith("VLGRPO_")
        and _reference_kind(r["name"], owner)["kind"] == "refused"
    ]
    assert len(refused) >= 20
    got = _classify([(r["name"], "/somewhere/else") for r in refused], owner)
    assert got.problems == [
        f"{r['name']}: {r['meaning']} (value not shown); fix: "
        f"{r['fix'] if r['fix'] != '-' else 'unset it for the launch'}"
        for r in refused
    ]
    assert not got.passed and not got.dropped
    # the value is never shown
    assert not any("/somewhere/else" in p for p in got.problems)
    # empty, it is dropped
    assert _classify([(r["name"], "") for r in refused], owner).dropped == [r["name"] for r in refused]


def test_a_refused_row_accepts_only_the_words_a_program_sets_itself():
    row = next(r for r in _rows() if r["name"] == "PYTHONBREAKPOINT")
    for own in row["allowed"].split():
        assert _classify([("PYTHONBREAKPOINT", own)]).dropped == ["PYTHONBREAKPOINT"]
    for other in ("evil.x", row["allowed"].split()[0] + "x", " " + row["allowed"].split()[0], "0"):
        assert _classify([("PYTHONBREAKPOINT", other)]).problems, other


def test_pass_on_request_and_unlisted_names_pass_only_when_named():
    por = [n for n in _names("pass-on-request") if _reference_kind(n, "fa")["kind"] == "pass-on-request"][:6]
    unlisted = ["MY_TOOL_SETTING", "FOO", "ZZ_UNLISTED_1"]
    for n in unlisted:
        assert _reference_kind(n, "fa") is None
    names = por + unlisted
    got = _classify([(n, "1") for n in names])
    assert got.passed == [] and got.dropped == names
    got = _classify([(n, "1") for n in names], pass_env=",".join(names))
    assert got.passed == names and got.requested == names
    # a name without a row is type-checked (its shape), a typed row too
    assert set(unlisted) <= set(got.typed)


def test_this_entrypoints_set_rows_win_and_an_inherited_value_is_dropped():
    for owner in ("fa", "node"):
        names = _names("set", owner)
        got = _classify([(n, "inherited") for n in names], owner)
        assert got.dropped == names and not got.passed and not got.problems


# ---- names: shown as bash shows them, odd names, functions, twins, near misses --------------------------------


def test_names_bash_cannot_hold_are_dropped_shown_and_listed_for_env_u():
    odd = ["A-B", "1X", "X Y", "A\nB", "a.b", "caf\udcc3\udca9"]
    got = _classify([(n, "1") for n in odd])
    assert got.odd == odd
    assert got.dropped == [_bash_q(n) for n in odd]


def test_an_exported_function_is_refused_and_an_empty_one_dropped():
    got = _classify([("BASH_FUNC_ls%%", "() { echo hi; }"), ("BASH_FUNC_cd%%", "")])
    assert got.problems == [
        f"{_bash_q('BASH_FUNC_ls%%')}: an exported shell function: every bash the launch starts "
        "would run it in place of the command of that name; fix: unset it before the launch "
        "(export -fn NAME; Lmod: unset -f module ml; Slurm: --export=NONE or a list)"
    ]
    assert got.odd == ["BASH_FUNC_cd%%"]


def test_a_name_set_twice_is_one_problem_whatever_the_copies():
    # (ray-node.sh's view: the recipes build HOME themselves)
    got = _classify([("HOME", "/a"), ("HOME", "/b"), ("HOME", "/c"), ("FOO", "1"), ("FOO", "1")], owner="node")
    assert [p.split(":")[0] for p in got.problems] == ["HOME", "FOO"]
    assert "set more than once" in got.problems[0]
    assert got.passed == ["HOME"] and got.dropped == ["FOO"]


def test_an_entry_with_an_empty_name_is_refused():
    got = _classify([("", "x"), ("HOME", "/root")])
    assert len(got.problems) == 1 and got.problems[0].startswith("environment: has a variable with an empty name")


@pytest.mark.parametrize(
    "name, setting", [("vlgrpo_lr", "VLGRPO_LR"), ("Vlgrpo_Lr", "VLGRPO_LR"), ("vlgrpo_patches", "VLGRPO_PATCHES")]
)
def test_a_setting_in_the_wrong_case_is_named(name, setting):
    got = _classify([(name, "1")])
    assert got.problems == [
        f"{name}: differs from the setting {setting} only by case, so it would be ignored; fix: rename it {setting}"
    ]


def test_a_vlgrpo_name_in_the_wrong_case_that_is_no_setting():
    got = _classify([("vlgrpo_nothing_here", "1")])
    assert (
        "looks like a VLGRPO_ variable (it differs only by case from VLGRPO_NOTHING_HERE) but is no setting"
        in got.problems[0]
    )


@pytest.mark.parametrize("name", ["VLGR\u03a1O_LR", "VLGR\u0420O_LR", "\uff36LGRPO_LR", "VLGRPO_L\u0280"])
def test_a_look_alike_letter_is_found_once_the_values_are_checked(name):
    got = _classify([(name, "1")])
    assert got.nonascii == [name] and not got.problems
    probs = childenv.value_problems("fa", [], "", (), got.nonascii)
    if name == "VLGRPO_L\u0280":  # small capital R: no Latin look-alike in the table, so no finding
        assert probs == [] or "VLGRPO_L" in probs[0]
        return
    assert probs == [
        f"{_bash_q(name)}: differs from the setting VLGRPO_LR by a look-alike character (a non-ASCII "
        "letter), so it would be ignored; fix: rename it VLGRPO_LR"
    ]


def test_settings_a_python_reader_owns_reach_the_children_and_the_doctor_gets_its_own():
    got = _classify([("VLGRPO_PATCHES", "all"), ("VLGRPO_LR", "1e-6"), ("VLGRPO_MODEL_PATH", "/m")])
    assert got.passed == ["VLGRPO_PATCHES"]
    doc = _classify([("VLGRPO_PATCHES", "all"), ("VLGRPO_MODEL_PATH", "/m"), ("VLGRPO_LR", "1e-6")], "doctor")
    assert doc.passed == ["VLGRPO_PATCHES", "VLGRPO_MODEL_PATH"]


# ---- VLGRPO_PASS_ENV ---------------------------------------------------------------------------------------


def test_pass_env_may_name_only_what_a_launch_may_pass():
    refused = next(n for n in _names("refused") if _reference_kind(n, "fa")["kind"] == "refused")
    drop = next(n for n in _names("drop") if _reference_kind(n, "fa")["kind"] == "drop")
    setn = _names("set", "fa")[0]
    got = _classify([("FOO", "1")], pass_env=f"VLGRPO_LR,{refused},{drop},{setn},FOO,NOT_SET_HERE")
    lines = got.problems
    assert lines[0].startswith("VLGRPO_PASS_ENV: names VLGRPO_LR: settings are not passed this way")
    assert lines[1].startswith(f"VLGRPO_PASS_ENV: names {refused}, which is refused: ")
    assert lines[2].startswith(f"VLGRPO_PASS_ENV: names {drop}, which is never passed: ")
    assert lines[3].startswith(f"VLGRPO_PASS_ENV: names {setn}, which this entrypoint sets itself: ")
    assert len(lines) == 4
    assert got.unset_named == [refused, drop, setn, "NOT_SET_HERE"]


# ---- typed values, once the environment is built -------------------------------------------------------------


def test_typed_values_are_checked_without_showing_them(tmp_path):
    ww = tmp_path / "ww"
    ww.mkdir()
    ww.chmod(0o777)
    got = _classify([("PYTHONWARNINGS", "all:0:evil.Warn:0:0"), ("TMPDIR", str(ww)), ("HOME", "/root")], owner="node")
    assert got.typed == ["PYTHONWARNINGS", "TMPDIR", "HOME"]
    # a recipe builds HOME: the inherited one is dropped, not checked
    assert _classify([("HOME", "/root")]).dropped == ["HOME"]
    probs = childenv.value_problems(
        "node", ["PYTHONWARNINGS=all:0:evil.Warn:0:0", f"TMPDIR={ww}", "HOME=/root"], "", (), []
    )
    assert [p.split(":")[0] for p in probs] == ["PYTHONWARNINGS", "TMPDIR"]
    assert all("(value not shown); fix: " in p for p in probs)
    assert not any("evil" in p for p in probs)


def test_a_folder_inside_the_checkpoint_folder_is_refused_for_home(tmp_path):
    ck = tmp_path / "ckpt"
    (ck / "home").mkdir(parents=True)
    probs = childenv.value_problems("node", [f"HOME={ck}/home"], "", (str(ck),), [])
    assert len(probs) == 1 and probs[0].startswith("HOME: ")


def test_an_inherited_ray_address_is_refused_unless_it_is_the_checked_one():
    assert childenv.ray_address_problem("fa", "", "") is None
    assert childenv.ray_address_problem("fa", "10.0.0.1:6379", "10.0.0.1:6379") is None
    assert childenv.ray_address_problem("vo", "10.0.0.1:6379", "").startswith(
        "RAY_ADDRESS: set (value not shown) without VLGRPO_RAY_ADDRESS"
    )
    assert childenv.ray_address_problem("fa", "10.0.0.9:6379", "10.0.0.1:6379").startswith(
        "RAY_ADDRESS: differs from VLGRPO_RAY_ADDRESS"
    )
    assert childenv.ray_address_problem("doctor", "127.0.0.7:6390", "").startswith(
        "RAY_ADDRESS: set (value not shown): the doctor's Ray check would join that cluster"
    )
    assert childenv.ray_address_problem("node", "10.0.0.1:6379", "") is None
    # never the value
    assert "10.0.0.9" not in childenv.ray_address_problem("fa", "10.0.0.9:6379", "10.0.0.1:6379")
