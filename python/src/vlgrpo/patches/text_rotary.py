"""Replacement ``forward`` of the Qwen3-VL text rotary embedding (patch ``qwen3_vl.text_rotary_device``).

Mirrors transformers 4.57.6 ``Qwen3VLTextRotaryEmbedding.forward`` / ``Qwen3VLMoeTextRotaryEmbedding.forward``
(``modeling_qwen3_vl.py`` / ``modeling_qwen3_vl_moe.py``): interleaved M-RoPE, cos/sin of
``inv_freq (head_dim/2,) x position_ids (3, batch, seq)`` in float32. The upstream method multiplies the
``inv_freq`` buffer, wherever it lives, with ``position_ids``; when the buffer stays on the CPU (FSDP2 CPU
offload, field case B01 note; huggingface/transformers#45859, fixed by PR #45861 in 5.x) and the positions are on
the accelerator, that is a device-mismatch error. Here ``inv_freq`` is moved to ``position_ids.device`` first; on
one device the result is bitwise the upstream one.

Imported only when a target module is imported (it imports torch and transformers).
"""

from __future__ import annotations

import torch
from transformers.modeling_rope_utils import dynamic_rope_update


def _forward(self, x: torch.Tensor, position_ids: torch.Tensor):
    """cos, sin of shape (batch, seq, head_dim) in ``x.dtype`` on ``position_ids.device``.

    Args:
        x: any tensor of the attention input (only its dtype and device type are used).
        position_ids: (batch, seq) or (3, batch, seq) M-RoPE positions (temporal, height, width).
    """
    if position_ids.ndim == 2:
        position_ids = position_ids[None, ...].expand(3, position_ids.shape[0], -1)
    inv_freq = self.inv_freq.to(device=position_ids.device, dtype=torch.float32)
    inv_freq_expanded = inv_freq[None, None, :, None].expand(3, position_ids.shape[1], -1, 1)
    positions = position_ids[:, :, None, :].float()
    device_type = x.device.type if isinstance(x.device.type, str) and x.device.type != "mps" else "cpu"
    with torch.autocast(device_type=device_type, enabled=False):
        freqs = (inv_freq_expanded @ positions).transpose(2, 3)
        freqs = self.apply_interleaved_mrope(freqs, self.mrope_section)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos() * self.attention_scaling
        sin = emb.sin() * self.attention_scaling
    return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


#: the drop-in method, with the same decorators as upstream (no_grad, transformers' dynamic RoPE update)
text_rotary_forward = torch.no_grad()(dynamic_rope_update(_forward))


class DeviceMixRecorder(torch.overrides.TorchFunctionMode):
    """Records torch calls whose tensor arguments live on more than one device (CPU-testable stand-in for the
    accelerator's "Expected all tensors to be on the same device" error)."""

    def __init__(self):
        super().__init__()
        self.mixed = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        devices = {a.device for a in list(args) + list(kwargs.values()) if isinstance(a, torch.Tensor) and a.dim() > 0}
        if len(devices) > 1:
            self.mixed.append((getattr(func, "__name__", str(func)), sorted(str(d) for d in devices)))
        return func(*args, **kwargs)


def verify() -> None:
    """Tiny Qwen3-VL-MoE text config: on one device the replacement equals transformers' method bitwise; with the
    ``inv_freq`` buffer on the CPU and ``position_ids`` on another device ("meta" stands in for the accelerator) no
    torch call mixes devices and the outputs land on the positions' device. Raises ``AssertionError``."""
    from transformers.models.qwen3_vl_moe import modeling_qwen3_vl_moe as m
    from transformers.models.qwen3_vl_moe.configuration_qwen3_vl_moe import Qwen3VLMoeTextConfig

    cfg = Qwen3VLMoeTextConfig(hidden_size=32, head_dim=16, num_attention_heads=2, num_key_value_heads=1,
                               rope_scaling={"rope_type": "default", "mrope_section": [4, 2, 2],
                                             "mrope_interleaved": True})
    rotary = m.Qwen3VLMoeTextRotaryEmbedding(cfg)
    x = torch.randn(1, 7, 32, dtype=torch.bfloat16)
    pos = torch.arange(7)[None, None, :].expand(3, 1, 7).clone()
    pos[1:, 0, 2:5] = torch.tensor([[0, 0, 1], [0, 1, 0]])
    upstream = getattr(type(rotary).forward, "__wrapped__", type(rotary).forward)
    while getattr(upstream, "__wrapped__", None) is not None and getattr(upstream, "__vlgrpo_patch__", None):
        upstream = upstream.__wrapped__
    ref = upstream(rotary, x, pos)
    got = text_rotary_forward(rotary, x, pos)
    assert all(torch.equal(a, b) for a, b in zip(ref, got)), "differs from transformers' rotary on one device"
    with DeviceMixRecorder() as rec:
        cos, sin = text_rotary_forward(rotary, x, pos.to("meta"))  # autocast has no "meta" device type
    assert not rec.mixed, f"torch calls mixing devices: {rec.mixed[:3]}"
    assert cos.device.type == sin.device.type == "meta" and cos.shape == (1, 7, 16)
