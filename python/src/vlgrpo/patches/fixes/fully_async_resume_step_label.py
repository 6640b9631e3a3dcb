"""Patch ``fully_async.resume_step_label``: after a resume the first trainer step is labelled ``N*T + 1``, not
``N*T + 2`` (field case C04 (a), verl issue #7933, PR #7935).

verl v0.8.0's ``FullyAsyncTrainer.load_checkpoint`` (``verl/experimental/fully_async_policy/fully_async_trainer.py``)
sets ``global_steps = N * trigger_parameter_sync_step + 1`` and ``fit()`` adds 1 again before the first step, so
after resuming from ``global_step_5`` with T=16 the first step is logged (``training/global_step``, dumps, the next
checkpoint's bookkeeping) as 82 instead of 81. The wrapper runs verl's ``load_checkpoint`` and, when it loaded a
checkpoint, sets ``global_steps = current_param_version * trigger_parameter_sync_step`` (what PR #7935 does).

Standard library at import (the registry imports this module at interpreter start).
"""

RECORD = {
    "id": "fully_async.resume_step_label",
    "title": "a resumed fully-async run skips one step number (C04)",
    "summary": (
        "the fully-async trainer resumed from global_step_N labels its first step N*T + 2 (load_checkpoint sets "
        "N*T + 1 and fit() adds 1): one step number skipped in metrics, dumps and later saves; load_checkpoint now "
        "leaves N*T so the first step is N*T + 1"
    ),
    "upstream": "verl-project/verl#7933 (fix: verl PR #7935; not in verl 0.8.0, 0.9.0 or 0.9.1)",
    "applies_when": (
        "FullyAsyncTrainer.load_checkpoint sets global_steps to an expression ending in '+ 1' and fit() "
        "increments global_steps before its first step (verl v0.8.0-0.9.1)"
    ),
    "targets": (
        (
            "verl.experimental.fully_async_policy.fully_async_trainer",
            "FullyAsyncTrainer.__ray_metadata__.modified_class.load_checkpoint",
        ),
    ),
    "detector": __name__ + ":is_faulty",
    "replacement": __name__ + ":make_load_checkpoint",
    "wraps": True,
    "verify": __name__ + ":verify",
    "recheck_after": (),
}


def _assigns_plus_one(fn):
    import ast

    for node in ast.walk(fn):
        if (
            isinstance(node, ast.Assign)
            and any(getattr(t, "attr", None) == "global_steps" for t in node.targets)
            and isinstance(node.value, ast.BinOp)
            and isinstance(node.value.op, ast.Add)
            and isinstance(node.value.right, ast.Constant)
            and node.value.right.value == 1
        ):
            return node.lineno
    return None


def _increments(fn):
    import ast

    return any(
        isinstance(n, ast.AugAssign) and getattr(n.target, "attr", None) == "global_steps" and isinstance(n.op, ast.Add)
        for n in ast.walk(fn)
    )


def is_faulty(obj, fit=None):
    """``(faulty, reason)`` for ``FullyAsyncTrainer.load_checkpoint`` (a function under Ray's tracing wrapper, or an
    ``ast.FunctionDef`` with the class's ``fit`` node in ``fit``): faulty when it assigns ``global_steps = ... + 1``
    and ``fit`` increments ``global_steps`` too."""
    import sys

    from vlgrpo.patches.source import function_node, unwrap_named

    obj = unwrap_named(obj, "_resume_span")  # Ray wraps an actor class's methods
    fn = function_node(obj)
    line = _assigns_plus_one(fn)
    if line is None:
        return False, f"{fn.name} does not set global_steps to N*T + 1 (verl PR #7935's fix, or other code)"
    if fit is None:
        owner = getattr(sys.modules.get(getattr(obj, "__module__", "")), "FullyAsyncTrainer", None)
        owner = getattr(getattr(owner, "__ray_metadata__", None), "modified_class", owner)
        fit = getattr(owner, "fit", None)
        if fit is None:
            return False, "no FullyAsyncTrainer.fit to compare with"
        fit = function_node(unwrap_named(fit, "_resume_span"))
    if not _increments(fit):
        return False, "fit() does not increment global_steps before the first step"
    return True, (
        f"{fn.name} sets global_steps = N*T + 1 (line {line}) and fit() adds 1 again: the first step after a "
        "resume is labelled N*T + 2 (verl issue #7933)"
    )


def make_load_checkpoint(original):
    """Wrap ``async FullyAsyncTrainer.load_checkpoint(self)`` (verl v0.8.0)."""

    async def load_checkpoint(self, *args, **kwargs):
        result = await original(self, *args, **kwargs)
        version = getattr(self, "current_param_version", 0)
        if result and version:
            self.global_steps = version * self.trigger_parameter_sync_step
        return result

    return load_checkpoint


make_load_checkpoint.__vlgrpo_code__ = make_load_checkpoint(None).__code__


def verify() -> None:
    """A trainer resumed at version 5 with T=16 by a v0.8.0-like load and fit increment labels its first step 81; a
    fresh start (load returns 0) keeps verl's value. Raises ``AssertionError``."""
    import asyncio
    from types import SimpleNamespace

    async def original(self):
        if not self.resume:
            return 0
        self.current_param_version = 5
        self.global_steps = self.current_param_version * self.trigger_parameter_sync_step + 1
        return 5

    load = make_load_checkpoint(original)
    trainer = SimpleNamespace(resume=True, trigger_parameter_sync_step=16, global_steps=0, current_param_version=0)
    assert asyncio.run(load(trainer)) == 5
    trainer.global_steps += 1  # fit()
    assert trainer.global_steps == 81, trainer.global_steps
    fresh = SimpleNamespace(resume=False, trigger_parameter_sync_step=16, global_steps=0, current_param_version=0)
    asyncio.run(load(fresh))
    assert fresh.global_steps == 0
