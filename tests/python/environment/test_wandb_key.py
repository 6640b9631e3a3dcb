"""The W&B key file (``WANDB_API_KEY_FILE``) by vlgrpo.trackers: the one path rule for key files and the key's form.

References: the key's form is checked against the W&B client's own check (wandb's
``wandb/sdk/lib/wbauth/validation.py`` ``check_api_key``, loaded from the installed wandb when there is one) and
against the key forms W&B issues (40 hexadecimal digits, ``local-`` and 40 hex digits on a self-hosted server,
``wandb_v1_`` and 77 characters); the path rule's cases are real files whose modes and owners are set here (root
hands a file to uid 65534).
"""

from __future__ import annotations

import importlib.util
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vlgrpo import environment, trackers

KEY = "0123456789abcdef0123456789abcdef01234567"  # 40 hex digits, the classic W&B key
NEW_KEY = "wandb_v1_" + "Ab3_x-9Z" * 9 + "Q9z0x"  # 86 characters, the form W&B issues since 2025
LOCAL_KEY = "local-" + KEY  # a self-hosted server's key
# other services' tokens with their documented prefixes (made-up bodies)
HF = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz01234567"
OPENAI = "sk-proj-" + "a1B2c3D4" * 6
GITHUB = "ghp_" + "a1B2c3D4e5" * 3 + "F6g7H8"
ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="needs root to hand a file to another uid")


def _client_check():
    """wandb's check_api_key from the installed wandb's source file, loaded alone (importing wandb itself starts
    its service machinery); None when wandb is not installed."""
    spec = importlib.util.find_spec("wandb")
    if spec is None or not spec.submodule_search_locations:
        return None
    src = Path(list(spec.submodule_search_locations)[0]) / "sdk" / "lib" / "wbauth" / "validation.py"
    if not src.is_file():
        return None
    mod_spec = importlib.util.spec_from_file_location("_wandb_key_validation", src)
    mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(mod)
    return mod.check_api_key


def _keyfile(tmp_path: Path, text: str, name: str = "wandb.key", mode: int = 0o600) -> Path:
    f = tmp_path / name
    f.write_text(text)
    f.chmod(mode)
    return f


def _plan(path, loggers="console,wandb", owner="fa", **extra):
    return trackers.plan(loggers, {"WANDB_API_KEY_FILE": str(path), **extra}, owner)


def _refused(plan, fragment):
    assert plan.exports == {} and [p[0] for p in plan.problems] == ["WANDB_API_KEY_FILE"], plan
    assert fragment in plan.problems[0][1], plan.problems
    return plan.problems[0]


@pytest.mark.parametrize("key", [KEY, NEW_KEY, LOCAL_KEY, KEY.upper()])
def test_the_key_forms_w_and_b_issues_are_read_and_exported_as_wandb_api_key(tmp_path, key):
    for text in (key, key + "\n", key + "\r\n"):
        p = _plan(_keyfile(tmp_path, text))
        assert p.problems == [] and p.exports == {"WANDB_API_KEY": key}, p
    mode_0400 = _keyfile(tmp_path, key, "ro.key", 0o400)
    assert _plan(mode_0400).exports == {"WANDB_API_KEY": key}
    # a node (ray-node.sh: no logger list) exports it too
    assert _plan(mode_0400, loggers="", owner="node").exports == {"WANDB_API_KEY": key}


CANDIDATES = [
    KEY,
    NEW_KEY,
    LOCAL_KEY,
    "x" * 39,
    "x" * 40,
    "local-" + "x" * 39,
    "a-b-" + "c" * 40,
    "a.b-" + "c" * 40,
    "-" + "c" * 40,
    "c" * 40 + ".",
    "café" + "c" * 40,
    "ab cd-" + "c" * 40,
    HF,
    OPENAI,
    GITHUB,
    "eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJrdWJlcm5ldGVzIn0.c2ln",
    "",
    "c" * 400,
    "c" * 3000,
]


def test_every_key_accepted_is_one_the_w_and_b_client_accepts():
    """The rule is the client's, narrowed: what it accepts, the installed client's own check accepts too; of the
    client's keys it refuses only JWTs, other services' tokens and keys with spaces or non-ASCII characters."""
    check = _client_check()
    if check is None:
        pytest.skip("wandb is not installed here (the image pins it)")
    for key in CANDIDATES:
        ours, theirs = trackers.wandb_key_problem(key) == "", check(key) is None
        if ours:
            assert theirs, key
        elif theirs:
            why = trackers.wandb_key_problem(key)
            assert any(w in why for w in ("JWT", "looks like", "spaces, control or non-ASCII")), (key, why)


@pytest.mark.parametrize(
    "text, fragment",
    [
        (HF, "Hugging Face token"),
        (OPENAI, "OpenAI"),
        (GITHUB, "GitHub token"),
        ("eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJrdWJlcm5ldGVzIn0.c2lnbmF0dXJl", "JWT"),
        ("x" * 39, "too short"),
        ("not a key; secret-ish text", "spaces"),
        ("local-" + "é" * 40, "non-ASCII"),
        ("local-" + "a.b" * 20, "other than letters"),
        (KEY + "\n" + KEY + "\n", "more than one line"),
        (KEY + "\0" + KEY, "more than one line"),
        ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjE\n-----END OPENSSH PRIVATE KEY-----\n", "PEM block"),
        ("-----BEGIN CERTIFICATE-----", "PEM block"),
        ("k" * 5000, "larger than 4 KiB"),
        ("", "empty"),
    ],
)
def test_what_is_no_w_and_b_key_is_refused_naming_the_variable_never_the_contents(tmp_path, text, fragment):
    name, why, fix = _refused(_plan(_keyfile(tmp_path, text)), fragment)
    secret = text.strip()[:20]
    assert "contents not shown" in why
    for part in (why, fix):
        assert (not secret or secret not in part) and "b3BlbnNzaC1" not in part, part
    assert "WANDB_API_KEY_FILE" in fix and "authorize" in fix


def test_a_0644_key_file_is_refused_with_the_chmod_fix(tmp_path):
    f = _keyfile(tmp_path, KEY, mode=0o644)
    _, why, _ = _refused(_plan(f), "mode 0644")
    assert f"chmod 0600 {f}" in why and KEY not in why


@pytest.mark.parametrize("mode", [0o620, 0o602, 0o640, 0o660, 0o666])
def test_a_key_file_its_group_or_others_can_write_or_read_is_refused(tmp_path, mode):
    f = _keyfile(tmp_path, KEY, mode=mode)
    why = _refused(_plan(f), "can be ")[1]
    assert f"{mode:04o}" in why


@needs_root
def test_a_key_file_of_another_user_is_refused_and_so_is_a_link_to_one(tmp_path):
    tmp_path.chmod(0o755)
    theirs = _keyfile(tmp_path, KEY, "theirs.key")
    os.chown(theirs, 65534, 65534)
    _refused(_plan(theirs), "owned by uid 65534")
    link = tmp_path / "link.key"
    link.symlink_to(theirs)
    _refused(_plan(link), "owned by uid 65534")  # the link is resolved first: the file it names is judged
    # a link of ours to a key of ours passes
    mine = _keyfile(tmp_path, KEY, "mine.key")
    (tmp_path / "mine.link").symlink_to(mine)
    assert _plan(tmp_path / "mine.link").exports == {"WANDB_API_KEY": KEY}


@needs_root
def test_a_key_file_below_a_folder_others_can_write_or_own_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    _refused(_plan(_keyfile(shared, KEY)), "can be written by every user")
    group = tmp_path / "group"
    group.mkdir()
    group.chmod(0o775)
    _refused(_plan(_keyfile(group, KEY)), "can be written by its group")
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    key = _keyfile(theirs, KEY)
    os.chown(theirs, 65534, 65534)
    _refused(_plan(key), "owned by uid 65534")


@pytest.mark.parametrize(
    "path", ["/proc/self/environ", "/proc/self/mem", "/proc/1/environ", "/dev/stdin", "/sys/kernel/notes"]
)
def test_kernel_and_device_files_are_no_key_files(path):
    _refused(_plan(path), "kernel or device file")


def test_a_link_into_proc_is_refused_as_a_kernel_file(tmp_path):
    (tmp_path / "env.key").symlink_to("/proc/self/environ")
    _refused(_plan(tmp_path / "env.key"), "kernel or device file")


def test_a_missing_file_a_folder_and_a_fifo_are_refused_at_once(tmp_path):
    _refused(_plan(tmp_path / "missing"), "does not exist")
    folder = tmp_path / "dir"
    folder.mkdir(mode=0o700)
    _refused(_plan(folder), "not a regular file")
    os.mkfifo(tmp_path / "fifo", 0o600)
    _refused(_plan(tmp_path / "fifo"), "not a regular file")  # never opened: a FIFO would block the launch


def test_a_path_with_control_characters_is_shown_escaped(tmp_path):
    p = _plan(str(tmp_path / "a\x1b[31mb\nc"))
    why = p.problems[0][1]
    assert "\x1b" not in why and "\n" not in why and "\\x1b" in why, why


def test_both_the_key_and_the_file_is_refused_and_wandb_without_a_key_needs_one(tmp_path):
    f = _keyfile(tmp_path, KEY)
    p = trackers.plan("console,wandb", {"WANDB_API_KEY_FILE": str(f), "WANDB_API_KEY": "set"})
    assert p.exports == {} and p.problems[0][:2] == (
        "WANDB_API_KEY_FILE",
        "both WANDB_API_KEY and WANDB_API_KEY_FILE are set",
    )
    p = trackers.plan("console,wandb", {})
    assert [x[0] for x in p.problems] == ["VLGRPO_LOGGER"] and "includes wandb, but neither" in p.problems[0][1]
    dry = trackers.plan("console,wandb", {}, dry_run=True)
    assert dry.problems == [] and dry.notes[0].startswith("warning: VLGRPO_LOGGER has wandb but neither")
    for mode in trackers.WANDB_KEYLESS:
        assert trackers.plan("console,wandb", {"WANDB_MODE": mode}).problems == []
    assert trackers.plan("console,wandb", {"WANDB_API_KEY": "set"}).problems == []
    assert trackers.plan("console", {}).problems == [] and trackers.plan("", {}, "node").problems == []


def test_the_command_line_exports_the_key_and_prints_it_nowhere_else(tmp_path, capsys, monkeypatch):
    f = _keyfile(tmp_path, KEY)
    data = f"WANDB_API_KEY_FILE={f}\0WANDB_MODE=online\0".encode()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    assert environment.main(["trackers", "--owner=fa", "--loggers=[console,wandb]"]) == 0
    assert capsys.readouterr().out.splitlines() == [f"export\tWANDB_API_KEY\t{KEY}"]
    f.chmod(0o644)
    proc = subprocess.run(
        [sys.executable, "-m", "vlgrpo.environment", "trackers", "--owner=node"], input=data, capture_output=True
    )
    proc.stdout, proc.stderr = proc.stdout.decode(), proc.stderr.decode()
    assert proc.returncode == 2 and proc.stdout.startswith("problem\tWANDB_API_KEY_FILE\t"), proc
    assert KEY not in proc.stdout + proc.stderr
