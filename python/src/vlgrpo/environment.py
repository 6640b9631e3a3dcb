"""The launch environment registry: every environment variable a vlgrpo launch reads, sets or passes.

The registry is ``environment.tsv`` next to this module (one row per variable or ``*`` pattern; its header
describes the columns). It is the single source for the launcher (:mod:`vlgrpo.launch` validates settings and
builds each child's environment from it) and for the Python side: this module reads
the same rows, validates a value by its type (:func:`validate`, the one definition: the entrypoints' settings
step, :mod:`vlgrpo.launch`, calls it), and classifies a variable name by the registry's precedence (an exact row, else the matching
pattern with the most characters, ties broken by reverse byte order).

Standard library only, and nothing beyond ``os`` at import time: :func:`read_setting` runs at every interpreter
start (the patch switches, from :mod:`vlgrpo.patches`), so it scans the file for the rows it needs and caches
them; no validator imports ``re`` (its import costs more than a launch's whole settings step).

Command line (``python3 -m vlgrpo.environment``): ``check-ray-job-config [--owner=O] [--pass-env=A,B]
[--protect=DIR]...`` reads a Ray job config JSON (``RAY_JOB_CONFIG_JSON_ENV_VAR``) on stdin and prints one problem
per line (``NAME<TAB>why<TAB>fix``), exit 2 when there are any; ``classify NAME...`` prints ``NAME<TAB>kind<TAB>row`` for the recipes' view; ``trackers ...`` is
``python3 -m vlgrpo.trackers plan ...`` (:mod:`vlgrpo.trackers`).
"""

import os

TYPE_CHECKING = False  # typing's constant without importing typing (the module runs at every interpreter start)
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "environment.tsv")
COLUMNS = ("name", "owner", "kind", "type", "allowed", "default", "hydra", "meaning", "fix")
KINDS = ("setting", "set", "pass", "pass-on-request", "drop", "refused")
ENTRYPOINTS = {"fa": "fully-async-grpo.sh", "vo": "veomni-grpo.sh", "node": "ray-node.sh"}
MAX_LEN = 1024  # characters of a setting value at most

_ROWS: "list[Row]" = []
_SETTING_CACHE: "dict[tuple[str, str], Row | None]" = {}


class Row:
    """One registry row. Empty cells (``-`` in the file) are ``""``; ``owners`` is the owner column as a tuple."""

    __slots__ = COLUMNS + ("owners",)
    name: str
    owner: str
    kind: str
    type: str
    allowed: str
    default: str
    hydra: str
    meaning: str
    fix: str
    owners: "tuple[str, ...]"

    def __init__(self, cells: "list[str]") -> None:
        for col, cell in zip(COLUMNS, cells):
            setattr(self, col, "" if cell == "-" else cell)
        self.owners = tuple(self.owner.split(","))

    def __repr__(self) -> str:
        return f"Row({self.name!r}, {self.owner!r}, {self.kind!r})"


def _split(line: str) -> "list[str]":
    cells = line.rstrip("\n").split("\t")
    if len(cells) != len(COLUMNS):
        raise ValueError(f"{PATH}: row {cells[0]!r} has {len(cells)} cells, not {len(COLUMNS)}")
    return cells


def rows() -> "list[Row]":
    """Every row of the registry, in file order (read once). Raises OSError / ValueError for a broken file."""
    if not _ROWS:
        with open(PATH, encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("#") or line.startswith("name\t") or not line.strip():
                    continue
                _ROWS.append(Row(_split(line)))
    return _ROWS


def settings(owner: str) -> "list[Row]":
    """The ``VLGRPO_*`` setting rows of entrypoint or reader ``owner`` (``fa``, ``vo``, ``node``, ``patches``)."""
    return [r for r in rows() if r.kind == "setting" and owner in r.owners]


def setting_row(name: str, owner: str = "patches") -> "Row | None":
    """The setting row ``name`` (full variable name) owned by ``owner``, read without parsing the whole file (it
    runs at interpreter start). Returns None when there is none."""
    key = (name, owner)
    if key in _SETTING_CACHE:
        return _SETTING_CACHE[key]
    found = None
    prefix = name + "\t"
    with open(PATH, encoding="utf-8") as fh:
        for line in fh:
            if line.startswith(prefix):
                row = Row(_split(line))
                if row.kind == "setting" and owner in row.owners:
                    found = row
                    break
    _SETTING_CACHE[key] = found
    return found


def _fnmatch(name: str, pattern: str) -> bool:
    """Shell-glob match with ``*`` only (the registry's patterns), as bash ``[[ $n == $p ]]``."""
    parts = pattern.split("*")
    if len(parts) == 1:
        return name == pattern
    if not name.startswith(parts[0]) or len(name) < len(parts[0]) + len(parts[-1]):
        return False
    pos = len(parts[0])
    end = len(name) - len(parts[-1])
    if not name.endswith(parts[-1]):
        return False
    for mid in parts[1:-1]:
        i = name.find(mid, pos, end)
        if i < 0:
            return False
        pos = i + len(mid)
    return pos <= end


def env_row(name: str, owner: str = "fa") -> "Row | None":
    """The row whose rule applies to variable ``name`` for entrypoint ``owner``: an
    exact row (this entrypoint's own ``set`` row first), else the longest matching pattern. Setting rows are not
    considered (see :func:`settings`). Returns None when no row applies: the variable is then dropped unless
    ``VLGRPO_PASS_ENV`` names it."""
    exact = None
    patterns = []
    for r in rows():
        if r.kind == "setting":
            continue
        if r.kind == "set" and owner not in r.owners:
            continue
        if "*" in r.name:
            patterns.append(r)
        elif r.name == name:
            if r.kind == "set" or exact is None or exact.kind != "set":
                exact = r
    if exact is not None:
        return exact
    if name.lower().endswith("_proxy"):
        return OTHER_PROXY
    patterns.sort(key=lambda r: (len(r.name), r.name.encode()), reverse=True)
    for r in patterns:
        if _fnmatch(name, r.name):
            return r
    return None


# ---- values: the type rules of the registry (the one definition; vlgrpo.launch words the refusals) -------


class Refused(ValueError):
    """A value :func:`validate` refuses. ``reason`` says which rule it broke: ``"plain"`` (not printable ASCII
    without spaces, or too long), ``"type"`` (not a value of its type and allowed values), and for paths
    ``"path-chars"``, ``"path-resolves"`` (made absolute, it has characters Hydra cannot take), ``"path-file"``,
    ``"path-dir"`` or ``"path-trust"`` (it fails the one path rule; ``fix`` is the rule's), for URIs
    ``"uri-credentials"``; ``path`` is the absolute path of the path reasons. :mod:`vlgrpo.launch.settings` words the
    entrypoints' refusal from it."""

    def __init__(self, message: str, reason: str = "type", path: str = "", fix: str = "") -> None:
        super().__init__(message)
        self.reason = reason
        self.path = path
        self.fix = fix


_DIGITS = "0123456789"
_LOWER = "abcdefghijklmnopqrstuvwxyz"
_UPPER = _LOWER.upper()


def _plain(raw: str) -> bool:
    """Printable ASCII without spaces, at most MAX_LEN characters (no spaces, control or non-ASCII characters)."""
    return len(raw) <= MAX_LEN and all("!" <= c <= "~" for c in raw)


def _is_int(raw: str) -> bool:
    if raw in ("-1", "0"):
        return True
    return 1 <= len(raw) <= 9 and raw[0] in "123456789" and all(c in _DIGITS for c in raw)


def _int_in(spec: str, value: int) -> bool:
    for alt in spec.split("|"):
        if ".." in alt:
            lo, hi = alt.split("..", 1)
            if int(lo) <= value <= int(hi):
                return True
        elif alt and value == int(alt):
            return True
    return False


def _is_float(raw: str) -> bool:
    """``^(0|[1-9][0-9]{0,8})(\\.[0-9]{1,9})?([eE]-?[0-9]{1,2})?$`` without ``re``."""
    mant, exp = raw, None
    for e in "eE":
        if e in mant:
            mant, exp = mant.split(e, 1)
            break
    if exp is not None:
        digits = exp[1:] if exp.startswith("-") else exp
        if not 1 <= len(digits) <= 2 or not all(c in _DIGITS for c in digits):
            return False
    whole: str
    frac: "str | None"
    # the ignore: mypy types the padded list's items str | None; the first is the split's first part, a str
    whole, frac = (mant.split(".", 1) + [None])[:2] if "." in mant else (mant, None)  # type: ignore[assignment]
    if frac is not None and (not 1 <= len(frac) <= 9 or not all(c in _DIGITS for c in frac)):
        return False
    return whole == "0" or (1 <= len(whole) <= 9 and whole[0] in "123456789" and all(c in _DIGITS for c in whole))


def _words(raw: str, alphabet: str) -> bool:
    return bool(raw) and all(c in alphabet for c in raw)


def validate(row: Row, raw: str, cwd: "str | None" = None) -> object:
    """The value of ``raw`` for setting ``row`` under its registry type, or raise ValueError naming what is wrong.

    Returns (as the entrypoints pass it on): int -> int, float -> float, bool -> bool, enum/name/addr/ipv4 ->
    str, list/ids/envnames -> tuple of str, path -> absolute path str (made absolute against ``cwd``, default
    the working directory, without resolving symlinks; for file/dir/dirw an existing one that passes the one path
    rule, :func:`vlgrpo.pathrule.check_path`: no other user can change what it names). The one value rule
    of the registry: the entrypoints apply it through :mod:`vlgrpo.launch.settings`, the patch switches through
    :func:`read_setting`. A refused value raises :class:`Refused`; a type the registry does not know, a plain
    ValueError."""
    t, a = row.type, row.allowed
    if not _plain(raw):
        raise Refused(f"value contains spaces, control or non-ASCII characters, or is longer than {MAX_LEN}", "plain")
    if t == "int":
        if _is_int(raw) and _int_in(a, int(raw)):
            return int(raw)
        raise Refused(f"{raw!r} is not an integer in {a.replace('|', ' or ')}")
    if t == "float":
        lo, hi = a.split("..", 1)
        if _is_float(raw) and float(lo) <= float(raw) <= float(hi):
            return float(raw)
        raise Refused(f"{raw!r} is not a number in {a}")
    if t == "bool":
        if raw in ("true", "True", "1"):
            return True
        if raw in ("false", "False", "0"):
            return False
        raise Refused(f"{raw!r} is not a boolean (true or false)")
    if t == "enum":
        if _words(raw, _LOWER + _DIGITS + "_") and raw in a.split():
            return raw
        raise Refused(f"{raw!r} is not one of {', '.join(a.split())}")
    if t == "list":
        items = raw.split(",")
        if all(_words(i, _LOWER + _DIGITS + "_") and i in a.split() for i in items) and len(set(items)) == len(items):
            return tuple(items)
        raise Refused(f"{raw!r} is not a comma list of distinct values from: {', '.join(a.split())}")
    if t == "ids":
        items = raw.split(",")
        ok = len(items) <= 32 and all(
            1 <= len(i) <= 64 and i[0] in _LOWER + _DIGITS and all(c in _LOWER + _DIGITS + "_.-" for c in i)
            for i in items
        )
        if ok:
            return tuple(items)
        raise Refused(f"{raw!r} is not a comma list of ids (lower-case letters, digits, '_', '.', '-')")
    return _validate_re(t, a, raw, cwd)


_ALNUM = _LOWER + _UPPER + _DIGITS
_PATH_CHARS = frozenset(_ALNUM + "._/-")
_LABEL_CHARS = frozenset(_ALNUM + "-")
_URL_PATH_CHARS = frozenset(_ALNUM + "._~/-")
_NAME_CHARS = frozenset(_ALNUM + "._-")


def _octets(host: str) -> bool:
    """``host`` is a dotted quad of 0-255 without leading zeros (what ``inet_aton`` reads one way only)."""
    parts = host.split(".")
    return len(parts) == 4 and all(
        p == "0" or (1 <= len(p) <= 3 and p[0] in "123456789" and all(c in _DIGITS for c in p) and int(p) <= 255)
        for p in parts
    )


def _hostname(host: str) -> bool:
    """RFC 1123 labels (1-63 letters, digits, '-', no '-' at either end) whose last has a letter and is not a
    hexadecimal number (``0x1f`` is an address to ``inet_aton``)."""
    labels = host.split(".")
    if not all(1 <= len(x) <= 63 and x[0] != "-" and x[-1] != "-" and set(x) <= _LABEL_CHARS for x in labels):
        return False
    last = labels[-1]
    hexnum = (
        len(last) >= 2 and last[0] == "0" and last[1] in "xX" and all(c in _DIGITS + "abcdefABCDEF" for c in last[2:])
    )
    return any(c in _LOWER + _UPPER for c in last) and not hexnum


def _number_like(raw: str) -> bool:
    """``([0-9][0-9_]*(\\.[0-9_]*)?|\\.[0-9][0-9_]*)([eE]-?[0-9_]+)?``: what Hydra's grammar reads as a number."""
    mant, exp = raw, None
    for i, c in enumerate(raw):
        if c in "eE":
            mant, exp = raw[:i], raw[i + 1 :]
            break
    if exp is not None:
        digits = exp[1:] if exp.startswith("-") else exp
        if not digits or not all(c in _DIGITS + "_" for c in digits):
            return False
    if mant.startswith("."):
        return len(mant) >= 2 and mant[1] in _DIGITS and all(c in _DIGITS + "_" for c in mant[2:])
    whole, dot, frac = mant.partition(".")
    return bool(whole) and whole[0] in _DIGITS and all(c in _DIGITS + "_" for c in whole[1:] + frac)


def _identifier(name: str, limit: int) -> bool:
    return 1 <= len(name) <= limit and (name[0] in _LOWER + _UPPER + "_") and all(c in _ALNUM + "_" for c in name)


def _validate_re(t: str, a: str, raw: str, cwd: "str | None") -> object:
    """The types of the launch's own settings (names, addresses, paths), written without ``re``: its import costs
    more than the whole check at every launch."""
    if t == "name":
        if (
            1 <= len(raw) <= 128
            and raw[0] in _ALNUM
            and all(c in _ALNUM + "._-" for c in raw)
            and not _number_like(raw)
            and raw.lower() not in ("true", "false", "null", "nan", "inf")
        ):
            return raw
        raise Refused(f"{raw!r} is not a plain name")
    if t == "addr":
        # a dotted quad without leading zeros, or RFC 1123 labels whose last one has a letter
        # and is not a hex number (what inet_aton would read as an address: 010.0.0.1, 0x0a.0.0.1, 167772161, 10.1)
        host, sep, port = raw.partition(":")
        if (
            sep
            and 1 <= len(host) <= 253
            and ":" not in port
            and 1 <= len(port) <= 5
            and port[0] in "123456789"
            and all(c in _DIGITS for c in port)
            and int(port) <= 65535
            and (_octets(host) or _hostname(host))
        ):
            return raw
        raise Refused(f"{raw!r} is not HOST:PORT (HOST a dotted-quad IPv4 address or a hostname)")
    if t == "uri":
        path: "str | None"
        # http(s)://HOST[:PORT][/PATH] (HOST as for addr) without user:password@, query or fragment, or file:///PATH,
        # file:/PATH (the folder of a file: store is checked by vlgrpo.trackers)
        scheme, sep, rest = raw.partition("://")
        if sep and scheme in ("http", "https"):
            hostport, slash, path = rest.partition("/")
            host, colon, port = hostport.partition(":")
            if (
                1 <= len(host) <= 253
                and (_octets(host) or _hostname(host))
                and (
                    not colon
                    or (
                        1 <= len(port) <= 5
                        and port[0] in "123456789"
                        and all(c in _DIGITS for c in port)
                        and int(port) <= 65535
                    )
                )
                and set(path) <= _URL_PATH_CHARS
            ):
                return raw
        elif raw.startswith("file:"):
            path = raw[8:] if raw.startswith("file:///") else raw[6:] if raw.startswith("file:/") else None
            if path is not None and (not path or (path[0] in _ALNUM + "._-" and set(path) <= _PATH_CHARS)):
                return raw
        if "@" in raw:
            raise Refused("holds credentials (user:password@ or a token; value not shown)", "uri-credentials")
        raise Refused(
            f"{raw!r} is not an http(s)://HOST[:PORT][/PATH] URL without credentials, query or fragment, "
            "nor a file:///PATH"
        )
    if t == "ipv4":
        if _octets(raw) and a == "bind" and raw in ("0.0.0.0", "255.255.255.255"):
            raise Refused(f"{raw!r} is no one address", "ipv4-wildcard")
        if _octets(raw):
            return raw
        raise Refused(f"{raw!r} is not an IPv4 address")
    if t == "envnames":
        items = raw.split(",")
        if len(items) <= 64 and all(_identifier(i, 128) for i in items) and len(set(items)) == len(items):
            return tuple(items)
        raise Refused(f"{raw!r} is not a comma list of distinct variable names")
    if t == "path":
        if not raw or raw[0] == "-" or not set(raw) <= _PATH_CHARS:
            raise Refused(f"path {raw!r} has characters the launch cannot pass safely", "path-chars")
        path = os.path.normpath(raw if raw.startswith("/") else os.path.join(cwd or os.getcwd(), raw))
        if path.startswith("//"):
            path = "/" + path.lstrip("/")
        if not (path.startswith("/") and set(path) <= _PATH_CHARS):
            raise Refused(
                f"relative path {raw!r} resolves to {path!r}, which has characters Hydra cannot take",
                "path-resolves",
                path,
            )
        if a == "file" and not (os.path.isfile(path) and os.access(path, os.R_OK)):
            raise Refused(f"{path} is not a readable file", "path-file", path)
        if a in ("dir", "dirw") and not (os.path.isdir(path) and os.access(path, os.R_OK)):
            raise Refused(f"{path} is not a readable directory", "path-dir", path)
        if a in ("file", "dir", "dirw") or (a == "dirnew" and os.path.lexists(path)):
            from . import pathrule

            if a == "dirnew" and not os.path.isdir(path):
                raise Refused(f"{path} is not a directory", "path-dir", path)
            problem = pathrule.check_path(path, kind="file" if a == "file" else "dir")
            if problem is not None:
                raise Refused(problem.text(), "path-trust", path, problem.fix)
        elif a == "dirnew":
            # not there yet (the program makes it): the folder that will hold it must not let another user make it
            # first, or swap it (/tmp itself does)
            why = _owner_rule_problem(path)
            if why:
                raise Refused(
                    f"{path} {why}",
                    "path-trust",
                    path,
                    "name a folder of yours (or one to be made inside a folder only you and root can write)",
                )
        return path
    raise ValueError(f"setting {t!r} is not a type the registry knows")


def read_setting(
    name: str, environ: "Mapping[str, str] | None" = None, owner: str = "patches"
) -> "tuple[Any, str | None]":
    """``(value, problem)`` of setting ``name`` (e.g. ``VLGRPO_PATCHES``) from ``environ`` (default
    ``os.environ``) under its registry row: an empty or unset variable gives the row's default (``None`` when it
    has none); an invalid one gives the default and a one-line problem naming the variable, the accepted values
    and the fix. Raises KeyError when the registry has no such setting for ``owner``. Cheap: the row is cached
    after the first call (it runs at every interpreter start)."""
    row = setting_row(name, owner)
    if row is None:
        raise KeyError(f"{name} is not a setting of {owner} in {PATH}")
    env = os.environ if environ is None else environ
    raw = env.get(name, "")
    default = validate(row, row.default) if row.default and not row.default.startswith("@") else None
    if raw == "":
        return default, None
    try:
        return validate(row, raw), None
    except ValueError as exc:
        return default, f"{name}: {exc}; fix: {_hint(row)}"


def _hint(row: Row) -> str:
    t, a = row.type, row.allowed
    if t == "bool":
        return "set true or false (or 1/0)"
    if t == "enum":
        return "set one of: " + ", ".join(a.split())
    if t == "ids":
        return "set comma-separated ids such as a.b,c-d"
    if t in ("int", "float"):
        return f"set a number in {a.replace('|', ' or ')}"
    return "set a valid value (entrypoints/<recipe>.sh --help lists the settings)"


# ---- look-alike names --------------------------------------------------------------------------------------

#: Letters of other scripts that look like a Latin capital letter, by that letter: the Greek, Cyrillic and Cherokee
#: capitals Unicode's confusables.txt (UTS #39) lists as confusable with A-Z (small letters reach them through
#: str.upper(); fullwidth and mathematical letters, Roman numerals and the fullwidth low line through NFKC).
_LOOKALIKES = {
    "A": "ΑАᎪ",
    "B": "ΒВᏴ",
    "C": "ϹСᏟ",
    "D": "Ꭰ",
    "E": "ΕЕᎬ",
    "F": "Ϝ",
    "G": "ԌᏀ",
    "H": "ΗНҺᎻ",
    "I": "ΙІӀ",
    "J": "ЈͿᎫ",
    "K": "ΚКᏦ",
    "L": "Ꮮ",
    "M": "ΜМᎷ",
    "N": "Ν",
    "O": "ΟОՕ",
    "P": "ΡРᏢ",
    "Q": "Ԛ",
    "R": "ᎡᏒ",
    "S": "ЅᏚ",
    "T": "ΤТᎢ",
    "V": "ѴᏙ",
    "W": "ԜᎳ",
    "X": "ΧХ",
    "Y": "ΥУҮ",
    "Z": "ΖᏃ",
}
_SKELETON = {ord(c): latin for latin, chars in _LOOKALIKES.items() for c in chars}


def skeleton(name: str) -> str:
    """The ASCII upper-case form a reader would take ``name`` for: Unicode NFKC (fullwidth and mathematical letters
    become Latin), upper case, and the Greek/Cyrillic/Cherokee look-alikes of :data:`_LOOKALIKES` replaced by their
    Latin letter. A character with no such form stays as it is (so the result is not ASCII). ``VLGRΡO_LR`` (Greek
    Rho) and ``vlgrpo_mаx`` (Cyrillic a) give ``VLGRPO_LR`` and ``VLGRPO_MAX``."""
    import unicodedata

    return unicodedata.normalize("NFKC", name).upper().translate(_SKELETON).upper()


# ---- the Ray job config (RAY_JOB_CONFIG_JSON_ENV_VAR) ------------------------------------------------------

#: top-level keys of a Ray job config that pass (Ray 2.48.0 job_config.py JobConfig.from_json reads runtime_env,
#: metadata, jvm_options, code_search_path, ray_namespace, client_job, py_driver_sys_path; the last four load
#: code or put folders on the workers' sys.path, ray_namespace changes which actors verl finds).
JOB_CONFIG_KEYS = ("runtime_env", "metadata")
#: runtime_env keys that pass: env_vars (each name under the registry) and config (timeouts, eager install).
#: Every other key installs or loads code or rewrites the worker command (pip, conda, uv, py_modules,
#: working_dir, py_executable, worker_process_setup_hook, container, image_uri, java_jars, mpi, nsight, ...).
RUNTIME_ENV_KEYS = ("env_vars", "config")


def check_ray_job_config(
    text: str, owner: str = "fa", pass_env: "tuple[str, ...]" = (), protect: "tuple[str, ...]" = (), _depth: int = 0
) -> "list[tuple[str, str, str]]":
    """Problems of a Ray job config JSON (the value of ``RAY_JOB_CONFIG_JSON_ENV_VAR``) for entrypoint ``owner``:
    a list of ``(name, why, fix)``, empty when it passes. Parsed with :mod:`json` (so ``"p\\u0069p"`` is ``pip``);
    keys are refused unless allowlisted (:data:`JOB_CONFIG_KEYS`, :data:`RUNTIME_ENV_KEYS`); each ``env_vars``
    name must be one a launch passes (Ray sets them in every worker, past the entrypoint's environment) and its
    value must pass that row's type check (:func:`check_value`, the same rule the entrypoints apply to the
    inherited environment: a dotted ``PYTHONWARNINGS`` category or a ``BASH_ENV`` file is refused here too)."""
    import json

    var = "RAY_JOB_CONFIG_JSON_ENV_VAR"
    fix = "submit the Ray job with runtime_env env_vars only (the image holds the code)"
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        return [(var, f"is not JSON ({exc.msg} at character {exc.pos})", fix)]
    except ValueError as exc:  # not a syntax error: a number past int()'s 4,300-digit limit, ...
        return [(var, f"is JSON this check cannot read ({str(exc)[:120]})", fix)]
    except RecursionError:
        return [(var, "is JSON nested too deeply to check", fix)]
    if not isinstance(doc, dict):
        return [(var, f"is a JSON {type(doc).__name__}, not an object", fix)]
    out: "list[tuple[str, str, str]]" = []
    for key in sorted(set(doc) - set(JOB_CONFIG_KEYS)):
        out.append((var, f"has the job config key {key!r}, which loads code or changes what the workers see", fix))
    renv = doc.get("runtime_env")
    if renv is None:
        renv = {}
    if not isinstance(renv, dict):
        return out + [(var, "has a runtime_env that is not an object", fix)]
    for key in sorted(set(renv) - set(RUNTIME_ENV_KEYS)):
        out.append((var, f"has a runtime_env with {key!r}, which installs or loads code in every worker", fix))
    env_vars = renv.get("env_vars") or {}
    if not isinstance(env_vars, dict):
        return out + [(var, "has runtime_env env_vars that are not an object", fix)]
    out += [
        (var, why, 'give metadata as an object of strings, e.g. {"team": "rl"}')
        for why in _metadata_problems(doc.get("metadata"))
    ]
    if "config" in renv:
        out += [
            (
                var,
                why,
                "give runtime_env config as Ray types it: setup_timeout_seconds an integer, eager_install "
                "true/false, log_files a list of strings",
            )
            for why in _runtime_env_config_problems(renv["config"])
        ]
    for name in sorted(env_vars):
        value = env_vars[name]
        why = _job_env_var_problem(name, owner, pass_env, value)
        if not why and not isinstance(value, str):
            why = f"its value is a JSON {type(value).__name__}, not a string"
        if not why and "$" in value:
            # Ray 2.48.0 update_envs (ray/_private/utils.py) runs os.path.expandvars on each value, in key order,
            # after this check: PATH=/x/$LANG with LANG=../evil is judged as written and used as expanded
            why = (
                "its value has a '$': Ray expands $NAME in env_vars values when it starts each worker, so the value "
                "checked here is not the one the workers get"
            )
        if not why:
            row = env_row(name, owner)
            if row is not None and row.kind == "set" and (not row.default or value != row.default):
                why = (
                    f"the launch sets it itself ({row.meaning})"
                    if not row.default
                    else f"the launch sets it to {row.default!r} for every child ({row.meaning})"
                )
        if not why:
            row = _checked_row(name, owner, pass_env)
            if row is not None and row.type and row.kind in ("pass", "pass-on-request"):
                if row.type == "rayjob" and _depth >= 2:
                    why = "a Ray job config inside a Ray job config"
                else:
                    why = check_value(
                        row, value, owner=owner, pass_env=pass_env, protect=protect, _depth=_depth + 1, name=name
                    )
        if why:
            out.append(
                (var, f"runtime_env env_vars sets {ascii(name)[1:-1]}: {why}", "remove it from the job's env_vars")
            )
    return out


def _metadata_problems(meta: object) -> "list[str]":
    """Ray 2.48.0 ``JobConfig`` metadata is a mapping of strings to strings (``JobConfig.from_json`` calls
    ``metadata.items()``; the protobuf field is ``map<string, string>``)."""
    if meta is None:
        return []
    if not isinstance(meta, dict):
        return [f"has metadata that is a JSON {type(meta).__name__}, not an object of strings (Ray fails at ray.init)"]
    bad = [k for k, v in meta.items() if not isinstance(v, str)]
    if bad:
        return [f"has metadata {ascii(bad[0])} whose value is not a string (Ray fails at ray.init)"]
    return []


def _job_env_var_problem(name: str, owner: str, pass_env: "tuple[str, ...]", value: object = None) -> str:
    if not name.isidentifier() or not name.isascii():
        return "not a valid environment variable name"
    if name.startswith("VLGRPO_"):
        return _job_setting_problem(name, owner, value)
    row = env_row(name, owner)
    if row is None:
        return (
            "" if name in pass_env else "Ray would set it in every worker, and it is not a variable the launch passes"
        )
    if row.kind == "refused":
        return row.meaning
    if row.kind == "drop":
        return "never passed: " + row.meaning
    if row.kind == "pass-on-request" and name not in pass_env:
        return "passed only when named in VLGRPO_PASS_ENV: " + row.meaning
    return ""


def _job_setting_problem(name: str, owner: str, value: object) -> str:
    """A ``VLGRPO_*`` name in a job's env_vars: Ray sets it in the workers (and, for a submitted job, in the driver,
    where the entrypoint validates it as a setting). An unknown name or a refused row is refused. A setting the
    workers read themselves (the patch switches, owner ``patches``) must have a valid value equal to the one the
    launch runs with (this checker gets the launch's patch switches in its environment): workers with
    ``VLGRPO_PATCHES=off`` while the launch checked it on would run without the safety patches. Other settings are
    read by the entrypoint alone and pass."""
    import os

    row = env_row(name, owner)
    if row is not None and row.kind == "refused":
        return row.meaning
    setting = next((r for r in rows() if r.kind == "setting" and r.name == name), None)
    if setting is None:
        return "not a setting (unknown VLGRPO_ variable)"
    if "patches" not in setting.owners:
        return ""  # read by the entrypoint alone (a submitted job's driver gets the same env_vars and checks them)
    if not isinstance(value, str):
        return ""  # reported as a non-string value by the caller
    if value:
        try:
            validate(setting, value)
        except ValueError as exc:
            return f"not a valid value: {exc}"
    launch = os.environ.get(name, "")
    if value != launch:
        now = repr(launch) if launch else "it unset"
        return (
            f"the workers would run with {name}={value!r} while the launch runs with {now}: the patch switches "
            "must be the same for both"
        )
    return ""


#: Ray 2.48.0 ``RuntimeEnvConfig`` (``ray/runtime_env/runtime_env.py``): the keys of runtime_env.config and the
#: types it accepts (``setup_timeout_seconds`` an int, > 0 or -1; ``eager_install`` a bool; ``log_files`` a list of
#: strings)
RUNTIME_ENV_CONFIG = {"setup_timeout_seconds": "int", "eager_install": "bool", "log_files": "strings"}


def _runtime_env_config_problems(cfg: object) -> "list[str]":
    if not isinstance(cfg, dict):
        return [f"runtime_env config is a JSON {type(cfg).__name__}, not an object"]
    out: "list[str]" = []
    for key in sorted(cfg, key=str):
        value = cfg[key]
        kind = RUNTIME_ENV_CONFIG.get(key)
        if kind is None:
            out.append(f"runtime_env config has the key {key!r}, which Ray does not know")
        elif kind == "int" and (isinstance(value, bool) or not isinstance(value, int) or (value <= 0 and value != -1)):
            out.append(f"runtime_env config {key} is {value!r}: Ray takes a whole number of seconds > 0, or -1")
        elif kind == "bool" and not isinstance(value, bool):
            out.append(f"runtime_env config {key} is {value!r}: Ray takes true or false")
        elif kind == "strings" and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            out.append(f"runtime_env config {key} is {value!r}: Ray takes a list of strings")
        elif kind == "strings" and any("/" in v or "\\" in v or v in ("", ".", "..") for v in value):
            # Ray's agent opens os.path.join(log_dir, name) for each: a path creates a file anywhere it may write
            out.append(
                f"runtime_env config {key} names a path, not a file name of Ray's log folder: "
                + ", ".join(repr(v) for v in value if "/" in v or "\\" in v or v in ("", ".", ".."))[:200]
            )
    return out


# ---- the checks of passed variables (the registry's `pass` types): one rule for bash and Python -------------

#: pass-row types (the registry's type column of kinds pass / pass-on-request); see :func:`check_value`
PASS_TYPES = (
    "warnings",
    "bashenv",
    "rayjob",
    "tmpdir",
    "dir",
    "dirs",
    "shaped",
    "httpurl",
    "plainname",
    "pyinit",
    "compiler",
    "torchlogs",
    "paths",
    "plugin",
    "username",
    "proxyurl",
    "rayconfig",
    "tz",
    "loglevel",
    "outfile",
)

#: ``shaped`` (the pattern rows NCCL_*, HCCL_*, ASCEND_*, ...): what a name under the pattern does, read from its
#: '_'-separated words, since the libraries add names every release (NCCL 2.27: NCCL_ENV_PLUGIN, NCCL_GIN_PLUGIN,
#: NCCL_RMA_PLUGIN; NCCL_IBVERBS_LIB; CANN: ASCEND_OPP_PATH, ASCEND_CUSTOM_OPP_PATH). A library or plugin the
#: process loads, or a peer it connects to, passes only when named in VLGRPO_PASS_ENV; a path is checked as
#: ``dirs`` entries are.
#: Words chosen against the settings the libraries name in words like these that are not files or peers
#: (NCCL_PROXY_*, NCCL_GRAPH_MIXING_SUPPORT, HCCL_HOST_SOCKET_PORT_RANGE, ASCEND_MODULE_LOG_LEVEL pass).
SHAPE_LOADS = frozenset(("PLUGIN", "PLUGINS", "LIB", "LIBS", "LIBRARY", "SO", "DLL", "PRELOAD"))
SHAPE_PEER = frozenset(("ADDR", "ADDRESS", "URL", "URI", "ENDPOINT"))
SHAPE_PATH = frozenset(
    ("PATH", "PATHS", "HOME", "DIR", "DIRS", "ROOT", "FILE", "FILES", "CONF", "CONFIG", "CACHE", "PREFIX")
)


def _control(value: str) -> bool:
    return any(ord(c) < 32 or ord(c) == 127 for c in value)


def _under(path: str, roots: "tuple[str, ...]") -> str:
    """The root of ``roots`` (real paths) that ``path`` lies in or equals, after resolving symlinks, else ''."""
    real = os.path.realpath(path)
    for root in roots:
        if root and (real == root or real.startswith(root.rstrip("/") + "/")):
            return root
    return ""


def _owner_rule_problem(path: str) -> str:
    """Why another user controls what folder or file ``path`` names, by the one path rule (:mod:`vlgrpo.pathrule`,
    OpenSSH StrictModes: it and every folder above it owned by root or the launching user, no group or other write
    bit, a sticky folder accepted only above it); a path that does not exist is judged by its nearest existing
    folder, which must not let others create it (``/tmp`` itself does). ``""`` when it passes. The component that
    fails is named (not the whole value)."""
    from . import pathrule

    probe = os.path.abspath(path)
    missing = False
    while not os.path.lexists(probe) and probe != "/":
        probe, missing = os.path.dirname(probe), True
    problem = pathrule.check_path(probe)
    if problem is None:
        return ""
    if missing:
        return f"does not exist, and {problem.component} {problem.why}: another user could create it"
    return f"is not safe from other users: {problem.component} {problem.why}"


def _dir_problem(path: str, protect: "tuple[str, ...]", must_exist: bool, owned: bool = True) -> str:
    """Why folder ``path`` is not one the launch may hand a reader that loads or runs what it finds there
    (caches, a home, a path of programs or libraries): inside a protected root (the checkpoint folder or its volume,
    which others may write, symlinks resolved), writable by every user without the sticky bit, or, with ``owned``,
    failing the one path rule (:func:`_owner_rule_problem`: another user owns it or a folder above it, or can write
    it). ``owned=False`` for TMPDIR, whose rule (:func:`_tmpdir_owner_problem`) accepts ``/tmp`` itself."""
    import stat

    if not path.startswith("/"):
        return "is not an absolute path"
    root = _under(path, protect)
    if root:
        return f"lies in {root} (the checkpoint folder or its volume), which whoever can write checkpoints can fill"
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if must_exist:
            return "is not an existing folder"
        return _owner_rule_problem(path) if owned else ""
    except OSError as exc:
        return f"cannot be looked at by this user ({exc.strerror})" if must_exist else ""
    if not stat.S_ISDIR(st.st_mode):
        return "is not a folder"
    if st.st_mode & stat.S_IWOTH and not st.st_mode & stat.S_ISVTX:
        return "is a folder every user can write (and not sticky)"
    if must_exist and not os.access(path, os.W_OK | os.X_OK):
        return "is a folder this user cannot write"
    return _owner_rule_problem(path) if owned else ""


def _tmpdir_owner_problem(path: str) -> str:
    """Why the temporary folder ``path`` (it passed :func:`_dir_problem`) lets another user replace what the launch
    writes there (its working folder, the overrides it checked, the preflight's argv), by the one path rule
    (:func:`vlgrpo.pathrule.check_path` with ``sticky_root``: a folder of root or the launching user that no one else
    can write, or a root-owned sticky folder such as ``/tmp``; the folders above it as for every path). A folder of
    another user is refused whatever its mode: its owner may rename or delete every entry, sticky bit or not.
    ``""`` when it passes."""
    from . import pathrule

    problem = pathrule.check_path(path, kind="dir", sticky_root=True)
    if problem is None:
        return ""
    if problem.component != os.path.realpath(path):
        return f"lies below {problem.text()}"
    return f"{problem.why}: its owner, or whoever else can write it, can replace the files the launch writes there"


#: a proxy variable without an exact row (``Https_Proxy``, ``grpc_proxy``, ``FTP_PROXY``): Python's urllib, requests
#: and httpx read every ``*_proxy`` name in any case (urllib.request.getproxies_environment), gRPC reads
#: ``grpc_proxy``; only the typed upper- and lower-case rows pass, shown in the plan
OTHER_PROXY = Row(
    [
        "*_proxy (any other case or scheme)",
        "urllib",
        "drop",
        "-",
        "-",
        "-",
        "-",
        "a proxy in another case or for another scheme: Python's HTTP clients read *_proxy names in any case, so the "
        "key and the run would go past the plan's proxy line; HTTPS_PROXY, https_proxy, HTTP_PROXY, http_proxy, "
        "ALL_PROXY, all_proxy, NO_PROXY and no_proxy are the typed doors",
        "-",
    ]
)

#: the check of a variable without a registry row that VLGRPO_PASS_ENV names: ``shaped`` (its loads and peer
#: shapes pass, being requested; a path-shaped name gets the ``dirs`` rule)
UNLISTED = Row(["(no row)", "-", "pass-on-request", "shaped"] + ["-"] * (len(COLUMNS) - 4))


def shape(name: str) -> str:
    """What variable ``name`` does by its words (see :data:`SHAPE_LOADS`): ``"loads"``, ``"peer"``, ``"path"`` or
    ``""``. ``NCCL_COMM_ID`` (the bootstrap root's ``host:port``) is a peer."""
    words = set(name.upper().split("_"))
    if words & SHAPE_LOADS:
        return "loads"
    if words & SHAPE_PEER or name.upper().endswith("_COMM_ID"):
        return "peer"
    if words & SHAPE_PATH:
        return "path"
    return ""


def _path_entry_problem(entry: str, protect: "tuple[str, ...]") -> str:
    """``dirs``' rule for one entry of a path variable, which may name a file: the file (when it exists) and its
    folder are checked."""
    if os.path.isdir(entry) or not os.path.exists(entry):
        return _dir_problem(entry, protect, must_exist=False)
    import stat

    why = _dir_problem(os.path.dirname(entry) or "/", protect, must_exist=False)
    if why:
        return (
            f"is a file in a folder {why[len('is a folder ') :]}"
            if why.startswith("is a folder ")
            else (f"is a file in a folder that {why}")
        )
    st = os.stat(entry)
    if st.st_mode & stat.S_IWOTH:
        return "is a file every user can write"
    return _owner_rule_problem(entry)


def _plain_name(value: str, first: str = "", more: str = "") -> bool:
    """``value`` is 1-128 letters, digits, ``_ . -`` (and the characters of ``more``), the first a letter or digit
    (or one of ``first``): the plain-name rule of ``plainname``, ``plugin`` and ``username``."""
    return 0 < len(value) <= 128 and value[0] in _ALNUM + first and set(value) <= (_NAME_CHARS | frozenset(more))


PROXY_SCHEMES = ("http", "https", "socks5", "socks5h")


def proxy_parts(url: str) -> "tuple[str, str, bool] | None":
    """``(scheme, host[:port], has_credentials)`` of a proxy URL as Python's urllib and requests read
    ``HTTPS_PROXY`` and the like (``SCHEME://[USER[:PASSWORD]@]HOST[:PORT][/]``: scheme one of
    :data:`PROXY_SCHEMES`, HOST a host name or dotted-quad address, PORT 1-65535), or ``None`` when ``url`` is not
    one (a path, query or fragment, another scheme, an empty host). The credentials are never returned."""
    scheme, sep, rest = url.partition("://")
    if not sep:  # requests reads HOST:PORT as http://HOST:PORT (utils.prepend_scheme_if_needed)
        scheme, rest = "http", url
    if scheme.lower() not in PROXY_SCHEMES:
        return None
    if rest.endswith("/"):
        rest = rest[:-1]
    if any(c in rest for c in "/?#") or _control(rest) or " " in rest:
        return None
    creds, at, hostport = rest.rpartition("@")
    host, colon, port = hostport.partition(":")
    if colon and not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535 and port[0] != "0"):
        return None
    if not (_octets(host) or _hostname(host)):
        return None
    return scheme.lower(), hostport, bool(at)


def _paths_problem(value: str, protect: "tuple[str, ...]") -> str:
    """``paths``: a ':' list (one path for most rows) of absolute paths, each a file or a folder that another user
    cannot change (:func:`_path_entry_problem`: the one path rule on it when it exists, else on the folder that
    would hold it) and that lies off the checkpoint folder and its volume. For the variables that name a library
    a program loads (``HCCL_SO_PATH``, ``VLLM_NCCL_SO_PATH``), a file it reads (``SSL_CERT_FILE``,
    ``NCCL_TOPO_FILE``, ``NETRC``) or writes (``NCCL_DEBUG_FILE``)."""
    for entry in value.split(":"):
        if entry and not entry.startswith("/"):
            what = "is not" if ":" not in value else "has an entry that is not"
            return f"{what} an absolute path (a relative one is read from each child's working folder)"
    if ":" not in value:
        return _path_entry_problem(value, protect)
    return _path_list_problem(value, _path_entry_problem, protect, "has an empty entry")


def _path_list_problem(
    value: str, entry_problem: "Callable[[str, tuple[str, ...]], str]", protect: "tuple[str, ...]", empty: str
) -> str:
    """The first problem of a ':' list of paths: ``empty`` for an empty entry, else ``entry_problem(entry,
    protect)`` of the first entry that has one, or ''."""
    for entry in value.split(":"):
        if not entry:
            return empty
        why = entry_problem(entry, protect)
        if why:
            return f"has an entry that {why}"
    return ""


def _torch_logs_problem(value: str, known: list[str]) -> str:
    """Why ``TORCH_LOGS`` ``value`` may not pass, or ''. Mirrors torch's ``_parse_log_settings``
    (torch/_logging/_internal.py, torch 2.8-2.13): ``help`` / ``+help`` raise ValueError at every ``import torch``,
    and a name that is neither a registered log nor an artifact is looked up as a module (``importlib.util.find_spec``,
    which imports the parents of a dotted name, then its submodules are listed and enabled): so each comma-separated
    element must be ``[+-]NAME`` with NAME one of ``known`` (the names torch registers); spaces are dropped first,
    as torch drops them."""
    if not value:
        return ""
    for item in value.replace(" ", "").split(","):
        name = item[1:] if item[:1] in ("+", "-") else item
        if name not in known:
            if "." in name:
                why = "a dotted name, which torch imports as a module in every process"
            elif name in ("help", "+help"):
                why = "help, which makes every import of torch raise"
            else:
                why = "a name torch does not register, which it would look up as a module to import"
            return f"has {why} (only the log and artifact names torch registers pass, each optionally + or -)"
    return ""


def _pyinit_problem(name: str, value: str) -> str:
    """Why CPython 3.11 would stop at start (``Fatal Python error``, exit 1, before any of our code) on ``value`` of
    ``name``, or ''. Mirrors CPython 3.11 ``Python/initconfig.c`` (``config_init_hash_seed``: ``random`` or an
    integer 0..4294967295; ``config_init_utf8_mode``: ``0`` or ``1``) and ``Python/pylifecycle.c``
    ``init_sys_streams`` (``PYTHONIOENCODING``: ``ENCODING[:ERRORS]``, each part empty or known to :mod:`codecs`);
    stricter where CPython is lax (no sign or spaces in the seed)."""
    import codecs

    if not value:
        return ""
    if name == "PYTHONHASHSEED":
        if value == "random" or (value.isascii() and value.isdigit() and int(value) <= 4294967295):
            return ""
        return "is not random or an integer 0..4294967295: every Python process would stop at start"
    if name == "PYTHONUTF8":
        return "" if value in ("0", "1") else "is not 0 or 1: every Python process would stop at start"
    if name == "PYTHONIOENCODING":
        enc, _, errors = value.partition(":")
        try:
            if enc:
                codecs.lookup(enc)
            if errors:
                codecs.lookup_error(errors)
        except LookupError:
            return "names an encoding or error handler Python does not know: every Python process would stop at start"
        return ""
    raise ValueError(f"{name}: no pyinit rule")


def _warnings_problem(value: str) -> str:
    """Why the ``PYTHONWARNINGS`` filters ``value`` may not reach every interpreter of the launch, or ''. Each
    ','-separated filter is read as CPython 3.11 ``Lib/warnings.py`` ``_setoption`` reads it (split on ':', every
    field stripped): a dotted category makes ``_getcategory`` import the module before the dot (code chosen by
    the environment runs at start); an action that ``_getaction`` reads as ``error`` (``error`` or any prefix of
    it: ``e``, ``err``, ...) makes a warning an exception, so a harmless warning of any library stops that
    process; a filter written as a ``-W`` option (``-Werror``: the action ``-Werror``, which ``_getaction`` does
    not know) is dropped by CPython with a message in every process. Stricter than CPython, which drops a filter
    with an unknown category with a message."""
    for f in value.split(","):
        parts = [p.strip() for p in f.split(":")]
        if len(parts) > 2 and "." in parts[2]:
            return "has a dotted warning category, which makes every Python process import that module"
        if parts[0] and "error".startswith(parts[0]):
            return (
                "has a filter with the action error, which turns a warning into an exception: a harmless warning "
                "of any library would stop that Python process"
            )
        if parts[0].startswith("-W"):
            return (
                "has a filter written as a -W command-line option, which CPython does not read here: every Python "
                "process would print 'Invalid -W option ignored' and run without it"
            )
    return ""


#: what ``compiler`` values may name: a C or C++ compiler driver, by the end of its file name once a version
#: suffix (``-12``, ``-18.1``) is taken off: gcc, x86_64-linux-gnu-g++-12, clang++-18, cc, icpx, nvc++
COMPILER_NAMES = ("cc", "c++", "gcc", "g++", "clang", "clang++", "icx", "icpx", "nvc", "nvc++")
_PROGRAM_CHARS = frozenset(_LOWER + _UPPER + _DIGITS + "._+-/")


def _compiler_problem(value: str, protect: "tuple[str, ...]") -> str:
    """Why ``value`` of a compiler variable (``CC``, ``CXX``, ``NVCC_CCBIN``) may not reach the builds that run it,
    or ''. torch writes ``CXX`` into ``build.ninja`` (run through ``/bin/sh``) and passes ``CC`` to nvcc's
    ``-ccbin``; Triton runs ``CC`` for its launcher (``subprocess``): so the value is one word of letters, digits
    and ``. _ + - /`` (no space, quote or shell character; not an option), its file name names a compiler
    (:data:`COMPILER_NAMES`: ``sh``, ``python3`` or ``env`` are refused), and a path is absolute, an executable
    regular file off the protected roots (the checkpoint folder and its volume), that passes the one path rule
    (:mod:`vlgrpo.pathrule`: root's or the launching user's, no group or other write, folders above too). A bare
    name is looked up on the PATH the children get, whose entries pass the same rule (the ``PATH`` row)."""
    import stat

    from . import pathrule

    if not value:
        return ""
    if value[0] == "-" or not set(value) <= _PROGRAM_CHARS:
        return (
            "is not one compiler name or absolute path (it has a space, quote or shell character, or starts with "
            "'-'; torch's builds run it through a shell)"
        )
    base = value.rsplit("/", 1)[-1]
    cut = len(base)
    while cut > 0 and base[cut - 1] in _DIGITS + ".":
        cut -= 1
    stem = base[: cut - 1] if 0 < cut < len(base) and base[cut - 1] == "-" else base
    if not stem.endswith(COMPILER_NAMES):
        return "does not name a C or C++ compiler (gcc, g++, cc, c++, clang, clang++, icx, icpx, nvc, nvc++)"
    if "/" not in value:
        return ""
    if not value.startswith("/"):
        return "is a relative path, which each build reads from its own working directory"
    root = _under(value, protect)
    if root:
        return f"lies in {root} (the checkpoint folder or its volume), which whoever can write checkpoints can fill"
    try:
        st = os.stat(value)
    except OSError:
        return "is not an existing file"
    if not stat.S_ISREG(st.st_mode) or not os.access(value, os.X_OK):
        return "is not an executable file"
    problem = pathrule.check_path(value, kind="file")
    if problem is not None:
        return f"is not safe from other users: {problem.component} {problem.why}"
    return ""


def check_value(
    row: Row,
    value: str,
    owner: str = "fa",
    pass_env: "tuple[str, ...]" = (),
    protect: "tuple[str, ...]" = (),
    _depth: int = 0,
    name: str = "",
) -> str:
    """Why ``value`` of the passed variable of registry row ``row`` may not reach the launch's children, or ''.

    The one implementation of the registry's pass types, used by the entrypoints for the inherited environment
    (:mod:`vlgrpo.launch.childenv`, the launch's environment step) and by :func:`check_ray_job_config` for a job's ``env_vars``:
    every typed value: no control characters (a line break or CR is read one way by bash and another by Python);
    ``warnings`` (``PYTHONWARNINGS``): see :func:`_warnings_problem`; ``compiler`` (``CC``, ``CXX``,
    ``NVCC_CCBIN``): see :func:`_compiler_problem`;
    ``bashenv``: empty or the row's allowed file; ``rayjob``: :func:`check_ray_job_config`; ``tmpdir``: an
    existing folder this user can write, see :func:`_dir_problem`; ``dir``: the same when it exists; ``dirs``: a
    ':' list of ``dir`` (an empty entry is the working directory); ``shaped``: by the words of ``name``
    (:func:`shape`), a library or a peer only when ``pass_env`` names it, a path as ``dirs`` entries are (a file
    entry: the file and its folder); ``httpurl`` (``WANDB_BASE_URL``): the ``uri`` setting type's http(s) form,
    ``http(s)://HOST[:PORT][/PATH]`` without credentials, query or fragment; ``plainname`` (``WANDB_ENTITY``): 1-128
    letters, digits, ``_ . -``, the first a letter or digit; ``rayconfig`` (``RAY_*`` on request): a core setting of
    Ray 2.48.0 (``RAY_<lower-case name>``, src/ray/common/ray_config_def.h) whose value is a number, ``true`` or
    ``false``. ``protect`` are real paths (the checkpoint folder and
    its volume's mount point). The reasons never quote the value (the entrypoints add "value not shown")."""
    t = row.type
    if not t or (not value and t in ("tmpdir", "dir", "dirs", "paths", "plugin", "username")):
        return ""
    if _control(value):
        return (
            "has a control character (a line break, carriage return, tab, ...), which bash and Python split differently"
        )
    if t == "warnings":
        return _warnings_problem(value)
    if t == "pyinit":
        return _pyinit_problem(row.name, value)
    if t == "torchlogs":
        return _torch_logs_problem(value, row.allowed.split())
    if t == "bashenv":
        if value and value != row.allowed:
            return f"names a file every bash of the launch would run first; only the image's own {row.allowed} passes"
        return ""
    if t == "rayjob":
        probs = check_ray_job_config(value, owner, pass_env, protect, _depth)
        return "; ".join(p[1] for p in probs)
    if t in ("tmpdir", "dir"):
        if t == "dir" and not value:
            return ""
        return _dir_problem(value, protect, must_exist=(t == "tmpdir"), owned=(t != "tmpdir")) or (
            _tmpdir_owner_problem(value) if t == "tmpdir" else ""
        )
    if t == "shaped":
        # nothing says what the reader of an unlisted name or of a name under a pattern row does with its value:
        # no URL, no spaces or shell syntax (NCCL_IB_HCA='x;$(cmd)' lands in NCCL's debug log verbatim)
        why = _plain_value_problem(value)
        if why:
            return why
        kind = shape(name)
        # a path by its name, or for a name without a row also by its value, whatever the name says
        # (OMP_TOOL_LIBRARIES=/x/tool.so: no LIB word in it)
        if kind == "path" or (row is UNLISTED and "/" in value):
            return _path_list_problem(
                value, _path_entry_problem, protect, "has an empty entry, which is read as the working directory"
            )
        if kind in ("loads", "peer") and name not in pass_env:
            what = (
                "a library or plugin every child would load"
                if kind == "loads"
                else "a peer address every child would connect to or serve on"
            )
            return (
                f"names {what} (read from its name under the {row.name} row); it passes only when "
                "VLGRPO_PASS_ENV names it"
            )
        return ""
    if t == "httpurl":
        if not value:
            return ""
        if not value.startswith(("http://", "https://")):
            return "is not an http:// or https:// URL"
        try:
            _validate_re("uri", "", value, None)
        except Refused as exc:
            if exc.reason == "uri-credentials":
                return "holds credentials (user:password@ or a token); a server URL carries none"
            return "is not an http(s)://HOST[:PORT][/PATH] URL without credentials, query or fragment"
        return ""
    if t == "compiler":
        return _compiler_problem(value, protect)
    if t == "paths":
        return _paths_problem(value, protect)
    if t == "plugin":
        if "/" in value:
            return _paths_problem(value, protect)
        if _plain_name(value):
            return ""
        return (
            "is neither a plugin name (letters, digits, '_', '.', '-', the first a letter or digit: the library "
            "is then found on the library path) nor an absolute path"
        )
    if t == "proxyurl":
        if not value or proxy_parts(value) is not None:
            return ""
        return (
            "is not a proxy URL: [SCHEME://][USER[:PASSWORD]@]HOST[:PORT][/] with SCHEME http, https, socks5 or "
            "socks5h, HOST a host name or dotted-quad address, no path, query or fragment"
        )
    if t == "username":
        name = value[:-1] if value.endswith("$") else value
        if _plain_name(name, first="_", more="@"):
            return ""
        return (
            "is not a user name (1-128 letters, digits, '_', '.', '-', '@', the first a letter, digit or '_'; no "
            "'/'): programs put it into paths (torch's /tmp/torchinductor_<user>, caches)"
        )
    if t == "rayconfig":
        key = name[len("RAY_") :] if name.startswith("RAY_") else ""
        if not (0 < len(key) <= 128 and "a" <= key[0] <= "z" and all(c in _RAY_KEY for c in key)):
            return (
                "is not one of Ray's core settings by its form (RAY_<setting> with the lower-case name of "
                "ray_config_def.h); Ray reads its other RAY_ names as folders, hosts or debugger switches"
            )
        whole, _, frac = value.removeprefix("-").partition(".")
        number = 0 < len(whole) <= 20 and whole.isdigit() and whole.isascii() and (not frac or frac.isdigit())
        if not (number and frac.isascii() and len(frac) <= 20) and value not in ("true", "false"):
            return (
                "is not a number, true or false; a core setting that takes a list or a text (modules Ray imports in "
                "every worker, spilling targets) would reach code or storage"
            )
        return ""
    if t == "tz":
        return _tz_problem(value)
    if t == "loglevel":  # set but empty is no level either: verl's setLevel('') raises
        names = ("CRITICAL", "FATAL", "ERROR", "WARN", "WARNING", "INFO", "DEBUG", "NOTSET")
        if (value.upper() if row.allowed == "any-case" else value) in names:
            return ""
        return "is not a log level name" + (" (any case)" if row.allowed == "any-case" else " (upper-case)")
    if t == "outfile":
        return _outfile_problem(value, protect) if value else ""
    if t == "plainname":
        if not value or _plain_name(value):
            return ""
        return "is not a plain name (1-128 letters, digits, '_', '.', '-', the first a letter or digit)"
    if t == "dirs":
        return _path_list_problem(
            value,
            lambda e, p: _dir_problem(e, p, must_exist=False),
            protect,
            "has an empty entry, which is read as the working directory (Python's import "
            "path, the dynamic loader's and the shell's search paths)",
        )
    raise ValueError(f"{row.name}: pass type {t!r} is not one the registry knows")


#: the characters of a Ray core setting's name (ray_config_def.h: lower-case words joined by '_')
_RAY_KEY = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")


def _checked_row(name: str, owner: str, pass_env: "tuple[str, ...]") -> "Row | None":
    """The row whose pass check applies to ``name``: its registry row, or for a name without one that
    ``VLGRPO_PASS_ENV`` names, :data:`UNLISTED` (its path-shaped names get the ``dirs`` rule)."""
    row = env_row(name, owner)
    if row is None and name in pass_env:
        return UNLISTED
    return row


def _tz_problem(value: str) -> str:
    """``TZ``: a zone name (``Europe/Berlin``, read below the system's zoneinfo folder) or a POSIX TZ string
    (``CST-8``, ``EST5EDT,M3.2.0,M11.1.0``), never a file: glibc (time/tzfile.c) opens ``TZ=/path`` and
    ``TZ=:/path`` as given, and a relative name with ``..`` leaves the zoneinfo folder."""
    name = value[1:] if value.startswith(":") else value
    if name.startswith("/") or ".." in name.split("/"):
        return "names a file (an absolute path, or '..' out of the zoneinfo folder), which every child's C library would open"
    if any(not (c.isascii() and (c.isalnum() or c in "_+-/:.,<>")) for c in name):
        return "is not a zone name or a POSIX TZ string"
    return ""


def _outfile_problem(value: str, protect: "tuple[str, ...]") -> str:
    """A file a library creates or truncates (``NCCL_DEBUG_FILE``, dump files, torch's flight-recorder prefix):
    absolute, not there yet (NCCL opens it with ``fopen(..., "w")``: an existing file, a login script or a
    checkpoint, would be overwritten with text of the library's choosing), not a dotfile (``~/.bash_profile`` need
    not exist to be run at the next login), in a folder the path rule accepts, off the checkpoint volume."""
    if not os.path.isabs(value):
        return "is not an absolute path"
    base = os.path.basename(value)
    if not base or base.startswith("."):
        return "names a dotfile or a folder (a shell or tool reads dotfiles at start-up); name a plain file"
    if os.path.lexists(value):
        return "names a file that exists already, which the library would overwrite"
    why = _dir_problem(os.path.dirname(value), protect, must_exist=True)
    return (
        f"has a folder that {why[len('is a folder ') :]}"
        if why.startswith("is a folder ")
        else (f"its folder {why}" if why else "")
    )


#: characters of a command line or of shell syntax, refused in a value the registry does not type
_COMMANDLIKE = frozenset(" \t|;&$`<>(){}[]!*?'\"\\~#")


def _plain_value_problem(value: str) -> str:
    """Why a value the registry does not type (a requested variable without a row, :data:`UNLISTED`, or a name
    under a pattern row such as ``NCCL_*``) is not a plain one, or ''.

    Nothing says what an unknown reader does with it, so the value is judged by its shape: a URL (``scheme://``)
    could send the job somewhere (a redirect the launch cannot judge), spaces or shell syntax could be a command a
    reader runs; a path by its value goes through the path rule (the caller). Plain words, numbers and lists
    (``1``, ``true``, ``eth0,eth1``, ``expandable_segments:True``, ``a=1,b=2``) pass."""
    if "://" in value:
        return (
            "holds a URL: a variable the registry does not type may not name a server (a redirect the launch cannot "
            "judge)"
        )
    if any(c in _COMMANDLIKE for c in value):
        return (
            "holds spaces or shell syntax: a variable the registry does not type passes only as a plain word, number "
            "or list, never as something a reader could run"
        )
    return ""


def check_values(
    records: "list[str]", owner: str = "fa", pass_env: "tuple[str, ...]" = (), protect: "tuple[str, ...]" = ()
) -> "list[tuple[str, str, str]]":
    """Problems ``(name, why, fix)`` of ``records`` (``NAME=VALUE`` strings: the typed variables the entrypoint
    passes, as bash exports them) under their registry rows (:func:`check_value`); a requested name without a
    row is checked as :data:`UNLISTED`."""
    out: "list[tuple[str, str, str]]" = []
    for rec in records:
        name, _, value = rec.partition("=")
        row = _checked_row(name, owner, pass_env)
        if row is None or not row.type:
            continue
        why = check_value(row, value, owner=owner, pass_env=pass_env, protect=protect, name=name)
        if why:
            fix = row.fix or "unset it for the launch"
            if row.type == "shaped" and shape(name) in ("loads", "peer"):
                fix = f"unset it, or name it in VLGRPO_PASS_ENV when the launch needs {name}"
            elif row is UNLISTED and why.startswith("holds "):
                fix = "remove it from VLGRPO_PASS_ENV and unset it (a setting of a known reader gets a typed row)"
            elif row.type == "shaped" and why.startswith("holds "):
                fix = "give it a plain value (a word, a number, a list: NCCL_IB_HCA=mlx5_0,mlx5_1), or unset it"
            elif row.type == "shaped":
                fix = "point it at absolute paths off the checkpoint volume that not every user can write, or " + (
                    "remove it from VLGRPO_PASS_ENV" if row is UNLISTED else "unset it"
                )
            out.append((name, why, fix))
    return out


def main(argv: "list[str] | None" = None) -> int:
    import sys

    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["check-ray-job-config"]:
        owner = "fa"
        pass_env: "tuple[str, ...]" = ()
        protect: "list[str]" = []
        for a in args[1:]:
            if a.startswith("--owner="):
                owner = a.split("=", 1)[1]
            elif a.startswith("--pass-env="):
                pass_env = tuple(x for x in a.split("=", 1)[1].split(",") if x)
            elif a.startswith("--protect="):
                protect.append(a.split("=", 1)[1])
        problems = check_ray_job_config(sys.stdin.read(), owner, pass_env, tuple(protect))
        for name, why, fix in problems:
            line = f"{name}\t{why}\t{fix}".replace("\n", " ").replace("\r", " ")
            sys.stdout.buffer.write((line + "\n").encode("utf-8", "surrogateescape"))
        sys.stdout.flush()
        return 2 if problems else 0
    if args[:1] == ["trackers"]:
        # the experiment trackers' settings: the rules are vlgrpo.trackers'
        from vlgrpo import trackers

        return trackers.main(["plan"] + args[1:])
    if args[:1] == ["classify"]:
        for name in args[1:]:
            row = env_row(name)
            print(f"{name}\t{row.kind if row else 'unlisted'}\t{row.name if row else '-'}")
        return 0
    print(
        "usage: python3 -m vlgrpo.environment check-ray-job-config [--owner=fa|vo|node] [--pass-env=A,B] < JSON"
        "\n       python3 -m vlgrpo.environment classify NAME...",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
