"""Patch ``fully_async.stall_watchdog``: a fully-async run that stops making progress ends with the stalled stage
named and every actor's stacks written, instead of hanging silently (field case C13).

verl v0.8.0's fully-async task runner waits on the trainer and the rollouter with ``ray.wait(..., timeout=None)``
(``verl/experimental/fully_async_policy/fully_async_main.py``, ``FullyAsyncTaskRunner._run_training_loop``), and
nothing below it has a deadline: the trainer's wait for rollout samples (``MessageQueueClient.get_sample``), the
weight sync (``FullyAsyncTrainer._fit_update_weights`` -> ``CheckpointEngineManager.update_weights``), the worker
groups' calls (log-prob, actor update) and the checkpoint save (``FullyAsyncTrainer._save_checkpoint``) wait as
long as it takes. One rank stuck in a collective, a rollout server that stops answering, a save on a dead
filesystem: the job sits at 0 % utilisation until someone notices.

The wrappers open a :func:`vlgrpo.watchdog.watch` stage around each of those methods (named with the trainer step and
parameter version) and count every sample the trainer receives as progress (:func:`vlgrpo.watchdog.beat`); after
``VLGRPO_STALL_TIMEOUT`` seconds (default 1800; 0 switches the watchdog off) without progress the watchdog writes the
stacks into ``<trainer.default_local_dir>/stalls/`` and ends the process with exit code 75 (the job's driver then
fails and the scheduler restarts it from the last checkpoint; :mod:`vlgrpo.watchdog`). verl's code runs unchanged
inside the stages.

Standard library at import (the registry imports this module at interpreter start).
"""

import os

_TRAINER = "verl.experimental.fully_async_policy.fully_async_trainer"
_ROLLOUTER = "verl.experimental.fully_async_policy.fully_async_rollouter"
_QUEUE = "verl.experimental.fully_async_policy.message_queue"
# Ray actor classes: their methods live on the class Ray pickles when the actor is created
_T = "FullyAsyncTrainer.__ray_metadata__.modified_class."
_R = "FullyAsyncRollouter.__ray_metadata__.modified_class."

#: method name -> the stage it runs (what the stall line and the stacks file name)
STAGES = {
    "init_workers": "worker start-up (init_workers: placement, model load, engines)",
    "fit": "training loop (fit)",
    "_get_samples_from_queue": "waiting for rollout samples (_get_samples_from_queue)",
    "_fit_compute_reward": "reward (_fit_compute_reward)",
    "_fit_compute_log_prob": "old log-prob (_fit_compute_log_prob)",
    "_fit_compute_ref_log_prob": "reference log-prob (_fit_compute_ref_log_prob)",
    "_fit_update_actor": "actor update (_fit_update_actor)",
    "_fit_update_weights": "weight sync (_fit_update_weights)",
    "_fit_validate": "validation (_fit_validate)",
    "_save_checkpoint": "checkpoint save (_save_checkpoint)",
    # RayPPOTrainer's (patch ppo.stall_watchdog: main_ppo, the VeOmni recipe)
    "_validate": "validation (_validate)",
    "_compute_old_log_prob": "old log-prob (_compute_old_log_prob)",
    "_compute_ref_log_prob": "reference log-prob (_compute_ref_log_prob)",
    "_update_actor": "actor update (_update_actor)",
}
#: methods whose return is progress inside the open stage (no stage of their own)
BEATS = ("get_sample",)

RECORD = {
    "id": "fully_async.stall_watchdog",
    "title": "fully-async: a stalled stage hangs the job silently: stage named, stacks written, exit 75 (C13)",
    "summary": (
        "verl's fully-async task runner waits on the trainer with no deadline, and so do the trainer's wait for "
        "rollout samples, the weight sync, the worker-group calls and the checkpoint save: a hang anywhere leaves "
        "the job at 0 % utilisation forever; these stages now run under a progress watchdog (VLGRPO_STALL_TIMEOUT, "
        "default 1800 s, 0: off) that names the stalled stage on stderr, writes every actor's Python stacks to "
        "<checkpoint folder>/stalls/ and ends the process with exit code 75 so the job restarts from its last "
        "checkpoint."
    ),
    "upstream": "field case C13 (no upstream watchdog; related: verl-project/verl#6967, a hang at the first sync)",
    "applies_when": (
        "the fully-async trainer's and rollouter's stage methods and the queue client's get_sample wait with no "
        "timeout, deadline or heartbeat anywhere in them (verl v0.8.0)"
    ),
    "targets": (
        (_TRAINER, _T + "init_workers"),
        (_TRAINER, _T + "fit"),
        (_TRAINER, _T + "_get_samples_from_queue"),
        (_TRAINER, _T + "_fit_compute_reward"),
        (_TRAINER, _T + "_fit_compute_log_prob"),
        (_TRAINER, _T + "_fit_compute_ref_log_prob"),
        (_TRAINER, _T + "_fit_update_actor"),
        (_TRAINER, _T + "_fit_update_weights"),
        (_TRAINER, _T + "_fit_validate"),
        (_TRAINER, _T + "_save_checkpoint"),
        (_ROLLOUTER, _R + "init_workers"),
        (_QUEUE, "MessageQueueClient.get_sample"),
    ),
    "detector": __name__ + ":is_faulty",
    "replacement": __name__ + ":make_watched",
    "wraps": True,
    "verify": __name__ + ":verify",
    "recheck_after": (),
}

_BOUNDED = ("timeout", "deadline", "heartbeat", "watchdog")
#: names that bound one sub-wait of a stage, not the stage: verl v0.8.0's ``RayPPOTrainer.init_workers`` hands
#: ``ray_wait_register_center_timeout`` to the worker group for its register-center lookup only, then waits on
#: ``init_model`` (model load, NCCL/HCCL groups, engines) with no deadline
_PARTIAL = frozenset({"ray_wait_register_center_timeout"})


def _plain(func):
    from vlgrpo.patches.source import unwrap_named

    return unwrap_named(func, "_resume_span")  # Ray wraps an actor class's methods when tracing is on


def is_faulty(func):
    """``(faulty, reason)`` for one target: faulty when it is one of :data:`STAGES` / :data:`BEATS` and no name,
    attribute or keyword of its source mentions a timeout, deadline, heartbeat or watchdog (its waits are unbounded);
    a name in :data:`_PARTIAL` bounds one sub-wait only and does not count.
    Parses the installed function's own source with :mod:`ast`."""
    import ast

    from vlgrpo.patches.source import function_node

    fn = function_node(_plain(func))
    if fn.name not in STAGES and fn.name not in BEATS:
        return False, f"{fn.name} is not a stage this patch knows"
    idents = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Attribute):
            idents.add(node.attr)
        elif isinstance(node, ast.Name):
            idents.add(node.id)
        elif isinstance(node, ast.keyword) and node.arg:
            idents.add(node.arg)
    bounded = sorted(i for i in idents - _PARTIAL if any(w in i.lower() for w in _BOUNDED))
    if bounded:
        return False, f"{fn.name} already bounds its wait ({', '.join(bounded)})"
    what = STAGES.get(fn.name, "get_sample: the trainer's wait for one rollout sample")
    return True, f"{what} waits with no deadline: a hang there is silent"


def stage_name(self, method):
    """The stage label of ``method`` run by ``self`` (the trainer or the rollouter): :data:`STAGES` plus the
    trainer step and parameter version where the object has them (``RayPPOTrainer``: the step only)."""
    label = f"{type(self).__name__}: {STAGES.get(method, method)}"
    step, version = getattr(self, "global_steps", None), getattr(self, "current_param_version", None)
    if isinstance(step, int):
        label += f" at trainer step {step}"
        if isinstance(version, int):
            label += f", param version {version}"
    return label


def _configure(self):
    from vlgrpo import watchdog

    config = getattr(self, "config", None)
    try:
        root = config.trainer.default_local_dir
    except Exception:  # noqa: BLE001 - a stand-in without verl's config: keep the folder configured before
        return
    if isinstance(root, str) and root:
        watchdog.configure(os.path.join(root, "stalls"))


def make_watched(original):
    """The wrapper of one target: a :func:`vlgrpo.watchdog.watch` stage around a method of :data:`STAGES`, or a
    :func:`vlgrpo.watchdog.beat` after each return of a method of :data:`BEATS` (async or not, as the original)."""
    import inspect

    from vlgrpo import watchdog

    method = getattr(_plain(original), "__name__", "") if original is not None else ""
    is_async = original is None or inspect.iscoroutinefunction(_plain(original))

    if method in BEATS:

        async def beat_after(self, *args, **kwargs):
            result = await original(self, *args, **kwargs)
            watchdog.beat()
            return result

        return beat_after

    async def watched_async(self, *args, **kwargs):
        _configure(self)
        with watchdog.watch(stage_name(self, method)):
            return await original(self, *args, **kwargs)

    def watched(self, *args, **kwargs):
        _configure(self)
        with watchdog.watch(stage_name(self, method)):
            return original(self, *args, **kwargs)

    return watched_async if is_async else watched


#: the code objects :func:`make_watched` can return (how the engine tells an installed wrapper is ours)
make_watched.__vlgrpo_code__ = tuple(
    c
    for c in make_watched.__code__.co_consts
    if getattr(c, "co_name", "") in ("beat_after", "watched_async", "watched")
)


def verify() -> None:
    """A watched stage that blocks past a 0.3 s bound is reported: the stall line names the stage, the stacks file
    names the blocked function, and the process would exit 75 (the exit is replaced here); a stage that beats every
    0.1 s for 0.8 s is not. Raises ``AssertionError``."""
    import contextlib
    import io
    import tempfile
    import threading
    import time

    from vlgrpo import watchdog

    err = io.StringIO()
    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stderr(err):
        os.chmod(tmp, 0o700)
        with watchdog.trial(os.path.join(tmp, "stalls"), timeout=0.3) as ended:

            class Trainer:
                global_steps, current_param_version = 3, 1

                def _save_checkpoint(self):
                    for _ in range(8):
                        time.sleep(0.1)
                        watchdog.beat()
                    return "saved"

            healthy = make_watched(Trainer._save_checkpoint)
            assert healthy(Trainer()) == "saved" and not ended, ended
            release = threading.Event()

            def _fit_update_weights(self):
                release.wait(10)

            stuck = make_watched(_fit_update_weights)
            runner = threading.Thread(target=stuck, args=(Trainer(),), daemon=True)
            start = time.monotonic()
            runner.start()
            while not ended and time.monotonic() - start < 10:
                time.sleep(0.05)
            release.set()
            runner.join(5)
            assert ended == [watchdog.EXIT_CODE], ended
            line = err.getvalue()
            assert "STALL in stage 'Trainer: weight sync (_fit_update_weights) at trainer step 3" in line, line
            (event,) = [d for d in os.listdir(os.path.join(tmp, "stalls")) if d.startswith("stall-")]
            stacks = [f for f in os.listdir(os.path.join(tmp, "stalls", event)) if f.startswith("stacks-")]
            assert len(stacks) == 1, stacks
            with open(os.path.join(tmp, "stalls", event, stacks[0])) as fh:
                text = fh.read()
            assert "in _fit_update_weights" in text and "weight sync" in text, text
