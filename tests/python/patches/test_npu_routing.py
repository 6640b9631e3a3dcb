"""verl's real Ascend NPU layer (``verl/models/transformers/npu_patch.py``) on the CPU, with the torch_npu stand-in
(tests/python/npu_stub): verl 0.7.1 (train-routing bug, field case B04) and the pinned 0.8.0. Each scenario runs
in a fresh interpreter (scenarios/npu_block.py) because verl's NPU layer rebinds transformers classes.
"""

from __future__ import annotations

import pytest
from patch_helpers import NPU_STUB, SCENARIOS, run_py

SCRIPT = SCENARIOS / "npu_block.py"
NPU_TARGET = "verl.models.transformers.npu_patch.NPUQwen3VLMoeTextSparseMoeBlock.forward"
NPU_CLASS = "verl.models.transformers.npu_patch.NPUQwen3VLMoeTextSparseMoeBlock"
TOL = 1e-5


def _assert_correct(out, mode):
    res = out[mode]
    assert "error" not in res, res
    assert res["out_err"] < TOL and res["grad_x_err"] < 1e-4 and res["grad_param_err"] < 1e-4, (mode, res)


def _scenario(path, env=None):
    out = run_py(SCRIPT, path=path, env=env).json
    assert "crash" not in out, out.get("crash")
    return out


@pytest.mark.parametrize("order", ["startup", "before"])
def test_verl_071_npu_block_fixed_in_train_mode(verl_071, shim_dir, order):
    path = [shim_dir, verl_071, NPU_STUB] if order == "startup" else [verl_071, NPU_STUB]
    out = _scenario(path, env={"ORDER": order})
    assert out["verl"] == "0.7.1" and out["npu_import"] == "ok"
    assert out["block_class"] == NPU_CLASS  # verl's NPU layer rebound transformers' class name
    assert out["status"]["npu.qwen3_vl_moe.train_routing"][0] == "applied"
    assert "not self.training" in out["status"]["npu.qwen3_vl_moe.train_routing"][1]
    assert out["targets"][NPU_TARGET] == "applied"
    _assert_correct(out, "train")
    _assert_correct(out, "eval")
    assert out["train_eval_diff"] < 1e-6


def test_verl_071_npu_block_unpatched_shows_the_bug(verl_071, shim_dir):
    out = _scenario([shim_dir, verl_071, NPU_STUB], env={"VLGRPO_PATCHES": "off"})
    assert out["status"]["npu.qwen3_vl_moe.train_routing"][0] == "disabled"
    # train mode indexes the (tokens x top_k) weights by expert id: on the NPU that silently reads wrong values,
    # on the CPU the out-of-range index raises
    assert "index" in out["train"]["error"] and "out of bounds" in out["train"]["error"], out["train"]
    _assert_correct(out, "eval")


def test_verl_router_fix_stacked_after_npu_layer(verl_071, shim_dir):
    # transformers<=4.57.3 path (B04 inference): verl's router fix rebinds the forward of whatever class the name
    # holds (the NPU class) with a dense forward; the final bound forward is checked, not an assumed order.
    out = _scenario([shim_dir, verl_071, NPU_STUB], env={"STACK": "verl_router"})
    assert out["forward_file"].endswith("verl/models/transformers/qwen3_vl.py")
    assert out["status"]["npu.qwen3_vl_moe.train_routing"][0] == "not needed"
    assert out["targets"][NPU_TARGET] == "not needed"
    _assert_correct(out, "train")
    _assert_correct(out, "eval")


def test_verl_080_npu_layer_on_transformers_457(shim_dir):
    # pins.md: v0.8.0's npu_patch imports transformers.models.qwen3_5*, absent in 4.57.6 -> verl applies no NPU
    # patch at all; the block stays transformers' own (router-fixed) class.
    out = _scenario([shim_dir, NPU_STUB])
    assert out["verl"] == "0.8.0"
    assert "transformers.models.qwen3_5" in out["npu_import"]
    assert out["block_class"] == "transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe.Qwen3VLMoeTextSparseMoeBlock"
    assert out["status"]["npu.qwen3_vl_moe.train_routing"][0] == "not needed"
    assert out["status"]["qwen3_vl_moe.router_dtype"][0] == "applied"
    _assert_correct(out, "train")
    _assert_correct(out, "eval")


def test_verl_080_npu_layer_when_it_imports(shim_dir):
    # With verl's upstream fix c5a9ed569 the NPU layer loads on 4.57.x; its block is dense in both modes.
    out = _scenario([shim_dir, NPU_STUB], env={"FAKE_QWEN3_5": "1"})
    assert out["verl"] == "0.8.0" and out["npu_import"] == "ok"
    assert out["block_class"] == NPU_CLASS
    assert out["targets"][NPU_TARGET] == "not needed"
    assert out["status"]["npu.qwen3_vl_moe.train_routing"][0] == "not needed"
    _assert_correct(out, "train")
    _assert_correct(out, "eval")
