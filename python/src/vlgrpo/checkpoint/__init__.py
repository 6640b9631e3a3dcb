"""The checkpoint folder as an input (field case C03): manifests written at save, verified before any load.

verl v0.8.0 unpickles ``global_step_N/data.pt`` and every FSDP shard with ``torch.load(weights_only=False)``, and the
images resume automatically; whoever can write into the checkpoint volume runs code in the rollouter and in every
trainer worker at the next start. This package (standard library only) holds what the runtime patch
``checkpoint.manifest`` and the CLI ``python -m vlgrpo checkpoint`` share:

- :mod:`vlgrpo.checkpoint.manifest`: write a manifest part for the files a writer produced (sha256, size), verify a
  ``global_step_N`` folder against its manifests (cheap checks first: names, kinds, owners, modes, sizes; then the
  sha256 of the files the caller is about to read), ``trust`` an existing folder.
- :mod:`vlgrpo.checkpoint.resume`: which folder a verl config resumes from, and the checks on the tracker file and
  on ``trainer.resume_from_path``.
"""

from vlgrpo.checkpoint.manifest import CheckpointRefused as CheckpointRefused
