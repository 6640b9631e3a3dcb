"""The experiment trackers' settings: from the typed ``VLGRPO_*`` settings to what verl's loggers read.

verl 0.8.0 (``verl/utils/tracking.py``, ``Tracking.__init__``) configures each logger of ``trainer.logger`` from the
environment of the process that creates the ``Tracking`` object -- on a Ray cluster a Ray actor, whose environment
is its node's ``ray start`` environment (plus the job's runtime_env), not the launching process's:

- ``wandb``: ``wandb.init`` reads ``WANDB_API_KEY`` (and ``WANDB_MODE``, ``WANDB_ENTITY``, ...); the launch takes the key
  from ``WANDB_API_KEY_FILE`` (:func:`wandb_key_problem` is the key's form, :func:`read_key_file` the file);
- ``tensorboard``: ``_TensorboardAdapter`` writes to ``TENSORBOARD_DIR``, default ``tensorboard_log/<project>/<experiment>``
  under the working directory (the launch's throw-away folder);
- ``mlflow``: ``MLFLOW_TRACKING_URI``, default ``sqlite:////tmp/mlruns.db`` (inside the container);
- ``swanlab``: ``SWANLAB_API_KEY`` (``swanlab.login``), ``SWANLAB_LOG_DIR`` (default ``swanlog`` under the working
  directory), ``SWANLAB_MODE`` (default ``cloud``);
- ``console``, ``file``: nothing here (the file logger's folder is ``VERL_FILE_LOGGER_ROOT``, a registry row).

The registry (``environment.tsv``) holds the settings (owner ``trackers``: the entrypoints send their values here)
and the variables they become (kind ``set``). :func:`plan` is the one rule: it checks the values, refuses a selected
logger without its required setting, warns about a setting of a logger that is not selected, and returns what the
entrypoint exports for its children. ``entrypoints/ray-node.sh`` exports the same for ``ray start`` (every Ray process
of the node inherits it: the logging actor may run on any node); ``vlgrpo cluster probe`` checks, in an actor on each
node, that the variables the launch's loggers need are there (:func:`node_problems`; names only, never values of
secrets).

Command line (``python3 -m vlgrpo.trackers plan --owner=fa|vo|node [--loggers=a,b] [--dry-run]``, also reached as
``python3 -m vlgrpo.environment trackers ...``, which the entrypoints run): reads
NUL-separated ``VLGRPO_NAME=VALUE`` records (the values the entrypoint validated by their registry type; and the W&B
inputs of :data:`WANDB_INPUTS`, as inherited) on stdin and
prints one line per result, tab-separated: ``problem NAME WHY FIX``, ``note TEXT`` or ``export NAME VALUE``; exit 2
when there is a problem, 0 otherwise. Every exported value is plain printable ASCII without spaces (the registry
types and the key check guarantee it), so a line is one record.

Standard library only.
"""

from __future__ import annotations

import dataclasses
import os
import re

#: the loggers ``VLGRPO_LOGGER`` accepts that read configuration from the environment (verl 0.8.0 tracking.py)
LOGGERS = ("wandb", "tensorboard", "mlflow", "swanlab")
#: a tracker API key as the SwanLab key file holds it (letters, digits, ``_ . -``, 20-400 characters)
KEY_RE = re.compile(r"[A-Za-z0-9_.-]{20,400}")
KEY_MAX_BYTES = 4096
#: ``SWANLAB_MODE`` values that do not send anything to SwanLab's cloud, so need no key
SWANLAB_KEYLESS = ("local", "offline", "disabled")
#: ``WANDB_MODE`` values that need no key
WANDB_KEYLESS = ("offline", "disabled")


@dataclasses.dataclass(frozen=True)
class Setting:
    """A tracker setting: ``name`` (the ``VLGRPO_*`` variable), the ``logger`` it configures, the variable ``target``
    verl's logger reads, ``required`` (the logger is refused without it), ``secret`` (the value is a file holding the
    key, never shown), ``folder`` (the value is a folder the logger writes: the path rule and write access)."""

    name: str
    logger: str
    target: str
    required: bool = False
    secret: bool = False
    folder: bool = False


SETTINGS = (
    Setting("VLGRPO_TENSORBOARD_DIR", "tensorboard", "TENSORBOARD_DIR", required=True, folder=True),
    Setting("VLGRPO_MLFLOW_TRACKING_URI", "mlflow", "MLFLOW_TRACKING_URI", required=True),
    Setting("VLGRPO_SWANLAB_API_KEY_FILE", "swanlab", "SWANLAB_API_KEY", secret=True),
    Setting("VLGRPO_SWANLAB_LOG_DIR", "swanlab", "SWANLAB_LOG_DIR", folder=True),
    Setting("VLGRPO_SWANLAB_MODE", "swanlab", "SWANLAB_MODE"),
)
BY_NAME = {s.name: s for s in SETTINGS}
#: variables holding secrets: never shown, and never sent back by the probe's actors
SECRETS = ("WANDB_API_KEY", "SWANLAB_API_KEY")
#: the W&B inputs the entrypoints send besides the settings: the key file's path, ``WANDB_API_KEY`` (its value is
#: never sent: ``set`` stands for it) and ``WANDB_MODE``, as inherited
WANDB_INPUTS = ("WANDB_API_KEY_FILE", "WANDB_API_KEY", "WANDB_MODE")

# ---- the W&B API key ---------------------------------------------------------------------------------------
#
# What the W&B client accepts as WANDB_API_KEY: wandb 0.31.0 (the image's pin), wandb/sdk/lib/wbauth/validation.py
# check_api_key, called by wbauth.AuthApiKey for every key wandb.init uses: three dot-separated base64url segments
# (a JWT: W&B's internal clients' tokens), or an optional server prefix up to the first '-' (self-hosted servers:
# ``local-...``) followed by at least 40 of ``A-Z a-z 0-9 _ -``. Keys W&B issues: 40 hexadecimal digits (classic),
# ``wandb_v1_`` and 77 more characters (since 2025; clients before 0.22.3 refuse them), ``local-`` and 40 hex digits.
# The launch takes the client's second form alone, in printable ASCII without spaces (the launch passes the key on
# in one line), and refuses what is plainly another service's secret: a JWT in a key file is a Kubernetes
# service-account or OIDC token far more often than a W&B client's (W&B reads OIDC tokens from
# WANDB_IDENTITY_TOKEN_FILE), and the token prefixes below are those services' documented ones -- whoever runs the
# W&B server a launch talks to (WANDB_BASE_URL) would get the token.

#: the shortest secret part the client takes (validation.py: "API key must have 40+ characters")
WANDB_KEY_MIN = 40
_WANDB_SECRET_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_JWT_RE = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")
#: (prefix, what it is) of tokens of other services that are no W&B key (each service's documented token prefix)
OTHER_TOKENS = (
    ("hf_", "a Hugging Face token"),
    ("api_org_", "a Hugging Face organization token"),
    ("sk-", "an OpenAI or Anthropic API key"),
    ("sk_live_", "a Stripe key"),
    ("sk_test_", "a Stripe key"),
    ("rk_live_", "a Stripe key"),
    ("ghp_", "a GitHub token"),
    ("gho_", "a GitHub token"),
    ("ghu_", "a GitHub token"),
    ("ghs_", "a GitHub token"),
    ("ghr_", "a GitHub token"),
    ("github_pat_", "a GitHub token"),
    ("glpat-", "a GitLab token"),
    ("xoxb-", "a Slack token"),
    ("xoxp-", "a Slack token"),
    ("xoxa-", "a Slack token"),
    ("xoxr-", "a Slack token"),
    ("xoxs-", "a Slack token"),
    ("xapp-", "a Slack token"),
    ("pypi-", "a PyPI token"),
    ("npm_", "an npm token"),
    ("AKIA", "an AWS access key"),
    ("ASIA", "an AWS access key"),
    ("AIza", "a Google API key"),
    ("ya29.", "a Google OAuth token"),
)


def wandb_key_problem(key: str) -> str:
    """``""`` when ``key`` (one line, its end of line removed) is a W&B API key in the form the W&B client takes,
    else why not, in words that never show the key.

    Mirrors wandb 0.31.0 ``wandb/sdk/lib/wbauth/validation.py`` ``check_api_key`` (a prefix up to the first '-',
    then at least :data:`WANDB_KEY_MIN` letters, digits, ``_`` or ``-``), narrowed as the section above says:
    printable ASCII without spaces, no JWT, none of :data:`OTHER_TOKENS`' prefixes. Raises nothing."""
    what = next((w for prefix, w in OTHER_TOKENS if key.startswith(prefix)), "")
    if what:
        return f"it holds what looks like {what}, not a W&B API key"
    if _JWT_RE.fullmatch(key):
        return "it holds a JWT (a signed token such as a Kubernetes service-account or OIDC token), not a W&B API key"
    if not key:
        return "it is empty"
    if not all("!" <= c <= "~" for c in key):
        return "it holds spaces, control or non-ASCII characters"
    _, dash, secret = key.partition("-")
    secret = secret if dash else key
    if not set(secret) <= _WANDB_SECRET_CHARS:
        return "it holds characters other than letters, digits, '_' and '-' after the server prefix"
    if len(secret) < WANDB_KEY_MIN:
        return (
            f"it is too short: a W&B API key has at least {WANDB_KEY_MIN} characters after its server prefix "
            "(such as local-)"
        )
    return ""


def _wandb_plan(out: "Plan", values: dict, chosen: set, recipe: bool, dry_run: bool) -> None:
    """The W&B part of :func:`plan`: ``WANDB_API_KEY_FILE`` read by :func:`read_key_file` (the path rule for a key
    file: ``secret=True``) and :func:`wandb_key_problem`, exported as ``WANDB_API_KEY``; both it and
    ``WANDB_API_KEY`` given is a problem; a recipe whose loggers have wandb without a key (and ``WANDB_MODE`` not
    offline/disabled) is a problem, a note in a dry run."""
    path, inherited = values.get("WANDB_API_KEY_FILE", ""), bool(values.get("WANDB_API_KEY"))
    if path and inherited:
        out.problems.append(
            ("WANDB_API_KEY_FILE", "both WANDB_API_KEY and WANDB_API_KEY_FILE are set", "set only one of them")
        )
        return
    if path:
        key, why = read_key_file(path, secret=True, shape=wandb_key_problem, what="W&B API key")
        if not why:
            out.exports["WANDB_API_KEY"] = key
            return
        fix = (
            "point WANDB_API_KEY_FILE at a file of yours that holds only your W&B API key (from "
            "https://wandb.ai/authorize, or your server's /authorize page), on one line"
        )
        out.problems.append(("WANDB_API_KEY_FILE", why, fix))
        return
    if recipe and "wandb" in chosen and not inherited and values.get("WANDB_MODE", "") not in WANDB_KEYLESS:
        if dry_run:
            out.notes.append(
                "warning: VLGRPO_LOGGER has wandb but neither WANDB_API_KEY nor WANDB_API_KEY_FILE is set; "
                "a real launch is refused until one is (or WANDB_MODE=offline)"
            )
        else:
            out.problems.append(
                (
                    "VLGRPO_LOGGER",
                    "includes wandb, but neither WANDB_API_KEY nor WANDB_API_KEY_FILE is set",
                    "provide the key (WANDB_API_KEY_FILE=/run/secrets/wandb), set WANDB_MODE=offline, or "
                    "drop wandb from VLGRPO_LOGGER",
                )
            )


@dataclasses.dataclass
class Plan:
    """What :func:`plan` decided: ``problems`` ``(name, why, fix)``, ``notes`` (warnings, one line each) and
    ``exports`` (variable -> value for the children, in :data:`SETTINGS` order)."""

    problems: list = dataclasses.field(default_factory=list)
    notes: list = dataclasses.field(default_factory=list)
    exports: dict = dataclasses.field(default_factory=dict)


def parse_loggers(text: str) -> tuple[str, ...]:
    """``console,wandb`` or the entrypoints' formatted ``[console,wandb]`` -> ``("console", "wandb")``."""
    return tuple(x for x in text.strip().strip("[]").split(",") if x)


def _kernel_path(path: str) -> bool:
    """``path`` as given or with its links resolved lies in /proc, /sys or /dev (``/proc/self/cwd`` names each
    process's own working folder; a key file there is the kernel's, not the user's)."""
    from vlgrpo.pathrule import resolved

    return any(
        p == k or p.startswith(k + "/")
        for p in (os.path.abspath(path), resolved(path))
        for k in ("/proc", "/sys", "/dev")
    )


def _show_path(path: str) -> str:
    """``path`` for a message: as it is when it is printable ASCII, else :func:`ascii` of it (a control character
    or a terminal escape in a variable's value is never printed)."""
    return path if all(" " <= c <= "~" for c in path) else ascii(path)


def read_key_file(path: str, secret: bool = False, shape=None, what: str = "API key") -> tuple[str, str]:
    """``(key, "")`` from a key file, or ``("", why)``: a regular file of at most 4 KiB holding one line, the key,
    outside /proc, /sys and /dev (links resolved), that passes the one path rule (:func:`vlgrpo.pathrule.check_path`:
    no other user can replace it or a folder above it, since whoever can send the run's metrics to their own account,
    or a token of theirs to the tracker). ``secret``: the path rule's key-file check as well (owned by the launching
    user, mode 0600 or 0400). ``shape``: a function of the line giving why it is no key (``what``, in words) or ``""``
    (default: letters, digits, ``_ . -``, 20-400 characters). A PEM block is refused as one. The contents are never
    part of ``why``."""
    from vlgrpo.pathrule import check_path

    shown = _show_path(path)
    if shown != path:
        return "", f"the path {shown} holds control or non-ASCII characters (name the file by a plain path)"
    if _kernel_path(path):
        return "", f"{shown} is a kernel or device file, not a key file"
    problem = check_path(path, kind="file", secret=secret)
    if problem is not None:
        return "", f"{problem.text()} (the path rule: {problem.fix})"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        return "", f"{shown} cannot be opened ({exc.strerror})"
    try:
        import stat

        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return "", f"{shown} is not a regular file"
        data = os.read(fd, KEY_MAX_BYTES + 1)
    except OSError as exc:
        return "", f"{shown} cannot be read ({exc.strerror})"
    finally:
        os.close(fd)
    if len(data) > KEY_MAX_BYTES:
        return "", "the file is larger than 4 KiB (contents not shown); a key file holds one line, the key"
    if data.lstrip().startswith(b"-----BEGIN "):
        return "", "the file holds a PEM block (a private key or certificate; contents not shown), not an API key"
    text = data.decode("ascii", "replace")
    if text.endswith("\n"):
        text = text[:-1]
    if text.endswith("\r"):
        text = text[:-1]
    if "\n" in text or "\r" in text or "\0" in text:
        return "", "the file holds more than one line (contents not shown); a key file holds one line, the key"
    if shape is not None:
        why = shape(text)
        if why:
            return "", f"the file does not hold one {what} (contents not shown): {why}"
        return text, ""
    if not KEY_RE.fullmatch(text):
        return "", "the file does not hold one API key (contents not shown)"
    return text, ""


def _folder_problem(path: str) -> str:
    """Why the logger may not write its files to folder ``path`` (the path rule, :mod:`vlgrpo.pathrule`, and write
    access for this user), or ''."""
    from vlgrpo.pathrule import check_path, resolved

    if _kernel_path(path):
        return f"{path} is a kernel or device folder ({resolved(path)}), not a folder for the logger's files"
    problem = check_path(path, kind="dir")
    if problem is not None:
        return f"{problem.text()} (the path rule: {problem.fix})"
    if not os.access(path, os.W_OK | os.X_OK):
        return f"{path} is a folder this user cannot write"
    return ""


def _uri_problem(uri: str) -> str:
    """An MLflow tracking URI (already of the registry's ``uri`` shape): a ``file:`` store's folder must pass the
    path rule; http(s) servers are not contacted here."""
    if not uri.startswith("file:"):
        return ""
    path = uri[len("file:") :]
    if path.startswith("///"):
        path = path[2:]
    why = _folder_problem(path)
    return f"the file store {why}" if why else ""


def plan(loggers, values: dict, owner: str = "fa", dry_run: bool = False) -> Plan:
    """The tracker settings ``values`` (``VLGRPO_*`` name -> value validated by its registry type; unset ones absent
    or empty) for the selected ``loggers`` of entrypoint ``owner``.

    A recipe (``fa``, ``vo``): a selected logger whose required setting is unset is a problem naming the setting and
    the fix; swanlab in ``cloud`` mode without a key is a problem (a note in a dry run: keys are usually mounted on
    the cluster alone, as for W&B); a setting of a logger not selected is a note and is not exported. ``node``
    (ray-node.sh, which does not know the recipe's loggers): every given setting is checked and exported. Values:
    folders must pass :func:`vlgrpo.pathrule.check_path` and be writable; a ``file:`` MLflow store likewise; the
    SwanLab key file is read by :func:`read_key_file`. W&B (``values`` may hold :data:`WANDB_INPUTS`): the key from
    ``WANDB_API_KEY_FILE`` (the path rule for key files, :func:`wandb_key_problem`) is exported as ``WANDB_API_KEY``
    for a recipe and a node alike; both it and ``WANDB_API_KEY`` is a problem; a recipe with wandb but neither (and
    ``WANDB_MODE`` not offline or disabled) is a problem, a note in a dry run. Returns a :class:`Plan`."""
    out = Plan()
    chosen = set(parse_loggers(loggers) if isinstance(loggers, str) else loggers)
    recipe = owner != "node"
    _wandb_plan(out, values, chosen, recipe, dry_run)
    given = {s.name: values.get(s.name, "") for s in SETTINGS}
    for s in SETTINGS:
        value = given[s.name]
        if not value:
            if recipe and s.required and s.logger in chosen:
                out.problems.append(
                    (
                        s.name,
                        f"unset, but VLGRPO_LOGGER has {s.logger} (verl's {s.logger} logger reads "
                        f"{s.target}; without it {_DEFAULT_WHERE[s.target]})",
                        f"set {s.name} ({_EXAMPLE[s.name]}), or drop {s.logger} from VLGRPO_LOGGER",
                    )
                )
            continue
        if recipe and s.logger not in chosen:
            out.notes.append(f"warning: {s.name} is set but VLGRPO_LOGGER has no {s.logger}: it is not used")
            continue
        if s.secret:
            key, why = read_key_file(value)
            if why:
                out.problems.append(
                    (s.name, why, f"point {s.name} at a readable file that holds only the key, on one line")
                )
            else:
                out.exports[s.target] = key
            continue
        why = _folder_problem(value) if s.folder else _uri_problem(value) if s.target == "MLFLOW_TRACKING_URI" else ""
        if why:
            out.problems.append(
                (
                    s.name,
                    why,
                    f"point {s.name} at a folder of your own (or root's) on a volume that "
                    "outlives the container, e.g. mkdir -m 0700 /checkpoints/tracking",
                )
            )
        else:
            out.exports[s.target] = value
    if (
        recipe
        and "swanlab" in chosen
        and "SWANLAB_API_KEY" not in out.exports
        and not any(p[0] == "VLGRPO_SWANLAB_API_KEY_FILE" for p in out.problems)
    ):
        mode = given["VLGRPO_SWANLAB_MODE"] or "cloud"
        if mode not in SWANLAB_KEYLESS:
            why = f"VLGRPO_LOGGER has swanlab in {mode} mode, but VLGRPO_SWANLAB_API_KEY_FILE is unset"
            fix = (
                "point VLGRPO_SWANLAB_API_KEY_FILE at a file that holds the key (e.g. /run/secrets/swanlab), set "
                "VLGRPO_SWANLAB_MODE=offline, or drop swanlab from VLGRPO_LOGGER"
            )
            if dry_run:
                out.notes.append(f"warning: {why}; a real launch is refused until it is set ({fix})")
            else:
                out.problems.append(("VLGRPO_SWANLAB_API_KEY_FILE", why, fix))
    return out


_DEFAULT_WHERE = {
    "TENSORBOARD_DIR": "it writes into the launch's throw-away working folder",
    "MLFLOW_TRACKING_URI": "it writes to sqlite:////tmp/mlruns.db inside the container",
}
_EXAMPLE = {
    "VLGRPO_TENSORBOARD_DIR": "a folder on a volume, e.g. /checkpoints/tensorboard",
    "VLGRPO_MLFLOW_TRACKING_URI": "e.g. http://mlflow:5000 or file:///checkpoints/mlruns",
}


# ---- on every node of a Ray cluster --------------------------------------------------------------------------


def node_needs(loggers) -> list[tuple[str, str, str, tuple]]:
    """What a process that creates verl's ``Tracking`` must see for ``loggers``: ``(logger, variable, mode variable,
    modes that need no key)`` per requirement (the mode variable '' when the variable is always needed)."""
    chosen = parse_loggers(loggers) if isinstance(loggers, str) else tuple(loggers)
    out: list[tuple[str, str, str, tuple]] = []
    if "wandb" in chosen:
        out.append(("wandb", "WANDB_API_KEY", "WANDB_MODE", WANDB_KEYLESS))
    for s in SETTINGS:
        if s.required and s.logger in chosen:
            out.append((s.logger, s.target, "", ()))
    if "swanlab" in chosen:
        out.append(("swanlab", "SWANLAB_API_KEY", "SWANLAB_MODE", SWANLAB_KEYLESS))
    return out


#: the variables an actor reports (secrets as presence only)
NODE_VARS = ("WANDB_API_KEY", "WANDB_MODE") + tuple(s.target for s in SETTINGS)


def node_view(environ=None) -> dict:
    """What this process sees of :data:`NODE_VARS`: the value, ``True`` for a set secret, ``None`` when unset. Runs
    in the probe's actors; a secret's value never leaves the process."""
    env = os.environ if environ is None else environ
    out = {}
    for name in NODE_VARS:
        value = env.get(name) or None
        out[name] = (value is not None) if name in SECRETS and value is not None else value
    return out


_NODE_FIX = {
    "WANDB_API_KEY": "start that node's ray-node.sh with WANDB_API_KEY_FILE (or WANDB_API_KEY), or with WANDB_MODE=offline",
    "SWANLAB_API_KEY": "start that node's ray-node.sh with VLGRPO_SWANLAB_API_KEY_FILE, or VLGRPO_SWANLAB_MODE=offline",
}


def node_problems(loggers, seen: dict, launch=None) -> list[tuple[str, str]]:
    """``(variable, problem)`` for a node whose processes see ``seen`` (:func:`node_view`): each variable
    :func:`node_needs` asks for that is missing (unless the node's mode variable says no key is needed), and each
    tracker setting the launch exported (``launch``: its environment, default ``os.environ``) that the node has with
    another value (values not shown). The fix names the ray-node.sh setting."""
    env = os.environ if launch is None else launch
    out = []
    for logger, var, mode_var, keyless in node_needs(loggers):
        if seen.get(var):
            continue
        if mode_var and (seen.get(mode_var) or "") in keyless:
            continue
        setting = next((s.name for s in SETTINGS if s.target == var), "")
        fix = _NODE_FIX.get(var) or f"start that node's ray-node.sh with {setting} (the same value as the launch's)"
        out.append((var, f"{var} is not set in its Ray processes, where verl's {logger} logger may run -- fix: {fix}"))
    chosen = parse_loggers(loggers) if isinstance(loggers, str) else tuple(loggers)
    for s in SETTINGS:
        if s.secret or s.logger not in chosen:
            continue
        mine, theirs = env.get(s.target) or None, seen.get(s.target)
        if mine and theirs and mine != theirs:
            out.append(
                (
                    s.target,
                    f"{s.target} differs from the launch's (from {s.name}; values not shown) -- fix: start "
                    f"that node's ray-node.sh with the same {s.name} as the launch",
                )
            )
    return out


def main(argv=None) -> int:
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] != ["plan"]:
        print(
            "usage: python3 -m vlgrpo.trackers plan --owner fa|vo|node [--loggers a,b] [--dry-run] "
            "< NUL-separated VLGRPO_NAME=VALUE records",
            file=sys.stderr,
        )
        return 2
    owner, loggers, dry = "fa", "", False
    for a in args[1:]:
        if a.startswith("--owner="):
            owner = a.split("=", 1)[1]
        elif a.startswith("--loggers="):
            loggers = a.split("=", 1)[1]
        elif a == "--dry-run":
            dry = True
    data = sys.stdin.buffer.read().decode("utf-8", "surrogateescape")
    values = dict(r.split("=", 1) for r in data.split("\0") if "=" in r)
    result = plan(loggers, values, owner, dry)
    lines = [f"problem\t{n}\t{w}\t{f}" for n, w, f in result.problems]
    lines += [f"note\t{n}" for n in result.notes]
    lines += [f"export\t{k}\t{v}" for k, v in result.exports.items()]
    for line in lines:
        sys.stdout.write(line.replace("\n", " ").replace("\r", " ") + "\n")
    sys.stdout.flush()
    return 2 if result.problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
