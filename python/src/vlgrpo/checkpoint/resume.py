"""Which ``global_step_N`` folder a verl run resumes from, with the checks on the way there (field case C03).

Mirrors the folder choice of verl v0.8.0 (``RayPPOTrainer._load_checkpoint``, ``FullyAsyncTrainer.load_checkpoint``,
``FullyAsyncRollouter.load_checkpoint`` with ``verl/utils/checkpoint/checkpoint_manager.py::find_latest_ckpt_path``):
``trainer.resume_mode`` ``disable`` -> none; ``auto`` -> ``<default_local_dir>/latest_checkpointed_iteration.txt``
names ``global_step_<int>``, none when the tracker or the folder is missing; ``resume_path`` ->
``trainer.resume_from_path``. Relative paths are taken from the working directory, as verl does.

Refused (:class:`~vlgrpo.checkpoint.manifest.CheckpointRefused`): a checkpoint folder that fails the one path rule
(:mod:`vlgrpo.pathrule`: another user could move the tracker or a ``global_step_N`` folder away and turn a resume into a
silent fresh start, or plant one; a folder that does not exist yet is judged by its nearest existing parent); a
tracker that is a symlink, not a regular file, owned by another uid or group/world-writable; a tracker verl cannot
read (verl raises at start) or reads as another number than its plain digits say; a tracker whose folder resolves
(symlinks followed) outside the checkpoint folder; a ``resume_path`` folder outside the checkpoint folder without a
valid manifest (the manifest check itself follows in :func:`vlgrpo.checkpoint.manifest.inventory`, for every
folder). Standard library.
"""

from __future__ import annotations

import os
import stat
from typing import Any

from vlgrpo.checkpoint.manifest import CheckpointRefused, StrPath, check_owned, inventory, is_step_number

TRACKER = "latest_checkpointed_iteration.txt"
#: bytes of the tracker read at most (verl reads it whole; a step number is a few digits)
TRACKER_MAX_BYTES = 4096


def _abs(path: StrPath) -> str:
    path = os.fspath(path)
    return path if os.path.isabs(path) else os.path.join(os.getcwd(), path)


def _inside(path: StrPath, root: StrPath) -> bool:
    real, real_root = os.path.realpath(path), os.path.realpath(root)
    return real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep)


def read_tracker(root: StrPath, uid: int | None = None) -> str | None:
    """The folder ``<root>/latest_checkpointed_iteration.txt`` names, or ``None`` when there is no tracker or no
    such folder (verl starts fresh then). Raises :class:`CheckpointRefused` for an unsafe tracker or a folder that
    resolves outside ``root``."""
    uid = os.getuid() if uid is None else uid
    tracker = os.path.join(_abs(root), TRACKER)
    try:
        st = os.lstat(tracker)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISREG(st.st_mode):
        raise CheckpointRefused(
            tracker,
            "tracker is a symlink or not a regular file",
            f"replace it by a file holding the step number (e.g. `echo 5 > {tracker}`)",
        )
    check_owned(tracker, st, uid, "tracker")
    step = tracker_step(tracker)
    folder = os.path.join(_abs(root), f"global_step_{step}")
    if not os.path.lexists(folder):
        return None
    if not _inside(folder, root):
        raise CheckpointRefused(
            folder,
            f"the tracker points to {os.path.realpath(folder)}, outside the checkpoint "
            f"folder {os.path.realpath(_abs(root))}",
            "resume only from folders inside the checkpoint folder; remove the symlink",
        )
    return folder


def tracker_step(tracker: str) -> int:
    """The step number in the tracker file ``tracker``, read as verl v0.8.0 reads it
    (``find_latest_ckpt_path``: ``int(f.read().decode())``, so surrounding white space is dropped), refused
    (:class:`CheckpointRefused`) where verl would raise at start (not UTF-8, not an integer, larger than
    :data:`TRACKER_MAX_BYTES`) and where verl's ``int()`` reads a number that the text does not spell in plain ASCII
    digits (``+5``, ``1_0``, non-ASCII digits): the resume would not be the folder the file seems to name."""
    fix = f"write the step of the checkpoint to resume in plain digits (e.g. `echo 5 > {tracker}`)"
    with open(tracker, "rb") as fh:
        raw = fh.read(TRACKER_MAX_BYTES + 1)
    if len(raw) > TRACKER_MAX_BYTES:
        raise CheckpointRefused(
            tracker, f"tracker is larger than {TRACKER_MAX_BYTES} bytes; a step number is a few digits", fix
        )
    try:
        step = int(raw.decode())
    except (UnicodeDecodeError, ValueError):
        raise CheckpointRefused(
            tracker, f"tracker holds {raw[:40]!r}, not a step number verl can read (it raises ValueError at start)", fix
        ) from None
    if not is_step_number(raw.decode().strip()):
        raise CheckpointRefused(
            tracker, f"tracker holds {raw[:40]!r}, which verl reads as {step}: not a step number in plain digits", fix
        )
    return step


def check_folder_trust(default_local_dir: StrPath, uid: int | None = None) -> None:
    """Refuse (:class:`CheckpointRefused`) a checkpoint folder that fails :func:`vlgrpo.pathrule.check_path`; one
    that does not exist yet (verl creates it) is judged by its nearest existing parent folder."""
    from vlgrpo.pathrule import check_path

    path = _abs(default_local_dir)
    probe = path
    while not os.path.lexists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    problem = check_path(probe, kind="dir", uid=uid)
    if problem is not None:
        raise CheckpointRefused(
            path,
            f"the checkpoint folder is not safe from other users: {problem.text()} (they "
            "could move the tracker or a global_step_N folder away, turning a resume into a "
            "silent fresh start, or plant one)",
            problem.fix,
        )


def resume_folder(
    default_local_dir: StrPath, resume_mode: str, resume_from_path: StrPath | None = None, uid: int | None = None
) -> str | None:
    """The ``global_step_N`` folder verl will load for these ``trainer.*`` values, or ``None`` (fresh start).

    ``default_local_dir`` must pass :func:`check_folder_trust` (modes auto and resume_path). For ``resume_path``,
    a folder outside ``default_local_dir`` must carry a valid manifest (checked here); every
    folder is checked in full by :func:`vlgrpo.checkpoint.manifest.inventory` before loading anyway.
    Raises :class:`CheckpointRefused`.
    """
    if resume_mode == "disable":
        return None
    if resume_mode in ("auto", "resume_path"):
        check_folder_trust(default_local_dir, uid)
    if resume_mode == "auto":
        return read_tracker(default_local_dir, uid)
    if resume_mode == "resume_path":
        if not resume_from_path:
            raise CheckpointRefused(
                "trainer.resume_from_path",
                "is unset with resume_mode=resume_path",
                "set it to a global_step_N folder inside the checkpoint folder",
            )
        folder = _abs(resume_from_path)
        if not _inside(folder, default_local_dir):
            try:
                inventory(folder, uid)
            except CheckpointRefused as exc:
                raise CheckpointRefused(
                    folder,
                    f"lies outside the checkpoint folder {_abs(default_local_dir)} and "
                    f"carries no valid manifest ({exc.reason})",
                    "copy it into the checkpoint folder, or check it and run "
                    f"`python -m vlgrpo checkpoint trust {folder}`",
                ) from None
        return folder
    raise CheckpointRefused("trainer.resume_mode", f"unknown value {resume_mode!r}", "use auto, disable or resume_path")


def resume_folder_of(config: Any, uid: int | None = None) -> str | None:
    """:func:`resume_folder` for a verl (OmegaConf) config: reads ``config.trainer.default_local_dir``,
    ``resume_mode`` and ``resume_from_path``."""
    trainer = config.trainer
    return resume_folder(trainer.default_local_dir, trainer.resume_mode, trainer.get("resume_from_path"), uid)
