"""Wiring of ``qwen3_vl.vision_pos_embed`` (the method itself is tested in test_pos_embed*.py): tiny Qwen3-VL and
Qwen3-VL-MoE models from the real configs, first without, then with verl's monkey patch, in fresh interpreters
(scenarios/vision_model.py). The logits must not change; the final bound method must be ours."""

from __future__ import annotations

from patch_helpers import SCENARIOS, run_py

SCRIPT = SCENARIOS / "vision_model.py"
OURS = "vlgrpo/patches/qwen3_vl_pos_embed.py"
STEPS = "dense:0,moe:1"  # dense Qwen3-VL without verl, then Qwen3-VL-MoE through verl's apply_monkey_patch


def _run(path, env):
    out = run_py(SCRIPT, path=path, env={"STEPS": STEPS, **env}).json
    assert "crash" not in out, out.get("crash")
    return out


def _max_diff(a, b):
    return max(abs(x - y) for ra, rb in zip(a, b) for x, y in zip(ra, rb))


def test_pos_embed_patch_bound_last_and_logits_unchanged(shim_dir):
    on = _run([shim_dir], {})
    off = _run([shim_dir], {"VLGRPO_PATCHES": "off"})
    dense_on, dense_off, moe_on, moe_off = on["dense:0"], off["dense:0"], on["moe:1"], off["moe:1"]
    for res in (dense_on, moe_on):
        assert res["status"]["qwen3_vl.vision_pos_embed"] == "applied"
        assert res["bound_file"].endswith(OURS)
    assert dense_off["bound_file"].endswith("transformers/models/qwen3_vl/modeling_qwen3_vl.py")
    # verl bound its module-level copy onto the vision classes; with the patches on, that copy is ours
    assert moe_on["apply_monkey_patch_wrapped"] is True
    assert moe_on["verl_copy_file"].endswith(OURS)
    assert moe_on["targets"]["verl.models.transformers.qwen3_vl.fast_pos_embed_interpolate"] == "applied"
    assert moe_off["bound_file"].endswith("verl/models/transformers/qwen3_vl.py")
    for a, b in ((dense_on, dense_off), (moe_on, moe_off)):
        assert len(a["logits"]) == len(b["logits"]) == 2 + (1 + 4 + 1) + (1 + 24 + 1) + 2
        assert _max_diff(a["logits"], b["logits"]) < 1e-5
