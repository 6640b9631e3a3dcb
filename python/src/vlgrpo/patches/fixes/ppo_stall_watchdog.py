"""Patch ``ppo.stall_watchdog``: a ``main_ppo`` run (the VeOmni recipe) that stops making progress ends with the
stalled stage named and the trainer's stacks written, instead of hanging silently (field case C13's kind, for the
colocated trainer).

verl v0.8.0's ``main_ppo`` runs ``RayPPOTrainer`` (``verl/trainer/ppo/ray_trainer.py``) inside its ``TaskRunner``
actor and the driver waits on that actor with a plain ``ray.get`` (``verl/trainer/main_ppo.py``): the worker start-up
(``init_workers``), every call of the training loop (``fit``: rollout, the worker groups' log-prob and actor-update
calls) and validation (``_validate``) wait as long as they take. One rank stuck in a collective or a rollout server
that stops answering leaves the job at 0 % utilisation.

The same watchdog as ``fully_async.stall_watchdog`` (:mod:`vlgrpo.watchdog`; the wrapper and the detector are that
module's :func:`~vlgrpo.patches.fixes.fully_async_stall_watchdog.make_watched` and
:func:`~vlgrpo.patches.fixes.fully_async_stall_watchdog.is_faulty`): each target runs in a ``watch`` stage named
with the trainer step; a stage returning is progress, so a healthy step (old log-prob, actor update, ...) keeps the
open ``fit`` stage alive. After ``VLGRPO_STALL_TIMEOUT`` seconds (default 1800; 0: off) without progress the stacks go
to ``<trainer.default_local_dir>/stalls/`` and the ``TaskRunner`` process ends with exit code 75 (Ray reports the
actor dead, the driver's ``ray.get`` raises and the job fails, to be restarted from its last checkpoint).

Not a target: ``RayPPOTrainer._save_checkpoint`` (``checkpoint.manifest`` holds it; a target holds one patch) -- a save
that hangs is seen as no progress in the open ``fit`` stage and named as that stage.

``init_workers`` passes ``ray_wait_register_center_timeout`` to the worker group: it bounds the register-center
lookup only, and the detector does not count it as a bound (``fully_async_stall_watchdog._PARTIAL``).

Standard library at import (the registry imports this module at interpreter start).
"""

_MODULE = "verl.trainer.ppo.ray_trainer"

RECORD = {
    "id": "ppo.stall_watchdog",
    "title": "VeOmni recipe (main_ppo): a stalled stage hangs silently: stage named, stacks written, exit 75",
    "summary": (
        "verl's main_ppo driver waits on the trainer with no deadline, and so do the trainer's worker start-up, its "
        "training loop's rollout and worker-group calls and validation: a hang anywhere leaves the job at 0 % "
        "utilisation forever; these stages now run under the progress watchdog of fully_async.stall_watchdog "
        "(VLGRPO_STALL_TIMEOUT, default 1800 s, 0: off): the stalled stage named on stderr, the stacks in "
        "<checkpoint folder>/stalls/, exit code 75 so the job restarts from its last checkpoint."
    ),
    "upstream": "field case C13's kind for the colocated trainer (no upstream watchdog)",
    "applies_when": (
        "RayPPOTrainer's stage methods wait with no timeout, deadline or heartbeat anywhere in them (verl v0.8.0)"
    ),
    "targets": (
        (_MODULE, "RayPPOTrainer.init_workers"),
        (_MODULE, "RayPPOTrainer.fit"),
        (_MODULE, "RayPPOTrainer._validate"),
        (_MODULE, "RayPPOTrainer._compute_old_log_prob"),
        (_MODULE, "RayPPOTrainer._compute_ref_log_prob"),
        (_MODULE, "RayPPOTrainer._update_actor"),
    ),
    "detector": __name__ + ":is_faulty",
    "replacement": "vlgrpo.patches.fixes.fully_async_stall_watchdog:make_watched",
    "wraps": True,
    "verify": __name__ + ":verify",
    "recheck_after": (),
}


def is_faulty(func):
    """``(faulty, reason)`` for one ``RayPPOTrainer`` stage method: the rule of
    :func:`vlgrpo.patches.fixes.fully_async_stall_watchdog.is_faulty` (no name in the installed source bounds the
    wait), read from the installed function's source."""
    from vlgrpo.patches.fixes import fully_async_stall_watchdog as shared

    return shared.is_faulty(func)


def verify() -> None:
    """The shared watchdog's self-check (:func:`vlgrpo.patches.fixes.fully_async_stall_watchdog.verify`) plus the
    stage label of a ``RayPPOTrainer``: the step without a parameter version. Raises ``AssertionError``."""
    from vlgrpo.patches.fixes import fully_async_stall_watchdog as shared

    shared.verify()

    class RayPPOTrainer:
        global_steps = 3

    label = shared.stage_name(RayPPOTrainer(), "_update_actor")
    assert label == "RayPPOTrainer: actor update (_update_actor) at trainer step 3", label
