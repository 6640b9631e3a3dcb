"""Process-wide patch state, the switches and the status names (imported at interpreter start).

Standard library only, and only what the interpreter has already loaded (``os``): every other module of the
package imports this one, and it imports none of them except :mod:`vlgrpo.patches.log`, lazily, to log.

Switches (read by :func:`read_switches`): ``VLGRPO_PATCHES=off`` (the one value, in any case and spacing, that the
registry's enum ``on off`` allows) switches every patch off; any other value fails closed: the patches stay on, with
a warning (never an error: this runs in every interpreter; a launch refuses the value itself);
``VLGRPO_PATCHES_DISABLED=<id>,<id>`` switches single patches off;
``VLGRPO_PATCHES_STRICT=1`` makes every failure raise instead of being logged and recorded (:func:`strict`).
"""

import os

#: Values of ``VLGRPO_PATCHES`` (stripped, lower-cased) that switch every patch off / keep them on, the registry
#: row's enum (python/src/vlgrpo/environment.tsv). Anything else (``no``, ``0``, ``false``, ``disabled``, ...) fails
#: closed: on, with a warning, so a value the entrypoints refuse cannot switch the patches off in a Ray worker that
#: got it another way (a job's runtime_env).
OFF_VALUES = ("off",)
ON_VALUES = ("", "on")

#: Status of a patch or of one of its targets (see :mod:`vlgrpo.patches.engine` for their meaning).
APPLIED, NOT_NEEDED, ABSENT, DISABLED, FAILED, PENDING = (
    "applied", "not needed", "target absent", "disabled", "failed", "pending")
#: The statuses :func:`vlgrpo.patches.status` reports after importing the targets (``PENDING`` only without).
STATUSES = (APPLIED, NOT_NEEDED, ABSENT, DISABLED, FAILED)

#: Process-wide state, read by :func:`vlgrpo.patches.status` and :func:`vlgrpo.patches.bootstrap_state`.
STATE = {
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
}

_LOGGED = set()


def strict() -> bool:
    """True when ``VLGRPO_PATCHES_STRICT`` is set to a true value (1/true/yes/on)."""
    return os.environ.get("VLGRPO_PATCHES_STRICT", "").strip().lower() in ("1", "true", "yes", "on")


def read_switches():
    """The patch switches as :func:`vlgrpo.patches.bootstrap.install` reads them: ``(switch, all_off, disabled)``
    with ``switch`` the lower-cased ``VLGRPO_PATCHES`` value, ``all_off`` whether it switches every patch off, and
    ``disabled`` the ids listed in ``VLGRPO_PATCHES_DISABLED`` (a tuple, known or not). Also read by the
    preflight."""
    switch = os.environ.get("VLGRPO_PATCHES", "on").strip().lower()
    raw = os.environ.get("VLGRPO_PATCHES_DISABLED", "")
    return switch, switch in OFF_VALUES, tuple(x.strip() for x in raw.split(",") if x.strip())


def enabled(patch_id: str) -> bool:
    """True unless the switches turned ``patch_id`` off in this process (as :data:`STATE` recorded them)."""
    return STATE["enabled"] and patch_id not in STATE["disabled_ids"]


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
