"""The experiment trackers' settings: from the typed ``VLGRPO_*`` settings to what verl's loggers read.

verl 0.8.0 (``verl/utils/tracking.py``, ``Tracking.__init__``) configures each logger of ``trainer.logger`` from the
environment of the process that creates the ``Tracking`` object -- on a Ray cluster a Ray actor, whose environment
is its node's ``ray start`` environment (plus the job's runtime_env), not the launching process's:

- ``wandb``: ``wandb.init`` reads ``WANDB_API_KEY`` (and ``WANDB_MODE``, ``WANDB_ENTITY``, ...);
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
NUL-separated ``VLGRPO_NAME=VALUE`` records (the values the entrypoint validated by their registry type) on stdin and
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
#: a tracker API key as the key files hold it (the W&B rule of entrypoints/lib/launch.sh vg_secrets)
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

    return any(p == k or p.startswith(k + "/") for p in (os.path.abspath(path), resolved(path))
               for k in ("/proc", "/sys", "/dev"))


def read_key_file(path: str) -> tuple[str, str]:
    """``(key, "")`` from a key file, or ``("", why)``: a readable regular file of at most 4 KiB holding one line,
    the key (letters, digits, ``_ . -``, 20-400 characters), that passes the one path rule
    (:func:`vlgrpo.pathrule.check_path`: no other user can replace it or a folder above it, since whoever can
    send the run's metrics to their own account, or a token of theirs to the tracker). The contents are never part
    of ``why``."""
    from vlgrpo.pathrule import check_path

    if _kernel_path(path):
        return "", f"{path} is a kernel or device file, not a key file"
    problem = check_path(path, kind="file")
    if problem is not None:
        return "", f"{problem.text()} (the path rule: {problem.fix})"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        return "", f"{path} cannot be opened ({exc.strerror})"
    try:
        import stat

        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return "", f"{path} is not a regular file"
        data = os.read(fd, KEY_MAX_BYTES + 1)
    except OSError as exc:
        return "", f"{path} cannot be read ({exc.strerror})"
    finally:
        os.close(fd)
    if len(data) > KEY_MAX_BYTES:
        return "", "the file is larger than 4 KiB (contents not shown); a key file holds one line, the key"
    text = data.decode("ascii", "replace")
    if text.endswith("\n"):
        text = text[:-1]
    if text.endswith("\r"):
        text = text[:-1]
    if "\n" in text or "\r" in text or "\0" in text:
        return "", "the file holds more than one line (contents not shown); a key file holds one line, the key"
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
    path = uri[len("file:"):]
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
    SwanLab key file is read by :func:`read_key_file`. Returns a :class:`Plan`."""
    out = Plan()
    chosen = set(parse_loggers(loggers) if isinstance(loggers, str) else loggers)
    recipe = owner != "node"
    given = {s.name: values.get(s.name, "") for s in SETTINGS}
    for s in SETTINGS:
        value = given[s.name]
        if not value:
            if recipe and s.required and s.logger in chosen:
                out.problems.append((s.name, f"unset, but VLGRPO_LOGGER has {s.logger} (verl's {s.logger} logger reads "
                                     f"{s.target}; without it {_DEFAULT_WHERE[s.target]})",
                                     f"set {s.name} ({_EXAMPLE[s.name]}), or drop {s.logger} from VLGRPO_LOGGER"))
            continue
        if recipe and s.logger not in chosen:
            out.notes.append(f"warning: {s.name} is set but VLGRPO_LOGGER has no {s.logger}: it is not used")
            continue
        if s.secret:
            key, why = read_key_file(value)
            if why:
                out.problems.append((s.name, why, f"point {s.name} at a readable file that holds only the key, on one line"))
            else:
                out.exports[s.target] = key
            continue
        why = _folder_problem(value) if s.folder else _uri_problem(value) if s.target == "MLFLOW_TRACKING_URI" else ""
        if why:
            out.problems.append((s.name, why, f"point {s.name} at a folder of your own (or root's) on a volume that "
                                 "outlives the container, e.g. mkdir -m 0700 /checkpoints/tracking"))
        else:
            out.exports[s.target] = value
    if recipe and "swanlab" in chosen and "SWANLAB_API_KEY" not in out.exports and not any(
            p[0] == "VLGRPO_SWANLAB_API_KEY_FILE" for p in out.problems):
        mode = given["VLGRPO_SWANLAB_MODE"] or "cloud"
        if mode not in SWANLAB_KEYLESS:
            why = f"VLGRPO_LOGGER has swanlab in {mode} mode, but VLGRPO_SWANLAB_API_KEY_FILE is unset"
            fix = "point VLGRPO_SWANLAB_API_KEY_FILE at a file that holds the key (e.g. /run/secrets/swanlab), set " \
                  "VLGRPO_SWANLAB_MODE=offline, or drop swanlab from VLGRPO_LOGGER"
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
            out.append((s.target, f"{s.target} differs from the launch's (from {s.name}; values not shown) -- fix: start "
                        f"that node's ray-node.sh with the same {s.name} as the launch"))
    return out


def main(argv=None) -> int:
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] != ["plan"]:
        print("usage: python3 -m vlgrpo.trackers plan --owner fa|vo|node [--loggers a,b] [--dry-run] "
              "< NUL-separated VLGRPO_NAME=VALUE records", file=sys.stderr)
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
