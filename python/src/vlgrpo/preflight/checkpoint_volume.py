"""C03: the checkpoint volume as an input. The checkpoint folder must pass the one path rule whatever the resume mode
(:func:`vlgrpo.checkpoint.resume.check_folder_trust`; one that does not exist yet: its nearest existing folder).
The folder a resume will load must pass the manifest checks of
:mod:`vlgrpo.checkpoint` (the runtime patch checks it again, and hashes, before loading), the volume must be storage
that keeps a checkpoint (not RAM, not a loop image on RAM: :mod:`vlgrpo.checkpoint.volume`), and it must hold one
checkpoint of the model, and as many as verl keeps at the peak of a save (``retention_peak``)."""

from __future__ import annotations

import os
import shutil
from typing import TYPE_CHECKING, Any

from .report import ERROR, WARNING, Finding, Report

if TYPE_CHECKING:
    from .rules import Locator


def free_bytes(path: str) -> int:
    """Bytes free for this user on the file system of ``path`` (``shutil.disk_usage``)."""
    return shutil.disk_usage(path).free


def retention_peak(keep: Any) -> int | None:
    """Checkpoints on the volume at the peak of a save, for verl's ``trainer.max_actor_ckpt_to_keep`` = ``keep``.

    Mirrors verl v0.8.0 ``verl/utils/checkpoint/checkpoint_manager.py`` (``ensure_checkpoint_capacity`` before the
    save, ``register_checkpoint`` after it): with ``keep`` >= 2 the oldest are removed *before* the save down to
    ``keep - 1``, so the peak is ``keep``; with ``keep`` = 1 the old one is removed only *after* the new one is
    written, so the peak is 2. ``None``, 0 or a negative number: verl removes nothing (``None`` returned: unbounded).
    Only checkpoints saved by the running process are counted; older ``global_step_*`` folders on the volume stay
    and already take their space (so free space measured now is what the peak must fit in)."""
    if keep is None or isinstance(keep, bool) or not isinstance(keep, int) or keep <= 0:
        return None
    return max(keep, 2)


def planned_saves(work: Any) -> int | None:
    """How many checkpoints the run saves (``None`` when it cannot be known before the run: it depends on the
    dataset's length). verl v0.8.0 saves at every ``save_freq``-th step and at the last step
    (``ray_trainer.py`` fit: ``is_last_step``; ``fully_async_trainer.py``: ``_fit_save_checkpoint(force=True)``).
    Steps: ``trainer.total_training_steps`` (main_ppo), or for the fully-async trainer the parameter versions,
    ``rollout.total_rollout_steps / (ppo_mini_batch_size x require_batches x trigger_parameter_sync_step)``
    (``fully_async_rollouter.py`` ``set_max_required_samples``); an upper bound, the dataset may end first."""
    trainer = work.trainer
    freq = trainer.get("save_freq")
    if not isinstance(freq, int) or freq <= 0:
        return 0
    steps = None
    try:
        asy = work.get("async_training")
        total = work.get("rollout", {}).get("total_rollout_steps") if asy is not None else None
        if asy is not None and isinstance(total, int):
            per = (
                int(work.actor_rollout_ref.actor.ppo_mini_batch_size)
                * int(asy.get("require_batches", 1))
                * int(asy.get("trigger_parameter_sync_step", 1))
            )
            steps = total // per if per > 0 else None
        elif isinstance(trainer.get("total_training_steps"), int):
            steps = trainer.get("total_training_steps")
    except (AttributeError, KeyError, TypeError, ValueError):
        steps = None
    if steps is None:
        return None
    return steps // freq + (1 if steps % freq else 0)


def check_checkpoint_volume(
    work: Any, report: Report, loc: Locator, model_path: str, launch: bool = True
) -> dict[str, Any]:
    """Add ``rules.checkpoint-untrusted`` / ``rules.checkpoint-space`` findings; return what was checked.

    ``launch``: the argv is exec'd next (``--purpose launch``, the default): less free space than one checkpoint
    (:func:`vlgrpo.checkpoint.size.checkpoint_bytes`) is an error. ``False`` for the entrypoint's dry run
    (``--purpose plan``): a warning. Less than two is a warning either way."""
    from vlgrpo.checkpoint.manifest import CheckpointRefused, inventory
    from vlgrpo.checkpoint.resume import check_folder_trust, resume_folder
    from vlgrpo.checkpoint.size import checkpoint_bytes

    trainer = work.trainer
    root = trainer.default_local_dir
    out: dict[str, Any] = {"dir": root}
    try:
        if trainer.resume_mode == "disable":
            # no resume now, but the checkpoints this run saves are what a later resume loads
            check_folder_trust(root)
        folder = resume_folder(root, trainer.resume_mode, trainer.get("resume_from_path"))
        out["resume_from"] = folder
        if folder is not None:
            out["files"] = len(inventory(folder))
    except CheckpointRefused as exc:
        from .patch_checks import safety_patch_off

        key = "trainer.resume_from_path" if trainer.resume_mode == "resume_path" else "trainer.default_local_dir"
        # with the patch off nothing checks the files again before verl unpickles them (weights_only=False): the
        # finding is about code the launch would run, which VLGRPO_PREFLIGHT=warn cannot waive
        unguarded = safety_patch_off("checkpoint.manifest")
        report.add(
            Finding(
                "rules.checkpoint-untrusted",
                ERROR,
                f"{exc.path}: {exc.reason}",
                loc.where(key),
                "verl unpickles every file of the checkpoint it resumes (field case C03)"
                + (", and a later resume loads what this run saves there" if trainer.resume_mode == "disable" else "")
                + (
                    "; the patch checkpoint.manifest, which checks them again before loading, is switched "
                    "off, so they would be unpickled as they are"
                    if unguarded
                    else ""
                ),
                exc.fix,
                runs_code=unguarded,
            )
        )
    if os.path.isdir(root):
        from vlgrpo.checkpoint.volume import storage_problem

        need, how = checkpoint_bytes(model_path)
        free = free_bytes(root)
        storage = storage_problem(root)
        if storage.problem:
            report.add(
                Finding(
                    "rules.checkpoint-storage",
                    ERROR if launch else WARNING,
                    storage.problem,
                    loc.where("trainer.default_local_dir"),
                    "a checkpoint there is lost with the node's memory (or the container), and the space it reports is "
                    "not disk" + ("" if launch else " (a dry run: refused when launched)"),
                    "point VLGRPO_CHECKPOINT_DIR at a folder on a disk or a shared file system that outlives the node",
                )
            )
        if len(storage.chain) > 1 and storage.free_bytes is not None and storage.free_bytes < free:
            # a loop image: the backing file system caps what a save can write (a sparse image overstates it)
            free, how = storage.free_bytes, how + "; free space capped by the loop image's backing file system"
        out.update(free_bytes=free, checkpoint_bytes=need, estimate=how, storage=[m.source for m in storage.chain])
        freq = trainer.get("save_freq")
        keep = trainer.get("max_actor_ckpt_to_keep")
        if trainer.get("remove_previous_ckpt_in_save"):
            keep = 1  # verl: deprecated, the same as keeping one
        peak = retention_peak(keep)
        saves = planned_saves(work)
        if peak is not None and saves:
            peak = min(peak, max(saves, 1))
        out.update(keep=keep, peak_checkpoints=peak, saves=saves)
        if isinstance(freq, int) and freq <= 0:
            pass  # no save: the run writes no checkpoint
        elif peak is None:
            _unbounded(report, loc, root, free, need, how, saves, launch)
        elif free < peak * need:
            severity = ERROR if launch else WARNING
            report.add(
                Finding(
                    "rules.checkpoint-space",
                    severity,
                    f"{root} has {free / 1e9:.1f} GB free; keeping {keep} checkpoint(s) needs {peak} x "
                    f"{need / 1e9:.1f} GB = {peak * need / 1e9:.1f} GB at the peak of a save ({how})",
                    loc.where("trainer.max_actor_ckpt_to_keep"),
                    (
                        "verl removes old checkpoints only after the new one is written when it keeps one"
                        if peak == 2 and keep == 1
                        else "verl writes the next checkpoint next to the ones it keeps"
                    )
                    + "; the save fails when the volume fills"
                    + ("" if launch else " (a dry run: refused when launched)"),
                    f"free space, point VLGRPO_CHECKPOINT_DIR at a volume with at least {peak * need / 1e9:.0f} GB"
                    + (
                        f", or keep fewer: VLGRPO_CHECKPOINTS_TO_KEEP={int(free // need)}"
                        if free >= 2 * need
                        else " (keeping fewer does not help: verl holds two at the peak even when it keeps one)"
                    ),
                )
            )
    return out


def _unbounded(
    report: Report, loc: Locator, root: str, free: int, need: int, how: str, saves: int | None, launch: bool
) -> None:
    """verl keeps every checkpoint (``max_actor_ckpt_to_keep`` null or <= 0): the old rule (error below one, a
    warning below two) and a warning naming how many saves fill the volume."""
    if free < 2 * need:
        severity = ERROR if free < need and launch else WARNING
        report.add(
            Finding(
                "rules.checkpoint-space",
                severity,
                f"{root} has {free / 1e9:.1f} GB free; one checkpoint needs {need / 1e9:.1f} GB ({how})",
                loc.where("trainer.default_local_dir"),
                (
                    "the save fails hours into the run when the volume fills"
                    if free < need
                    else "verl writes the next checkpoint before it removes an old one"
                )
                + ("" if launch or free >= need else " (a dry run: refused when launched)"),
                f"free space or point VLGRPO_CHECKPOINT_DIR at a volume with at least {2 * need / 1e9:.0f} GB",
            )
        )
    fits = int(free // need)
    runs = (
        f"the run saves up to {saves} checkpoints ({saves} x {need / 1e9:.1f} GB = {saves * need / 1e9:.1f} GB)"
        if saves
        else "the number of saves depends on the dataset's length"
    )
    fill = f"; the volume ({free / 1e9:.1f} GB free) fills at save {fits + 1}" if saves is None or saves > fits else ""
    report.add(
        Finding(
            "rules.checkpoint-retention",
            WARNING,
            f"every checkpoint is kept (trainer.max_actor_ckpt_to_keep unset or 0): {runs}{fill}",
            loc.where("trainer.max_actor_ckpt_to_keep"),
            "verl never removes a checkpoint without a retention count",
            "set VLGRPO_CHECKPOINTS_TO_KEEP (default 2)",
        )
    )
