"""Detect the faulty code itself, by parsing the installed function's source with :mod:`ast`.

Version numbers are deliberately not used: verl gates its router fix at transformers <= 4.57.3, yet 4.57.4-4.57.6
carry the same line (field case B03); verl's NPU layer rebinds the block class, so what matters is the final
bound ``forward`` (B04).

Each detector takes a function (its ``__code__`` locates the source, so ``__wrapped__`` chains are *not*
followed) or an already parsed ``ast.FunctionDef`` (tests run them on source files of other releases), and
returns ``(faulty: bool, reason: str)``. ``OSError``/``TypeError`` propagate when no source is available.
"""

from __future__ import annotations

import ast
import inspect
import textwrap


def function_node(obj) -> ast.FunctionDef:
    """Parse ``obj`` (a function, or an ``ast.FunctionDef`` returned as is) into its ``FunctionDef`` node.

    Line numbers of the returned node are those of the file defining ``obj`` (so a detector's "line N" points at the
    installed source, as for a node found by :func:`find_function` in a whole module)."""
    if isinstance(obj, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return obj
    code = getattr(obj, "__code__", None)
    if code is None:
        raise TypeError(f"cannot inspect {obj!r}: not a Python function")
    lines, first = inspect.getsourcelines(code)
    tree = ast.parse(textwrap.dedent("".join(lines)))
    if first > 1:
        ast.increment_lineno(tree, first - 1)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return node
    raise TypeError(f"source of {obj!r} holds no function definition")


def find_function(source: str, qualname: str) -> ast.FunctionDef:
    """Return the ``FunctionDef`` (or ``AsyncFunctionDef``) of ``qualname`` (``"Class.method"`` or ``"func"``) in module ``source``."""
    body = ast.parse(source).body
    parts = qualname.split(".")
    for i, part in enumerate(parts):
        wanted = (ast.FunctionDef, ast.AsyncFunctionDef) if i == len(parts) - 1 else ast.ClassDef
        match = [n for n in body if isinstance(n, wanted) and n.name == part]
        if not match:
            raise KeyError(f"{qualname} not found in source")
        node = match[-1]  # the last definition wins, as at run time
        body = node.body
    return node


def _name(node):
    return node.id if isinstance(node, ast.Name) else None


def _ordered(node):
    """All descendants of ``node`` sorted by source position."""
    nodes = [n for n in ast.walk(node) if hasattr(n, "lineno")]
    return sorted(nodes, key=lambda n: (n.lineno, n.col_offset))


def _dtype_cast_base(value):
    """``x.to(y.dtype)`` -> ``"y"``; else ``None``."""
    if (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "to"
            and value.args and isinstance(value.args[0], ast.Attribute) and value.args[0].attr == "dtype"):
        return _name(value.args[0].value)
    return None


def _routing_scatters(fn):
    """Yield ``(call, dest, src)`` for every ``torch.zeros_like(<dest>).scatter_(dim, index, <src>)``."""
    for node in ast.walk(fn):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("scatter_", "scatter")):
            continue
        base = node.func.value
        if not (isinstance(base, ast.Call) and base.args):
            continue
        callee = base.func.attr if isinstance(base.func, ast.Attribute) else _name(base.func)
        if callee != "zeros_like":
            continue
        src = node.args[2] if len(node.args) >= 3 else next((k.value for k in node.keywords if k.arg == "src"), None)
        yield node, _name(base.args[0]), _name(src) if src is not None else None


def scatter_dtype_mismatch(obj):
    """Router-dtype fault (B03): routing weights cast to one tensor's dtype, then scattered into
    ``zeros_like(<another tensor>)``.

    transformers 4.57.x ``Qwen3VLMoeTextSparseMoeBlock.forward`` (``modeling_qwen3_vl_moe.py``) does
    ``routing_weights = routing_weights.to(hidden_states.dtype)`` and then
    ``torch.zeros_like(router_logits).scatter_(1, router_indices, routing_weights)``.
    """
    fn = function_node(obj)
    casts = {}  # variable -> name whose dtype it was last cast to
    scatters = {id(c): (d, s) for c, d, s in _routing_scatters(fn)}
    if not scatters:
        return False, "no scatter of routing weights into zeros_like(...) (block rewritten, e.g. transformers 5.x)"
    for node in _ordered(fn):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            base = _dtype_cast_base(node.value)
            if base is None:
                casts.pop(node.targets[0].id, None)
            else:
                casts[node.targets[0].id] = base
        elif id(node) in scatters:
            dest, src = scatters[id(node)]
            if src in casts and dest is not None and casts[src] != dest:
                return True, (f"line {node.lineno} of {fn.name}: {src} cast to {casts[src]}.dtype, then scattered "
                              f"into zeros_like({dest}) (dtype error when they differ)")
    return False, "routing weights are cast to the dtype of the tensor they are scattered into"


def _mentions_training(test) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == "training" for n in ast.walk(test))


def routing_scatter_guarded_by_training(obj):
    """NPU train-routing fault (B04): the dense routing scatter sits under an ``if`` on ``self.training``.

    verl 0.7.x ``NPUQwen3VLMoeTextSparseMoeBlock.forward`` (``verl/models/transformers/npu_patch.py``) has
    ``if not self.training: routing_weights = torch.zeros_like(router_logits).scatter_(...)``.
    """
    fn = function_node(obj)
    scatters = {id(c) for c, _, _ in _routing_scatters(fn)}
    if not scatters:
        return False, "no dense routing scatter in this forward (not the verl NPU block pattern)"
    for node in ast.walk(fn):
        if isinstance(node, ast.If) and _mentions_training(node.test):
            inside = {id(n) for n in ast.walk(node)} - {id(n) for n in ast.walk(node.test)}
            hit = scatters & inside
            if hit:
                return True, (f"line {node.lineno} of {fn.name}: dense (tokens x num_experts) routing matrix built "
                              f"only under `if {ast.unparse(node.test)}`")
    return False, "dense routing matrix built in both train and eval mode"


def _mentions(node, attrs=(), names=()):
    for n in ast.walk(node):
        if isinstance(n, ast.Attribute) and n.attr in attrs:
            return True
        if isinstance(n, ast.Name) and n.id in names:
            return True
    return False


def rotary_inv_freq_off_device(obj):
    """Text M-RoPE fault (B01 note): ``self.inv_freq`` enters the frequency matmul without being moved to the
    device of ``position_ids``/``x`` (transformers 4.57.x ``Qwen3VLTextRotaryEmbedding.forward`` and the MoE copy;
    huggingface/transformers#45859). Decorators (``torch.no_grad``, ``dynamic_rope_update``) are looked through via
    ``__wrapped__`` until a function that reads ``inv_freq``."""
    func = obj
    for _ in range(8):
        fn = function_node(func)
        if _mentions(fn, attrs=("inv_freq",)):
            break
        nxt = getattr(func, "__wrapped__", None)
        if nxt is None or getattr(func, "__vlgrpo_patch__", None):
            return False, "does not read inv_freq (not the Qwen3-VL rotary pattern)"
        func = nxt
    else:
        return False, "does not read inv_freq (decorator chain too deep)"
    if not _mentions(fn, attrs=("apply_interleaved_mrope",)):
        # The replacement mirrors the 4.57.x forward (interleaved M-RoPE through ``self.apply_interleaved_mrope``);
        # a rotary of another shape (e.g. transformers 5.17's ``recomposition_frequencies``) is left alone rather
        # than replaced by code written for a different class layout.
        return False, (f"{fn.name} is not the transformers 4.57.x interleaved M-RoPE form (no "
                       f"self.apply_interleaved_mrope) that this fix replaces; left alone")
    derived = set()
    first = None
    for node in _ordered(fn):
        if isinstance(node, ast.Assign) and _mentions(node.value, attrs=("inv_freq",), names=derived):
            derived.update(t.id for t in node.targets if isinstance(t, ast.Name))
            first = first or node
    for node in ast.walk(fn):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "to"
                and _mentions(node.func.value, attrs=("inv_freq",), names=derived)
                and any(_mentions(a, attrs=("device",)) or (isinstance(a, ast.keyword) and a.arg == "device")
                        for a in list(node.args) + list(node.keywords))):
            return False, f"line {node.lineno} of {fn.name}: inv_freq is moved to the computation device"
    line = first.lineno if first is not None else fn.lineno
    return True, (f"line {line} of {fn.name}: self.inv_freq is multiplied with position_ids without moving it to "
                  f"their device (device mismatch when the buffer stays on the CPU under FSDP2 CPU offload)")
