"""Patch ``qwen3_vl.vision_pos_embed``: the Qwen3-VL vision tower's ``fast_pos_embed_interpolate`` (field case B01).

The replacement (a fused gather computed on ``grid_thw.device``) and its self-check live in the kernel module
:mod:`vlgrpo.patches.qwen3_vl_pos_embed` (it imports torch and defines a Triton kernel); this module holds the
record and the detectors.

verl's ``apply_monkey_patch`` binds ``verl.models.transformers.qwen3_vl.fast_pos_embed_interpolate`` (and
``qwen3_5``'s) onto ``Qwen3VLVisionModel``/``Qwen3VLMoeVisionModel`` when a model is built, i.e. after our
post-import fix of the transformers method. verl 0.8.0's copy is device-correct, but binding it would silently
replace the vlgrpo method (which also avoids per-image rebuilding). So a verl copy counts as faulty when either its
own code is faulty, or the installed transformers method it would replace is faulty (then we fixed that one, and the
copy must be ours too): :func:`verl_copy_is_faulty`. The transformers method is judged from its module's source
text, so rebinding at run time does not change the answer.
"""

import ast
import dis
import importlib
import inspect

from vlgrpo.patches import source

_QWEN3_VL = "transformers.models.qwen3_vl.modeling_qwen3_vl"
_QWEN3_VL_MOE = "transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe"
_KERNEL = "vlgrpo.patches.qwen3_vl_pos_embed"

RECORD = {
    "id": "qwen3_vl.vision_pos_embed",
    "title": "vision pos-embed device mismatch under FSDP2 CPU offload; one host sync per call (B01, B02)",
    "summary": (
        "Qwen3-VL vision tower `fast_pos_embed_interpolate` builds its index/weight tensors on "
        "`pos_embed.weight.device` (the CPU under FSDP2 cpu_offload -> device-mismatch error) and iterates "
        "device tensors element by element; replaced by a version that computes on `grid_thw.device`."
    ),
    "upstream": (
        "verl-project/verl#5571 (fix: verl PR #6131, moved by PR #6332); "
        "huggingface/transformers#45859 (same family, text M-RoPE)"
    ),
    "applies_when": (
        "the bound `fast_pos_embed_interpolate` takes its device from `pos_embed.weight` "
        "(transformers 4.57.x-5.5.x); verl's module-level copies are replaced too so its monkey patch "
        "cannot undo the fix"
    ),
    "targets": (
        (_QWEN3_VL, "Qwen3VLVisionModel.fast_pos_embed_interpolate"),
        (_QWEN3_VL_MOE, "Qwen3VLMoeVisionModel.fast_pos_embed_interpolate"),
        ("verl.models.transformers.qwen3_vl", "fast_pos_embed_interpolate", __name__ + ":verl_copy_is_faulty"),
        ("verl.models.transformers.qwen3_5", "fast_pos_embed_interpolate", __name__ + ":verl_copy_is_faulty"),
    ),
    "detector": __name__ + ":is_faulty",
    "replacement": _KERNEL + ":fast_pos_embed_interpolate",
    "verify": __name__ + ":verify",
    "recheck_after": (("verl.models.transformers.monkey_patch", "apply_monkey_patch"),),
}

_TRANSFORMERS_METHODS = (
    (_QWEN3_VL, "Qwen3VLVisionModel.fast_pos_embed_interpolate"),
    (_QWEN3_VL_MOE, "Qwen3VLMoeVisionModel.fast_pos_embed_interpolate"),
)


def _chain(node) -> list:
    """``a.b.c`` -> ["a", "b", "c"]; anything else -> []."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return parts[::-1]
    return []


def _is_weight_device(node) -> bool:
    parts = _chain(node)
    return len(parts) >= 3 and parts[-3:] == ["pos_embed", "weight", "device"]


def _faulty_from_ast(fn, where: str = "") -> tuple[bool, str]:
    args = [a.arg for a in fn.args.args]
    grid = args[1] if len(args) > 1 else "grid_thw"
    # Names holding pos_embed.weight.device, and names holding slices of the grid tensor.
    device_names, grid_slices = set(), set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
            if isinstance(target, ast.Name) and _is_weight_device(value):
                device_names.add(target.id)
            targets = target.elts if isinstance(target, ast.Tuple) else [target]
            values = value.elts if isinstance(value, ast.Tuple) and isinstance(target, ast.Tuple) else [value]
            for tgt, val in zip(targets, values if len(values) == len(targets) else [value] * len(targets)):
                if (
                    isinstance(tgt, ast.Name)
                    and isinstance(val, ast.Subscript)
                    and isinstance(val.value, ast.Name)
                    and val.value.id == grid
                ):
                    grid_slices.add(tgt.id)
    for node in ast.walk(fn):
        if isinstance(node, ast.keyword) and node.arg == "device":
            if _is_weight_device(node.value) or (isinstance(node.value, ast.Name) and node.value.id in device_names):
                return True, (
                    f"{where}line {node.value.lineno} ({fn.name}): tensors are created on "
                    f"pos_embed.weight.device (the CPU under FSDP2 cpu_offload) instead of grid_thw.device"
                )
    for node in ast.walk(fn):
        if isinstance(node, (ast.For, ast.comprehension)):
            it = node.iter
            sources = it.args if isinstance(it, ast.Call) and _chain(it.func) in (["zip"], ["enumerate"]) else [it]
            for src in sources:
                base = src.value if isinstance(src, ast.Subscript) else src
                if isinstance(base, ast.Name) and (base.id == grid or base.id in grid_slices):
                    return True, (
                        f"{where}line {it.lineno} ({fn.name}): iterates the {grid} tensor element by "
                        f"element (a device sync per element)"
                    )
    return False, f"{fn.name} takes no device from pos_embed.weight and does not iterate {grid} element by element"


def _faulty_from_bytecode(func) -> tuple[bool, str]:
    names = [ins.argval for ins in dis.get_instructions(func) if ins.opname in ("LOAD_ATTR", "LOAD_METHOD")]
    for i in range(len(names) - 2):
        if names[i : i + 3] == ["pos_embed", "weight", "device"]:
            return True, f"{func.__qualname__} (bytecode, no source) reads pos_embed.weight.device"
    return False, f"{func.__qualname__} (bytecode, no source) never reads pos_embed.weight.device"


def is_faulty(func) -> tuple[bool, str]:
    """Decide from the code of ``func`` whether it is the faulty upstream ``fast_pos_embed_interpolate``.

    Faulty (transformers 4.57.x-5.5.x, ``modeling_qwen3_vl.py``; field case B01) means either
    (a) it creates tensors with ``device=...pos_embed.weight.device`` (directly or through a variable), or
    (b) it loops over the ``grid_thw`` tensor, or over slices of it such as ``grid_thw[:, 0]``, element by element.
    verl 0.8.0's copy (``verl/models/transformers/qwen3_vl.py``: device from ``grid_thw``, one ``tolist()``) and
    the vlgrpo replacement are not faulty.

    Args:
        func: a function (its source is parsed with :mod:`ast`; without source its bytecode is scanned for
            ``pos_embed.weight.device``) or an ``ast.FunctionDef``.

    Returns:
        ``(faulty, reason)``; the reason names the line (of the file defining ``func``) and the construct.

    Raises:
        TypeError: ``func`` is neither a Python function nor a ``FunctionDef``.
    """
    code = getattr(func, "__code__", None)
    if code is not None:
        from vlgrpo.patches.qwen3_vl_pos_embed import fast_pos_embed_interpolate

        if code is fast_pos_embed_interpolate.__code__:
            return False, "already the vlgrpo replacement"
    try:
        fn = source.function_node(func)
    except (OSError, IndentationError, SyntaxError):
        return _faulty_from_bytecode(func)
    return _faulty_from_ast(fn, "" if code is None else f"{code.co_filename}, ")


def installed_transformers_method_faulty() -> tuple[bool, str]:
    """Parse the installed transformers Qwen3-VL modules and run :func:`is_faulty` on the method's source.

    Returns ``(faulty, reason)``; ``(False, ...)`` when the method is not defined there (transformers >= 5.17).
    """
    for module_name, qualname in _TRANSFORMERS_METHODS:
        try:
            text = inspect.getsource(importlib.import_module(module_name))
            node = source.find_function(text, qualname)
        except (ImportError, KeyError, OSError):
            continue
        faulty, reason = is_faulty(node)
        if faulty:
            return True, f"{module_name}.{qualname}: {reason}"
    return False, "the installed transformers Qwen3-VL vision method is not faulty (or absent)"


def verl_copy_is_faulty(func) -> tuple[bool, str]:
    """``(faulty, reason)`` for a verl module-level ``fast_pos_embed_interpolate`` (see the module docstring)."""
    faulty, reason = is_faulty(func)
    if faulty:
        return True, reason
    tf_faulty, tf_reason = installed_transformers_method_faulty()
    if tf_faulty:
        return True, (
            f"verl's copy is fine on its own ({reason}), but apply_monkey_patch would bind it over the "
            f"vlgrpo fix of the faulty transformers method ({tf_reason})"
        )
    return False, reason


def verify() -> None:
    """The kernel module's self-check (:func:`vlgrpo.patches.qwen3_vl_pos_embed.verify`: tiny CPU inputs against a
    from-the-definition bilinear reference, values and gradients). Raises ``AssertionError``."""
    from vlgrpo.patches import qwen3_vl_pos_embed

    qwen3_vl_pos_embed.verify()
