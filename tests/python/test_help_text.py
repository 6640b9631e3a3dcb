"""--help in a terminal: plain text that fits 80 columns and says everything the Markdown says.

Each entrypoint's --help is Markdown on a pipe (the source of docs/settings.md, checked by tests/bats/cli.bats) and,
when stdout is a terminal, the same text wrapped for it (vlgrpo.launch.help plain). The terminal here is a real
pseudo-terminal (Python's pty); the reference is the Markdown the same entrypoint prints on a pipe: every table row's
first cell starts a line of its own, and every other cell and every paragraph appears word for word, only wrapped.
"""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ENTRYPOINTS = ["fully-async-grpo.sh", "veomni-grpo.sh", "ray-node.sh"]


def _env(columns: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLGRPO_")}
    env["COLUMNS"] = str(columns)
    # the recipes' --help is the launcher's: python3 on PATH must have the vlgrpo package, as in the images
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
    return env


def in_terminal(argv: list[str], columns: int = 80) -> str:
    """stdout of ``argv`` run with a pseudo-terminal as its stdout (stderr a pipe)."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(argv, stdout=follower, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=_env(columns))
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    assert proc.wait(timeout=60) == 0, proc.stderr.read()
    return b"".join(chunks).decode().replace("\r\n", "\n")


def _words(text: str) -> str:
    return " ".join(text.replace("`", "").replace("\\|", "|").split())


@pytest.mark.parametrize("entry", ENTRYPOINTS)
@pytest.mark.parametrize("columns", [80, 100])
def test_help_in_a_terminal_fits_and_keeps_every_word_of_the_markdown(entry, columns):
    script = str(REPO / "entrypoints" / entry)
    markdown = subprocess.run([script, "--help"], capture_output=True, text=True, env=_env(columns), check=True).stdout
    assert max(len(line) for line in markdown.splitlines()) > 200  # the Markdown itself is not for a terminal
    text = in_terminal([script, "--help"], columns)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= columns, max(lines, key=len)
    flat = _words(text)
    rows = [line for line in markdown.splitlines() if line.startswith("| ") and not line.startswith("|---")]
    assert len(rows) > 20
    for row in rows[1:]:
        if row == rows[0]:
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", row.strip("|"))]
        if cells[0] == "Variable" or cells[0] == "Hydra key(s)":
            continue  # a header row of a second table
        assert cells[0].replace("`", "") in lines, cells[0]
        for cell in cells[1:]:
            if cell and cell != "—":
                assert _words(cell) in flat, cell
    for para in re.split(r"\n\s*\n", markdown):
        if para.strip() and not para.lstrip().startswith(("|", "#")):
            assert _words(para) in flat, para[:80]
