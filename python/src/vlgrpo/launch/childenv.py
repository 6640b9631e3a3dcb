"""The environment step of a launch: which inherited variables the children get, and why the others may not.

Every variable of the entrypoint's environment as it was at exec (the shim reads ``/proc/$$/environ``, names bash
cannot hold included, and hands each entry over) is classified under the registry (``vlgrpo/environment.tsv``, the row :func:`vlgrpo.environment.
env_row` finds for the entrypoint), once, here:

- a ``refused`` row with a value other than the row's own allowed words stops the launch (exit 2, value not
  shown); a ``pass`` row passes, and its value is checked by its type once the environment is built
  (:func:`value_problems`: :func:`vlgrpo.environment.check_values`, the rule a Ray job's ``runtime_env`` gets too); a ``pass-on-request`` row, or a name with no row, passes only when
  ``VLGRPO_PASS_ENV`` names it; everything else is dropped (listed by name in the plan);
- the ``VLGRPO_*`` settings a Python reader owns (the patch switches; every setting for the doctor) pass;
- a name set twice, an exported bash function, a name that differs from a setting by case or by a look-alike
  letter (:func:`vlgrpo.environment.skeleton`) is a problem;
- every name ``VLGRPO_PASS_ENV`` lists must be one a launch may pass.

The launcher then builds the children's environment from the passed set (:mod:`vlgrpo.launch.entry`; no other
program runs in between) and checks the typed values in it (:func:`value_problems`).
Problems are lines ``VAR: FAULT; fix: FIX`` in the order the entrypoints always reported them: the variables in
environment order, then ``VLGRPO_PASS_ENV``'s names, then the typed values, then the look-alike names.

Names and values are bytes decoded with ``surrogateescape`` (as bash hands them over); a name is shown as bash's
``printf %q`` shows it in the C locale (:func:`vlgrpo.launch.settings.show`).
"""

from __future__ import annotations

import os

from vlgrpo import environment, mounts
from vlgrpo.launch import settings

_ALPHA = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
_ALNUM = _ALPHA | frozenset("0123456789")


def identifier(name: str) -> bool:
    """``name`` is a shell variable name (``^[A-Za-z_][A-Za-z0-9_]*$`` in the C locale)."""
    return bool(name) and name[0] in _ALPHA and all(c in _ALNUM for c in name)


_identifier = identifier


def _non_ascii(name: str) -> bool:
    return any(ord(c) > 0x7F for c in name)


def _upper_ascii(name: str) -> str:
    """``${name^^}`` in the C locale: ASCII letters only."""
    return "".join(chr(ord(c) - 32) if "a" <= c <= "z" else c for c in name)


class Classified:
    """The outcome of the environment step. ``passed``: inherited names the children get (environment order);
    ``requested``: of those, the ones only ``VLGRPO_PASS_ENV`` let through; ``dropped``: the names dropped, shown
    (:func:`~vlgrpo.launch.settings.show` for names bash cannot hold); ``odd``: dropped names that are not shell
    identifiers (bash removes them with ``env -u``); ``typed``: passed names whose value has a type check
    (:func:`value_problems`, once the environment is built); ``nonascii``: names with non-ASCII characters (checked
    for look-alikes of a setting there too);
    ``unset_named``: names ``VLGRPO_PASS_ENV`` lists that are not set; ``problems``: lines. (A plain class:
    dataclasses costs imports at every launch.)"""

    def __init__(self) -> None:
        self.passed: list[str] = []
        self.requested: list[str] = []
        self.dropped: list[str] = []
        self.odd: list[str] = []
        self.typed: list[str] = []
        self.unset_named: list[str] = []
        self.nonascii: list[str] = []
        self.problems: list[str] = []


def _own_value(row: environment.Row, value: str) -> bool:
    """``value`` is one of a refused row's allowed words (what a program sets itself, e.g. Ray's PYTHONBREAKPOINT)."""
    return any(w != "-" and w == value for w in row.allowed.split())


def ray_address_problem(owner: str, inherited: str, ours: str) -> str | None:
    """The problem of an inherited ``RAY_ADDRESS`` (``inherited``; ``ours``: ``VLGRPO_RAY_ADDRESS``), or None: verl's
    ``ray.init()`` joins the cluster it names, so one set without ``VLGRPO_RAY_ADDRESS`` (or different from it)
    would skip the readiness wait and the device probe; the doctor's Ray check would join it and run actors there."""
    if not inherited:
        return None
    if owner == "doctor":
        return settings.problem(
            "RAY_ADDRESS",
            "set (value not shown): the doctor's Ray check would join that cluster and run its actors there",
            "unset RAY_ADDRESS (the doctor checks this node with a private Ray instance)",
        )
    if owner not in ("fa", "vo") or inherited == ours:
        return None
    if not ours:
        return settings.problem(
            "RAY_ADDRESS",
            "set (value not shown) without VLGRPO_RAY_ADDRESS: verl would join that "
            "cluster without the node wait and the device probe",
            "set VLGRPO_RAY_ADDRESS to the same HOST:PORT (cluster mode), or unset RAY_ADDRESS",
        )
    return settings.problem(
        "RAY_ADDRESS",
        "differs from VLGRPO_RAY_ADDRESS (verl would join RAY_ADDRESS, not the cluster that was checked)",
        "unset RAY_ADDRESS; the launch exports VLGRPO_RAY_ADDRESS as RAY_ADDRESS after the checks",
    )


def classify(owner: str, entries: list[tuple[str, str]], held: dict[str, str], pass_env: str) -> Classified:
    """Classify the environment ``entries`` (``(name, value)`` per environ entry, in order; an entry without ``=`` has
    its whole text as name and value, as bash's ``${e%%=*}`` / ``${e#*=}`` give) of entrypoint ``owner`` (``fa``, ``vo``,
    ``node``, ``doctor``) under the registry.

    ``held``: the values the entrypoint's bash holds for its exported variables (what the children get: bash sets
    ``PWD``, ``SHLVL`` and ``_`` itself); a refused row is judged by the inherited value. ``pass_env``: the
    validated ``VLGRPO_PASS_ENV`` (comma list, or ""). The values of the ``typed`` names and the ``nonascii`` names
    are checked by :func:`value_problems`. Raises OSError / ValueError for a broken registry.
    Mirrors nothing upstream: the rules are the registry's (docs/runtime-surfaces.md)."""
    out = Classified()
    declared = {r.name[len("VLGRPO_") :]: r for r in settings.owner_settings(owner)}
    requested = pass_env.split(",") if pass_env else []
    nonascii: list[str] = []
    seen: dict[str, int] = {}
    for name, envval in entries:
        if not name:
            # an entry `=VALUE` (execve allows it): no program can read or unset it by name
            out.problems.append(
                settings.problem(
                    "environment",
                    "has a variable with an empty name (an entry '=VALUE'; value not shown)",
                    "remove it from what starts the launch (an env file line or runtime_env key with no name)",
                )
            )
            continue
        if name in seen:
            # a name twice (execve allows it; an env file or template can produce it): getenv() in the C and Python
            # readers sees the first copy, bash exports the last, so no check can speak for both
            if seen[name] == 1:
                seen[name] = 2
                out.problems.append(
                    settings.problem(
                        settings.show(name),
                        "set more than once in the environment (the copies may differ: C and "
                        "Python programs read the first, bash passes on the last; values not shown)",
                        "set it once (look for a repeated line in the env file, job template or runtime_env)",
                    )
                )
            continue
        seen[name] = 1
        val = held.get(name, envval) if _identifier(name) else envval
        if _non_ascii(name):
            nonascii.append(name)  # a look-alike of a setting (Greek or Cyrillic letters, fullwidth forms): below
        elif not name.startswith("VLGRPO_") and _upper_ascii(name).startswith("VLGRPO_"):
            out.problems.append(settings.near_miss(name, _upper_ascii(name), "only by case"))
        if name.startswith("VLGRPO_"):
            if not _identifier(name):
                if not _non_ascii(name):
                    out.problems.append(
                        settings.problem(
                            settings.show(name),
                            "not a setting (not even a valid variable name)",
                            "unset it (--help lists the settings)",
                        )
                    )
                continue
            row = declared.get(name[len("VLGRPO_") :])
            # a setting a Python reader owns (the patch switches) reaches the children; the doctor's settings reach
            # the doctor, which checks them itself
            if row is not None and ("patches" in row.owner or owner == "doctor"):
                out.passed.append(name)
            continue
        if not _identifier(name):
            if name.startswith("BASH_FUNC_") and val:
                out.problems.append(
                    settings.problem(
                        settings.show(name),
                        "an exported shell function: every bash the launch starts would run it in "
                        "place of the command of that name",
                        "unset it before the launch (export -fn NAME; Lmod: unset -f module ml; Slurm: --export=NONE or "
                        "a list)",
                    )
                )
            else:
                out.odd.append(name)
                out.dropped.append(settings.show(name))
            continue
        env = environment.env_row(name, owner)
        kind = env.kind if env is not None else ""
        if env is not None and kind == "refused":
            if envval and not _own_value(env, envval):
                out.problems.append(
                    settings.problem(name, f"{env.meaning} (value not shown)", env.fix or "unset it for the launch")
                )
            else:
                out.dropped.append(name)
        elif env is not None and kind == "pass":
            out.passed.append(name)
            if env.type:
                out.typed.append(name)
        elif env is None or kind == "pass-on-request":
            if name in requested:
                out.passed.append(name)
                out.requested.append(name)
                # a name without a row is checked too (UNLISTED: a path-shaped name gets the dirs rule)
                if env is None or env.type:
                    out.typed.append(name)
            else:
                out.dropped.append(name)
        else:
            out.dropped.append(name)  # drop, or a value this entrypoint sets itself
    _check_requested(owner, requested, held, out)
    out.nonascii = nonascii
    return out


def value_problems(
    owner: str, values: list[str], pass_env: str, protect: tuple[str, ...], nonascii: list[str]
) -> list[str]:
    """Problem lines of the passed typed variables (``values``: ``NAME=VALUE`` as bash exports them once the
    environment is built) under their registry rows (:func:`vlgrpo.environment.check_values`; ``protect``: real
    paths typed folders may not lie in), then of the ``nonascii`` names whose skeleton
    (:func:`vlgrpo.environment.skeleton`) is a ``VLGRPO_*`` name: ``VLGRΡO_LR`` (Greek Rho) would be ignored without
    a word."""
    out: list[str] = []
    names = tuple(n for n in (pass_env.split(",") if pass_env else []) if n)
    for name, why, fix in environment.check_values(values, owner, names, protect):
        if name:
            out.append(settings.problem(_one_line(name), _one_line(why) + " (value not shown)", _one_line(fix)))
    for name in nonascii:
        skel = environment.skeleton(name).replace("\n", "?").replace("\r", "?")
        if skel.startswith("VLGRPO_"):
            out.append(settings.near_miss(settings.show(name), skel, "by a look-alike character (a non-ASCII letter)"))
    return out


def _one_line(text: str) -> str:
    return text.replace("\n", " ").replace("\r", " ")


def _check_requested(owner: str, requested: list[str], held: dict[str, str], out: Classified) -> None:
    """Every name in ``VLGRPO_PASS_ENV`` must be one a launch may pass; the ones not set are listed."""
    for n in requested:
        if n.startswith("VLGRPO_"):
            out.problems.append(
                settings.problem(
                    "VLGRPO_PASS_ENV",
                    f"names {n}: settings are not passed this way "
                    "(the patch switches reach the children by themselves)",
                    f"remove {n} from VLGRPO_PASS_ENV",
                )
            )
            continue
        env = environment.env_row(n, owner)
        if env is not None and env.kind == "refused":
            out.problems.append(
                settings.problem(
                    "VLGRPO_PASS_ENV",
                    f"names {n}, which is refused: {env.meaning}",
                    f"remove {n} from VLGRPO_PASS_ENV and unset it",
                )
            )
        elif env is not None and env.kind == "drop":
            out.problems.append(
                settings.problem(
                    "VLGRPO_PASS_ENV",
                    f"names {n}, which is never passed: {env.meaning}",
                    f"remove {n} from VLGRPO_PASS_ENV",
                )
            )
        elif env is not None and env.kind == "set":
            out.problems.append(
                settings.problem(
                    "VLGRPO_PASS_ENV",
                    f"names {n}, which this entrypoint sets itself: {env.meaning}",
                    f"remove {n} from VLGRPO_PASS_ENV",
                )
            )
        if n not in held:
            out.unset_named.append(n)


def protected(checkpoint_dir: str, markers: list[str], mountinfo: str) -> tuple[str, ...]:
    """The real paths typed folders may not lie in: the checkpoint folder and, in a container, the mount point of
    the volume it is on (none when the folder does not exist)."""
    try:
        ck = os.path.realpath(checkpoint_dir, strict=True) if checkpoint_dir else ""
    except (OSError, RuntimeError):
        ck = ""
    if not ck:
        return ()
    out = [ck]
    if mounts.in_container(markers, mountinfo):
        try:
            m = mounts.mount_of(ck, mounts.read_mounts(mountinfo))
        except OSError:
            m = None
        if m is not None and m.point != "/":
            out.append(m.point)
    return tuple(out)
