"""Patch ``qwen3_vl.text_rotary_device``: the Qwen3-VL text M-RoPE ``forward`` on a CPU-resident ``inv_freq``.

transformers 4.57.x ``Qwen3VLTextRotaryEmbedding.forward`` (and the MoE copy) multiplies the ``inv_freq`` buffer,
wherever it lives, with ``position_ids``; under FSDP2 CPU offload the buffer stays on the CPU while the positions
are on the accelerator: a device-mismatch error (field case B01 note; huggingface/transformers#45859). The
replacement, :func:`vlgrpo.patches.text_rotary.text_rotary_forward` (a module of its own: it is built with torch's
and transformers' decorators), moves ``inv_freq`` to ``position_ids.device`` first.
"""

import ast

from vlgrpo.patches.source import function_node, mentions, ordered

_QWEN3_VL = "transformers.models.qwen3_vl.modeling_qwen3_vl"
_QWEN3_VL_MOE = "transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe"

RECORD = {
    "id": "qwen3_vl.text_rotary_device",
    "title": "text M-RoPE `inv_freq` left on the CPU under FSDP2 CPU offload (B01)",
    "summary": (
        "Qwen3-VL text M-RoPE `forward` multiplies the `inv_freq` buffer with `position_ids` without moving it "
        "to their device: a device-mismatch error when the buffer stays on the CPU under FSDP2 CPU offload; "
        "replaced by a forward that moves `inv_freq` to `position_ids.device` (bitwise equal otherwise)."
    ),
    "upstream": "huggingface/transformers#45859 (fix: transformers PR #45861); field case B01 note",
    "applies_when": (
        "the bound text rotary `forward` reads `self.inv_freq` and never moves it to the computation device "
        "(transformers 4.57.x)"
    ),
    "targets": (
        (_QWEN3_VL, "Qwen3VLTextRotaryEmbedding.forward"),
        (_QWEN3_VL_MOE, "Qwen3VLMoeTextRotaryEmbedding.forward"),
    ),
    "detector": __name__ + ":is_faulty",
    "replacement": "vlgrpo.patches.text_rotary:text_rotary_forward",
    "verify": __name__ + ":verify",
    "recheck_after": (("verl.models.transformers.monkey_patch", "apply_monkey_patch"),),
}


def is_faulty(obj):
    """Text M-RoPE fault (B01 note): ``self.inv_freq`` enters the frequency matmul without being moved to the
    device of ``position_ids``/``x`` (transformers 4.57.x ``Qwen3VLTextRotaryEmbedding.forward`` and the MoE copy;
    huggingface/transformers#45859). Decorators (``torch.no_grad``, ``dynamic_rope_update``) are looked through via
    ``__wrapped__`` until a function that reads ``inv_freq``."""
    func = obj
    for _ in range(8):
        fn = function_node(func)
        if mentions(fn, attrs=("inv_freq",)):
            break
        nxt = getattr(func, "__wrapped__", None)
        if nxt is None or getattr(func, "__vlgrpo_patch__", None):
            return False, "does not read inv_freq (not the Qwen3-VL rotary pattern)"
        func = nxt
    else:
        return False, "does not read inv_freq (decorator chain too deep)"
    if not mentions(fn, attrs=("apply_interleaved_mrope",)):
        # The replacement mirrors the 4.57.x forward (interleaved M-RoPE through ``self.apply_interleaved_mrope``);
        # a rotary of another shape (e.g. transformers 5.17's ``recomposition_frequencies``) is left alone rather
        # than replaced by code written for a different class layout.
        return False, (
            f"{fn.name} is not the transformers 4.57.x interleaved M-RoPE form (no "
            f"self.apply_interleaved_mrope) that this fix replaces; left alone"
        )
    derived = set()
    first = None
    for node in ordered(fn):
        if isinstance(node, ast.Assign) and mentions(node.value, attrs=("inv_freq",), names=derived):
            derived.update(t.id for t in node.targets if isinstance(t, ast.Name))
            first = first or node
    for node in ast.walk(fn):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "to"
            and mentions(node.func.value, attrs=("inv_freq",), names=derived)
            and any(
                mentions(a, attrs=("device",)) or (isinstance(a, ast.keyword) and a.arg == "device")
                for a in list(node.args) + list(node.keywords)
            )
        ):
            return False, f"line {node.lineno} of {fn.name}: inv_freq is moved to the computation device"
    line = first.lineno if first is not None else fn.lineno
    return True, (
        f"line {line} of {fn.name}: self.inv_freq is multiplied with position_ids without moving it to "
        f"their device (device mismatch when the buffer stays on the CPU under FSDP2 CPU offload)"
    )


def verify() -> None:
    """Tiny Qwen3-VL-MoE text config: on one device the replacement equals transformers' method bitwise; with the
    ``inv_freq`` buffer on the CPU and ``position_ids`` on another device ("meta" stands in for the accelerator) no
    torch call mixes devices and the outputs land on the positions' device. Raises ``AssertionError``."""
    import torch
    from transformers.models.qwen3_vl_moe import modeling_qwen3_vl_moe as m
    from transformers.models.qwen3_vl_moe.configuration_qwen3_vl_moe import Qwen3VLMoeTextConfig

    from vlgrpo.patches.text_rotary import DeviceMixRecorder, text_rotary_forward

    cfg = Qwen3VLMoeTextConfig(
        hidden_size=32,
        head_dim=16,
        num_attention_heads=2,
        num_key_value_heads=1,
        rope_scaling={"rope_type": "default", "mrope_section": [4, 2, 2], "mrope_interleaved": True},
    )
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
