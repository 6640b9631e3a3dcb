"""``--help`` of the entrypoints: the usage and the settings table, from the registry (and a recipe's file).

:func:`markdown` is the text a pipe or a file gets (docs/settings.md is made of it, by ``scripts/gen-docs``);
:func:`plain` is what a terminal gets: the same text wrapped to the terminal's width, each table row a block.
"""

from __future__ import annotations

import re

from vlgrpo import environment
from vlgrpo.launch import recipes, settings


def default_text(row: environment.Row) -> str:
    """The default as the tables show it: ``derived: ...``, ``unset``, or the value in backticks."""
    if row.default.startswith("@"):
        return "derived: " + row.default.partition(":")[2]
    return f"`{row.default}`" if row.default else "unset"


def template_keys(template: list[str], short: str) -> str:
    """The Hydra keys whose template element uses ``{SHORT}``, in backticks, comma-separated."""
    return ", ".join(f"`{el.partition('=')[0]}`" for el in template if "{" + short + "}" in el)


def _view_kind(owner: str) -> dict[str, str]:
    """Registry name (exact or pattern) -> the kind of its row in ``owner``'s view: this entrypoint's own ``set``
    row first, else the last row of that name (other entrypoints' ``set`` rows not seen)."""
    out: dict[str, str] = {}
    for r in environment.rows():
        if r.kind == "setting" or (r.kind == "set" and owner not in r.owners):
            continue
        if out.get(r.name) == "set" and r.kind != "set":
            continue
        out[r.name] = r.kind
    return out


def env_names(owner: str, kind: str) -> str:
    """The registry names of ``kind`` in ``owner``'s view, as a Markdown list (```A`, `B*```), in file order."""
    view, out = _view_kind(owner), []
    for r in environment.rows():
        if r.kind == kind and view.get(r.name) == kind and f"`{r.name}`" not in out:
            out.append(f"`{r.name}`")
    return ", ".join(out)


def settings_rows(owner: str) -> str:
    """``NAME<TAB>TYPE<TAB>ALLOWED<TAB>DEFAULT<TAB>MEANING`` per setting (allowed values and default in words, no
    backticks): ``scripts/gen-docs`` builds the env file template and the README summary from it."""
    out = []
    for row in settings.owner_settings(owner):
        d = default_text(row).replace("`", "")
        out.append(f"{row.name[len('VLGRPO_') :]}\t{row.type}\t{settings.allowed_text(row)}\t{d}\t{row.meaning}\n")
    return "".join(out)


def env_table() -> str:
    """Every registry row that is not a setting, as a Markdown table (docs/settings.md)."""
    out = ["| Variable | Kind | Read or set by | Check | Meaning | Fix |\n|---|---|---|---|---|---|\n"]
    for r in environment.rows():
        if r.kind == "setting":
            continue
        meaning = f"`{r.name}={r.default}`: {r.meaning}" if r.kind == "set" and r.default else r.meaning
        name, meaning = r.name.replace("|", "\\|"), meaning.replace("|", "\\|")
        out.append(f"| `{name}` | {r.kind} | {r.owner} | {r.type} | {meaning} | {r.fix} |\n")
    return "".join(out)


def markdown(owner: str) -> str:
    """The usage and settings table of recipe entrypoint ``owner`` (``fa``, ``vo``), Markdown."""
    prog, rec = settings.PROGS[owner], recipes.load(owner)
    out = [f"#### `entrypoints/{prog}`\n\n", f"{rec.summary}\n\n"]
    out.append(f"Usage: `{prog} [--dry-run]` or `{prog} --help`. Settings come only from these environment variables\n")
    out.append("(an empty value counts as unset); arguments, Hydra overrides and unknown `VLGRPO_*` variables are\n")
    out.append("refused. Exit status: 0 started (or, in a dry run, planned), 2 invalid configuration or preflight\n")
    out.append("findings, 1 any other failure.\n\n")
    out.append("| Variable | Type | Allowed | Default | Hydra key(s) | Meaning |\n|---|---|---|---|---|---|\n")
    for row in settings.owner_settings(owner):
        short = row.name[len("VLGRPO_") :]
        keys = template_keys(rec.template, short) or "—"
        out.append(
            f"| `{row.name}` | {row.type} | {settings.allowed_text(row)} | {default_text(row)} | {keys} | "
            f"{row.meaning} |\n"
        )
    if rec.derived:
        out.append("\nDerived (not settable):\n\n| Hydra key(s) | Value |\n|---|---|\n")
        for name, text in rec.derived.items():
            out.append(f"| {template_keys(rec.template, name)} | {text} |\n")
    out.append(f"\nFixed for every launch (no variable reaches them): {rec.fixed}\n")
    out.append(
        "\nSecrets: `WANDB_API_KEY`, or `WANDB_API_KEY_FILE` naming a file that holds it (never printed; the file is\n"
        "yours, mode 0600 or 0400, in folders no other user can write, and holds one W&B API key on one line);\n"
        "a logger list with wandb needs one of them (or `WANDB_MODE=offline`) for a real launch. The other trackers\n"
        "need their settings (tensorboard `VLGRPO_TENSORBOARD_DIR`, mlflow `VLGRPO_MLFLOW_TRACKING_URI`, swanlab\n"
        "`VLGRPO_SWANLAB_API_KEY_FILE`); on a Ray cluster every node carries them too (docs/cluster.md).\n"
    )
    own = [r for r in environment.rows() if r.kind == "set" and owner in r.owners]
    fixed = ", ".join(f"`{r.name}={r.default}`" if r.default else f"`{r.name}`" for r in own)
    out.append(
        "\nEnvironment (the rules of every variable: docs/settings.md): the entrypoint runs as `#!/bin/bash -p` and\n"
        "builds the environment of every child (preflight, cluster tool, verl) instead of passing its own: it sets\n"
        f"{fixed} (`RAY_ADDRESS`: `VLGRPO_RAY_ADDRESS` after the checks, else `local`), the working directory is a\n"
        "fresh private folder (mktemp -d under TMPDIR, mode 0700; never the checkpoint folder, which Ray would put on\n"
        "every worker's sys.path), and of the inherited variables only these pass (typed ones checked): "
        f"{env_names(owner, 'pass')}; "
        "these only when named in `VLGRPO_PASS_ENV` (as any unlisted variable may be): "
        f"{env_names(owner, 'pass-on-request')}. "
        f"Never passed: {env_names(owner, 'drop')}. Everything else is dropped (the dry-run plan lists the names). "
        "A launch is refused (exit 2) while any of these is set, since they make a process import or run what they\n"
        f"name: {env_names(owner, 'refused')}; so is `RAY_ADDRESS` unless it equals `VLGRPO_RAY_ADDRESS`.\n"
    )
    out.append(
        "\nSignals: SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 or SIGPIPE sent to the entrypoint during the\n"
        "checks (`docker stop` sends SIGTERM to PID 1) stop the running check with everything it started and end the\n"
        "launch with exit 128+signal, nothing started; once verl runs (exec, same PID) the signals are verl's.\n"
    )
    return "".join(out)


def node_markdown() -> str:
    """The usage and settings table of ``ray-node.sh`` (owner ``node``), Markdown."""
    out = ["usage: ray-node.sh head|worker   (or --help)\n\n"]
    out.append("Starts Ray on this node in the foreground with its accelerators declared. Settings come only from\n")
    out.append("these environment variables (an empty value counts as unset); exit 2 on invalid configuration.\n\n")
    out.append("| Variable | Allowed | Default | Meaning |\n|---|---|---|---|\n")
    for row in settings.owner_settings("node"):
        out.append(f"| `{row.name}` | {settings.allowed_text(row)} | {default_text(row)} | {row.meaning} |\n")
    out.append("\nRequired: GLOO_SOCKET_IFNAME, and HCCL_SOCKET_IFNAME (Ascend) or NCCL_SOCKET_IFNAME (NVIDIA).\n")
    return "".join(out)


def _width(text: str) -> int:
    return len(text.encode("utf-8", "surrogateescape"))  # bytes, as the C locale counts


def _plain(text: str) -> str:
    return text.replace("`", "").replace("\\|", "|").replace("**", "")


def _wrap(text: str, p1: str, p2: str, width: int) -> str:
    """``text``'s words wrapped at ``width`` columns, the first line prefixed by ``p1``, the others by ``p2``."""
    out, line = "", p1
    for word in re.split(" +", text):
        if not word:
            continue
        if line not in (p1, p2) and _width(line) + 1 + _width(word) > width:
            out, line = out + line + "\n", p2
        line = line + word if line in (p1, p2) else line + " " + word
    return out + line + "\n"


def _cells(line: str) -> list[str]:
    line = re.sub(r"^\| *", "", line)
    line = re.sub(r" *\|$", "", line).replace("\\|", "\x01")
    return [_plain(c.replace("\x01", "|")) for c in re.split(r" *\| *", line)]


def plain(markdown_text: str, columns: str = "") -> str:
    """``markdown_text`` as plain text for a terminal of ``columns`` columns (a number of at least 40, else 80):
    headings and paragraphs wrapped, each table row a block (its first cell, then one indented ``Header: value``
    line per other cell, wrapped), backticks and escapes dropped."""
    width = int(columns) if re.fullmatch("[0-9]{2,3}", columns) and int(columns) >= 40 else 80
    out: list[str] = []
    para, head, intable = "", [], False

    def flush() -> None:
        nonlocal para
        if para:
            out.append(_wrap(para, "", "", width))
            para = ""

    for line in markdown_text.split("\n")[:-1] if markdown_text.endswith("\n") else markdown_text.split("\n"):
        if line.startswith("|"):
            flush()
            if not intable:
                head, intable = _cells(line), True
                continue
            if re.fullmatch(r"\|[-| ]+\|", line):
                continue
            cells = _cells(line)
            out.append(cells[0] + "\n")
            for i, c in enumerate(cells[1:], start=1):
                if c and c != "—":
                    out.append(_wrap(c, f"    {head[i] if i < len(head) else ''}: ", "        ", width))
            continue
        intable = False
        if re.match("#+ ", line):
            flush()
            out.append(_plain(re.sub("^#+ ", "", line)) + "\n")
        elif not line:
            flush()
            out.append("\n")
        else:
            para = para + (" " if para else "") + _plain(line)
    flush()
    return "".join(out)
