"""Detector for verl's module-level copies of ``fast_pos_embed_interpolate`` (patch ``qwen3_vl.vision_pos_embed``).

verl's ``apply_monkey_patch`` binds ``verl.models.transformers.qwen3_vl.fast_pos_embed_interpolate`` (and
``qwen3_5``'s) onto ``Qwen3VLVisionModel``/``Qwen3VLMoeVisionModel`` when a model is built, i.e. after our
post-import fix of the transformers method. verl 0.8.0's copy is device-correct, but binding it would silently
replace the vlgrpo method (which also avoids per-image rebuilding). So a verl copy counts as faulty when either
its own code is faulty, or the installed transformers method it would replace is faulty (then we fixed that one,
and the copy must be ours too). The transformers method is judged from its module's source text, so rebinding at
run time does not change the answer.
"""

from __future__ import annotations

import importlib
import inspect

from vlgrpo.patches import detect

_TRANSFORMERS_METHODS = (
    ("transformers.models.qwen3_vl.modeling_qwen3_vl", "Qwen3VLVisionModel.fast_pos_embed_interpolate"),
    ("transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe", "Qwen3VLMoeVisionModel.fast_pos_embed_interpolate"),
)


def installed_transformers_method_faulty() -> tuple[bool, str]:
    """Parse the installed transformers Qwen3-VL modules and run the pos-embed detector on the method's source.

    Returns ``(faulty, reason)``; ``(False, ...)`` when the method is not defined there (transformers >= 5.17).
    """
    from vlgrpo.patches import qwen3_vl_pos_embed as pe

    for module_name, qualname in _TRANSFORMERS_METHODS:
        try:
            source = inspect.getsource(importlib.import_module(module_name))
            node = detect.find_function(source, qualname)
        except (ImportError, KeyError, OSError):
            continue
        faulty, reason = pe.is_faulty(node)
        if faulty:
            return True, f"{module_name}.{qualname}: {reason}"
    return False, "the installed transformers Qwen3-VL vision method is not faulty (or absent)"


def verl_copy_is_faulty(func) -> tuple[bool, str]:
    """``(faulty, reason)`` for a verl module-level ``fast_pos_embed_interpolate`` (see module docstring)."""
    from vlgrpo.patches import qwen3_vl_pos_embed as pe

    faulty, reason = pe.is_faulty(func)
    if faulty:
        return True, reason
    tf_faulty, tf_reason = installed_transformers_method_faulty()
    if tf_faulty:
        return True, (f"verl's copy is fine on its own ({reason}), but apply_monkey_patch would bind it over the "
                      f"vlgrpo fix of the faulty transformers method ({tf_reason})")
    return False, reason
