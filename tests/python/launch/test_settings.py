"""The settings step of the launch (vlgrpo.launch.settings), in process.

What a user sees when a setting is refused: one line per problem, naming the variable, what is wrong and the fix,
worded from the setting's registry row (python/src/vlgrpo/environment.tsv: its allowed values and default are read
from the row here, not copied); values shown as bash's ``printf %q`` shows them (bash itself is the reference);
"did you mean" by edit distance (a plain Levenshtein table written here is the reference). The entrypoints print
exactly these lines, in this order, and exit 2 (the end-to-end case at the bottom runs the real script).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vlgrpo import environment
from vlgrpo.launch import settings

REPO = Path(__file__).resolve().parents[3]
OWNERS = ("fa", "vo", "node")


def _row(owner, name):
    return next(r for r in settings.owner_settings(owner) if r.name == name)


def _problems(owner, env, cwd="/"):
    return settings.read_settings(owner, env, cwd).problems


# ---- values shown as bash shows them ----------------------------------------------------------------------

QUOTE_CASES = [
    "",
    "plain",
    "a b",
    "a\tb",
    "x\ny",
    "\x1b[31m",
    "x\x7f",
    "modèle",
    "模型",
    "'q'",
    '"q"',
    "$(id)",
    "`id`",
    "#c",
    "a#b",
    "~a",
    "a~b",
    "a:~b",
    "a=~b",
    "k=v",
    "a,b",
    "[a]",
    "{x}",
    "*?",
    "a|b;c&d",
    "<>",
    "!x",
    "^x",
    "\\x",
    "%s",
    "+-./:@_",
    "\x01\x02\x1f",
    "\udcff\udcfe",
]


def _bash_q(values):
    script = 'for v; do printf "%q\\0" "$v"; done'
    out = subprocess.run(
        ["bash", "-c", script, "_"] + [v.encode("utf-8", "surrogateescape") for v in values],
        capture_output=True,
        check=True,
        env={"LC_ALL": "C", "PATH": os.environ["PATH"]},
    ).stdout
    return out.decode("utf-8", "surrogateescape").split("\0")[:-1]


def test_shell_quote_is_bash_printf_q():
    every_byte = [chr(c) for c in range(1, 128)] + [f"a{chr(c)}b" for c in range(1, 128)]
    values = QUOTE_CASES + every_byte
    assert [settings.shell_quote(v) for v in values] == _bash_q(values)


def test_show_cuts_long_values_at_40_bytes():
    long = "é" * 30  # 60 bytes: the cut falls inside a character, as bash's ${v:0:40} in the C locale does
    assert settings.show("x" * 40) == "x" * 40
    assert settings.show("x" * 41) == "x" * 40 + "... (41 characters)"
    assert (
        settings.show(long)
        == _bash_q([long.encode()[:40].decode("utf-8", "surrogateescape")])[0] + "... (60 characters)"
    )


# ---- one refusal per type, worded from the registry row ------------------------------------------------------


def test_refusals_name_the_variable_the_fault_and_the_fix(tmp_path):
    # each entry: a setting of fa, a refused value, and the line a user reads (from the row's own columns)
    lr, nn = _row("fa", "VLGRPO_LR"), _row("fa", "VLGRPO_TRAINER_NNODES")
    fsdp, logger = _row("fa", "VLGRPO_FSDP_SIZE"), _row("fa", "VLGRPO_LOGGER")
    resume, model = _row("fa", "VLGRPO_RESUME_MODE"), _row("fa", "VLGRPO_MODEL_PATH")
    train, proj = _row("fa", "VLGRPO_TRAIN_FILE"), _row("fa", "VLGRPO_PROJECT_NAME")
    vbt = _row("fa", "VLGRPO_VAL_BEFORE_TRAIN")
    words = ", ".join(logger.allowed.split())
    first, rest = logger.allowed.split(" ", 1)
    cases = {
        nn.name: (
            "01",
            f"01 is not an integer in {nn.allowed}; fix: set a decimal integer in {nn.allowed} "
            "(no sign, no leading zeros)",
        ),
        fsdp.name: (
            "0",
            f"0 is not an integer in {fsdp.allowed.replace('|', ' or ')}; fix: set a decimal integer in "
            f"{fsdp.allowed.replace('|', ' or ')} (no sign, no leading zeros)",
        ),
        lr.name: (
            "nan",
            f"nan is not a number in {lr.allowed}; fix: set a decimal number such as 0.5 or 1e-6 in {lr.allowed}",
        ),
        vbt.name: ("yes", "yes is not a boolean; fix: set true or false"),
        resume.name: (
            "latest",
            f"latest is not one of {', '.join(resume.allowed.split())}; fix: set one of: "
            f"{', '.join(resume.allowed.split())}",
        ),
        logger.name: (
            "console,console",
            f"console\\,console is not a comma list of distinct values from: {words}; "
            f"fix: set e.g. {first} or {first},{rest}; no brackets, quotes or spaces",
        ),
        proj.name: (
            "1e5",
            "1e5 is not a plain name; fix: use 1-128 letters, digits, '.', '_' or '-' (starting with a "
            "letter or digit, not a number, not true/false/null)",
        ),
        model.name: (
            str(tmp_path / "none"),
            f"{tmp_path / 'none'} is not a readable directory; fix: create it or "
            f"mount it (e.g. docker -v HOST_DIR:{tmp_path / 'none'})",
        ),
        train.name: (
            "x",
            f"{tmp_path / 'x'} is not a readable file; fix: point it at an existing file (mount it into the container)",
        ),
    }
    env = {name: value for name, (value, _) in cases.items()}
    got = _problems("fa", env, str(tmp_path))
    # in the registry's order, one line each, the values as given (no default filled in for a refused one)
    order = [r.name for r in settings.owner_settings("fa") if r.name in cases]
    want = [f"{name}: {cases[name][1]}" for name in order]
    assert [p for p in got if p.split(":")[0] in cases] == want


def test_a_value_with_spaces_or_control_characters_is_refused_before_its_type(tmp_path):
    for value in ("a b", "x\ny", "é", "x" * 1025):
        row = _row("fa", "VLGRPO_ROLLOUT_N")
        (line,) = [p for p in _problems("fa", {row.name: value}, str(tmp_path)) if p.startswith(row.name)]
        assert line == (
            f"{row.name}: value {settings.show(value)} contains spaces, control or non-ASCII characters, "
            f"or is longer than 1024; fix: use a plain value ({row.allowed})"
        )


def test_paths_with_characters_hydra_reads_are_refused(tmp_path):
    row = _row("fa", "VLGRPO_CHECKPOINT_DIR")
    for value in ("a,b", "x=y", "~/ck", "-rf", "${HOME}"):
        (line,) = [p for p in _problems("fa", {row.name: value}, str(tmp_path)) if p.startswith(row.name)]
        assert line == (
            f"{row.name}: path {settings.show(value)} has characters the launch cannot pass safely; fix: "
            "use a path of letters, digits, '/', '.', '_' and '-' only (no spaces, commas, '=', quotes, "
            "'~', '$')"
        )


def test_every_setting_of_every_entrypoint_has_a_worded_refusal(tmp_path):
    # a value no type accepts: every setting refuses it with a line naming it, and nothing else is reported
    for owner in OWNERS:
        rows = settings.owner_settings(owner)
        env = {r.name: "%%" for r in rows}
        got = _problems(owner, env, str(tmp_path))
        assert [p.split(":")[0] for p in got] == [r.name for r in rows]
        assert all("; fix: " in p for p in got)


def test_accepted_values_and_defaults_are_the_hydra_text(tmp_path):
    (tmp_path / "m").mkdir()
    got = settings.read_settings(
        "fa",
        {
            "VLGRPO_LOGGER": "console,wandb",
            "VLGRPO_VAL_BEFORE_TRAIN": "0",
            "VLGRPO_LR": "1e-6",
            "VLGRPO_MODEL_PATH": "m/../m/.",
        },
        str(tmp_path),
    )
    assert got.values["LOGGER"] == "[console,wandb]"
    assert got.values["VAL_BEFORE_TRAIN"] == "False"
    assert got.values["LR"] == "1e-6"  # as written: Hydra reads it, not Python's float repr
    assert got.values["MODEL_PATH"] == str(tmp_path / "m")
    assert got.source["LR"] == "env" and got.raw["LR"] == "1e-6"
    for row in settings.owner_settings("fa"):
        short = row.name[len("VLGRPO_") :]
        if row.default.startswith("@"):
            assert got.source[short] == "derived" and got.values[short] == ""
        elif row.default and short not in ("LOGGER", "VAL_BEFORE_TRAIN", "LR", "MODEL_PATH"):
            assert got.source[short] == "default" and got.raw[short] == row.default
        elif not row.default:
            assert got.source[short] == "unset" and got.values[short] == ""


def test_a_derived_value_out_of_range_names_its_inputs():
    row = _row("fa", "VLGRPO_PPO_MAX_TOKEN_LEN_PER_DEVICE")
    how = row.default.partition(":")[2]
    lo, hi = row.allowed.split("..")
    text, line = settings.check_derived("fa", "PPO_MAX_TOKEN_LEN_PER_DEVICE", str(int(hi) + 1), "VLGRPO_A=1", "/")
    assert text is None
    assert line == (
        f"{row.name}: not set, so derived as {how} = {int(hi) + 1} from VLGRPO_A=1, which is not in "
        f"{row.allowed}; fix: change those settings, or set {row.name} to a value in {row.allowed}"
    )
    assert settings.check_derived("fa", "PPO_MAX_TOKEN_LEN_PER_DEVICE", lo, "", "/") == (lo, None)
    with pytest.raises(ValueError):
        settings.check_derived("fa", "LR", "1", "", "/")  # not a derived setting


# ---- names: unknown, another entrypoint's, by case; did you mean ----------------------------------------------


def _levenshtein(a, b):
    d = [[i + j if i * j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
    return d[-1][-1]


def _reference_nearest(word, names):
    if len(word) > 64:
        return ""
    scored = [(_levenshtein(word, n), i, n) for i, n in enumerate(names)]
    d, _, best = min(scored)
    return best if d * 3 <= len(word) + 2 else ""


@pytest.mark.parametrize("owner", OWNERS)
def test_did_you_mean_is_the_nearest_setting(owner):
    names = [r.name[len("VLGRPO_") :] for r in settings.owner_settings(owner)]
    words = (
        [n[:-1] for n in names]
        + [n[1:] + "X" for n in names]
        + ["LR_", "PATCH", "X", "RAYPORT", "Q" * 70, "MAX_PROMT_LENGTH", "ROLLOUTN", "TOTALLY_OTHER"]
    )
    got = [settings.nearest(w, names) for w in words]
    want = [_reference_nearest(w, names) for w in words]
    assert got == want
    assert sum(1 for g in got if g) > len(names)  # most near misses get a suggestion


def test_nearest_is_fast_for_long_and_many_names():
    # 60 names of 10 to 62 characters, far and near (a bash loop once took 25.6 s for 20 long names)
    names = [r.name[len("VLGRPO_") :] for r in settings.owner_settings("fa")]
    words = []
    for i in range(20):
        words += ["X" * 60 + f"{i:02d}", f"PPO_MAX_TOKEN_LEN_PER_DEVIC{i}", f"ROLOUT_N{i}"]
    t0 = time.perf_counter()
    best = [settings.nearest(w, names) for w in words]
    took = time.perf_counter() - t0
    assert sum(1 for b in best if b) == 40
    assert took < 1.0, f"{took:.2f} s for 60 names"


def _only(owner):
    """A setting every row of which belongs to ``owner`` alone."""
    owners = {}
    for r in environment.rows():
        if r.kind == "setting":
            owners.setdefault(r.name, set()).update(r.owners)
    return next(name for name, own in owners.items() if own == {owner})


def test_unknown_names_case_and_siblings():
    fa_only, node_only = _only("fa"), _only("node")
    lower = "VLGRPO_" + fa_only[len("VLGRPO_") :].lower()
    names = ["VLGRPO_MAX_PROMT_LENGTH", "VLGRPO_", lower, fa_only, node_only, "OTHER", "VLGRPO_ZZZZZZZZ"]
    assert settings.unknown_vars("fa", names) == [
        "VLGRPO_: no setting name after VLGRPO_ (an env-file line with an empty name gives this); fix: remove the "
        "VLGRPO_= line, or complete the name (--help lists the settings)",
        f"{lower}: differs from the setting {fa_only} only by case, so it would be ignored; fix: rename it {fa_only}",
        "VLGRPO_MAX_PROMT_LENGTH: not a setting of fully-async-grpo.sh (unknown VLGRPO_ variable); fix: unset it, or "
        "did you mean VLGRPO_MAX_PROMPT_LENGTH? (--help lists the settings)",
        "VLGRPO_ZZZZZZZZ: not a setting of fully-async-grpo.sh (unknown VLGRPO_ variable); fix: unset it (--help "
        "lists the settings)",
    ]
    # the recipes and ray-node.sh accept each other's settings; one recipe refuses the other's
    assert settings.unknown_vars("node", [fa_only]) == []
    vo_only = _only("vo")
    assert settings.unknown_vars("fa", [vo_only]) == [
        f"{vo_only}: a setting of veomni-grpo.sh, not of fully-async-grpo.sh; fix: unset it for this recipe (keep one "
        "env file per recipe)"
    ]
    assert settings.unknown_vars("doctor", [vo_only, fa_only, node_only]) == []


# ---- the command line --------------------------------------------------------------------------------------


@pytest.mark.parametrize("args", [[], ["settings", "fa", "--cwd", "/"], ["serve", "fa"], ["entry"], ["docs", "x"]])
def test_cli_usage_errors_exit_2(args):
    proc = subprocess.run(
        [sys.executable, "-I", "-m", "vlgrpo.launch"] + args, capture_output=True, env={"PATH": os.environ["PATH"]}
    )
    assert proc.returncode == 2 and b"usage:" in proc.stderr and proc.stdout == b""


# ---- end to end: the entrypoint prints these lines, in this order, and exits 2 ---------------------------------


def test_the_entrypoint_prints_the_launchers_problems(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "python3").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    (bindir / "python3").chmod(0o755)
    env = {
        "VLGRPO_LR": "2",
        "VLGRPO_LOGGER": "console,x",
        "VLGRPO_MODEL_PATH": "nowhere",
        "VLGRPO_MAX_PROMT_LENGTH": "1",
        "VLGRPO_rollout_n": "2",
    }
    proc = subprocess.run(
        [str(REPO / "entrypoints/fully-async-grpo.sh"), "--dry-run"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PATH": f"{bindir}:/usr/bin:/bin", **env},
    )
    assert proc.returncode == 2
    lines = settings.read_settings("fa", env, str(tmp_path)).problems + settings.unknown_vars("fa", sorted(env))
    want = [f"fully-async-grpo.sh: error: {line}" for line in lines]
    want.append(f"fully-async-grpo.sh: {len(lines)} configuration problem(s); nothing was started (see --help)")
    assert proc.stderr.splitlines() == want
    assert proc.stdout == ""


@pytest.mark.parametrize(
    "uri",
    [
        "https://h/?token=s3cretpw",
        "https://h/#s3cretpw",
        "https://h:s3cretpw",
        "https://u:s3cretpw@h/",
        "http://h/ s3cretpw",
        "ftp://s3cretpw",
    ],
)
def test_a_refused_url_is_never_shown(uri, tmp_path):
    """Attack review: a refused VLGRPO_MLFLOW_TRACKING_URI was echoed in full, token and all."""
    lines = [
        p
        for p in _problems("fa", {"VLGRPO_MLFLOW_TRACKING_URI": uri}, str(tmp_path))
        if p.startswith("VLGRPO_MLFLOW_TRACKING_URI: ")
    ]
    assert len(lines) == 1 and "s3cretpw" not in lines[0]
