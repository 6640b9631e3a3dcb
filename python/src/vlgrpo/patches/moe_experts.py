"""Grouped-GEMM Qwen3-VL-MoE text experts (patch ``qwen3_vl_moe.grouped_experts``): torch code and self-checks.

Upstream method replaced (same arguments, output shape, dtype and values up to bf16 rounding order):
transformers 4.57.6, ``transformers/models/qwen3_vl_moe/modeling_qwen3_vl_moe.py``,
``Qwen3VLMoeTextExperts.forward(hidden_states (batch, seq, hidden), routing_weights (tokens, num_experts),
router_indices (tokens, top_k))``, with ``gate_up_proj`` (num_experts, hidden, 2*inter; gate half first) and
``down_proj`` (num_experts, inter, hidden). For token ``t`` it computes
``sum_j routing_weights[t, e_j] * (act(x_t @ G[e_j]) * (x_t @ U[e_j])) @ D[e_j]`` over ``e_j = router_indices[t, j]``.

What the upstream method costs: in training a Python loop over the hit experts with one ``torch.where`` (a host
sync) per expert per layer (about 265 ms fwd+bwd per layer on an H200 at 4,096 tokens); in eval mode every token is
repeated ``num_experts`` times (a 30 GiB transient per layer at 16,384 tokens). What this module does instead, in
both modes:

1. the routing weights are gathered from the dense (tokens, num_experts) matrix at ``router_indices``;
2. the (token, slot) pairs are ordered by expert with one stable sort and counted once (``searchsorted`` of the
   sorted ids: the group ends, on the device, no host sync);
3. gate_up and down run as two grouped GEMMs over the sorted rows: ``torch.nn.functional.grouped_mm`` /
   ``torch._grouped_mm`` where the device, dtype and torch support it (decided at first use on each device and
   dtype: compute capability, the function's presence, and a tiny forward+backward check against a per-expert
   loop, :func:`method_for`), else per-expert slices of the sorted rows with the group ends read once (method
   ``"sliced"``: one host read per call instead of one per expert; none on the CPU);
4. the weighted sum back into token order is one batched (1 x top_k) @ (top_k x hidden) product per token (fp32
   accumulation, one rounding), cast to the hidden dtype in training (as upstream's ``index_add_``) and to
   ``promote(compute dtype, routing dtype)`` in eval mode (as upstream's eval product).

Gradients reach ``gate_up_proj``, ``down_proj``, the hidden states and the routing weights (at the chosen entries:
the ones the block's scatter passes on to the router; upstream's eval path also fills the others with the unused
experts' outputs, which that scatter discards). The gather and the
reordering are autograd functions whose backward is a gather too (no atomics, deterministic). The parameters are
read in the forward, so FSDP2-sharded experts (3-D parameters sharded on dim 0, unsharded by FSDP's pre-forward
hook) and CPU offload work unchanged.

Under ``torch.compile`` the grouped GEMM is traced only in a dtype its shape function takes (checked at first use on
meta tensors; some torch builds take bf16 only), the sliced path runs otherwise.

Devices: CUDA and CPU. On any other device (e.g. Ascend NPU, where verl ships its own NPU experts) the original
forward runs unchanged.

The patch's record and detector: :mod:`vlgrpo.patches.fixes.qwen3_vl_moe_grouped_experts`. Imported only when a
target module is imported (it imports torch).
"""

from __future__ import annotations

import logging
import threading

import torch
import torch.nn.functional as F

__all__ = [
    "GROUPED",
    "SLICED",
    "grouped_experts_forward",
    "make_grouped_experts_forward",
    "method_for",
    "moe_experts",
    "support_info",
]

GROUPED, SLICED = "grouped_mm", "sliced"
_DEVICES = ("cuda", "cpu")
#: (device string, dtype) -> (method, reason); filled at first use on that device and dtype
_SUPPORT: dict = {}
#: dtype -> whether the grouped GEMM has a shape function for it (torch.compile traces it with fake tensors; some
#: torch builds have one for bf16 only); filled at first use, with _SUPPORT
_TRACEABLE: dict = {}
_LOCK = threading.Lock()
_LOG = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------------------------
# Features of the installed torch (never its version)
# --------------------------------------------------------------------------------------------------------------
def _grouped_mm_function():
    """``torch.nn.functional.grouped_mm`` (public, newer torch) or ``torch._grouped_mm``, or ``None``."""
    return getattr(F, "grouped_mm", None) or getattr(torch, "_grouped_mm", None)


def _autocast_dtype(device_type: str):
    """The autocast dtype if autocast is on for ``device_type``, else ``None``."""
    try:
        on = torch.is_autocast_enabled(device_type)
    except TypeError:  # older signature without the device type
        on = torch.is_autocast_enabled() if device_type == "cuda" else torch.is_autocast_cpu_enabled()
    if not on:
        return None
    get = getattr(torch, "get_autocast_dtype", None)
    if get is not None:
        return get(device_type)
    return torch.get_autocast_gpu_dtype() if device_type == "cuda" else torch.get_autocast_cpu_dtype()


def _layout_ok(weight: torch.Tensor) -> bool:
    """Host-side check that ``weight`` (experts, K, N) meets the grouped GEMM's layout rules: row- or column-major
    matrices, 16-byte aligned start and leading strides."""
    if weight.dim() != 3:
        return False
    size = weight.element_size()
    row_major = weight.stride(2) == 1 and (weight.stride(1) * size) % 16 == 0
    col_major = weight.stride(1) == 1 and (weight.stride(2) * size) % 16 == 0
    # (under torch.compile the weight is a fake tensor without storage: its start address is not known then)
    aligned = _compiling() or weight.data_ptr() % 16 == 0
    return (row_major or col_major) and aligned and (weight.shape[1] * size) % 16 == 0


def _compiling() -> bool:
    check = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    return bool(check and check())


# --------------------------------------------------------------------------------------------------------------
# Routing plan and the reordering autograd functions
# --------------------------------------------------------------------------------------------------------------
def routing_plan(router_indices: torch.Tensor, num_experts: int):
    """Order the (token, slot) pairs by expert.

    Args:
        router_indices: (tokens, top_k) integer expert ids in ``[0, num_experts)``.

    Returns:
        ``(order, inverse, ends)``: ``order`` (tokens*top_k,) int64, the flat pair index ``t*top_k + j`` of each
        sorted row (a stable sort: pairs of one expert keep token order); ``inverse`` its inverse permutation;
        ``ends`` (num_experts,) int32, the end row of each expert's group (``ends[-1] = tokens*top_k``). All on the
        device of ``router_indices``; nothing is read back to the host.
    """
    flat = router_indices.reshape(-1)
    sorted_ids, order = torch.sort(flat, stable=True)
    experts = torch.arange(num_experts, device=flat.device, dtype=sorted_ids.dtype)
    ends = torch.searchsorted(sorted_ids, experts, right=True).to(torch.int32)
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(order.numel(), device=order.device, dtype=order.dtype)
    return order, inverse, ends


class _Dispatch(torch.autograd.Function):
    """``x[order // top_k]``: every token once per chosen expert, in expert order. Backward: the gradient rows
    gathered back into (token, slot) order and summed over the slots (a gather, no atomics)."""

    @staticmethod
    def forward(ctx, x, order, inverse, top_k: int):
        ctx.save_for_backward(inverse)
        ctx.top_k = top_k
        return x.index_select(0, torch.div(order, top_k, rounding_mode="floor"))

    @staticmethod
    def backward(ctx, grad):
        (inverse,) = ctx.saved_tensors
        tokens = inverse.numel() // ctx.top_k
        return grad.index_select(0, inverse).view(tokens, ctx.top_k, -1).sum(1), None, None, None


class _Unsort(torch.autograd.Function):
    """``y[inverse]``: rows from expert order back to (token, slot) order. Backward: ``grad[order]``."""

    @staticmethod
    def forward(ctx, y, order, inverse):
        ctx.save_for_backward(order)
        return y.index_select(0, inverse)

    @staticmethod
    def backward(ctx, grad):
        (order,) = ctx.saved_tensors
        return grad.index_select(0, order), None, None


def _sliced_mm(rows: torch.Tensor, weight: torch.Tensor, ends: list) -> torch.Tensor:
    """Per-expert products of the sorted ``rows`` with ``weight[e]`` (group ends read once, on the host)."""
    parts, start = [], 0
    for w_e, end in zip(weight.unbind(0), ends):
        if end > start:
            parts.append(rows[start:end] @ w_e)
        start = end
    if not parts:
        return rows.new_zeros((0, weight.shape[-1]))
    return torch.cat(parts) if len(parts) > 1 else parts[0]


# --------------------------------------------------------------------------------------------------------------
# The experts MLP
# --------------------------------------------------------------------------------------------------------------
def moe_experts(
    x: torch.Tensor,
    weights: torch.Tensor,
    router_indices: torch.Tensor,
    gate_up_proj: torch.Tensor,
    down_proj: torch.Tensor,
    act_fn=F.silu,
    method: str | None = None,
) -> torch.Tensor:
    """Routed expert MLP of Qwen3-VL-MoE for the rows of ``x``.

    Args:
        x: (tokens, hidden) in the compute dtype (that of the expert weights).
        weights: (tokens, top_k) routing weight of each chosen expert (any float dtype; rounded to the compute
            dtype for the weighted sum).
        router_indices: (tokens, top_k) integer expert ids.
        gate_up_proj: (num_experts, hidden, 2*inter), gate half first; down_proj: (num_experts, inter, hidden).
        act_fn: the gate activation (the config's ``hidden_act``, SiLU for Qwen3-VL-MoE).
        method: ``"grouped_mm"``, ``"sliced"`` or ``None`` (:func:`method_for` the device and dtype).

    Returns:
        (tokens, hidden) in the compute dtype: ``out[t] = sum_j weights[t, j] * expert_{e_j}(x[t])``.

    Raises:
        ValueError: unknown ``method``, or ``"grouped_mm"`` where it is not supported.
    """
    tokens, top_k = router_indices.shape
    num_experts, hidden = gate_up_proj.shape[0], gate_up_proj.shape[1]
    if tokens == 0:
        return x.new_zeros((0, hidden))
    if method is None:
        method = method_for(x.device, x.dtype)[0]
        if method == GROUPED and not (_layout_ok(gate_up_proj) and _layout_ok(down_proj)):
            method = SLICED
        if method == GROUPED and _compiling() and not _TRACEABLE.get(x.dtype, False):
            method = SLICED  # torch.compile could not trace the grouped GEMM in this dtype
    elif method not in (GROUPED, SLICED):
        raise ValueError(f"method={method!r}: use {GROUPED!r}, {SLICED!r} or None (chosen by device and dtype)")
    order, inverse, ends = routing_plan(router_indices, num_experts)
    rows = _Dispatch.apply(x, order, inverse, top_k)  # (tokens*top_k, hidden), expert order
    if method == GROUPED:
        mm = _grouped_mm_function()
        if mm is None:
            raise ValueError(
                "method='grouped_mm': this torch has neither torch.nn.functional.grouped_mm nor "
                "torch._grouped_mm; use method=None"
            )
        gate_up = mm(rows, gate_up_proj, offs=ends)
    else:
        ends_host = ends.tolist()  # the one host read of this call (free on the CPU)
        gate_up = _sliced_mm(rows, gate_up_proj, ends_host)
    del rows
    gate, up = gate_up.chunk(2, dim=-1)
    inter = act_fn(gate) * up
    del gate_up, gate, up
    if method == GROUPED:
        down = mm(inter, down_proj, offs=ends)
    else:
        down = _sliced_mm(inter, down_proj, ends_host)
    del inter
    per_slot = _Unsort.apply(down, order, inverse).view(tokens, top_k, hidden)
    del down
    return torch.bmm(weights.to(per_slot.dtype).unsqueeze(1), per_slot).squeeze(1)


def grouped_experts_forward(
    self, hidden_states: torch.Tensor, routing_weights: torch.Tensor, router_indices: torch.Tensor
) -> torch.Tensor:
    """Drop-in ``Qwen3VLMoeTextExperts.forward`` (transformers 4.57.x) on CUDA and the CPU.

    Uses ``self.gate_up_proj`` (num_experts, hidden, 2*inter), ``self.down_proj`` (num_experts, inter, hidden),
    ``self.act_fn``, ``self.hidden_size``, ``self.num_experts`` and ``self.training``.

    Args:
        hidden_states: (batch, seq, hidden) (any leading shape whose first dimension is the batch).
        routing_weights: (tokens, num_experts) dense routing matrix (zero except the chosen experts).
        router_indices: (tokens, top_k) chosen expert ids.

    Returns:
        (batch, tokens/batch, hidden), like the original; dtype: the hidden-state dtype in training, in eval mode
        that of a sum of the compute dtype promoted with the routing dtype (the original's two paths; under CUDA
        autocast the eval sum is float32). The compute dtype is the autocast dtype when autocast is on, else that
        of the expert weights.

    Raises:
        ValueError: ``routing_weights`` / ``router_indices`` of the wrong shape (names both shapes).
    """
    batch = hidden_states.shape[0]
    hidden = self.hidden_size
    x = hidden_states.reshape(-1, hidden)
    tokens = x.shape[0]
    if router_indices.dim() != 2 or router_indices.shape[0] != tokens:
        raise ValueError(f"router_indices has shape {tuple(router_indices.shape)}; expected (tokens={tokens}, top_k)")
    if tuple(routing_weights.shape) != (tokens, self.num_experts):
        raise ValueError(
            f"routing_weights has shape {tuple(routing_weights.shape)}; expected the dense "
            f"(tokens={tokens}, num_experts={self.num_experts}) matrix"
        )
    compute = _autocast_dtype(x.device.type) or self.gate_up_proj.dtype
    gate_up_proj, down_proj = self.gate_up_proj, self.down_proj
    if gate_up_proj.dtype != compute:
        gate_up_proj, down_proj = gate_up_proj.to(compute), down_proj.to(compute)
    weights = routing_weights.gather(1, router_indices)
    out = moe_experts(x.to(compute), weights, router_indices, gate_up_proj, down_proj, self.act_fn)
    if self.training:  # upstream: index_add_ into zeros_like(hidden_states)
        return out.to(x.dtype).view(batch, -1, hidden)
    # upstream's eval path ends with (product in promote(compute, routing dtype)).sum(): the same ops here, so the
    # dtype is the same under autocast too (CUDA autocast runs sum in float32)
    out = out.to(torch.promote_types(compute, routing_weights.dtype)).unsqueeze(0).sum(0)
    return out.view(batch, -1, hidden)


def make_grouped_experts_forward(original):
    """The replacement for a faulty bound ``Qwen3VLMoeTextExperts.forward``: :func:`grouped_experts_forward` on
    CUDA and CPU tensors, ``original`` on any other device (Ascend NPU: verl's NPU experts, not ours)."""

    def forward(self, hidden_states, routing_weights, router_indices):
        if hidden_states.device.type in _DEVICES:
            return grouped_experts_forward(self, hidden_states, routing_weights, router_indices)
        return original(self, hidden_states, routing_weights, router_indices)

    return forward


make_grouped_experts_forward.__vlgrpo_code__ = (make_grouped_experts_forward(None).__code__,)


# --------------------------------------------------------------------------------------------------------------
# First use on a device and dtype: is the grouped GEMM there, and right?
# --------------------------------------------------------------------------------------------------------------
def _loop_reference(x, weights, router_indices, gate_up_proj, down_proj):
    """Per-expert loop in float64 (the definition): (tokens, hidden) float64, differentiable."""
    x, weights, gate_up_proj, down_proj = (t.double() for t in (x, weights, gate_up_proj, down_proj))
    out = torch.zeros_like(x)
    for e in range(gate_up_proj.shape[0]):
        tok, slot = (router_indices == e).nonzero(as_tuple=True)
        if tok.numel() == 0:
            continue
        gate, up = (x[tok] @ gate_up_proj[e]).chunk(2, dim=-1)
        out = out.index_add(0, tok, ((F.silu(gate) * up) @ down_proj[e]) * weights[tok, slot, None])
    return out


def _rel(a, b) -> float:
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def check_method(device, dtype, method: str, seed: int = 0) -> dict:
    """Run :func:`moe_experts` with ``method`` on tiny inputs (4 experts, one of them unused; hidden 32, inter 16,
    top-2, 12 tokens) on ``device``/``dtype``, forward and backward, against :func:`_loop_reference`.

    Returns ``{"out", "grad_x", "grad_weights", "grad_gate_up", "grad_down"}``: relative L2 errors, and
    ``"unused_expert_grad"``: the largest |gradient| of the unused expert's weights (exactly 0 when right).
    """
    gen = torch.Generator().manual_seed(seed)
    num_experts, hidden, inter, tokens = 4, 32, 16, 12
    idx = torch.stack([torch.randperm(3, generator=gen)[:2] for _ in range(tokens)])  # expert 3 never chosen
    leaves = {
        "x": torch.randn(tokens, hidden, generator=gen),
        "weights": torch.rand(tokens, 2, generator=gen) + 0.1,
        "gate_up": torch.randn(num_experts, hidden, 2 * inter, generator=gen) / hidden**0.5,
        "down": torch.randn(num_experts, inter, hidden, generator=gen) / inter**0.5,
    }
    grad_out = torch.randn(tokens, hidden, generator=gen)
    with torch.inference_mode(False), torch.enable_grad():
        ref = {k: v.double().requires_grad_(True) for k, v in leaves.items()}
        want = _loop_reference(ref["x"], ref["weights"], idx, ref["gate_up"], ref["down"])
        (want * grad_out.double()).sum().backward()
        dev = {k: v.to(device, dtype).requires_grad_(True) for k, v in leaves.items()}
        got = moe_experts(dev["x"], dev["weights"], idx.to(device), dev["gate_up"], dev["down"], method=method)
        (got.float() * grad_out.to(device)).sum().backward()
    res = {"out": _rel(got.detach().cpu(), want.detach())}
    for name, key in (("grad_x", "x"), ("grad_weights", "weights"), ("grad_gate_up", "gate_up"), ("grad_down", "down")):
        res[name] = _rel(dev[key].grad.cpu(), ref[key].grad)
    res["unused_expert_grad"] = max(float(dev["gate_up"].grad[3].abs().max()), float(dev["down"].grad[3].abs().max()))
    return res


def _tolerance(dtype) -> float:
    return 1e-3 if dtype in (torch.float32, torch.float64) else 3e-2


def _decide(device: torch.device, dtype) -> tuple:
    mm = _grouped_mm_function()
    if mm is None:
        return SLICED, "torch has neither torch.nn.functional.grouped_mm nor torch._grouped_mm"
    where = f"{device.type}"
    if device.type == "cuda":
        capability = torch.cuda.get_device_capability(device)
        where = f"cuda (compute capability {capability[0]}.{capability[1]})"
        if capability < (8, 0):
            return SLICED, f"{where}: grouped GEMM kernels need compute capability >= 8.0"
    try:
        res = check_method(device, dtype, GROUPED)
    except Exception as exc:  # unsupported dtype/arch/layout in this torch: use the sliced path
        return SLICED, f"{mm.__name__} failed its first-use check on {where} {dtype} ({type(exc).__name__}: {exc})"[
            :400
        ]
    bad = {k: v for k, v in res.items() if k != "unused_expert_grad" and not v <= _tolerance(dtype)}
    if bad or res["unused_expert_grad"] != 0.0:
        return SLICED, f"{mm.__name__} disagrees with the per-expert loop on {where} {dtype}: {res}"
    return GROUPED, f"{mm.__name__} passed its first-use check on {where} {dtype} (max rel err {max(res.values()):.2g})"


def _traceable(dtype) -> bool:
    """Whether the grouped GEMM runs on meta tensors of ``dtype`` (what torch.compile's fake tensors need)."""
    mm = _grouped_mm_function()
    if mm is None:
        return False
    try:
        mm(
            torch.empty(8, 16, device="meta", dtype=dtype),
            torch.empty(2, 16, 16, device="meta", dtype=dtype),
            offs=torch.empty(2, device="meta", dtype=torch.int32),
        )
    except Exception:  # e.g. "Expected inputs of BF16 type" in the shape function
        return False
    return True


@torch.compiler.disable
def _first_use(device: torch.device, dtype) -> tuple:
    key = (str(device), dtype)
    with _LOCK:
        if key not in _SUPPORT:
            method, reason = _decide(device, dtype)
            _SUPPORT[key] = (method, reason)
            _TRACEABLE[dtype] = _traceable(dtype)
            (_LOG.info if method == GROUPED else _LOG.warning)("qwen3_vl_moe.grouped_experts: %s", reason)
    return _SUPPORT[key]


def method_for(device, dtype) -> tuple:
    """``(method, reason)`` for experts on ``device`` in ``dtype``: ``"grouped_mm"`` if this torch has a grouped
    GEMM, the device is the CPU or a CUDA device of compute capability >= 8.0, and a tiny forward+backward on that
    device and dtype matches a per-expert float64 loop (:func:`check_method`); ``"sliced"`` otherwise. Decided
    once per device and dtype (the first call runs the check), then cached."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    hit = _SUPPORT.get((str(device), dtype))
    return hit if hit is not None else _first_use(device, dtype)


def support_info() -> dict:
    """What was decided so far: ``{"<device> <dtype>": {"method", "reason"}}``."""
    return {
        f"{dev} {str(dt).replace('torch.', '')}": {"method": m, "reason": r}
        for (dev, dt), (m, r) in sorted(_SUPPORT.items(), key=lambda kv: (kv[0][0], str(kv[0][1])))
    }


# --------------------------------------------------------------------------------------------------------------
# Self-check
# --------------------------------------------------------------------------------------------------------------
class _TinyExperts(torch.nn.Module):
    """The attributes the experts forward reads (transformers 4.57.x layout), without transformers."""

    def __init__(self, num_experts=8, hidden=16, inter=8, seed=0):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.num_experts, self.hidden_size, self.intermediate_size = num_experts, hidden, inter
        self.gate_up_proj = torch.nn.Parameter(torch.randn(num_experts, hidden, 2 * inter, generator=gen) * 0.3)
        self.down_proj = torch.nn.Parameter(torch.randn(num_experts, inter, hidden, generator=gen) * 0.3)
        self.act_fn = torch.nn.SiLU()


def verify() -> None:
    """Tiny CPU float32 experts (8 experts, top-2, 6 tokens in a batch of 2, some experts unused): the
    replacement in train and eval mode, with every method this torch supports on the CPU, against the per-expert
    float64 loop (values and gradients of the hidden states, routing weights and both expert weights).

    Raises:
        AssertionError: on any mismatch (relative 1e-4) or a wrong shape/dtype.
    """
    experts = _TinyExperts()
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 3, 16, generator=gen)
    idx = torch.stack([torch.randperm(5, generator=gen)[:2] for _ in range(6)])  # experts 5..7 unused
    dense = torch.zeros(6, 8).scatter_(1, idx, torch.rand(6, 2, generator=gen) + 0.1)
    grad_out = torch.randn(2, 3, 16, generator=gen)
    leaves = (x, dense, experts.gate_up_proj, experts.down_proj)
    ref_in = [t.detach().double().requires_grad_(True) for t in leaves]
    want = _loop_reference(ref_in[0].reshape(6, 16), ref_in[1].gather(1, idx), idx, ref_in[2], ref_in[3])
    (want.reshape(2, 3, 16) * grad_out.double()).sum().backward()
    methods = [SLICED] + ([GROUPED] if method_for("cpu", torch.float32)[0] == GROUPED else [])
    for method in methods:
        for training in (True, False):
            experts.train(training)
            experts.zero_grad(set_to_none=True)
            xi, di = x.clone().requires_grad_(True), dense.clone().requires_grad_(True)
            saved = dict(_SUPPORT)
            _SUPPORT[("cpu", torch.float32)] = (method, "verify")
            try:
                out = grouped_experts_forward(experts, xi, di, idx)
            finally:
                _SUPPORT.clear()
                _SUPPORT.update(saved)
            label = f"{method}, {'train' if training else 'eval'}"
            assert out.shape == (2, 3, 16) and out.dtype == torch.float32, f"{label}: {out.shape} {out.dtype}"
            err = _rel(out, want.reshape(2, 3, 16))
            assert err < 1e-4, f"{label}: output off the float64 per-expert loop by {err:.3g} (relative)"
            (out * grad_out).sum().backward()
            pairs = {
                "grad hidden_states": (xi.grad, ref_in[0].grad),
                "grad routing_weights": (di.grad, ref_in[1].grad),
                "grad gate_up_proj": (experts.gate_up_proj.grad, ref_in[2].grad),
                "grad down_proj": (experts.down_proj.grad, ref_in[3].grad),
            }
            for name, (got, ref) in pairs.items():
                err = _rel(got.detach(), ref)
                assert err < 1e-4, f"{label}: {name} off the float64 per-expert loop by {err:.3g} (relative)"
