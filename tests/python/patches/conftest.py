"""Fixtures of the patch tests (helpers live in patch_helpers.py)."""

from patch_helpers import shim_dir, verl_071  # noqa: F401  (fixtures)
