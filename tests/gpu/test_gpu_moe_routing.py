"""Train-mode MoE routing of transformers 4.57.6's Qwen3VLMoeTextSparseMoeBlock on CUDA (B03, and the
train == eval property B04 is about), through tests/gpu/gpu_moe_routing.py in subprocesses.

Tolerances: bf16 outputs and gradients within 2e-2 relative L2 of the float64 reference written in
gpu_moe_routing.py, and train within 2e-2 of eval (measured on CPU: about 6e-3 and 4e-3).
"""

from __future__ import annotations

from gpu_helpers import HERE, load_json, log_dir, run_script
import sys

import pytest

SCRIPT = str(HERE / "gpu_moe_routing.py")
RTOL = 2e-2


def _run(patched: bool) -> dict:
    name = f"moe_{'patched' if patched else 'unpatched'}"
    out = log_dir() / f"{name}.json"
    proc = run_script([sys.executable, SCRIPT, str(out)], patched=patched, name=name)
    return load_json(out, proc)


def _assert_train_eval_reference(c: dict):
    assert "eval_error" not in c and "train_error" not in c, c
    assert c["same_topk_train_eval"]
    for k, v in c["rel"].items():
        assert v <= RTOL, (k, v, c["rel"])


@pytest.fixture(scope="module")
def unpatched():
    return _run(False)


@pytest.fixture(scope="module")
def patched():
    return _run(True)


def test_original_block_fails_under_mixed_precision(unpatched):
    assert unpatched["transformers"] == "4.57.6" and not unpatched["vlgrpo_loaded"]
    c = unpatched["cases"]["autocast"]
    assert c["forward_patch"] is None
    for mode in ("eval", "train"):
        assert "Expected self.dtype to be equal to src.dtype" in c[f"{mode}_error"]["message"], c


def test_original_block_pure_bf16_train_eq_eval_eq_reference(unpatched):
    _assert_train_eval_reference(unpatched["cases"]["bf16"])


@pytest.mark.parametrize("case", ["bf16", "autocast"])
def test_patched_block_train_eq_eval_eq_reference(patched, case):
    assert patched["vlgrpo_loaded"]
    c = patched["cases"][case]
    assert c["forward_patch"] == "qwen3_vl_moe.router_dtype", c["forward_fn"]
    _assert_train_eval_reference(c)
    if case == "autocast":
        assert c["logits_dtype"] == "torch.bfloat16"
