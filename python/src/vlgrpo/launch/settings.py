"""The settings step of a launch: every ``VLGRPO_*`` setting of one entrypoint, validated and worded once.

The rows are the registry's (``vlgrpo/environment.tsv`` through :mod:`vlgrpo.environment`); whether a value is
accepted is :func:`vlgrpo.environment.validate` (the one value rule, also the patch switches'). This module adds
what the entrypoints do around it: which rows an entrypoint reads (:func:`owner_settings`), the value handed to
Hydra (:func:`hydra_value`), the refusal wording of each type (:func:`refusal`), the literal and derived
defaults (:func:`read_settings`, :func:`check_derived`), and the check that every exported ``VLGRPO_*`` name is
a setting of this entrypoint, with a "did you mean" (:func:`unknown_vars`, :func:`nearest`).

A problem is one line ``VAR: FAULT; fix: FIX``; the entrypoint prints each as ``PROG: error: LINE`` and exits 2.
Values are handled as bytes decoded with ``surrogateescape`` (as bash hands them over) and shown as bash's
``printf %q`` shows them in the C locale (:func:`show`), at most 40 bytes.
"""

from __future__ import annotations

import os

from vlgrpo import environment

#: the entrypoint file name of each registry owner (the recipes and the Ray node; the doctor's own)
PROGS = {"fa": "fully-async-grpo.sh", "vo": "veomni-grpo.sh", "node": "ray-node.sh", "doctor": "doctor.sh"}
OWNERS = tuple(PROGS)
SHOW_MAX = 40  # bytes of a value a message shows

# bash printf %q (lib/sh/shquote.c sh_backslash_quote): these are backslash-quoted anywhere, '#' at the start,
# '~' at the start or after ':' or '='
_BACKSLASHED = frozenset(b" \t\n!\"$&'()*,;<>?[\\]^`{|}")
_ANSIC = {
    0x07: "\\a",
    0x08: "\\b",
    0x0C: "\\f",
    0x0A: "\\n",
    0x0D: "\\r",
    0x09: "\\t",
    0x0B: "\\v",
    0x1B: "\\E",
    0x27: "\\'",
    0x5C: "\\\\",
}


def _bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def shell_quote(value: str) -> str:
    """``value`` as bash 5 ``printf %q`` writes it under ``LC_ALL=C``: ``''`` for the empty string; ``$'...'`` with
    C escapes and 3-digit octal for a value with a byte outside printable ASCII; otherwise backslashes before the
    shell's special characters. (Reference: bash 5.2 lib/sh/shquote.c and strtrans.c; a test compares with bash.)"""
    data = _bytes(value)
    if not data:
        return "''"
    if any(b < 0x20 or b >= 0x7F for b in data):
        out = []
        for b in data:
            if b in _ANSIC:
                out.append(_ANSIC[b])
            elif 0x20 <= b < 0x7F:
                out.append(chr(b))
            else:
                out.append(f"\\{b:03o}")
        return "$'" + "".join(out) + "'"
    out = []
    for i, b in enumerate(data):
        if b in _BACKSLASHED or (b == 0x23 and i == 0) or (b == 0x7E and (i == 0 or data[i - 1] in b":=")):
            out.append("\\")
        out.append(chr(b))
    return "".join(out)


def show(value: str) -> str:
    """``value`` made safe to print in a message: shell-quoted (:func:`shell_quote`), the first 40 bytes and the
    length of a longer one."""
    data = _bytes(value)
    if len(data) > SHOW_MAX:
        head = data[:SHOW_MAX].decode("utf-8", "surrogateescape")
        return f"{shell_quote(head)}... ({len(data)} characters)"
    return shell_quote(value)


def owner_settings(owner: str) -> list[environment.Row]:
    """The setting rows entrypoint ``owner`` reads, in file order (--help's order): its own, and for the doctor also
    the patch switches (its patches check reports them)."""
    if owner not in OWNERS:
        raise ValueError(f"{owner!r} is not an entrypoint of the registry (one of {', '.join(OWNERS)})")
    out = [
        r
        for r in environment.rows()
        if r.kind == "setting" and (owner in r.owners or (owner == "doctor" and "patches" in r.owners))
    ]
    seen = set()
    for r in out:
        if r.name in seen:
            raise ValueError(f"{environment.PATH}: setting {r.name} is declared twice for {owner}")
        seen.add(r.name)
    return out


def allowed_text(row: environment.Row) -> str:
    """The allowed column in words, as --help and the messages give it."""
    t, a = row.type, row.allowed
    if t in ("int", "float"):
        return a.replace("|", " or ")
    words = {
        "bool": "true, false",
        "enum": ", ".join(a.split()),
        "list": "comma list of: " + ", ".join(a.split()),
        "name": "letters, digits, . _ - (not a number)",
        "addr": "HOST:PORT",
        "ids": "comma list of ids",
        "envnames": "comma list of variable names",
        "ipv4": "IPv4 address",
        "uri": "http(s) URL or file: path",
    }
    if t == "path":
        return {
            "file": "existing file",
            "dir": "existing directory",
            "dirw": "writable directory",
            "dirnew": "directory of yours (may be made)",
        }.get(a, "path")
    return words.get(t, "")


def hydra_value(row: environment.Row, raw: str, value: object) -> str:
    """The text a placeholder of ``row`` takes in the Hydra argv, for ``raw`` that :func:`environment.validate`
    turned into ``value``: the value as written for int and float, ``True``/``False``, ``[a,b]`` for a list, the
    absolute path for a path, else ``raw``."""
    if row.type == "bool":
        return "True" if value else "False"
    if row.type == "list":
        return f"[{raw}]"
    if row.type == "path":
        return str(value)
    return raw


def refusal(row: environment.Row, raw: str, exc: environment.Refused) -> tuple[str, str]:
    """``(fault, fix)`` of the refusal ``exc`` of value ``raw`` for setting ``row``, in the entrypoints' words."""
    t, a = row.type, row.allowed
    # a URL can carry a token (?token=, #secret, host:password): a refused one is never shown
    shown = "the URL (not shown: it may carry a token)" if t == "uri" else show(raw)
    alts = a.replace(" ", ", ").replace("|", " or ")
    if exc.reason == "plain":
        return (
            f"{'' if t == 'uri' else 'value '}{shown} contains spaces, control or non-ASCII characters, or is longer than "
            f"{environment.MAX_LEN}",
            f"use a plain value ({allowed_text(row)})",
        )
    if exc.reason == "path-chars":
        return (
            f"path {shown} has characters the launch cannot pass safely",
            "use a path of letters, digits, '/', '.', '_' and '-' only (no spaces, commas, '=', quotes, '~', '$')",
        )
    if exc.reason == "path-resolves":
        return (
            f"relative path {shown} resolves to {show(exc.path)}, which has characters Hydra cannot take",
            "give an absolute path of plain characters",
        )
    if exc.reason == "path-file":
        return f"{exc.path} is not a readable file", "point it at an existing file (mount it into the container)"
    if exc.reason == "path-dir":
        return (
            f"{exc.path} is not a readable directory",
            f"create it or mount it (e.g. docker -v HOST_DIR:{exc.path})",
        )
    if exc.reason == "path-trust":
        return (
            f"{exc}: another user could change what the launch reads or writes there (the one path rule: "
            "it and every folder above it owned by root or you, writable by no one else)",
            exc.fix,
        )
    mlflow_credentials = (
        "credentials go in MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN)"
    )
    if exc.reason == "ipv4-wildcard":
        return (
            f"{shown} binds every interface of this node (or none), so whoever reaches any of its addresses can "
            "submit a Ray job, which runs code (the job API has no authentication)",
            "keep 127.0.0.1 and submit on the head (docker compose exec, or ssh -L 8265:127.0.0.1:8265), or name "
            "the one address of a private network the submitters use",
        )
    if exc.reason == "uri-credentials":
        return (
            "holds credentials (user:password@ or a token; value not shown): a URL is printed in plans and logs",
            f"set the URL without them; {mlflow_credentials}",
        )
    first, _, rest = a.partition(" ")
    texts = {
        "int": (f"{shown} is not an integer in {alts}", f"set a decimal integer in {alts} (no sign, no leading zeros)"),
        "float": (f"{shown} is not a number in {alts}", f"set a decimal number such as 0.5 or 1e-6 in {alts}"),
        "bool": (f"{shown} is not a boolean", "set true or false"),
        "enum": (f"{shown} is not one of {alts}", f"set one of: {alts}"),
        "list": (
            f"{shown} is not a comma list of distinct values from: {', '.join(a.split(' '))}",
            f"set e.g. {first} or {first},{rest or first}; no brackets, quotes or spaces",
        ),
        "name": (
            f"{shown} is not a plain name",
            "use 1-128 letters, digits, '.', '_' or '-' (starting with a letter or digit, not a number, "
            "not true/false/null)",
        ),
        "addr": (
            f"{shown} is not HOST:PORT (HOST a dotted-quad IPv4 address without leading zeros or a hostname)",
            "set the Ray head's GCS address, e.g. 10.0.0.1:6379 or ray-head:6379 (the resolver reads 010.0.0.1 "
            "as 8.0.0.1, 10.1 as 10.0.0.1, 167772161 as 10.0.0.1)",
        ),
        "ids": (
            f"{shown} is not a comma list of ids",
            "use ids of lower-case letters, digits, '_', '.', '-' separated by commas",
        ),
        "envnames": (
            f"{shown} is not a comma list of distinct variable names",
            "list names such as NCCL_NET_PLUGIN,PYTHONPATH (letters, digits, '_'; at most 64)",
        ),
        "ipv4": (
            f"{shown} is not an IPv4 address",
            "set a dotted-quad address such as 10.0.0.2 (0-255, no leading zeros)",
        ),
        "uri": (
            f"{shown} is not an http(s)://HOST[:PORT][/PATH] URL without credentials, query or fragment, nor a "
            "file:///PATH",
            f"set e.g. http://mlflow:5000 or file:///checkpoints/mlruns; {mlflow_credentials}",
        ),
    }
    if t not in texts:
        raise ValueError(f"setting {row.name} has unknown type {t}")
    return texts[t]


def problem(var: str, fault: str, fix: str) -> str:
    """One problem line (the entrypoint prints ``PROG: error: `` before it)."""
    return f"{var}: {fault}; fix: {fix}"


class Settings:
    """The outcome of the settings step: ``values`` (short name -> Hydra text; a refused value has none, a
    derived or unset one ``""``), ``raw`` (short name -> the value read or the literal default), ``source``
    (short name -> env, default, derived or unset) and ``problems`` (lines, in the entrypoints' order). (A plain
    class: dataclasses costs 18 ms of imports at every launch.)"""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        self.raw: dict[str, str] = {}
        self.source: dict[str, str] = {}
        self.problems: list[str] = []


def check(row: environment.Row, raw: str, cwd: str) -> tuple[str | None, str | None]:
    """``(hydra text, None)`` for an accepted ``raw`` of ``row``, or ``(None, problem line)``; a refused list
    gives ``""`` as its text (the entrypoints left it empty)."""
    try:
        value = environment.validate(row, raw, cwd=cwd)
    except environment.Refused as exc:
        fault, fix = refusal(row, raw, exc)
        return ("" if row.type == "list" and exc.reason != "plain" else None), problem(row.name, fault, fix)
    return hydra_value(row, raw, value), None


def read_settings(owner: str, env: dict[str, str], cwd: str) -> Settings:
    """Every setting of ``owner`` from ``env`` (an empty value counts as unset), validated, literal defaults filled
    in; a derived default (``@fn:...``) is left to :func:`check_derived`. ``cwd`` makes relative paths absolute
    (bash's ``$PWD``: symlinks not resolved)."""
    out = Settings()
    for row in owner_settings(owner):
        short = row.name[len("VLGRPO_") :]
        raw = env.get(row.name, "")
        if raw:
            out.raw[short], out.source[short] = raw, "env"
        elif row.default.startswith("@"):
            out.source[short], out.values[short] = "derived", ""
            continue
        elif row.default:
            raw = out.raw[short] = row.default
            out.source[short] = "default"
        else:
            out.source[short], out.values[short] = "unset", ""
            continue
        text, line = check(row, raw, cwd)
        if text is not None:
            out.values[short] = text
        if line:
            out.problems.append(line)
    return out


def check_derived(owner: str, short: str, raw: str, inputs: str, cwd: str) -> tuple[str | None, str | None]:
    """A derived default of ``owner``'s setting ``short`` (computed by the recipe as ``raw`` from ``inputs``, the
    ``VLGRPO_X=value`` list the message names): ``(hydra text, None)``, or ``(None, problem line)`` naming the
    inputs instead of a variable the user never set."""
    row = next((r for r in owner_settings(owner) if r.name == "VLGRPO_" + short), None)
    if row is None or not row.default.startswith("@"):
        raise ValueError(f"{short} is not a derived setting of {owner}")
    text, line = check(row, raw, cwd)
    if line is None:
        return text, None
    how = row.default.partition(":")[2]
    allowed = allowed_text(row)
    return None, problem(
        row.name,
        f"not set, so derived as {how} = {show(raw)} from {inputs}, which is not in {allowed}",
        f"change those settings, or set {row.name} to a value in {allowed}",
    )


def _all_owners() -> dict[str, list[str]]:
    """Setting short name -> the owner lists of every row of that name, in file order."""
    out: dict[str, list[str]] = {}
    for r in environment.rows():
        if r.kind == "setting":
            out.setdefault(r.name[len("VLGRPO_") :], []).extend(r.owners)
    return out


def _owner_prog(owners: list[str]) -> str:
    progs: list[str] = []
    for o in owners:
        if o in ("fa", "vo", "node") and PROGS[o] not in progs:
            progs.append(PROGS[o])
    return " and ".join(progs)


def near_miss(shown: str, canon: str, how: str) -> str:
    """The problem of a name that differs from ``canon`` only ``how`` (by case, by a look-alike character)."""
    short = canon[len("VLGRPO_") :]
    if short and short in _all_owners():
        return problem(shown, f"differs from the setting {canon} {how}, so it would be ignored", f"rename it {canon}")
    return problem(
        shown,
        f"looks like a VLGRPO_ variable (it differs {how} from {canon}) but is no setting",
        "rename or unset it (--help lists the settings)",
    )


def _distance(a: str, b: str, limit: int) -> int:
    """Levenshtein distance of ``a`` and ``b``, or ``limit + 1`` as soon as it must exceed ``limit``."""
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j - 1] + (ca != cb), prev[j] + 1, cur[j - 1] + 1))
        if min(cur) > limit:
            return limit + 1
        prev = cur
    return prev[-1]


def nearest(word: str, candidates: list[str]) -> str:
    """The candidate closest to ``word`` by edit distance (the first in order on a tie) when at most about a third
    of ``word`` differs (distance * 3 <= length + 2), else ``""``; words longer than 64 characters get none."""
    if len(word) > 64:
        return ""
    limit, best = (len(word) + 2) // 3, ""
    for cand in candidates:
        if abs(len(cand) - len(word)) > limit:
            continue
        d = _distance(word, cand, limit)
        if d <= limit:
            best, limit = cand, d - 1
        if limit < 0:
            break
    return best


def unknown_vars(owner: str, names: list[str]) -> list[str]:
    """Problems of the exported ``VLGRPO_*`` ``names`` (in the order given) that are no setting of ``owner``: an
    empty name, a name that differs from a setting by case, a setting of another entrypoint (the recipes and
    ray-node.sh accept each other's, the doctor every setting), and unknown names (last, with a "did you
    mean")."""
    declared = [r.name[len("VLGRPO_") :] for r in owner_settings(owner)]
    mine, owners = set(declared), _all_owners()
    prog = PROGS[owner]
    out: list[str] = []
    unknown: list[str] = []
    for v in names:
        if not v.startswith("VLGRPO_"):
            continue
        short = v[len("VLGRPO_") :]
        if not short:
            out.append(
                problem(
                    "VLGRPO_",
                    "no setting name after VLGRPO_ (an env-file line with an empty name gives this)",
                    "remove the VLGRPO_= line, or complete the name (--help lists the settings)",
                )
            )
            continue
        if short in mine:
            continue
        upper = short.upper()
        if short != upper and upper in owners:
            out.append(near_miss(v, "VLGRPO_" + upper, "only by case"))
            continue
        if short in owners:
            own = owners[short]
            if (
                owner == "doctor"
                or (owner == "node" and ("fa" in own or "vo" in own))
                or (owner != "node" and "node" in own)
            ):
                continue
            out.append(
                problem(
                    v,
                    f"a setting of {_owner_prog(own)}, not of {prog}",
                    "unset it for this recipe (keep one env file per recipe)",
                )
            )
            continue
        unknown.append(short)
    for short in unknown:
        best = nearest(short, declared)
        hint = f", or did you mean VLGRPO_{best}?" if best else ""
        out.append(
            problem(
                "VLGRPO_" + short,
                f"not a setting of {prog} (unknown VLGRPO_ variable)",
                f"unset it{hint} (--help lists the settings)",
            )
        )
    return out


def interpreter_problems(lib: str, named: str) -> list[str]:
    """Problems of the code this launch runs in: the interpreter (``sys.executable``: the shim started it by the
    absolute path of ``VLGRPO_PYTHON``, else of ``lib/interpreter``), every existing entry of ``sys.path`` (the
    standard library, site-packages, an editable install's source folder) and the entrypoints' ``lib`` folder (the
    registry and recipe files), each by the one path rule (:func:`vlgrpo.pathrule.check_path`: root's or the
    launching user's, no group or other write bit, folders above too). Another user who can write any of them can
    change the code of every later launch. ``named``: the value of ``VLGRPO_PYTHON`` ("" when unset). Empty when
    all pass."""
    import sys

    from vlgrpo import pathrule

    var = "VLGRPO_PYTHON" if named else "the interpreter"
    fix = (
        "make it and the folders above writable only by root or you (chmod go-w), or install the vlgrpo package "
        "in a Python that is and name it by VLGRPO_PYTHON"
    )
    out: list[str] = []
    seen: set[str] = set()
    checks = [(sys.executable, "file", "the interpreter")]
    checks += [(p, "any", "the sys.path entry") for p in sys.path if p and os.path.exists(p)]
    if lib:
        checks.append((lib, "dir", "the entrypoints' lib folder"))
    for path, kind, what in checks:
        if path in seen:
            continue
        seen.add(path)
        found = pathrule.check_path(path, kind=kind)
        if found:
            out.append(problem(var, f"{what} {found.text()}", fix))
    return out
