"""Wiring of ``qwen3_vl.vision_pos_embed`` (the method itself is tested in test_pos_embed*.py): tiny Qwen3-VL and
Qwen3-VL-MoE models from the real configs, with and without verl's monkey patch, in fresh interpreters
(scenarios/vision_model.py). The logits must not change; the final bound method must be ours."""

from __future__ import annotations

import pytest
from patch_helpers import SCENARIOS, run_py

SCRIPT = SCENARIOS / "vision_model.py"
OURS = "vlgrpo/patches/qwen3_vl_pos_embed.py"


def _run(path, env):
    out = run_py(SCRIPT, path=path, env=env).json
    assert "crash" not in out, out.get("crash")
    return out


def _max_diff(a, b):
    return max(abs(x - y) for ra, rb in zip(a, b) for x, y in zip(ra, rb))


@pytest.mark.parametrize("model,verl", [("dense", False), ("moe", True)])
def test_pos_embed_patch_bound_last_and_logits_unchanged(shim_dir, model, verl):
    env = {"MODEL": model, **({"APPLY_VERL": "1"} if verl else {})}
    on = _run([shim_dir], env)
    off = _run([shim_dir], {**env, "VLGRPO_PATCHES": "off"})
    assert on["status"]["qwen3_vl.vision_pos_embed"] == "applied"
    assert on["bound_file"].endswith(OURS)
    assert not off["bound_file"].endswith(OURS)
    if verl:
        # verl bound its module-level copy onto the vision class; that copy is ours, so the fix stays
        assert on["apply_monkey_patch_wrapped"] is True
        assert on["verl_copy_file"].endswith(OURS)
        assert on["targets"]["verl.models.transformers.qwen3_vl.fast_pos_embed_interpolate"] == "applied"
        assert off["bound_file"].endswith("verl/models/transformers/qwen3_vl.py")
    else:
        assert off["bound_file"].endswith(f"transformers/models/qwen3_vl/modeling_qwen3_vl.py")
    assert len(on["logits"]) == len(off["logits"]) == 2 + 4 + 24 + 2 * 2 + 2
    assert _max_diff(on["logits"], off["logits"]) < 1e-5
