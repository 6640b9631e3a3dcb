"""The grouped experts (patch ``qwen3_vl_moe.grouped_experts``) on CUDA at the real sizes, through
tests/gpu/gpu_moe_experts.py in a subprocess with the vlgrpo sitecustomize (see its docstring for the cases).
Speed and memory are measured by bench/moe_experts.py, not here.
"""

from __future__ import annotations

import sys

import pytest

from gpu_helpers import HERE, load_json, log_dir, run_script

SCRIPT = str(HERE / "gpu_moe_experts.py")


@pytest.fixture(scope="module")
def rep():
    out = log_dir() / "moe_experts_cuda.json"
    proc = run_script([sys.executable, SCRIPT, str(out)], patched=True, name="moe_experts_cuda", timeout=400)
    return load_json(out, proc)


def _ok(rep, case):
    res = rep[case]
    assert "error" not in res, res["error"]
    return res


def test_patch_is_bound_and_uses_grouped_mm_on_the_h200(rep):
    assert rep["transformers"] == "4.57.6"
    assert rep["patch"]["vlgrpo_patch"] == "qwen3_vl_moe.grouped_experts", rep["patch"]
    method, reason = rep["patch"]["torch.bfloat16"]
    assert method == "grouped_mm", reason  # compute capability 9.0, torch with a grouped GEMM


def test_bf16_error_no_larger_than_transformers_4576(rep):
    res = _ok(rep, "accuracy")
    for mode in ("train", "eval"):
        r = res[mode]
        assert r["dtype"][0] == r["dtype"][1] and r["shape"][0] == r["shape"][1] == [1, 4096, 2048], r
        assert r["ours"] <= 1.25 * r["transformers"], (mode, r)
        assert r["ours_vs_transformers_rel"] < 2e-2, (mode, r)


def test_fp32_gradients_match_the_loop(rep):
    res = _ok(rep, "grads_fp32")
    assert max(res.values()) < 1e-3, res  # fp32 (TF32 inside a grouped GEMM would show as ~1e-3)


def test_no_host_sync_in_train_and_eval(rep):
    assert _ok(rep, "sync") == {"train": "no sync", "eval": "no sync"}


def test_real_block_under_autocast_with_the_router_fix(rep):
    res = _ok(rep, "block")
    assert res["block_forward_patch"] == "qwen3_vl_moe.router_dtype"
    for mode in ("train", "eval"):
        assert res[mode]["dtype"][0] == res[mode]["dtype"][1] and res[mode]["rel"] < 2e-2, (mode, res[mode])


def test_torch_compile_default_mode_matches_eager(rep):
    res = _ok(rep, "compile")
    assert max(res.values()) < 2e-2, res
