"""Replacement ``forward`` of the Qwen3-VL text rotary embedding (patch ``qwen3_vl.text_rotary_device``).

Mirrors transformers 4.57.6 ``Qwen3VLTextRotaryEmbedding.forward`` / ``Qwen3VLMoeTextRotaryEmbedding.forward``
(``modeling_qwen3_vl.py`` / ``modeling_qwen3_vl_moe.py``): interleaved M-RoPE, cos/sin of
``inv_freq (head_dim/2,) x position_ids (3, batch, seq)`` in float32. The upstream method multiplies the
``inv_freq`` buffer, wherever it lives, with ``position_ids``; when the buffer stays on the CPU (FSDP2 CPU
offload, field case B01 note; huggingface/transformers#45859, fixed by PR #45861 in 5.x) and the positions are on
the accelerator, that is a device-mismatch error. Here ``inv_freq`` is moved to ``position_ids.device`` first; on
one device the result is bitwise the upstream one.

The patch's record, detector and self-check: :mod:`vlgrpo.patches.fixes.qwen3_vl_text_rotary_device`. Imported only
when a target module is imported (it imports torch and transformers).
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
