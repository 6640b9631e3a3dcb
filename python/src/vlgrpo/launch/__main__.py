"""``python3 -I -m vlgrpo.launch``: the launcher.

``entry fully-async-grpo|veomni-grpo ...``: the whole launch of a recipe entrypoint (:mod:`vlgrpo.launch.entry`;
the bash shims of entrypoints/ start it). ``docs ...``: the registry's text for ``scripts/gen-docs``.

The steps below are what ``ray-node.sh`` and ``doctor.sh`` (still bash) ask for, one request each:

Every step takes ``--registry FILE``: the registry the entrypoint loaded (in the images the copy in the
entrypoints' lib/, next to the scripts, a copy of this package's), so that bash and Python read the same rows;
without it, the package's own.

``settings OWNER --cwd DIR [--names-only]``: stdin holds the exported ``VLGRPO_*`` variables as bash sees them,
``NAME=VALUE`` records each ended by a NUL byte, in ``compgen -e`` order. stdout gets NUL-ended records (bash
reads them with ``read -r -d ''``; nothing is ever evaluated): ``v:SHORT=TEXT`` the Hydra text of a setting,
``r:SHORT=RAW`` the value read or the literal default, ``s:SHORT=SOURCE`` (env, default, derived, unset),
``p:LINE`` a problem of a value, ``u:LINE`` a problem of a name (unknown, another entrypoint's, case), and last
``end:``. ``--names-only`` checks the names alone (the doctor, which checks its values itself).

``derived OWNER --cwd DIR``: stdin holds ``SHORT``, ``RAW``, ``INPUTS`` NUL-ended triples (a derived default the
recipe computed, and the inputs it came from in words); stdout ``v:SHORT=TEXT`` or ``p:LINE`` records, then
``end:``.

``environment OWNER`` (served only): the records are tagged ``f:PATH`` (the environ file bash read), ``n:`` (it
was unreadable), ``x:ENTRY`` (each of its entries, in order), ``e:PASS_ENV`` (the validated ``VLGRPO_PASS_ENV``),
``A:ADDR`` (``VLGRPO_RAY_ADDRESS``) and ``h:NAME=VALUE`` (each variable bash exports, as it holds it); the answer (:mod:`vlgrpo.launch.childenv`):
``P:NAME`` passed, ``Q:NAME`` passed because ``VLGRPO_PASS_ENV`` names it, ``D:SHOWN`` dropped, ``O:NAME`` dropped
and not a shell name, ``T:NAME`` passed with a type check, ``U:NAME`` named in ``VLGRPO_PASS_ENV`` but not set,
``N:NAME`` a name with non-ASCII characters, ``p:LINE`` a problem.

``values OWNER`` (served only; once bash has built the environment): records ``e:PASS_ENV``, ``k:PATH`` (a
protected real path: the checkpoint folder, its volume's mount point), ``v:NAME=VALUE`` (each typed name's value
as bash exports it) and ``a:NAME`` (each non-ASCII name); the answer is ``p:LINE`` problems.

``trackers OWNER`` (served only): records ``o:LOGGERS`` (the logger list), ``d:1`` for a dry run and
``v:NAME=VALUE`` (the tracker settings, ``WANDB_API_KEY_FILE``, ``WANDB_MODE``, ``WANDB_API_KEY=set``); the answer
(:func:`vlgrpo.trackers.plan`): ``p:LINE`` problems, ``w:NOTE`` notes, ``X:NAME=VALUE`` the variables verl's
loggers read (a key among them: never printed).

``--fd N`` writes the records to file descriptor N instead of stdout (the entrypoints pass 3 and send stdout to
stderr, so that whatever else the interpreter prints at start cannot mix with the records).

``serve OWNER [--registry FILE] [--fd N]``: the steps in one interpreter, for a bash coprocess (one start per
launch): each request on stdin is NUL-ended fields ``STEP``, ``CWD``, ``FLAG`` (``--names-only`` or empty), ``N``
and N records; each answer is that step's records and ``end:``. It ends at end of input.

Exit status 0 when the step ran (its problems are records), 2 for a usage error, 1 for anything else.
"""

from __future__ import annotations

import sys

from vlgrpo import environment
from vlgrpo.launch import childenv, settings

USAGE = (
    "usage: python3 -I -m vlgrpo.launch settings OWNER [--registry FILE] [--fd N] --cwd DIR [--names-only] "
    "< NAME=VALUE records\n       python3 -I -m vlgrpo.launch derived OWNER [--registry FILE] [--fd N] --cwd DIR "
    "< SHORT RAW INPUTS records\n       python3 -I -m vlgrpo.launch serve OWNER [--registry FILE] [--fd N] < requests"
)


def _records(data: bytes) -> list[str]:
    text = data.decode("utf-8", "surrogateescape")
    parts = text.split("\0")
    if parts and parts[-1] == "":
        parts.pop()
    return parts


def _emit(out: list[str], fd: int) -> None:
    data = b"".join(rec.encode("utf-8", "surrogateescape") + b"\0" for rec in out + ["end:"])
    if fd == 1:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return
    with open(fd, "wb", closefd=False) as fh:
        fh.write(data)


def run_settings(owner: str, records: list[str], cwd: str, names_only: bool) -> list[str]:
    """The output records of the settings step (see the module docstring)."""
    env: dict[str, str] = {}
    names: list[str] = []
    for rec in records:
        name, _, value = rec.partition("=")
        names.append(name)
        env[name] = value
    out: list[str] = []
    if not names_only:
        got = settings.read_settings(owner, env, cwd)
        for short, text in got.values.items():
            out.append(f"v:{short}={text}")
        for short, raw in got.raw.items():
            out.append(f"r:{short}={raw}")
        for short, src in got.source.items():
            out.append(f"s:{short}={src}")
        out += ["p:" + line for line in got.problems]
    out += ["u:" + line for line in settings.unknown_vars(owner, names)]
    return out


def run_derived(owner: str, records: list[str], cwd: str) -> list[str]:
    """The output records of the derived step (see the module docstring)."""
    if len(records) % 3:
        raise ValueError("derived: the records are not SHORT RAW INPUTS triples")
    out: list[str] = []
    for i in range(0, len(records), 3):
        short, raw, inputs = records[i : i + 3]
        text, line = settings.check_derived(owner, short, raw, inputs, cwd)
        out.append(f"v:{short}={text}" if line is None else "p:" + line)
    return out


def run_trackers(owner: str, records: list[str]) -> list[str]:
    """The output records of the ``trackers`` step (see the module docstring): :func:`vlgrpo.trackers.plan`."""
    from vlgrpo import trackers

    got = settings.by_tag("trackers", records, "odv")
    loggers, dry, values = settings.last(got, "o"), settings.last(got, "d") == "1", settings.pairs(got["v"])
    result = trackers.plan(loggers, values, owner, dry)
    out = ["p:" + settings.problem(n, w, f) for n, w, f in result.problems]
    out += ["w:" + n for n in result.notes]
    return out + [f"X:{k}={v}" for k, v in result.exports.items()]


class _Fields:
    """NUL-ended fields read from a file descriptor as they arrive (a request is answered before the next)."""

    def __init__(self, fd: int) -> None:
        self.fd, self.buf, self.eof = fd, b"", False

    def next(self) -> str | None:
        import os

        while b"\0" not in self.buf:
            chunk = os.read(self.fd, 65536)
            if not chunk:
                return None
            self.buf += chunk
        field, _, self.buf = self.buf.partition(b"\0")
        return field.decode("utf-8", "surrogateescape")


def serve(owner: str, fd: int) -> int:
    """Answer requests on stdin until its end (see the module docstring)."""
    fields = _Fields(0)
    while True:
        head = [fields.next() for _ in range(4)]
        if head[0] is None:
            return 0
        step, cwd, flag, count = head
        if (
            step not in ("settings", "derived", "environment", "values", "trackers")
            or cwd is None
            or not cwd.startswith("/")
            or flag is None
            or count is None
            or not count.isdigit()
        ):
            print(f"vlgrpo.launch serve: a malformed request {head!r}", file=sys.stderr)
            return 1
        records = [fields.next() for _ in range(int(count))]
        if None in records:
            print("vlgrpo.launch serve: the input ended inside a request", file=sys.stderr)
            return 1
        got = [r for r in records if r is not None]
        if step == "settings":
            out = run_settings(owner, got, cwd, flag == "--names-only")
        elif step == "derived":
            out = run_derived(owner, got, cwd)
        elif step == "environment":
            out = childenv.run_environment(owner, got)
        elif step == "trackers":
            out = run_trackers(owner, got)
        else:
            out = childenv.run_values(owner, got)
        _emit(out, fd)


def _docs(args: list[str]) -> int:
    """``docs rows OWNER`` | ``docs env-names OWNER KIND`` | ``docs env-table``: the registry's text for
    ``scripts/gen-docs`` (:mod:`vlgrpo.launch.help`)."""
    from vlgrpo.launch import help as helptext

    if len(args) == 2 and args[0] == "rows" and args[1] in settings.OWNERS:
        sys.stdout.write(helptext.settings_rows(args[1]))
    elif len(args) == 3 and args[0] == "env-names" and args[1] in settings.OWNERS and args[2] in environment.KINDS:
        sys.stdout.write(helptext.env_names(args[1], args[2]))
    elif args == ["env-table"]:
        sys.stdout.write(helptext.env_table())
    else:
        print("usage: python3 -I -m vlgrpo.launch docs rows OWNER | env-names OWNER KIND | env-table", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "entry":
        from vlgrpo.launch import entry

        return entry.main(args[1:])
    if args and args[0] == "docs":
        return _docs(args[1:])
    if len(args) >= 2 and args[0] == "serve" and args[1] in settings.OWNERS:
        rest, fd = args[2:], 1
        while rest:
            if rest[0] == "--registry" and len(rest) > 1:
                environment.PATH, rest = rest[1], rest[2:]
            elif rest[0] == "--fd" and len(rest) > 1 and rest[1].isdigit():
                fd, rest = int(rest[1]), rest[2:]
            else:
                print(USAGE, file=sys.stderr)
                return 2
        try:
            return serve(args[1], fd)
        except (OSError, ValueError) as exc:
            print(f"vlgrpo.launch serve: {exc}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:  # Ctrl-C reaches the whole process group: the entrypoint reports it
            return 130
    if len(args) < 2 or args[0] not in ("settings", "derived") or args[1] not in settings.OWNERS:
        print(USAGE, file=sys.stderr)
        return 2
    step, owner, rest = args[0], args[1], args[2:]
    cwd, names_only, registry, fd = "", False, "", 1
    while rest:
        if rest[0] == "--fd" and len(rest) > 1 and rest[1].isdigit():
            fd, rest = int(rest[1]), rest[2:]
            continue
        if rest[0] == "--cwd" and len(rest) > 1:
            cwd, rest = rest[1], rest[2:]
        elif rest[0] == "--registry" and len(rest) > 1:
            registry, rest = rest[1], rest[2:]
        elif rest[0] == "--names-only" and step == "settings":
            names_only, rest = True, rest[1:]
        else:
            print(USAGE, file=sys.stderr)
            return 2
    if not cwd.startswith("/"):
        print("vlgrpo.launch: --cwd needs an absolute folder\n" + USAGE, file=sys.stderr)
        return 2
    if registry:
        environment.PATH = registry  # read on first use (nothing has read the registry yet)
    try:
        records = _records(sys.stdin.buffer.read())
        if step == "settings":
            out = run_settings(owner, records, cwd, names_only)
        else:
            out = run_derived(owner, records, cwd)
    except (OSError, ValueError) as exc:
        print(f"vlgrpo.launch {step}: {exc}", file=sys.stderr)
        return 1
    try:
        _emit(out, fd)
    except OSError as exc:
        print(f"vlgrpo.launch {step}: cannot write the records to fd {fd}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
