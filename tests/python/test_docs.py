"""The reference docs stay true to the tree: every field-case code the code and the tests use is defined in
docs/field-cases.md, the tests that page names exist, the generated docs equal what their generators print now,
and README.md stays one page."""

from __future__ import annotations

import fnmatch
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from vlgrpo.patches import registry, report

REPO = Path(__file__).resolve().parents[2]
FIELD_CASES = REPO / "docs" / "field-cases.md"
CODE = re.compile(r"\b[BC]\d\d\b")
# where a field-case code can appear: the code, the tests, the images, the scripts and examples
SEARCHED = ("python/src", "entrypoints", "docker", "tests", "scripts", "examples", "bench", "compose.yaml", "Makefile")
SUFFIXES = {
    ".py",
    ".sh",
    ".bash",
    ".bats",
    ".tsv",
    ".yaml",
    ".yml",
    ".md",
    ".txt",
    ".in",
    ".argv",
    ".env",
    ".example",
    ".sbatch",
    ".toml",
    ".json",
    "",
}


def _tracked_files() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "--", *SEARCHED],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [REPO / p for p in out.splitlines() if (REPO / p).is_file() and Path(p).suffix in SUFFIXES]


def _tracked_texts():
    """(path, text) of each tracked file :func:`_tracked_files` lists, skipping files that are not UTF-8."""
    for path in _tracked_files():
        try:
            yield path, path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue


def _defined_codes() -> set[str]:
    # a code is defined by its section heading: "## B01 — ..."
    return set(re.findall(r"^## ([BC]\d\d) ", FIELD_CASES.read_text(encoding="utf-8"), flags=re.M))


def test_every_field_case_code_used_is_defined_in_field_cases_md():
    defined = _defined_codes()
    used: dict[str, str] = {}
    for path, text in _tracked_texts():
        for code in CODE.findall(text):
            used.setdefault(code, str(path.relative_to(REPO)))
    assert used, "no field-case code found at all: the search is broken"
    missing = {c: where for c, where in sorted(used.items()) if c not in defined}
    assert not missing, f"field-case codes used but not defined in docs/field-cases.md (code: first file): {missing}"


def test_the_code_search_finds_a_code_in_a_comment():
    # the pattern the test above relies on: a code in a comment or a test name, not inside a longer word
    assert CODE.findall("# Field case B15: ...; test_b19_x; C03/see") == ["B15", "C03"]
    assert CODE.findall("AB01 B1 B123 sha256:B01x") == []


def test_every_defined_code_has_source_symptom_and_what_the_project_does():
    text = FIELD_CASES.read_text(encoding="utf-8")
    sections = re.split(r"^## (?=[BC]\d\d )", text, flags=re.M)[1:]
    assert len(sections) == len(_defined_codes())
    for sec in sections:
        code = sec[:3]
        for part in ("**Source:**", "**Symptom", "**What the project does:**"):
            assert part in sec, f"{code} in docs/field-cases.md lacks {part}"


def _test_names(path: Path) -> set[str]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".py":
        return set(re.findall(r"^(?:async )?def (test_\w+)", text, flags=re.M))
    return set()


def test_tests_named_in_field_cases_md_exist():
    text = FIELD_CASES.read_text(encoding="utf-8")
    missing = []
    current = None
    # `tests/x/test_y.py::test_z` names a file and a test; a following `::test_w` names another test of that file
    for m in re.finditer(r"`((?:tests|bench)/[\w/.-]+)(?:::([\w*\[\],. -]+))?`|`::([\w*]+)", text):
        path, name, more = m.group(1), m.group(2), m.group(3)
        if path:
            current = REPO / path
            if not current.exists():
                missing.append(path)
                continue
        name = name or more
        if not name or current is None or current.suffix != ".py" or not current.exists():
            continue
        name = name.split("[", 1)[0]
        if not fnmatch.filter(_test_names(current), name):
            missing.append(f"{current.relative_to(REPO)}::{name}")
    assert not missing, f"docs/field-cases.md names tests that do not exist: {missing}"


def test_patches_doc_table_is_the_generated_one():
    text = (REPO / "docs" / "patches.md").read_text(encoding="utf-8")
    block = text.split("<!-- BEGIN GENERATED: patches -->", 1)[1].split("<!-- END GENERATED: patches -->", 1)[0]
    assert block.strip() == report.markdown_table().strip(), (
        "docs/patches.md's patch table is stale: run make docs-patches"
    )


def test_readme_patch_summary_is_the_generated_one_and_names_every_patch():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    block = text.split("<!-- BEGIN GENERATED: patches-summary -->", 1)[1].split(
        "<!-- END GENERATED: patches-summary -->", 1
    )[0]
    assert block.strip() == report.markdown_summary().strip(), "README's patch summary is stale: run make docs-patches"
    for record in registry.PATCHES:
        assert f"`{record.id}`" in block


@pytest.mark.parametrize("record", registry.PATCHES, ids=lambda r: r.id)
def test_every_patch_record_has_a_one_line_title(record):
    title = record.title
    assert title and "\n" not in title and len(title) <= 100, f"{record.id}: title must be one line of <= 100 chars"
    for code in CODE.findall(title):
        assert code in _defined_codes(), f"{record.id}: title names {code}, not in docs/field-cases.md"


def test_generated_docs_are_up_to_date():
    """scripts/gen-docs --check: README's settings summary, docs/settings.md, docker/vlgrpo.env.example and the
    patch tables equal what the registry and the patch records generate now (make lint runs the same)."""
    env = {"PATH": "/usr/bin:/bin", "PY": sys.executable}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]  # the interpreter's own import path, as this process has it
    proc = subprocess.run(
        [str(REPO / "scripts" / "gen-docs"), "--check"], cwd=REPO, capture_output=True, text=True, env=env
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_readme_is_one_page():
    readme = (REPO / "README.md").read_bytes()
    assert len(readme) <= 15 * 1024, f"README.md is {len(readme)} bytes; the bar is 15 KB (move reference to docs/)"
    assert readme.count(b"\n") <= 220, "README.md is over about 200 lines (move reference to docs/)"


def test_docs_have_no_dated_ledgers():
    """Reference pages carry no run dates or pass counts (evidence goes in bench/RESULTS.md)."""
    dated = re.compile(r"\b20\d\d-\d\d-\d\d\b|\b\d+ passed\b")
    bad = []
    for path in [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").glob("*.md"))]:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if dated.search(line):
                bad.append(f"{path.relative_to(REPO)}:{n}: {line.strip()[:80]}")
    assert not bad, "dated or pass-count lines in the docs:\n" + "\n".join(bad)


def test_relative_links_in_the_docs_resolve():
    bad = []
    for path in [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+://", target):
                continue
            if not (path.parent / target).exists():
                bad.append(f"{path.relative_to(REPO)} -> {target}")
    assert not bad, f"broken relative links: {bad}"


def test_docs_named_in_the_code_exist():
    """Error messages and comments send readers to docs/*.md: each page they name exists."""
    named: dict[str, str] = {}
    for path, text in _tracked_texts():
        for page in re.findall(r"\bdocs/[\w.-]+\.md\b", text):
            named.setdefault(page, str(path.relative_to(REPO)))
    assert named, "no docs/ page named anywhere: the search is broken"
    missing = {p: where for p, where in sorted(named.items()) if not (REPO / p).is_file()}
    assert not missing, f"pages named in the code that do not exist (page: first file): {missing}"


# --- file references: a path of this repository named in the docs or in a comment exists ----------------------------
_TOP = sorted({p.name for p in REPO.iterdir() if p.is_dir() and not p.name.startswith(".")} | {".ci"})
# a repository path: one of the top folders, then /segments; not part of a longer path (/usr/lib/python3/...) and not
# a placeholder or pattern (tests/python/patches/test_<topic>.py, tests/bats/*.bats, docker/locks/$name)
_REF = re.compile(
    r"(?<![\w./$~{@-])((?:%s)/[\w.+-]+(?:/[\w.+-]+)*)(?![\w/+.-]*[<{*$])(?![\w/+-])" % "|".join(map(re.escape, _TOP))
)
_CODE_SUFFIXES = {".py", ".sh", ".bash", ".bats", ".yaml", ".yml", ".toml", ".sbatch", ".in", ".example", ".env", ""}
# the launcher's files, rewritten on another branch: their references are checked apart, below
_LAUNCHER = ("entrypoints/", "tests/bats/")


def _comment_texts(path: Path, text: str) -> list[tuple[int, str]]:
    """(line, text) of the comments and docstrings of a code file: where a path names a file for the reader."""
    if path.suffix == ".py":
        import ast
        import io
        import tokenize

        out = []
        try:
            for tok in tokenize.generate_tokens(io.StringIO(text).readline):
                if tok.type == tokenize.COMMENT:
                    out.append((tok.start[0], tok.string))
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    doc = ast.get_docstring(node, clean=False)
                    if doc and node.body:
                        out.append((node.body[0].lineno, doc))
        except (SyntaxError, tokenize.TokenError):
            return [(1, text)]
        return out
    # shell, Makefile, YAML, TOML: a '#' at the start of a line or after a blank starts a comment
    return [
        (n, line[m.start() :]) for n, line in enumerate(text.splitlines(), 1) if (m := re.search(r"(?:^|\s)#", line))
    ]


def file_references(path: Path, text: str) -> list[tuple[int, str]]:
    """(line, repository path) of each path of this repository ``path`` names for its reader: anywhere in a Markdown
    page, in the comments and docstrings of code. A path whose parent folder is not in this tree names another
    project's file (verl's recipe scripts, Ray's sources) and is left out."""
    chunks = list(enumerate(text.splitlines(), 1)) if path.suffix == ".md" else _comment_texts(path, text)
    refs = []
    for line, chunk in chunks:
        for m in _REF.finditer(chunk):
            ref = m.group(1).rstrip(".,:;")
            ref = re.sub(r":\d+$", "", ref)
            if (REPO / ref).parent.is_dir():
                refs.append((line + chunk.count("\n", 0, m.start()), ref))
    return refs


def _broken_references(include) -> list[str]:
    pages = [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").glob("*.md"))]
    code = [
        (p, t)
        for p, t in _tracked_texts()
        if p.suffix in _CODE_SUFFIXES and p.suffix != ".md" and not p.name.startswith(".")
    ]
    bad = []
    for path, text in [(p, p.read_text(encoding="utf-8")) for p in pages] + code:
        rel = str(path.relative_to(REPO))
        if not include(rel):
            continue
        bad += [f"{rel}:{n}: {ref}" for n, ref in file_references(path, text) if not (REPO / ref).exists()]
    return bad


def test_the_reference_search_finds_paths_and_skips_other_projects_and_patterns():
    md = Path("x.md")
    text = (
        "see `tests/bats/helpers/with-hooks.sh`, entrypoints/lib/shim.sh:8 and docs/settings.md.\n"
        "verl's examples/data_preprocess/geo3k.py, /usr/lib/python3/x.py, tests/python/patches/test_<topic>.py,"
        " tests/bats/*.bats\n"
    )
    assert [r for _, r in file_references(md, text)] == [
        "tests/bats/helpers/with-hooks.sh",
        "entrypoints/lib/shim.sh",
        "docs/settings.md",
    ]
    code = '"""bench/docstring.py"""\nx = "bench/not-a-comment.py"  # bench/in-a-comment.py\n'
    assert sorted(r for _, r in file_references(Path("m.py"), code)) == ["bench/docstring.py", "bench/in-a-comment.py"]


def test_paths_named_in_the_docs_and_comments_exist():
    """A path of this repository that a doc page, CONTRIBUTING.md or a code comment names is there (a renamed or
    removed file leaves the reader at a dead end)."""
    bad = _broken_references(lambda rel: not rel.startswith(_LAUNCHER))
    assert not bad, "paths named that do not exist (rename the reference or restore the file):\n" + "\n".join(bad)


def test_paths_named_in_the_launcher_comments_exist():
    bad = _broken_references(lambda rel: rel.startswith(_LAUNCHER))
    assert not bad, "paths named in entrypoints/ and tests/bats/ that do not exist:\n" + "\n".join(bad)


# --- bare issue numbers: they resolve nowhere for a reader; a field-case code or plain words do -----------------
_ISSUE = re.compile(r"\bissues? \d", re.IGNORECASE)  # in any case: "Issue", "ISSUES" too
# files other branches own now: the launcher rewrite (entrypoints/, tests/bats/) and the patch fixes
_OWNED_ELSEWHERE = (*_LAUNCHER, "python/src/vlgrpo/patches/fixes/")


def _bare_issue_numbers(include) -> list[str]:
    pages = [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").glob("*.md"))]
    bad = []
    for path, text in [(p, p.read_text(encoding="utf-8")) for p in pages] + list(_tracked_texts()):
        rel = str(path.relative_to(REPO))
        if rel == "bench/RESULTS.md" or not include(rel):  # the measurement record names the runs it reports
            continue
        bad += [f"{rel}:{n}: {line.strip()[:90]}" for n, line in enumerate(text.splitlines(), 1) if _ISSUE.search(line)]
    return sorted(set(bad))


def test_no_bare_issue_numbers_in_code_tests_or_docs():
    bad = _bare_issue_numbers(lambda rel: not rel.startswith(_OWNED_ELSEWHERE))
    assert not bad, (
        "bare issue numbers (use the field-case code of docs/field-cases.md or say it in words):\n" + "\n".join(bad)
    )


def test_no_bare_issue_numbers_in_the_launcher_and_the_fixes():
    bad = _bare_issue_numbers(lambda rel: rel.startswith(_OWNED_ELSEWHERE))
    assert not bad, "\n".join(bad)
