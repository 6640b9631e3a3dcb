"""CPU stand-in for ``torch_npu`` (Ascend Extension for PyTorch) — tests only.

Implements, in plain PyTorch, the operations verl's ``verl/models/transformers/npu_patch.py`` (v0.7.1, v0.8.0)
calls, following the semantics of the Ascend Extension for PyTorch API reference (torch_npu 2.x,
``torch_npu.npu_*``). They are references, not kernels: they loop over groups and compute in float32 where the
NPU kernels accumulate in float32. Unsupported arguments raise ``NotImplementedError`` instead of being ignored.

On import it also makes ``torch.histc`` accept integer tensors (the NPU kernel does; the CPU kernel raises
"histogram_cpu not implemented for 'Long'"), because verl counts tokens per expert with
``torch.histc(router_indices, bins=num_experts, min=0, max=num_experts)`` on an int64 tensor.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__version__ = "0.0.0+cpu-stand-in"

_cpu_histc = torch.histc


def _histc(input, bins=100, min=0, max=0, *, out=None):  # torch's own argument names
    """``torch.histc`` that also takes integer tensors (result in the input's dtype, as torch documents)."""
    if out is not None:
        raise NotImplementedError("histc stand-in: out= is not supported")
    if input.dtype.is_floating_point:
        return _cpu_histc(input, bins=bins, min=min, max=max)
    return _cpu_histc(input.double(), bins=bins, min=min, max=max).to(input.dtype)


torch.histc = _histc


def npu_rms_norm(x: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-6):
    """RMSNorm over the last dim: ``y = x / sqrt(mean(x**2) + epsilon) * gamma`` computed in float32.

    Returns ``(y, rstd)``: y has x's shape and dtype; rstd = 1/sqrt(mean(x**2)+eps), float32, shape (..., 1).
    """
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + epsilon)
    return (xf * rstd * gamma.float()).to(x.dtype), rstd


def npu_swiglu(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """SwiGLU: split x in two halves ``a, b`` along ``dim``; return ``silu(a) * b`` (half the size on dim)."""
    a, b = x.chunk(2, dim=dim)
    return (F.silu(a.float()) * b.float()).to(x.dtype)


def npu_rotary_mul(x: torch.Tensor, r1: torch.Tensor, r2: torch.Tensor) -> torch.Tensor:
    """Rotary embedding: ``x * r1 + rotate_half(x) * r2`` with ``rotate_half(x) = cat(-x2, x1)`` on the last
    dim (r1 = cos, r2 = sin, broadcast against x)."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * r1 + torch.cat((-x2, x1), dim=-1) * r2


def npu_moe_token_permute(tokens: torch.Tensor, indices: torch.Tensor, num_out_tokens=None, padded_mode=False):
    """Group token copies by expert.

    Args:
        tokens: (T, H). indices: (T, K) expert id of each of a token's K copies (int32/int64).

    Returns:
        ``(permuted_tokens, sorted_indices)``: permuted_tokens (T*K, H) = ``tokens[sorted_indices // K]``, where
        ``sorted_indices`` (T*K,) int32 is the stable argsort of the row-major flattened ``indices`` (so copies are
        ordered by expert id, then by token).
    """
    if num_out_tokens not in (None, 0) or padded_mode:
        raise NotImplementedError("npu_moe_token_permute stand-in: num_out_tokens/padded_mode not supported")
    top_k = indices.shape[1] if indices.dim() == 2 else 1
    flat = indices.reshape(-1).long()
    sorted_indices = torch.argsort(flat, stable=True)
    return tokens.index_select(0, sorted_indices // top_k), sorted_indices.to(torch.int32)


def npu_moe_token_unpermute(
    permuted_tokens: torch.Tensor, sorted_indices: torch.Tensor, probs=None, padded_mode=False, restore_shape=None
):
    """Inverse of :func:`npu_moe_token_permute`, merging each token's K copies weighted by ``probs``.

    Args:
        permuted_tokens: (T*K, H). sorted_indices: (T*K,) from the permute. probs: (T, K) or None (K = 1).

    Returns:
        (T, H) in permuted_tokens' dtype: ``sum_k probs[t, k] * copy(t, k)`` (accumulated in float32).
    """
    if padded_mode or restore_shape is not None:
        raise NotImplementedError("npu_moe_token_unpermute stand-in: padded_mode/restore_shape not supported")
    top_k = probs.shape[1] if probs is not None else 1
    hidden = permuted_tokens.shape[-1]
    unsorted = permuted_tokens.new_zeros(permuted_tokens.shape).index_copy(0, sorted_indices.long(), permuted_tokens)
    unsorted = unsorted.reshape(-1, top_k, hidden).float()
    if probs is not None:
        unsorted = unsorted * probs.float().unsqueeze(-1)
    return unsorted.sum(dim=1).to(permuted_tokens.dtype)


def _group_sizes(group_list, group_list_type):
    sizes = [int(v) for v in (group_list.tolist() if torch.is_tensor(group_list) else group_list)]
    if group_list_type == 0:  # cumulative ends
        sizes = [b - a for a, b in zip([0] + sizes[:-1], sizes)]
    elif group_list_type != 1:
        raise NotImplementedError(f"group_list_type={group_list_type}")
    return sizes


def npu_grouped_matmul(
    x, weight, *, bias=None, group_list=None, split_item=0, group_type=None, group_list_type=0, **unsupported
):
    """Grouped matmul, the two forms verl uses (a single x and a single weight tensor).

    - ``group_type=0`` (groups split M): x[0] (M, K), weight[0] (E, K, N); rows of group e (sizes from
      ``group_list``) are multiplied by ``weight[0][e]``; output (M, N).
    - ``group_type=2`` (groups split K): x[0] (K1, M), weight[0] (M, N); group e contributes
      ``x[0][:, rows_e] @ weight[0][rows_e]``; output (E, K1, N) (the weight gradient).

    ``group_list``: per-group sizes (``group_list_type=1``) or cumulative ends (``0``). ``split_item`` 2/3 return
    ``[output]``; 0/1 return the per-group pieces. Accumulates in float32, returns x's dtype.
    """
    extra = {k: v for k, v in unsupported.items() if v is not None}
    if bias is not None or extra or len(x) != 1 or len(weight) != 1:
        raise NotImplementedError(f"npu_grouped_matmul stand-in: unsupported arguments {sorted(extra) or 'bias/lists'}")
    a, w = x[0], weight[0]
    sizes = _group_sizes(group_list, group_list_type)
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    if group_type == 0:
        if sum(sizes) != a.shape[0]:
            raise ValueError(f"group sizes sum to {sum(sizes)}, x has {a.shape[0]} rows")
        pieces = [(a[s : s + n].float() @ w[e].float()).to(a.dtype) for e, (s, n) in enumerate(zip(starts, sizes))]
        out = torch.cat(pieces, dim=0)
    elif group_type == 2:
        if sum(sizes) != a.shape[1]:
            raise ValueError(f"group sizes sum to {sum(sizes)}, x has {a.shape[1]} columns")
        pieces = [(a[:, s : s + n].float() @ w[s : s + n].float()).to(a.dtype) for s, n in zip(starts, sizes)]
        out = torch.stack(pieces, dim=0)
    else:
        raise NotImplementedError(f"group_type={group_type}")
    return [out] if split_item in (2, 3) else pieces
