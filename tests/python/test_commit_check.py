"""The commit convention (CONTRIBUTING.md, Commits) is enforced twice: by the commit-msg hook `make hooks`
installs, at `git commit`, and by `scripts/commit_check.py range` in `make lint` (CI) over the commits after the
recorded base. Both are run here as a developer and CI run them, on real git repositories."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "commit_check.py"
sys.path.insert(0, str(SCRIPT.parent))
import commit_check  # a script, imported from its folder

SUBJECT_90 = "preflight: count the rows of each split once, then keep the counts close to its data files"
GOOD = "preflight: cache row counts by content hash\n\nA relaunch counted every row again (40 ms a row).\n"
GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def _git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("GIT_")}, **GIT_ENV, "HOME": str(repo.parent)}
    return subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=check)


@pytest.fixture
def repo(tmp_path) -> Path:
    """A new git repository holding the checker, the hook and the recorded base, as a clone of this one would."""
    r = tmp_path / "repo"
    (r / "scripts" / "hooks").mkdir(parents=True)
    (r / ".ci").mkdir()
    shutil.copy(SCRIPT, r / "scripts" / "commit_check.py")
    shutil.copy(REPO / "scripts" / "hooks" / "commit-msg", r / "scripts" / "hooks" / "commit-msg")
    _git(r, "init", "-q", "-b", "main")
    return r


def _commit(repo: Path, message: str, *, verify: bool = True) -> subprocess.CompletedProcess:
    """``git commit -F -`` of a one-byte change with ``message`` (``verify=False``: ``--no-verify``)."""
    f = repo / "f"
    f.write_text((f.read_text() if f.exists() else "") + "x")
    _git(repo, "add", "f")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("GIT_")}, **GIT_ENV, "HOME": str(repo.parent)}
    return subprocess.run(
        ["git", "commit", "-q", *([] if verify else ["--no-verify"]), "-F", "-"],
        cwd=repo,
        input=message,
        capture_output=True,
        text=True,
        env=env,
    )


def test_the_90_character_subject_is_90_characters():
    assert len(SUBJECT_90) == 90


def test_make_hooks_installs_the_hook_that_refuses_a_90_character_subject(repo):
    make = subprocess.run(["make", "-f", str(REPO / "Makefile"), "hooks"], cwd=repo, capture_output=True, text=True)
    assert make.returncode == 0, make.stdout + make.stderr
    assert _git(repo, "config", "core.hooksPath").stdout.strip() == "scripts/hooks"
    refused = _commit(repo, SUBJECT_90 + "\n\nWhy and what ran.\n")
    assert refused.returncode != 0
    assert "subject is 90 characters, at most 72" in refused.stderr
    assert _git(repo, "rev-list", "--all", check=False).stdout == ""  # no commit was made
    ok = _commit(repo, GOOD)
    assert ok.returncode == 0, ok.stderr
    assert _git(repo, "log", "-1", "--format=%s").stdout.strip() == GOOD.splitlines()[0]


@pytest.mark.parametrize(
    "message, problem",
    [
        ("cache row counts by content hash\n\nwhy\n", "no scope prefix"),
        ("preflight: added a row-count cache\n\nwhy\n", "'added' -> 'add'"),
        ("preflight: fixes the count of image rows\n\nwhy\n", "'fixes' -> 'fix'"),
        ("preflight: cache row counts by content hash\n", "no body"),
        ("preflight: cache row counts by content hash\nwhy, on the second line\n", "no blank line after the subject"),
        ("preflight: cache row counts\n\nSigned-off-by: t <t@example.invalid>\n", "no body"),
    ],
)
def test_the_hook_refuses_each_rule_and_says_which(repo, message, problem):
    _git(repo, "config", "core.hooksPath", "scripts/hooks")
    proc = _commit(repo, message)
    assert proc.returncode != 0 and problem in proc.stderr, proc.stderr


def test_the_hook_reads_the_message_git_stores(repo):
    """Comment lines and the verbose diff below the scissors line are not part of the message."""
    _git(repo, "config", "core.hooksPath", "scripts/hooks")
    msg = repo / "msg"
    msg.write_text(
        "# a comment\n" + GOOD + "# Please enter the commit message\n"
        "# ------------------------ >8 ------------------------\n" + "x" * 200 + "\n"
    )
    hook = subprocess.run([str(repo / "scripts" / "hooks" / "commit-msg"), str(msg)], capture_output=True, text=True)
    assert hook.returncode == 0, hook.stderr
    assert commit_check.message_lines(msg.read_text())[0] == GOOD.splitlines()[0]


def test_ci_check_refuses_a_90_character_subject_after_the_base_not_before(repo):
    # history before the base breaks every rule; it is not rewritten and not checked
    _commit(repo, "WIP " + "x" * 100 + "\n", verify=False)
    base = _git(repo, "rev-parse", "HEAD").stdout.strip()
    (repo / ".ci" / "commit-base").write_text(f"# the last commit before the convention\n{base}\n")
    _commit(repo, GOOD, verify=False)
    check = [sys.executable, str(repo / "scripts" / "commit_check.py"), "range"]
    ok = subprocess.run(check, cwd=repo, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert "1 of 1 commit(s)" in ok.stdout
    _commit(repo, SUBJECT_90 + "\n\nWhy and what ran.\n", verify=False)  # --no-verify: the hook is bypassed
    bad = subprocess.run(check, cwd=repo, capture_output=True, text=True)
    assert bad.returncode == 1
    assert SUBJECT_90[:40] in bad.stderr and "subject is 90 characters, at most 72" in bad.stderr
    assert "WIP" not in bad.stderr


def test_ci_check_stops_when_the_base_is_not_an_ancestor(repo):
    _commit(repo, GOOD, verify=False)
    _git(repo, "checkout", "-q", "--orphan", "other")
    _commit(repo, GOOD, verify=False)
    base = _git(repo, "rev-parse", "main").stdout.strip()
    proc = subprocess.run(
        [sys.executable, str(repo / "scripts" / "commit_check.py"), "range", base],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "not an ancestor of HEAD" in proc.stderr


def test_this_repository_passes_from_its_recorded_base():
    """The recorded base is in this history and every commit after it follows the convention (make lint runs
    the same check)."""
    proc = subprocess.run([sys.executable, str(SCRIPT), "range"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_git_own_subjects_and_autosquash_in_the_hook_pass():
    assert commit_check.problems("Merge branch 'h-fast'\n") == []
    assert commit_check.problems("fixup! preflight: cache row counts\n", hook=True) == []
    assert commit_check.problems("fixup! preflight: cache row counts\n") != []  # CI: squash before landing
