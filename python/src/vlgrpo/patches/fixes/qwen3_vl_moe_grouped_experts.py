"""Patch ``qwen3_vl_moe.grouped_experts``: the Qwen3-VL-MoE text experts of transformers 4.57.x on GPU.

transformers 4.57.x ``Qwen3VLMoeTextExperts.forward`` (``modeling_qwen3_vl_moe.py``) runs a Python loop over the hit
experts in training, with one ``torch.where`` (a host sync) per expert per layer, and in eval mode repeats every
token once per expert. verl 0.8.0 replaces the experts only on Ascend (``npu_patch.py``, grouped matmul); on NVIDIA
the fully-async FSDP2 recipe runs the loop. The replacement (torch code: sorted tokens, two grouped GEMMs, first-use
check per device and dtype) lives in :mod:`vlgrpo.patches.moe_experts`; this module holds the record and the
detector.

Left alone: transformers 5.x (the bound forward dispatches on ``config._experts_implementation``, grouped_mm among
its implementations), VeOmni 0.1.9a5's experts subclass (its own fused MoE in training; ``apply_veomni_qwen3vlmoe_patch``
binds it over transformers' class name, and its other path calls ``super().forward``, i.e. transformers' class,
patched), verl's NPU experts class (not a target). Stacks with ``qwen3_vl_moe.router_dtype`` (the block calls the
experts with the dense routing matrix) and ``npu.qwen3_vl_moe.train_routing`` (the NPU block keeps verl's experts).
"""

import ast

from vlgrpo.patches.source import function_node

_QWEN3_VL_MOE = "transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe"

RECORD = {
    "id": "qwen3_vl_moe.grouped_experts",
    "title": "MoE text experts loop with a host sync per expert (~60x slower on an H200); eval repeats tokens",
    "summary": (
        "Qwen3-VL-MoE text experts `forward` loops over the hit experts with one host sync per expert per layer in "
        "training (~265 ms fwd+bwd per layer at 4,096 tokens on an H200) and repeats every token num_experts times "
        "in eval mode (a ~30 GiB transient per layer at 16,384 tokens); replaced by tokens sorted by expert and two "
        "grouped GEMMs (no host sync), same outputs and gradients."
    ),
    "upstream": (
        "no fix in transformers 4.57.x (5.x: experts implementations, `grouped_mm`, in integrations/moe.py); verl "
        "applies a grouped matmul on Ascend only (npu_patch.py, PR #4406)"
    ),
    "applies_when": (
        "the bound `Qwen3VLMoeTextExperts.forward` takes (hidden_states, routing_weights, router_indices), uses the "
        "(experts, in, out) weight layout and loops over experts with a host sync or repeats the tokens "
        "num_experts times (transformers 4.57.x); CUDA and CPU tensors, the original elsewhere (Ascend NPU)"
    ),
    "targets": ((_QWEN3_VL_MOE, "Qwen3VLMoeTextExperts.forward"),),
    "detector": __name__ + ":is_faulty",
    "replacement": "vlgrpo.patches.moe_experts:make_grouped_experts_forward",
    "wraps": True,
    "verify": __name__ + ":verify",
    # VeOmni 0.1.9a5 binds its experts subclass over transformers' class name when it builds the model
    "recheck_after": (
        ("verl.models.transformers.monkey_patch", "apply_monkey_patch"),
        ("veomni.models.transformers.qwen3_vl_moe.modeling_qwen3_vl_moe", "apply_veomni_qwen3vlmoe_patch"),
    ),
}


def _self_attr(node, name: str) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == name
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    )


def _uses_in_out_layout(fn) -> bool:
    """True if ``fn`` multiplies activations from the left with ``self.gate_up_proj`` (``x @ W[e]`` or
    ``torch.bmm(x, W)``): the (experts, in, out) layout the replacement assumes."""
    for node in ast.walk(fn):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            right = node.right.value if isinstance(node.right, ast.Subscript) else node.right
            if _self_attr(right, "gate_up_proj"):
                return True
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "bmm"
            and len(node.args) == 2
            and _self_attr(node.args[1], "gate_up_proj")
        ):
            return True
    return False


def _faults(fn) -> list:
    """The slow constructs in ``fn``: a loop over experts with a host-syncing call inside, a repeat of the hidden
    states ``self.num_experts`` times."""
    found = []
    for node in ast.walk(fn):
        if isinstance(node, ast.For):
            for inner in ast.walk(node):
                if not isinstance(inner, ast.Call) or not isinstance(inner.func, ast.Attribute):
                    continue
                name = inner.func.attr
                if (name == "where" and len(inner.args) == 1) or name in ("nonzero", "tolist", "item"):
                    found.append(
                        f"line {node.lineno}: a Python loop over the experts with `{name}` inside (one "
                        f"host sync per expert per layer)"
                    )
                    break
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "repeat"
            and any(_self_attr(a, "num_experts") for a in node.args)
        ):
            found.append(
                f"line {node.lineno}: `repeat(self.num_experts, ...)` copies every token once per expert "
                f"(eval mode: tokens x num_experts x hidden transient)"
            )
    return found


def _calls_super_forward(fn) -> bool:
    return any(
        isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == "forward"
        and isinstance(n.func.value, ast.Call)
        and isinstance(n.func.value.func, ast.Name)
        and n.func.value.func.id == "super"
        for n in ast.walk(fn)
    )


def is_faulty(obj):
    """Decide from the code of ``obj`` whether it is the slow upstream ``Qwen3VLMoeTextExperts.forward``.

    Faulty (transformers 4.57.x ``modeling_qwen3_vl_moe.py``): the signature ``(self, hidden_states,
    routing_weights, router_indices)``, the expert weights used in the (experts, in, out) layout (``x @
    self.gate_up_proj[e]`` / ``torch.bmm(x, self.gate_up_proj)``), and (a) a Python loop over experts that calls
    ``torch.where(mask)`` / ``nonzero`` / ``tolist`` / ``item`` (a host sync per expert) or (b)
    ``.repeat(self.num_experts, ...)`` of the hidden states. Not faulty: transformers 5.x (dispatch on
    ``config._experts_implementation``), VeOmni 0.1.9a5's experts subclass (4 arguments, its fused MoE), the
    vlgrpo replacement.

    Returns ``(faulty, reason)``; ``TypeError`` / ``OSError`` when ``obj`` has no source.
    """
    fn = function_node(obj)
    if any(
        isinstance(n, ast.Attribute) and n.attr == "_experts_implementation" and _self_attr(n.value, "config")
        for n in ast.walk(fn)
    ):
        return False, (
            f"{fn.name} dispatches to transformers' own experts implementations (config."
            f"_experts_implementation: grouped_mm among them; transformers 5.x): not needed"
        )
    args = [a.arg for a in fn.args.args]
    if len(args) != 4 or fn.args.vararg or fn.args.kwonlyargs:
        tail = (
            " (its other path calls super().forward: transformers' class, replaced there where faulty)"
            if _calls_super_forward(fn)
            else ""
        )
        return False, (
            f"{fn.name}{tuple(args[1:])} is not the 3-argument (hidden_states, routing_weights, "
            f"router_indices) experts forward of transformers 4.57.x (e.g. VeOmni's fused-MoE experts): "
            f"left alone{tail}"
        )
    faults = _faults(fn)
    if not faults:
        return False, (
            f"{fn.name} has no per-expert host-sync loop and no repeat(num_experts) (e.g. the vlgrpo replacement)"
        )
    if not _uses_in_out_layout(fn):
        return False, (
            f"{fn.name} is slow ({'; '.join(faults)}) but does not use the (experts, in, out) weight "
            f"layout the replacement assumes: left alone"
        )
    where = getattr(getattr(obj, "__code__", None), "co_filename", None)
    return True, (f"{where}: " if where else "") + "; ".join(faults)


def verify() -> None:
    """The kernel module's self-check (:func:`vlgrpo.patches.moe_experts.verify`: tiny CPU experts, train and eval,
    every CPU method, values and gradients against a float64 per-expert loop). Raises ``AssertionError``."""
    from vlgrpo.patches import moe_experts

    moe_experts.verify()
