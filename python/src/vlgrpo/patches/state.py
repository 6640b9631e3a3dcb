"""Process-wide patch state, the switches and the status names (imported at interpreter start).

Standard library only, and only what the interpreter has already loaded (``os``): every other module of the
package imports this one, and it imports none of them except :mod:`vlgrpo.patches.log`, lazily, to log, and
:mod:`vlgrpo.environment` (stdlib only), lazily, when a switch is set.

Switches (read by :func:`read_switches` and :func:`strict`), each a row of the registry (vlgrpo/environment.tsv) read
by its rule, :func:`vlgrpo.environment.read_setting`, the one the entrypoints apply (vlgrpo.launch): an unset or
empty switch is its default (every switch's default is empty: patches on, none left out, not strict; a test holds the
registry to that, so an interpreter with no switch set reads no file); an invalid value is its default too, with a
warning (:func:`switch_problems`, logged by the bootstrap), never an error: this runs in every interpreter, and a
launch refuses the value itself. ``VLGRPO_PATCHES=off`` switches every patch off (the registry's enum is ``on off``:
``OFF``, ``no`` or ``0`` keep them on); ``VLGRPO_PATCHES_DISABLED=<id>,<id>`` switches single patches off;
``VLGRPO_PATCHES_STRICT=1`` (or true) makes every failure raise instead of being logged and recorded.
"""

import os

#: Values of ``VLGRPO_PATCHES`` that switch every patch off / keep them on, the registry row's enum
#: (python/src/vlgrpo/environment.tsv). Anything else (``no``, ``0``, ``OFF``, `` off``, ``disabled``, ...) fails
#: closed: on, with a warning, so a value the entrypoints refuse cannot switch the patches off in a Ray worker that
#: got it another way (a job's runtime_env).
OFF_VALUES = ("off",)
ON_VALUES = ("", "on")

#: Status of a patch or of one of its targets (see :mod:`vlgrpo.patches.engine` for their meaning).
APPLIED, NOT_NEEDED, ABSENT, DISABLED, FAILED, PENDING = (
    "applied",
    "not needed",
    "target absent",
    "disabled",
    "failed",
    "pending",
)
#: The statuses :func:`vlgrpo.patches.status` reports after importing the targets (``PENDING`` only without).
STATUSES = (APPLIED, NOT_NEEDED, ABSENT, DISABLED, FAILED)

#: Process-wide state, read by :func:`vlgrpo.patches.status` and :func:`vlgrpo.patches.bootstrap_state`.
STATE: dict = {
    "installed": False,  # finder on sys.meta_path
    "via": None,  # "sitecustomize", "pth", "api", "cli"
    "enabled": True,  # False under VLGRPO_PATCHES=off
    "disabled_ids": (),  # from VLGRPO_PATCHES_DISABLED
    "unknown_disabled_ids": (),
    "strict": False,
    "chained_sitecustomize": None,  # path of the pre-existing sitecustomize we executed
    "chain_error": None,
    "hook_errors": [],  # (module, "ExcType: message") of hooks that raised outside the engine's own guard
    "late_hooks": [],  # target modules another finder/loader imported past ours; hooked on the next import
    "unpatched_ids": (),  # undone in this process by vlgrpo.patches.unpatch() (until vlgrpo.patches.apply())
}

_LOGGED = set()


SWITCHES = ("VLGRPO_PATCHES", "VLGRPO_PATCHES_DISABLED", "VLGRPO_PATCHES_STRICT")
_PROBLEMS = {}  # switch name -> the problem of its value (read_switches, strict)


def _switch(name):
    """The value of switch ``name`` by its registry rule (None: the default), recording a problem of its value."""
    if not os.environ.get(name, ""):
        _PROBLEMS.pop(name, None)
        return None
    try:
        from vlgrpo import environment

        value, problem = environment.read_setting(name)
    except Exception as exc:  # the registry unreadable: fail closed (the default), and say why
        value, problem = None, f"{name}: could not be checked against the registry ({type(exc).__name__}: {exc})"
    if problem:
        _PROBLEMS[name] = problem
    else:
        _PROBLEMS.pop(name, None)
    return value


def switch_problems():
    """``{switch name: problem}`` of the switches read so far whose value is invalid (each then has its default)."""
    return dict(_PROBLEMS)


def strict() -> bool:
    """True when ``VLGRPO_PATCHES_STRICT`` is a true value of the registry's bool (true, True, 1)."""
    return _switch("VLGRPO_PATCHES_STRICT") is True


def read_switches() -> tuple[str, bool, tuple[str, ...]]:
    """The patch switches as :func:`vlgrpo.patches.bootstrap.install` reads them: ``(switch, all_off, disabled)``
    with ``switch`` the ``VLGRPO_PATCHES`` value (``""`` unset; as written when invalid), ``all_off`` whether it
    switches every patch off, and ``disabled`` the ids listed in ``VLGRPO_PATCHES_DISABLED`` (a tuple, known or not;
    empty when the list is invalid). Also read by the preflight and the doctor."""
    value = _switch("VLGRPO_PATCHES")
    if value is None and "VLGRPO_PATCHES" in _PROBLEMS:
        switch = os.environ.get("VLGRPO_PATCHES", "")
    else:
        switch = value or ""
    disabled = _switch("VLGRPO_PATCHES_DISABLED")
    return switch, value in OFF_VALUES, tuple(disabled or ())


def enabled(patch_id: str) -> bool:
    """True unless the switches turned ``patch_id`` off in this process (as :data:`STATE` recorded them) or
    :func:`vlgrpo.patches.unpatch` undid it here."""
    return STATE["enabled"] and patch_id not in STATE["disabled_ids"] and patch_id not in STATE["unpatched_ids"]


def disabled_reason(patch_id: str) -> str:
    """Why :func:`enabled` is False for ``patch_id`` (the reason of its ``disabled`` status rows)."""
    if not STATE["enabled"]:
        return "VLGRPO_PATCHES=off"
    if patch_id in STATE["disabled_ids"]:
        return f"{patch_id} listed in VLGRPO_PATCHES_DISABLED"
    if patch_id in STATE["unpatched_ids"]:
        return f"undone in this process by vlgrpo.patches.unpatch({patch_id!r}); vlgrpo.patches.apply() redoes it"
    return "enabled"


def set_unpatched(patch_id: str, undone: bool) -> None:
    """Record that :func:`vlgrpo.patches.unpatch` undid ``patch_id`` in this process (``undone``) or
    :func:`vlgrpo.patches.apply` redid it."""
    ids = tuple(i for i in STATE["unpatched_ids"] if i != patch_id)
    STATE["unpatched_ids"] = ids + (patch_id,) if undone else ids


def snapshot() -> dict:
    """A copy of :data:`STATE` (its lists copied too), for callers that report it."""
    state = dict(STATE)
    state["hook_errors"] = list(state["hook_errors"])
    state["late_hooks"] = list(state["late_hooks"])
    return state


def log_once(key, level, message):
    """Log ``message`` once per ``key`` on the ``vlgrpo.patches`` logger (imports ``logging`` lazily)."""
    if key in _LOGGED:
        return
    _LOGGED.add(key)
    try:
        from vlgrpo.patches import log

        prefix = "" if message.startswith("vlgrpo.patches") else "vlgrpo.patches: "
        log.logger().log(level, prefix + message)
    except Exception:  # logging itself must not break the host
        pass
