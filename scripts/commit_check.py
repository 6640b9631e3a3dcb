#!/usr/bin/env python3
"""The commit convention of CONTRIBUTING.md ("Commits"), checked on one message or on the commits a change adds.

    scripts/commit_check.py msg FILE        one message (the commit-msg hook, scripts/hooks/commit-msg)
    scripts/commit_check.py range [BASE]    every non-merge commit in BASE..HEAD (make lint, hence CI)

The rules, for the subject (first line) and the body:
  - at most 72 characters;
  - a scope prefix: ``scope: text``; a scope is a path or area name (``preflight``, ``tests/bats``,
    ``bench/RESULTS.md``, ``docker, tests``), lower-case or a file name, no spaces;
  - imperative: the first word after the scope is not the past, -ing or third-person form of a common commit
    verb ("added", "fixes", "updating" ...). A subject that describes the new state ("the loader reads X") passes:
    a heuristic refuses only what is certainly not imperative;
  - a body: a blank line after the subject, then at least one line of text (why, and the evidence).

BASE for ``range`` is, in this order: the argument, ``$VLGRPO_COMMIT_BASE``, or the commit recorded in
``.ci/commit-base`` (the last commit before the convention was enforced: history is not rewritten, so the
commits before it are never checked). BASE must be an ancestor of HEAD: otherwise the range would reach into the
history before the convention, and the check stops with exit 2 and says how to fix it (a shallow clone lacks it).

Exit 0 when every message passes, 1 when one does not (each problem printed), 2 on a usage or git error.
Standard library only: the hook runs with whatever python3 the developer has.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

MAX_SUBJECT = 72
REPO = Path(__file__).resolve().parents[1]
BASE_FILE = REPO / ".ci" / "commit-base"
# "scope: text", several scopes "a, b: text"; a scope is a path-like word (letters, digits, . _ / + - *)
SCOPE = re.compile(r"^(?P<scope>[\w.+*/-]+(?:, ?[\w.+*/-]+)*): (?P<text>\S.*)$")
# the common commit verbs whose past, -ing and third-person forms mark a subject as not imperative
VERBS = (
    "add allow apply avoid bump change check clean create delete disable document drop enable extend fix "
    "handle implement improve introduce make merge move raise reduce refactor remove rename replace revert "
    "rewrite run set skip speed split support test tidy update use write"
).split()
# verbs whose third-person form is as often a plural noun ("checks run in order"): only -ed/-ing refused
NOUNS_TOO = {"change", "check", "drop", "handle", "merge", "run", "set", "split", "support", "test"}
_IRREGULAR = {
    "made": "make",
    "ran": "run",
    "wrote": "write",
    "sped": "speed",
    "rewrote": "rewrite",
    "setting": "set",
    "running": "run",
    "splitting": "split",
    "skipped": "skip",
    "skipping": "skip",
    "dropped": "drop",
    "dropping": "drop",
}
TRAILER = re.compile(r"^(Signed-off-by|Co-authored-by|Reviewed-by|Acked-by|Change-Id): ")
GIT_SUBJECTS = ("Merge ", 'Revert "')  # subjects git writes itself (git merge, git revert)
AUTOSQUASH = ("fixup! ", "squash! ", "amend! ")  # squashed away before landing: the hook lets them through


def _not_imperative(word: str) -> str | None:
    """The verb ``word`` is a non-imperative form of (e.g. "added" -> "add"), or None."""
    w = word.lower()
    if w in _IRREGULAR:
        return _IRREGULAR[w]
    for verb in VERBS:
        stem = verb[:-1] if verb.endswith("e") else verb
        forms = {verb + "d", verb + "ed", stem + "ed", stem + "ing", verb + "ing"}
        if verb not in NOUNS_TOO:
            forms |= {verb + "s", verb + "es"}
        if w in forms:
            return verb
    return None


def message_lines(text: str) -> list[str]:
    """The message as git will store it: comment lines and everything below the scissors line dropped."""
    lines = []
    for line in text.splitlines():
        if re.match(r"^# -+ >8 -+$", line):
            break
        if line.startswith("#"):
            continue
        lines.append(line.rstrip())
    while lines and not lines[0]:
        lines.pop(0)
    return lines


def problems(text: str, *, hook: bool = False) -> list[str]:
    """What is wrong with one commit message (empty: it passes). ``hook``: autosquash subjects pass."""
    lines = message_lines(text)
    if not lines:
        return ["the message is empty"]
    subject = lines[0]
    if subject.startswith(GIT_SUBJECTS) or (hook and subject.startswith(AUTOSQUASH)):
        return []
    out = []
    if len(subject) > MAX_SUBJECT:
        out.append(f"subject is {len(subject)} characters, at most {MAX_SUBJECT}: say less, put the rest in the body")
    m = SCOPE.match(subject)
    if not m:
        out.append(
            "subject has no scope prefix: start it with the area it changes and ': ', "
            "e.g. 'preflight: cache row counts by content hash'"
        )
    else:
        first = m["text"].split()[0].strip(",.;:")
        verb = _not_imperative(first)
        if verb:
            out.append(
                f"subject is not imperative: '{first}' -> '{verb}' (say what the commit does: "
                f"'{m['scope']}: {verb} ...')"
            )
    rest = lines[1:]
    if rest and rest[0]:
        out.append("no blank line after the subject: the subject is one line, then a blank line, then the body")
    elif not [ln for ln in rest if ln.strip() and not TRAILER.match(ln)]:
        out.append("no body: after a blank line say why the change is needed and the evidence (what ran, numbers)")
    return out


def _git(*args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {proc.stderr.strip() or 'exit ' + str(proc.returncode)}")
    return proc.stdout


def base_commit(arg: str | None) -> tuple[str, str]:
    """(BASE, where it came from): the argument, $VLGRPO_COMMIT_BASE or .ci/commit-base's first word."""
    if arg:
        return arg, "the argument"
    if os.environ.get("VLGRPO_COMMIT_BASE"):
        return os.environ["VLGRPO_COMMIT_BASE"], "VLGRPO_COMMIT_BASE"
    words = [
        w for ln in BASE_FILE.read_text(encoding="utf-8").splitlines() if not ln.startswith("#") for w in ln.split()
    ]
    if not words:
        raise RuntimeError(f"{BASE_FILE.relative_to(REPO)} names no commit")
    return words[0], str(BASE_FILE.relative_to(REPO))


def check_range(arg: str | None) -> int:
    try:
        base, source = base_commit(arg)
        try:
            _git("rev-parse", "--verify", "-q", base + "^{commit}")
        except RuntimeError:
            print(
                f"commit-check: the base {base} ({source}) is not in this clone: fetch the full history "
                f"(git fetch --unshallow) or pass a base that is, e.g. scripts/commit_check.py range origin/main",
                file=sys.stderr,
            )
            return 2
        if (
            subprocess.run(
                ["git", "merge-base", "--is-ancestor", base, "HEAD"], cwd=REPO, capture_output=True, check=False
            ).returncode
            != 0
        ):
            print(
                f"commit-check: the base {base} ({source}) is not an ancestor of HEAD, so {base}..HEAD would "
                "reach into the history before the convention: rebase onto it or pass the commit this change "
                "started from",
                file=sys.stderr,
            )
            return 2
        shas = _git("rev-list", "--no-merges", "--reverse", f"{base}..HEAD").split()
        bad = 0
        for sha in shas:
            found = problems(_git("show", "-s", "--format=%B", sha))
            if found:
                bad += 1
                subject = _git("show", "-s", "--format=%s", sha).strip()
                print(f"commit-check: {sha[:10]} {subject}", file=sys.stderr)
                for p in found:
                    print(f"  - {p}", file=sys.stderr)
    except RuntimeError as exc:
        print(f"commit-check: {exc}", file=sys.stderr)
        return 2
    print(
        f"commit-check: {len(shas) - bad} of {len(shas)} commit(s) after {base[:10]} ({source}) follow the "
        "convention"
        + (
            ""
            if not bad
            else "; fix the others with git commit --amend / git rebase -i before "
            "they land (see CONTRIBUTING.md, Commits)"
        )
    )
    return 1 if bad else 0


def check_file(path: str) -> int:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        print(f"commit-msg: cannot read the message file {path}: {exc}", file=sys.stderr)
        return 2
    found = problems(text, hook=True)
    if found:
        print("commit-msg: the commit is refused (CONTRIBUTING.md, Commits):", file=sys.stderr)
        for p in found:
            print(f"  - {p}", file=sys.stderr)
        print(
            "  the message is kept in .git/COMMIT_EDITMSG; git commit -e -F .git/COMMIT_EDITMSG edits it again",
            file=sys.stderr,
        )
        return 1
    return 0


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "msg":
        return check_file(argv[1])
    if argv and argv[0] == "range" and len(argv) <= 2:
        return check_range(argv[1] if len(argv) == 2 else None)
    print("usage: scripts/commit_check.py msg FILE | range [BASE]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
