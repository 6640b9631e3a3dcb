"""Patch ``checkpoint.manifest``: a checkpoint is loaded only when its manifests show this job wrote it, and only
tensors and plain containers are unpickled (field case C03).

verl v0.8.0 loads ``global_step_N/data.pt`` (``FullyAsyncRollouter.load_checkpoint``,
``RayPPOTrainer._load_checkpoint``) and every FSDP shard and extra state
(``verl/utils/checkpoint/fsdp_checkpoint_manager.py``, ``FSDPCheckpointManager.load_checkpoint``; both recipes' engines
use it) with ``torch.load(weights_only=False)``, so anyone who can write into the checkpoint volume runs code in the
rollouter and every trainer worker at the next (automatic) resume.

With the patch:

- each writer records what it wrote when verl saves (:func:`vlgrpo.checkpoint.manifest.write_part`): every FSDP rank
  its own shards (rank 0 also ``fsdp_config.json`` and ``huggingface/``), the rollouter / the PPO trainer ``data.pt``;
- before verl loads, the folder is checked (:func:`vlgrpo.checkpoint.manifest.verify`: manifests present, owners,
  modes, symlinks, names, sizes; then the sha256 of the files this process reads: each FSDP rank its own three
  shards, the driver ``data.pt``), and the tracker / ``trainer.resume_from_path`` rules of
  :mod:`vlgrpo.checkpoint.resume`; a refusal raises :class:`~vlgrpo.checkpoint.manifest.CheckpointRefused` naming
  the file before any ``torch.load`` runs;
- verl's ``torch.load`` calls inside those loaders run with ``weights_only=True``. Measured on real ``torch.save``
  outputs of verl v0.8.0 (FSDP2, gloo, 2 ranks; tests/python/patches/test_checkpoint_manifest.py): the model and
  optimizer shards (DTensors) and ``data.pt`` (torchdata ``StatefulDataLoader`` state) load as they are; the extra
  state needs numpy's array reconstruction (the RNG state from ``np.random.get_state()``), allowed here by name
  (:data:`NUMPY_ARRAY_GLOBALS`); any other global is refused with the file named.

Standard library at import (the registry imports this module at interpreter start).
"""

import os
import sys

_FSDP = "verl.utils.checkpoint.fsdp_checkpoint_manager"
_ROLLOUTER = "verl.experimental.fully_async_policy.fully_async_rollouter"
_RAY_TRAINER = "verl.trainer.ppo.ray_trainer"
# FullyAsyncRollouter is a Ray actor class: its methods live on the class Ray pickles when the actor is created
_ACTOR = "FullyAsyncRollouter.__ray_metadata__.modified_class"

RECORD = {
    "id": "checkpoint.manifest",
    "title": "checkpoints unpickled with weights_only=False: sha256 manifests, weights only (C03)",
    "summary": (
        "verl unpickles every checkpoint file it resumes from (data.pt, FSDP model/optimizer shards, extra state) with "
        "torch.load(weights_only=False): whoever can write into the checkpoint volume runs code in the rollouter and "
        "every trainer worker; each save now writes a manifest (sha256, size, step, verl version, uid) and each load "
        "first checks owners, modes, names, sizes and the sha256 of what it reads, then unpickles weights only."
    ),
    "upstream": "field case C03 (no upstream fix; same pattern: ecmwf/anemoi-core#1416, OpenBMB/VoxCPM PR #347)",
    "safety": "code execution: without it verl unpickles checkpoint files with weights_only=False",
    "applies_when": (
        "verl's checkpoint loaders call torch.load(weights_only=False) and its savers write no digest "
        "(verl v0.8.0: FSDPCheckpointManager, FullyAsyncRollouter, RayPPOTrainer)"
    ),
    "targets": (
        (_FSDP, "FSDPCheckpointManager.save_checkpoint"),
        (_FSDP, "FSDPCheckpointManager.load_checkpoint"),
        (_ROLLOUTER, _ACTOR + ".save_checkpoint"),
        (_ROLLOUTER, _ACTOR + ".load_checkpoint"),
        (_RAY_TRAINER, "RayPPOTrainer._save_checkpoint"),
        (_RAY_TRAINER, "RayPPOTrainer._load_checkpoint"),
    ),
    "detector": __name__ + ":is_faulty",
    "replacement": __name__ + ":make_wrapper",
    "wraps": True,
    "verify": __name__ + ":verify",
    "recheck_after": (),
}

#: numpy globals an ``np.random.get_state()`` array needs under ``weights_only=True`` (numpy 1.x and 2.x names)
NUMPY_ARRAY_GLOBALS = (
    "numpy.core.multiarray._reconstruct",
    "numpy._core.multiarray._reconstruct",
    "numpy.ndarray",
    "numpy.dtype",
    "numpy.dtypes.UInt32DType",
    "numpy.dtypes.Float64DType",
    "numpy.dtypes.Int64DType",
)
_SHARD_KINDS = ("model", "optim", "extra_state")
_GUARD = {}


# ---- detector --------------------------------------------------------------------------------------------------


def _calls(node, attr):
    import ast

    return [
        n
        for n in ast.walk(node)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == attr
        and getattr(n.func.value, "id", None) == "torch"
    ]


def _unsafe_load(call):
    import ast

    for kw in call.keywords:
        if kw.arg == "weights_only":
            return not (isinstance(kw.value, ast.Constant) and kw.value.value is True)
    return False  # torch >= 2.6 defaults to weights_only=True


def is_faulty(obj, module_source=None):
    """``(faulty, reason)`` for a verl checkpoint saver or loader (a function, or an ``ast.FunctionDef`` with the
    source of its module in ``module_source``). A loader is faulty when one of its ``torch.load`` calls passes
    ``weights_only`` other than ``True``; a saver (it calls ``torch.save``) when its module never computes a digest
    (no ``sha256``/``hashlib``). Anything else is not a target."""
    import inspect

    from vlgrpo.patches.source import function_node, unwrap_named

    obj = unwrap_named(obj, "_resume_span")  # Ray wraps an actor class's methods
    fn = function_node(obj)
    if module_source is None:
        module = sys.modules.get(getattr(obj, "__module__", ""))
        module_source = inspect.getsource(module) if module is not None else ""
    loads = [c for c in _calls(fn, "load") if _unsafe_load(c)]
    if loads:
        return True, (
            f"{fn.name} unpickles checkpoint files with torch.load(weights_only=False) (line "
            f"{loads[0].lineno}) and checks no digest first"
        )
    if _calls(fn, "save"):
        if "sha256" in module_source or "hashlib" in module_source:
            return False, f"{fn.name}'s module already records digests of what it saves"
        return True, f"{fn.name} saves checkpoint files (torch.save) without recording their digests"
    return False, f"{fn.name} neither saves nor unpickles checkpoint files"


# ---- weights-only loads ----------------------------------------------------------------------------------------


def _numpy_globals():
    import importlib

    found = []
    for name in NUMPY_ARRAY_GLOBALS:
        mod, _, attr = name.rpartition(".")
        try:
            found.append(getattr(importlib.import_module(mod), attr))
        except (ImportError, AttributeError):
            continue
    return found


def _install_guard():
    """Replace ``torch.load`` (through :func:`vlgrpo.patches.contract.wrap`, as part of this patch: its
    :func:`vlgrpo.patches.unpatch` puts the original back) by a function that, inside :func:`weights_only_loads`
    only, loads with ``weights_only=True`` (numpy arrays allowed) and turns a refused global into
    ``CheckpointRefused``; everywhere else it calls the original unchanged. Installed again when it was undone."""
    import torch

    if "force" in _GUARD and getattr(torch.load, "__vlgrpo_guard__", False):
        return _GUARD["force"]
    import contextvars
    import pickle

    from vlgrpo.checkpoint.manifest import CheckpointRefused
    from vlgrpo.patches import contract

    # one variable for the life of the process: a weights_only_loads() entered before a re-install resets its token
    force = _GUARD.get("force") or contextvars.ContextVar("vlgrpo_weights_only_loads", default=False)
    original = torch.load

    def load(f, *args, **kwargs):
        if not force.get():
            return original(f, *args, **kwargs)
        kwargs["weights_only"] = True
        kwargs.pop("pickle_module", None)
        try:  # FSDP2 shards hold DTensors; torch allowlists them once this module is imported
            import torch.distributed.tensor  # noqa: F401
        except ImportError:
            pass
        with torch.serialization.safe_globals(_numpy_globals()):
            try:
                return original(f, *args, **kwargs)
            except pickle.UnpicklingError as exc:
                first = str(exc).split("\n\n")[-1].strip().splitlines()
                raise CheckpointRefused(
                    f,
                    "holds objects other than tensors and plain containers, which are not "
                    f"unpickled ({first[0] if first else exc})",
                    "this is not a file verl wrote; resume from another checkpoint",
                ) from None

    load.__vlgrpo_guard__ = True
    contract.wrap(torch, "load", load, patch_id=RECORD["id"], target="torch:load")
    _GUARD["force"] = force
    return force


class weights_only_loads:
    """Context manager: ``torch.load`` calls made inside it (this thread / task) load with ``weights_only=True``."""

    def __enter__(self):
        self._token = _install_guard().set(True)
        return self

    def __exit__(self, *exc):
        _GUARD["force"].reset(self._token)
        return False


# ---- the wrappers ----------------------------------------------------------------------------------------------


def step_dir_of(path):
    """The nearest ``global_step_N`` folder at or above ``path`` (absolute), or ``None``."""
    path = os.path.abspath(os.fspath(path))
    while True:
        base = os.path.basename(path)
        digits = base[len("global_step_") :]
        if base.startswith("global_step_") and digits.isascii() and digits.isdigit():
            return path
        parent = os.path.dirname(path)
        if parent == path:
            return None
        path = parent


def _verl_version():
    verl = sys.modules.get("verl")
    return getattr(verl, "__version__", None)


def _shards(local_path, world_size, rank):
    return [os.path.join(local_path, f"{kind}_world_size_{world_size}_rank_{rank}.pt") for kind in _SHARD_KINDS]


def _is_shard(name):
    return name.endswith(".pt") and "_world_size_" in name and "_rank_" in name


def fsdp_files_written(local_path, world_size, rank):
    """The files FSDP rank ``rank`` of ``world_size`` wrote under ``local_path`` in verl v0.8.0's
    ``FSDPCheckpointManager.save_checkpoint``: its model/optim/extra shards, and on rank 0 every other file there
    (``fsdp_config.json``, ``huggingface/``, LoRA metadata)."""
    files = [p for p in _shards(local_path, world_size, rank) if os.path.isfile(p)]
    if rank == 0:
        for root, _dirs, names in os.walk(local_path):
            files += [os.path.join(root, n) for n in sorted(names) if not (root == local_path and _is_shard(n))]
    return files


def _write_fsdp_part(manager, local_path):
    step_dir = step_dir_of(local_path)
    if step_dir is None:
        return None
    from vlgrpo.checkpoint.manifest import write_part

    files = fsdp_files_written(local_path, manager.world_size, manager.rank)
    part = f"{os.path.basename(os.path.normpath(local_path))}-rank-{manager.rank:05d}"
    return write_part(step_dir, files, part, verl_version=_verl_version())


def _verify_fsdp(manager, local_path):
    from vlgrpo.checkpoint.manifest import CheckpointRefused, verify

    step_dir = step_dir_of(local_path)
    if step_dir is None:
        raise CheckpointRefused(local_path, "is not inside a global_step_N folder", "resume from a verl checkpoint")
    wanted = dict(zip(_SHARD_KINDS, _shards(local_path, manager.world_size, manager.rank)))
    read = [wanted["model"]] if manager.should_load_model else []
    read += [wanted["optim"]] if manager.should_load_optimizer else []
    read += [wanted["extra_state"]] if manager.should_load_extra else []
    return verify(step_dir, [os.path.relpath(p, step_dir) for p in read])


def _verify_driver(trainer):
    """The rollouter's / PPO trainer's check before it loads ``data.pt``: the folder its config resumes from."""
    from vlgrpo.checkpoint.manifest import verify
    from vlgrpo.checkpoint.resume import resume_folder_of

    folder = resume_folder_of(trainer.config)
    if folder is None:
        return None
    return verify(folder, ["data.pt"] if os.path.lexists(os.path.join(folder, "data.pt")) else [])


def _ray_trainer_step_dir(trainer):
    root = trainer.config.trainer.default_local_dir
    root = root if os.path.isabs(root) else os.path.join(os.getcwd(), root)
    return os.path.join(root, f"global_step_{trainer.global_steps}")


def _write_data_part(step_dir, part):
    from vlgrpo.checkpoint.manifest import write_part

    data = os.path.join(step_dir, "data.pt")
    return write_part(step_dir, [data] if os.path.isfile(data) else [], part, verl_version=_verl_version())


def make_wrapper(original):
    """The wrapper for one of the targets of :data:`RECORD` (chosen by the original's qualified name)."""
    qualname = getattr(original, "__qualname__", "")

    if qualname.endswith("FSDPCheckpointManager.save_checkpoint"):

        def save_checkpoint(self, local_path, *args, **kwargs):
            result = original(self, local_path, *args, **kwargs)
            if local_path is not None:
                _write_fsdp_part(self, local_path)
            return result

        wrapper = save_checkpoint
    elif qualname.endswith("FSDPCheckpointManager.load_checkpoint"):

        def load_checkpoint(self, local_path, *args, **kwargs):
            if local_path is None:
                return original(self, local_path, *args, **kwargs)
            _verify_fsdp(self, local_path)
            with weights_only_loads():
                return original(self, local_path, *args, **kwargs)

        wrapper = load_checkpoint
    elif qualname.endswith("FullyAsyncRollouter.save_checkpoint"):

        async def rollouter_save_checkpoint(self, local_global_step_folder, *args, **kwargs):
            result = await original(self, local_global_step_folder, *args, **kwargs)
            _write_data_part(os.path.abspath(local_global_step_folder), "rollouter")
            return result

        wrapper = rollouter_save_checkpoint
    elif qualname.endswith("RayPPOTrainer._save_checkpoint"):

        def trainer_save_checkpoint(self, *args, **kwargs):
            result = original(self, *args, **kwargs)
            _write_data_part(_ray_trainer_step_dir(self), "trainer")
            return result

        wrapper = trainer_save_checkpoint
    else:  # FullyAsyncRollouter.load_checkpoint, RayPPOTrainer._load_checkpoint (sync, self.config)

        def driver_load_checkpoint(self, *args, **kwargs):
            _verify_driver(self)
            with weights_only_loads():
                return original(self, *args, **kwargs)

        wrapper = driver_load_checkpoint
    return wrapper


def _codes():
    def fake(name):
        def f(*a, **k):
            return None

        f.__qualname__ = name
        return f

    names = (
        "FSDPCheckpointManager.save_checkpoint",
        "FSDPCheckpointManager.load_checkpoint",
        "FullyAsyncRollouter.save_checkpoint",
        "RayPPOTrainer._save_checkpoint",
        "RayPPOTrainer._load_checkpoint",
    )
    return tuple(make_wrapper(fake(n)).__code__ for n in names)


make_wrapper.__vlgrpo_code__ = _codes()


def verify() -> None:
    """On a temporary ``global_step_3`` folder: a ``data.pt`` written by ``torch.save`` and recorded by the driver
    save wrapper loads back equal (weights only) through the driver load wrapper; the same folder with one byte of
    ``data.pt`` changed is refused before the original loader runs, and so is a pickled object that is not a
    tensor/container (its ``__reduce__`` would create a file). Raises ``AssertionError``."""
    import tempfile
    from types import SimpleNamespace

    import torch

    from vlgrpo.checkpoint.manifest import CheckpointRefused

    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "ckpt")
        step = os.path.join(root, "global_step_3")
        os.makedirs(step)
        state = {"sampler": {"generator": torch.arange(5, dtype=torch.uint8)}, "steps": 7}
        loaded = []

        def save(self):
            torch.save(state, os.path.join(step, "data.pt"))
            with open(os.path.join(root, "latest_checkpointed_iteration.txt"), "w") as fh:
                fh.write("3")

        def load(self):
            loaded.append(torch.load(os.path.join(step, "data.pt"), weights_only=False))

        save.__qualname__, load.__qualname__ = "RayPPOTrainer._save_checkpoint", "RayPPOTrainer._load_checkpoint"
        trainer = SimpleNamespace(
            global_steps=3,
            config=SimpleNamespace(
                trainer=SimpleNamespace(
                    default_local_dir=root, resume_mode="auto", get=lambda key, default=None: default
                )
            ),
        )
        make_wrapper(save)(trainer)
        make_wrapper(load)(trainer)
        assert torch.equal(loaded[-1]["sampler"]["generator"], state["sampler"]["generator"]), loaded
        with open(os.path.join(step, "data.pt"), "r+b") as fh:
            fh.seek(-30, 2)
            byte = fh.read(1)
            fh.seek(-30, 2)
            fh.write(bytes([byte[0] ^ 1]))
        try:
            make_wrapper(load)(trainer)
        except CheckpointRefused as exc:
            assert "data.pt: changed since it was written" in str(exc), exc
        else:
            raise AssertionError("a changed data.pt was loaded")
        assert len(loaded) == 1
        marker = os.path.join(tmp, "ran")
        torch.save({"x": _Canary(marker)}, os.path.join(step, "data.pt"))
        with weights_only_loads():
            try:
                torch.load(os.path.join(step, "data.pt"), weights_only=False)
            except CheckpointRefused as exc:
                assert "holds objects other than tensors" in str(exc), exc
            else:
                raise AssertionError("an arbitrary object was unpickled")
        assert not os.path.exists(marker), "the canary's __reduce__ ran"


class _Canary:
    """Pickles to ``open(path, "w")`` (what a malicious ``data.pt`` would run)."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))
