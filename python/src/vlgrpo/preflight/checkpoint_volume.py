"""C03: the checkpoint volume as an input. The folder a resume will load must pass the manifest checks of
:mod:`vlgrpo.checkpoint` (the runtime patch checks it again, and hashes, before loading), the volume must be storage
that keeps a checkpoint (not RAM, not a loop image on RAM: :mod:`vlgrpo.checkpoint.volume`), and it must hold one
checkpoint of the model (error below one, warning below two: verl writes the next before it deletes the last)."""

from __future__ import annotations

import os
import shutil
from typing import Any

from .report import ERROR, WARNING, Finding


def free_bytes(path: str) -> int:
    """Bytes free for this user on the file system of ``path`` (``shutil.disk_usage``)."""
    return shutil.disk_usage(path).free


def check_checkpoint_volume(work: Any, report, loc, model_path: str, launch: bool = True) -> dict:
    """Add ``rules.checkpoint-untrusted`` / ``rules.checkpoint-space`` findings; return what was checked.

    ``launch``: the argv is exec'd next (``--purpose launch``, the default): less free space than one checkpoint
    (:func:`vlgrpo.checkpoint.size.checkpoint_bytes`) is an error. ``False`` for the entrypoint's dry run
    (``--purpose plan``): a warning. Less than two is a warning either way."""
    from vlgrpo.checkpoint.manifest import CheckpointRefused, inventory
    from vlgrpo.checkpoint.resume import resume_folder
    from vlgrpo.checkpoint.size import checkpoint_bytes

    trainer = work.trainer
    root = trainer.default_local_dir
    out: dict[str, Any] = {"dir": root}
    try:
        folder = resume_folder(root, trainer.resume_mode, trainer.get("resume_from_path"))
        out["resume_from"] = folder
        if folder is not None:
            out["files"] = len(inventory(folder))
    except CheckpointRefused as exc:
        key = "trainer.resume_from_path" if trainer.resume_mode == "resume_path" else "trainer.default_local_dir"
        report.add(Finding("rules.checkpoint-untrusted", ERROR, f"{exc.path}: {exc.reason}", loc.where(key),
                           "verl unpickles every file of the checkpoint it resumes (field case C03)", exc.fix))
    if os.path.isdir(root):
        from vlgrpo.checkpoint.volume import storage_problem

        need, how = checkpoint_bytes(model_path)
        free = free_bytes(root)
        storage = storage_problem(root)
        if storage.problem:
            report.add(Finding(
                "rules.checkpoint-storage", ERROR if launch else WARNING, storage.problem,
                loc.where("trainer.default_local_dir"),
                "a checkpoint there is lost with the node's memory (or the container), and the space it reports is "
                "not disk" + ("" if launch else " (a dry run: refused when launched)"),
                "point VLGRPO_CHECKPOINT_DIR at a folder on a disk or a shared file system that outlives the node"))
        if len(storage.chain) > 1 and storage.free_bytes is not None and storage.free_bytes < free:
            # a loop image: the backing file system caps what a save can write (a sparse image overstates it)
            free, how = storage.free_bytes, how + f"; free space capped by the loop image's backing file system"
        out.update(free_bytes=free, checkpoint_bytes=need, estimate=how, storage=[m.source for m in storage.chain])
        if free < 2 * need:
            severity = ERROR if free < need and launch else WARNING
            report.add(Finding(
                "rules.checkpoint-space", severity,
                f"{root} has {free / 1e9:.1f} GB free; one checkpoint needs {need / 1e9:.1f} GB ({how})",
                loc.where("trainer.default_local_dir"),
                ("the save fails hours into the run when the volume fills" if free < need else
                 "verl writes the next checkpoint before it removes an old one")
                + ("" if launch or free >= need else " (a dry run: refused when launched)"),
                f"free space or point VLGRPO_CHECKPOINT_DIR at a volume with at least {2 * need / 1e9:.0f} GB"))
    return out
