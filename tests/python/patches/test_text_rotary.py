"""Text M-RoPE device fix (``qwen3_vl.text_rotary_device``, field case B01 note): real transformers 4.57.6 rotary
classes, upstream method as the reference. On the CPU the device mismatch is observed with a recorder of torch
calls whose tensors live on different devices ("meta" positions stand in for the accelerator); the GPU suite
checks the real error on CUDA."""

from __future__ import annotations

import pytest
import torch
from transformers.models.qwen3_vl import modeling_qwen3_vl as dense
from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLTextConfig
from transformers.models.qwen3_vl_moe import modeling_qwen3_vl_moe as moe
from transformers.models.qwen3_vl_moe.configuration_qwen3_vl_moe import Qwen3VLMoeTextConfig

from vlgrpo.patches import text_rotary
from vlgrpo.patches.fixes import qwen3_vl_text_rotary_device as text_rotary_fix

ROPE = {"rope_type": "default", "mrope_section": [4, 2, 2], "mrope_interleaved": True}
CASES = [
    (dense.Qwen3VLTextRotaryEmbedding, Qwen3VLTextConfig),
    (moe.Qwen3VLMoeTextRotaryEmbedding, Qwen3VLMoeTextConfig),
]


def _upstream(cls):
    f = cls.forward
    while getattr(f, "__vlgrpo_patch__", None):
        f = f.__wrapped__
    return f


def _positions(seq=11):
    pos = torch.arange(seq)[None, None, :].expand(3, 2, seq).clone()
    pos[1, :, 3:7], pos[2, :, 3:7] = torch.tensor([0, 0, 1, 1]), torch.tensor([0, 1, 0, 1])  # a 2x2 image
    return pos


@pytest.mark.parametrize("cls,cfg_cls", CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_bitwise_equal_to_upstream_on_one_device(cls, cfg_cls, dtype):
    rotary = cls(cfg_cls(hidden_size=32, head_dim=16, num_attention_heads=2, num_key_value_heads=1, rope_scaling=ROPE))
    x = torch.randn(2, 11, 32, dtype=dtype)
    for pos in (_positions(), torch.arange(11)[None].expand(2, 11)):  # 3-D M-RoPE and plain 2-D positions
        ref = _upstream(cls)(rotary, x, pos)
        got = text_rotary.text_rotary_forward(rotary, x, pos)
        assert all(torch.equal(a, b) and a.dtype == dtype for a, b in zip(ref, got))
        assert got[0].shape == (2, 11, 16)


@pytest.mark.parametrize("cls,cfg_cls", CASES)
def test_no_device_mixing_when_inv_freq_stays_on_cpu(cls, cfg_cls):
    rotary = cls(cfg_cls(hidden_size=32, head_dim=16, num_attention_heads=2, num_key_value_heads=1, rope_scaling=ROPE))
    assert rotary.inv_freq.device.type == "cpu"
    x, pos = torch.randn(2, 11, 32), _positions().to("meta")
    with text_rotary.DeviceMixRecorder() as rec:
        _upstream(cls)(rotary, x, pos)
    assert ("matmul", ["cpu", "meta"]) in rec.mixed  # the upstream fault: on CUDA/NPU this raises
    with text_rotary.DeviceMixRecorder() as rec:
        cos, sin = text_rotary.text_rotary_forward(rotary, x, pos)
    assert rec.mixed == [] and cos.device == sin.device == pos.device


def test_detector_on_real_code():
    for cls, _ in CASES:
        faulty, reason = text_rotary_fix.is_faulty(_upstream(cls))
        assert faulty and "inv_freq" in reason
    assert text_rotary_fix.is_faulty(text_rotary.text_rotary_forward)[0] is False
    from transformers.models.qwen2.modeling_qwen2 import Qwen2RotaryEmbedding  # moves inv_freq with .to(x.device)

    assert text_rotary_fix.is_faulty(Qwen2RotaryEmbedding.forward)[0] is False


class _OtherShapeRotary(torch.nn.Module):
    """A rotary of another layout (like transformers 5.17's, which recombines cos/sin through its own method and has
    no ``apply_interleaved_mrope``): it still reads ``self.inv_freq`` without a device move, but the 4.57.x-shaped
    replacement would call attributes it lacks, so the fix must leave it alone."""

    def __init__(self):
        super().__init__()
        self.register_buffer("inv_freq", torch.ones(4), persistent=False)

    def forward(self, x, position_ids):
        freqs = (self.inv_freq[None, None, :, None].float() @ position_ids[:, :, None, :].float()).transpose(2, 3)
        return self.recombine(freqs.cos()), self.recombine(freqs.sin())

    def recombine(self, t):
        return t


def test_detector_leaves_other_rotary_layouts_alone():
    faulty, reason = text_rotary_fix.is_faulty(_OtherShapeRotary.forward)
    assert faulty is False and "not the transformers 4.57.x" in reason


def test_verify_passes():
    text_rotary_fix.verify()
