"""Fixed ``fast_pos_embed_interpolate`` for the Qwen3-VL vision tower (patch ``qwen3_vl.vision_pos_embed``).

Upstream method mirrored (same arguments, same output values and row order):
transformers 4.57.6, ``transformers/models/qwen3_vl/modeling_qwen3_vl.py``,
``Qwen3VLVisionModel.fast_pos_embed_interpolate`` (``Qwen3VLMoeVisionModel`` in ``qwen3_vl_moe`` inherits the
same code). It bilinearly resamples the learned ``n x n`` position-embedding grid (``pos_embed``, an
``nn.Embedding`` with ``n*n`` rows; ``n = num_grid_per_side`` = 48 for Qwen3-VL) to each image's ``h x w`` patch
grid (``align_corners=True``: grid point ``i`` of an axis of length ``L`` sits at ``i*(n-1)/(L-1)``), repeats it
for the ``t`` frames, and emits the rows in spatial-merge-block order: within a frame, row
``((by*(w/m) + bx)*m + jy)*m + jx`` holds patch ``(y, x) = (by*m + jy, bx*m + jx)``, ``m = spatial_merge_size``.

What the upstream method (transformers 4.57.x-5.5.x, field case B01) gets wrong, and what this one does instead:

- it builds its index/weight tensors on ``pos_embed.weight.device``; under FSDP2 ``cpu_offload`` that is the CPU
  while ``grid_thw`` and the activations are on the accelerator ("Expected all tensors to be on the same
  device"). Here everything is computed on ``grid_thw.device``; a weight found elsewhere is moved there (the
  table only, with autograd), and module hooks on ``pos_embed`` (FSDP unshard) still run;
- it iterates ``grid_thw`` tensor elements (4.57.x: one device sync per element) and rebuilds every image's
  indices in Python lists. Here ``grid_thw`` is read once (``tolist()``: one device-to-host copy, none on the
  CPU) and the merge-order permutation is folded into the index order, so one fused 4-tap gather + weighted sum
  writes the output:

  - CUDA (Triton importable): one Triton kernel computes each output row's 4 taps from a small per-call table
    (per-axis taps of each distinct length, per-image offsets; one pinned non-blocking copy) and sums the table
    rows in float32 with float32 weights. Nothing is cached; every call costs the same.
  - CPU (``F.embedding_bag``) and other devices such as Ascend NPU (chunked ``F.embedding`` + float32 sum):
    indices/weights are built once per distinct ``(h, w)`` with vectorised tensor ops and kept in a bounded LRU
    cache on the target device; repeated images and video frames reuse them (each distinct grid is embedded
    once and copied).

  Peak extra memory is about the output itself (no (rows, 4, hidden) intermediates).

Settings (environment): ``VLGRPO_POS_EMBED_CACHE_MB`` (index cache bound per process, default 64 MiB, 0 = off;
not used by the Triton path),
``VLGRPO_POS_EMBED_TRITON=false`` (or ``0``: use ``F.embedding_bag`` on CUDA); both are rows of the launch registry
(``vlgrpo/environment.tsv``), read with :func:`vlgrpo.environment.read_setting` by the entrypoints' rules.

The patch's record and detectors: :mod:`vlgrpo.patches.fixes.qwen3_vl_vision_pos_embed`. Imported only when a
target module is imported (it imports torch).
"""

from __future__ import annotations

import contextlib
import math
import threading
import types
from collections import OrderedDict

import torch
import torch.nn.functional as F
from torch import nn

from vlgrpo import environment

__all__ = [
    "fast_pos_embed_interpolate",
    "interpolate_pos_embed",
    "verify",
    "clear_cache",
    "cache_info",
    "configure_cache",
]

# How the weighted 4-tap gather runs (``method``):
# - "triton": CUDA with Triton importable (``VLGRPO_POS_EMBED_TRITON=0`` turns it off): one kernel computes each
#   output row's 4 taps, reads the 4 table rows, sums in float32 with float32 weights and writes the row once (no
#   index cache); the backward rebuilds the taps with the same kernel;
# - "embedding_bag": CPU (and CUDA without Triton): ``F.embedding_bag(mode="sum", per_sample_weights=...)`` with the
#   weights rounded to the table dtype, as upstream rounds them;
# - "gather": any other device (e.g. Ascend "npu"): chunked ``F.embedding`` + float32 weighted sum.
_EMBEDDING_BAG_DEVICES = ("cpu", "cuda")
_TRITON_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_FALLBACK_CHUNK_ROWS = 8192
# Paths with the index cache: if the distinct (h, w) grids of a call cover at most this share of its output rows,
# their embeddings are computed once and copied per image/frame (cheaper than a gather per output row).
_REUSE_SHARE = 0.25


# --------------------------------------------------------------------------------------------------------------
# Cache of per-(h, w) index/weight tensors
# --------------------------------------------------------------------------------------------------------------
class _Cache:
    """Bounded LRU of ``(indices, weights)`` per ``(h, w, n, merge, device, dtype)``.

    Entries built in one batch are views of one buffer; the byte count is that of the live buffers, so the
    bound holds for the memory actually kept. Thread-safe.
    """

    def __init__(self, max_bytes: int, max_entries: int):
        self.max_bytes = int(max_bytes)
        self.max_entries = int(max_entries)
        self._entries: OrderedDict = OrderedDict()  # key -> (idx, wts, group)
        self._groups: dict = {}  # id(group) -> [nbytes, refcount]
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.rows_built = 0

    def get(self, key):
        with self._lock:
            hit = self._entries.get(key)
            if hit is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return hit[0], hit[1]

    def put_group(self, items, nbytes: int, rows: int) -> None:
        """Insert ``items`` = [(key, idx, wts)] that share one buffer of ``nbytes``."""
        with self._lock:
            self.rows_built += rows
            if self.max_entries <= 0 or self.max_bytes <= 0 or nbytes > self.max_bytes:
                return
            group = object()
            self._groups[id(group)] = [nbytes, 0, group]
            self._bytes += nbytes
            for key, idx, wts in items:
                old = self._entries.pop(key, None)
                if old is not None:
                    self._release(old[2])
                self._entries[key] = (idx, wts, group)
                self._groups[id(group)][1] += 1
            while self._entries and (len(self._entries) > self.max_entries or self._bytes > self.max_bytes):
                _, (_, _, g) = self._entries.popitem(last=False)
                self._release(g)

    def _release(self, group) -> None:
        rec = self._groups[id(group)]
        rec[1] -= 1
        if rec[1] == 0:
            self._bytes -= rec[0]
            del self._groups[id(group)]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._groups.clear()
            self._bytes = 0
            self.hits = self.misses = self.rows_built = 0

    def info(self) -> dict:
        with self._lock:
            return {
                "entries": len(self._entries),
                "bytes": self._bytes,
                "max_bytes": self.max_bytes,
                "max_entries": self.max_entries,
                "hits": self.hits,
                "misses": self.misses,
                "rows_built": self.rows_built,
            }


def _env_cache_bytes() -> int:
    # the registry's rule (python/src/vlgrpo/environment.tsv: float 0..65536, default 64), as the entrypoints check it
    value, problem = environment.read_setting("VLGRPO_POS_EMBED_CACHE_MB")
    if problem:
        raise ValueError(problem)
    return int(value * (1 << 20))


_CACHE = _Cache(max_bytes=_env_cache_bytes(), max_entries=4096)


# Per-axis taps of each (length, n) seen (host, float64 (3, length)): a few KiB each, at most _AXIS_TAPS_MAX.
_AXIS_TAPS: dict = {}
_AXIS_TAPS_MAX = 1024


def clear_cache() -> None:
    """Drop every cached index/weight tensor (on all devices) and the host's per-axis taps; reset the counters."""
    _CACHE.clear()
    _AXIS_TAPS.clear()


def cache_info() -> dict:
    """Counters of the module cache: ``entries``, ``bytes`` (held, int), ``max_bytes``, ``max_entries``,
    ``hits``/``misses`` (per distinct (h, w) looked up), ``rows_built`` (index rows computed so far)."""
    return _CACHE.info()


def configure_cache(max_bytes: int | None = None, max_entries: int | None = None) -> None:
    """Change the cache bounds (bytes of device memory, number of (h, w) entries; 0 disables caching).

    The default byte bound is ``VLGRPO_POS_EMBED_CACHE_MB`` MiB (64) read at import. Existing entries are
    dropped. Raises ``ValueError`` for negative bounds.
    """
    for name, value in (("max_bytes", max_bytes), ("max_entries", max_entries)):
        if value is not None and int(value) < 0:
            raise ValueError(f"configure_cache({name}={value}): must be >= 0 (0 disables the cache)")
    with _CACHE._lock:
        if max_bytes is not None:
            _CACHE.max_bytes = int(max_bytes)
        if max_entries is not None:
            _CACHE.max_entries = int(max_entries)
    _CACHE.clear()


# --------------------------------------------------------------------------------------------------------------
# Index/weight construction
# --------------------------------------------------------------------------------------------------------------
def _axis_taps(lengths, n: int):
    """Per-axis taps for every length in ``lengths`` (CPU, exactly as the upstream method computes them:
    ``torch.linspace(0, n-1, L)`` in float32, floor by ``int()``, ceil = floor+1 clipped to n-1,
    fraction = position - floor in float32). Each length's taps are computed once per process and kept (host
    memory, at most ``_AXIS_TAPS_MAX`` lengths; :func:`clear_cache` drops them).

    Returns ``(offsets, table)``: ``offsets[L]`` = start of length ``L`` in ``table``, a float64 tensor of shape
    (3, sum(lengths)) holding floor, ceil (exact integers) and fraction (float32 values).
    """
    offsets, cols, start = {}, [], 0
    for length in lengths:
        col = _AXIS_TAPS.get((length, n))
        if col is None:
            pos = torch.linspace(0, n - 1, length, dtype=torch.float32)
            floor = pos.int()
            ceil = (floor + 1).clip(max=n - 1)
            frac = pos - floor
            col = torch.stack([floor.double(), ceil.double(), frac.double()])
            if len(_AXIS_TAPS) < _AXIS_TAPS_MAX:
                _AXIS_TAPS[(length, n)] = col
        cols.append(col)
        offsets[length] = start
        start += length
    return offsets, torch.cat(cols, dim=1)


def _build(keys, n: int, merge: int, device: torch.device, dtype: torch.dtype):
    """Index/weight tensors for the distinct grids ``keys`` = [(h, w)], in merge-block row order.

    Vectorised over all rows of all keys (a fixed number of kernels whatever the number of keys).
    Returns ``(idx (S, 4) int64, wts (S, 4) dtype, sizes [h*w])`` on ``device``, S = sum(h*w). Column ``k`` of
    ``idx``/``wts`` is the (floor_h, floor_w), (floor_h, ceil_w), (ceil_h, floor_w), (ceil_h, ceil_w) tap.
    """
    lengths = sorted({v for key in keys for v in key})
    offsets, taps = _axis_taps(lengths, n)
    sizes = [h * w for h, w in keys]
    total = sum(sizes)
    meta = torch.tensor([[h * w, w // merge, offsets[h], offsets[w]] for h, w in keys], dtype=torch.float64)
    meta = torch.cat([meta, (torch.cumsum(meta[:, :1], 0) - meta[:, :1])], dim=1)  # + start row of each key
    # One host-to-device copy of everything computed on the host (pinned + non_blocking: no sync on CUDA).
    host = torch.cat([taps.flatten(), meta.flatten()])
    if device.type == "cuda":
        host = host.pin_memory()
    dev = host.to(device, non_blocking=True)
    width = taps.shape[1]
    floors, ceils, fracs = dev[:width].long(), dev[width : 2 * width].long(), dev[2 * width : 3 * width].float()
    per_key = dev[3 * width :].view(len(keys), 5).long()
    rep = torch.repeat_interleave(per_key[:, 1:], per_key[:, 0], dim=0, output_size=total)
    blocks_w, h_off, w_off, start = rep.unbind(1)
    row = torch.arange(total, device=device) - start
    block, inner = torch.div(row, merge * merge, rounding_mode="floor"), row % (merge * merge)
    y = torch.div(block, blocks_w, rounding_mode="floor") * merge + torch.div(inner, merge, rounding_mode="floor")
    x = (block % blocks_w) * merge + inner % merge
    gy, gx = h_off + y, w_off + x
    fh, ch, dh = floors[gy] * n, ceils[gy] * n, fracs[gy]
    fw, cw, dw = floors[gx], ceils[gx], fracs[gx]
    idx = torch.stack([fh + fw, fh + cw, ch + fw, ch + cw], dim=1)
    eh, ew = 1 - dh, 1 - dw
    wts = torch.stack([eh * ew, eh * dw, dh * ew, dh * dw], dim=1).to(dtype)
    return idx, wts, sizes


_TRITON = None  # None: not tried yet; False: unavailable; else a namespace with the kernel
_TRITON_ROWS = 16  # output rows per program of the fused kernel
_TRITON_BD = 128  # hidden columns per inner step


def _triton(device: torch.device | None = None, hidden: int = 5, dtype: torch.dtype = torch.float32):
    """The Triton kernel, or ``False`` when Triton is unavailable, switched off (``VLGRPO_POS_EMBED_TRITON=0``)
    or fails its first-use check: both of its modes (output rows; taps only) are compiled and run once on
    ``device`` on a tiny ``grid_thw`` with a table of ``hidden`` columns in ``dtype`` (those of the first real call,
    so the check compiles the variant that call uses) and compared with the torch path; any error or mismatch
    falls back to ``F.embedding_bag`` (logged once)."""
    global _TRITON
    if _TRITON is None:
        on, problem = environment.read_setting("VLGRPO_POS_EMBED_TRITON")  # registry bool, default true
        if problem:
            _warn_once(f"{problem}; the Triton path stays on")
        if not on:
            _TRITON = False
            return _TRITON
        try:
            _TRITON = _define_triton()
            if device is not None:
                _check_triton(device, hidden, dtype)
        except Exception as exc:  # ImportError, no C compiler, unsupported GPU, ...: use embedding_bag
            _TRITON = False
            _warn_once(f"Triton path disabled ({type(exc).__name__}: {exc}); using F.embedding_bag on CUDA")
    return _TRITON


def _check_triton(device: torch.device, hidden: int = 5, dtype: torch.dtype = torch.float32) -> None:
    rows = [(1, 2, 2), (2, 4, 6), (1, 2, 2)]
    # the torch path's indices/weights of every output row: one grid per image/frame, in output order
    ref_idx, ref_wts, _ = _build([(h, w) for t, h, w in rows for _ in range(t)], 3, 2, device, torch.float32)
    plan = _plan_triton(rows, 3, 2, device)
    idx, wts = _triton_taps(plan)
    table = ((torch.arange(9 * hidden, device=device) % 29) / 7).view(9, hidden).to(dtype)
    got = _InterpolateTriton.apply(table, plan).float()
    want = F.embedding_bag(ref_idx, table.float(), mode="sum", per_sample_weights=ref_wts)
    close = torch.allclose(got, want, rtol=1e-5 if dtype == torch.float32 else 1e-2, atol=1e-5)
    if not (torch.equal(idx, ref_idx) and torch.equal(wts, ref_wts) and close):
        raise AssertionError("Triton kernels disagree with the torch path on a 2x2 + 2 x 4x6 + 2x2 grid_thw")


def _warn_once(message: str) -> None:
    import logging

    logging.getLogger(__name__).warning("qwen3_vl.vision_pos_embed: %s", message)


#: integer arguments that change with every batch (row count, number of grid_thw rows, binary-search depth, grid
#: side): Triton must not specialise on their values (1, divisibility by 16), or each new batch compiles again
_TRITON_DYNAMIC_INTS = ("total", "n", "num_keys", "steps")
#: the per-call plan's pointers (16-byte aligned by construction anyway; see :func:`_plan_triton`)
_TRITON_PLAN_POINTERS = ("meta_ptr", "starts_ptr", "floor_ptr", "ceil_ptr", "frac_ptr")


def _jit_options(triton) -> dict:
    """``triton.jit`` options: no value specialisation of :data:`_TRITON_DYNAMIC_INTS`, and none on the plan
    pointers' alignment where this Triton has that option (a feature check, not a version check)."""
    import inspect

    options = {"do_not_specialize": list(_TRITON_DYNAMIC_INTS)}
    try:
        params = inspect.signature(triton.jit).parameters
    except (TypeError, ValueError):
        params = {}
    if "do_not_specialize_on_alignment" in params:
        options["do_not_specialize_on_alignment"] = list(_TRITON_PLAN_POINTERS)
    return options


def compiled_variants() -> int | None:
    """How many variants of the pos-embed Triton kernel this process has compiled (all devices), or ``None`` when
    the kernel is not defined or this Triton keeps its compiled kernels elsewhere. Used by the tests that count
    compilations (the kernel must compile once per device, dtype and hidden size, not once per batch)."""
    kernel = getattr(_TRITON, "interpolate", None) if _TRITON else None
    caches = getattr(kernel, "device_caches", None)
    if isinstance(caches, dict):  # Triton 3.x: device -> (kernel cache, ...)
        return sum(len(entry[0]) for entry in caches.values())
    cache = getattr(kernel, "cache", None)
    if isinstance(cache, dict):  # Triton 2.x: device -> {key: kernel}
        return sum(len(v) for v in cache.values())
    return None


def _define_triton():
    import triton
    import triton.language as tl

    @triton.jit(**_jit_options(triton))
    def interpolate(
        meta_ptr,
        starts_ptr,
        floor_ptr,
        ceil_ptr,
        frac_ptr,
        table_ptr,
        out_ptr,
        total,
        n,
        num_keys,
        steps,
        D: tl.constexpr,
        MERGE: tl.constexpr,
        ROWS: tl.constexpr,
        BD: tl.constexpr,
        TAPS_ONLY: tl.constexpr,
    ):
        # Each output row: its grid_thw row k (binary search in the row starts; starts[num_keys] = total), the patch
        # (y, x) it holds in merge-block order, its 4 taps (row ids into the n x n table) and float32 weights.
        # TAPS_ONLY: store those as (total, 4) int64 / float32 in table_ptr / out_ptr (for the backward); else
        # out[r, :] = sum_k table[idx_k(r), :] * w_k(r), accumulated in float32.
        rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
        rmask = rows < total
        lo = tl.zeros_like(rows)
        hi = lo + num_keys
        for _ in range(steps):
            mid = (lo + hi) // 2
            go = tl.load(starts_ptr + mid) <= rows
            lo = tl.where(go, mid, lo)
            hi = tl.where(go, hi, mid)
        size = tl.load(meta_ptr + lo * 4)
        blocks_w = tl.load(meta_ptr + lo * 4 + 1)
        h_off = tl.load(meta_ptr + lo * 4 + 2)
        w_off = tl.load(meta_ptr + lo * 4 + 3)
        r = (tl.minimum(rows, total - 1) - tl.load(starts_ptr + lo)) % size  # video frames repeat the grid
        block = r // (MERGE * MERGE)
        inner = r % (MERGE * MERGE)
        y = (block // blocks_w) * MERGE + inner // MERGE
        x = (block % blocks_w) * MERGE + inner % MERGE
        fh = tl.load(floor_ptr + h_off + y) * n
        ch = tl.load(ceil_ptr + h_off + y) * n
        dh = tl.load(frac_ptr + h_off + y)
        fw = tl.load(floor_ptr + w_off + x)
        cw = tl.load(ceil_ptr + w_off + x)
        dw = tl.load(frac_ptr + w_off + x)
        eh = 1.0 - dh
        ew = 1.0 - dw
        i0, i1, i2, i3 = fh + fw, fh + cw, ch + fw, ch + cw
        w0, w1, w2, w3 = eh * ew, eh * dw, dh * ew, dh * dw
        if TAPS_ONLY:
            o = rows.to(tl.int64) * 4
            tl.store(table_ptr + o, i0, mask=rmask)
            tl.store(table_ptr + o + 1, i1, mask=rmask)
            tl.store(table_ptr + o + 2, i2, mask=rmask)
            tl.store(table_ptr + o + 3, i3, mask=rmask)
            tl.store(out_ptr + o, w0, mask=rmask)
            tl.store(out_ptr + o + 1, w1, mask=rmask)
            tl.store(out_ptr + o + 2, w2, mask=rmask)
            tl.store(out_ptr + o + 3, w3, mask=rmask)
        else:
            cols = tl.arange(0, BD)
            out_row = rows.to(tl.int64)[:, None] * D
            for d0 in tl.static_range(0, D, BD):
                c = d0 + cols
                mask = rmask[:, None] & (c < D)[None, :]
                acc = tl.zeros((ROWS, BD), tl.float32)
                v = tl.load(table_ptr + i0[:, None] * D + c[None, :], mask=mask, other=0.0)
                acc += v.to(tl.float32) * w0[:, None]
                v = tl.load(table_ptr + i1[:, None] * D + c[None, :], mask=mask, other=0.0)
                acc += v.to(tl.float32) * w1[:, None]
                v = tl.load(table_ptr + i2[:, None] * D + c[None, :], mask=mask, other=0.0)
                acc += v.to(tl.float32) * w2[:, None]
                v = tl.load(table_ptr + i3[:, None] * D + c[None, :], mask=mask, other=0.0)
                acc += v.to(tl.float32) * w3[:, None]
                tl.store(out_ptr + out_row + c[None, :], acc.to(out_ptr.dtype.element_ty), mask=mask)

    return types.SimpleNamespace(interpolate=interpolate)


def _plan_triton(rows, n: int, merge: int, device: torch.device) -> types.SimpleNamespace:
    """What the fused kernels read, for the ``grid_thw`` rows ``rows`` = [(t, h, w)]: the per-axis taps of every
    distinct length (as :func:`_axis_taps`), per row ``[h*w, w/merge, h offset, w offset]`` and the output row
    starts (``t*h*w`` rows each, plus the total), all in one int64 buffer sent with one pinned, non-blocking
    host-to-device copy (no sync)."""
    lengths = sorted({v for _, h, w in rows for v in (h, w)})
    offsets, taps = _axis_taps(lengths, n)
    width = taps.shape[1]
    meta, starts, total = [], [], 0
    for t, h, w in rows:
        meta += [h * w, w // merge, offsets[h], offsets[w]]
        starts.append(total)
        total += t * h * w
    starts.append(total)
    frac = torch.zeros(width + (width & 1), dtype=torch.float32)
    frac[:width] = taps[2].float()
    # every segment starts on a 16-byte boundary (an even number of int64 before it), whatever the batch: the
    # kernel's pointer arguments then always have the same alignment (no re-specialisation)
    segments = [
        taps[0].long(),
        taps[1].long(),
        torch.tensor(meta, dtype=torch.long),
        torch.tensor(starts, dtype=torch.long),
        frac.view(torch.long),
    ]
    spans, at = [], 0
    for seg in segments:
        spans.append((at, at + seg.numel()))
        at += seg.numel() + (seg.numel() & 1)
    host = torch.zeros(at, dtype=torch.long)
    for seg, (lo, hi) in zip(segments, spans):
        host[lo:hi] = seg
    if device.type == "cuda":
        host = host.pin_memory()
    buf = host.to(device, non_blocking=True)
    k = len(rows)
    floors, ceils, meta_d, starts_d, fracs = (buf[lo:hi] for lo, hi in spans)
    return types.SimpleNamespace(
        floors=floors,
        ceils=ceils,
        meta=meta_d,
        starts=starts_d,
        fracs=fracs.view(torch.float32)[:width],
        total=total,
        n=n,
        merge=merge,
        num_keys=k,
        steps=max(k - 1, 0).bit_length(),
        device=device,
    )


def _launch(kernel, plan, *args, **consts):
    """Run ``kernel`` over the ``plan.total`` output rows (``_TRITON_ROWS`` per program) on ``plan.device``."""
    grid = (-(-plan.total // _TRITON_ROWS),)
    # (the CPU case is TRITON_INTERPRET=1, for kernel development only)
    where = torch.cuda.device(plan.device) if plan.device.type == "cuda" else contextlib.nullcontext()
    with where:
        kernel[grid](
            plan.meta,
            plan.starts,
            plan.floors,
            plan.ceils,
            plan.fracs,
            *args,
            plan.total,
            plan.n,
            plan.num_keys,
            plan.steps,
            MERGE=plan.merge,
            ROWS=_TRITON_ROWS,
            **consts,
        )


def _triton_taps(plan):
    """(total, 4) int64 indices and float32 weights of every output row of ``plan`` (one kernel)."""
    idx = torch.empty((plan.total, 4), dtype=torch.long, device=plan.device)
    wts = torch.empty((plan.total, 4), dtype=torch.float32, device=plan.device)
    _launch(_triton().interpolate, plan, idx, wts, D=1, BD=1, TAPS_ONLY=True)
    return idx, wts


class _InterpolateTriton(torch.autograd.Function):
    """Fused Triton forward: every output row computes its 4 taps from ``plan`` and sums the table rows in float32
    (one kernel, output written once, nothing cached). Backward: ``grad_table[p] = sum_{r,k: idx[r,k]=p} w[r, k]
    * grad_out[r]`` with the indices rebuilt by the ``taps`` kernel and the deterministic embedding backward, in
    float32 chunks."""

    @staticmethod
    def forward(ctx, table, plan):
        table_c = table.contiguous()
        out = torch.empty((plan.total, table.shape[1]), dtype=table.dtype, device=table.device)
        _launch(_triton().interpolate, plan, table_c, out, D=table.shape[1], BD=_TRITON_BD, TAPS_ONLY=False)
        ctx.plan = plan
        ctx.table_meta = (table.shape[0], table.dtype)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        idx, wts = _triton_taps(ctx.plan)
        num_rows, dtype = ctx.table_meta
        grad = torch.zeros((num_rows, grad_out.shape[1]), dtype=torch.float32, device=grad_out.device)
        for lo in range(0, idx.shape[0], _FALLBACK_CHUNK_ROWS):
            hi = min(lo + _FALLBACK_CHUNK_ROWS, idx.shape[0])
            part = (grad_out[lo:hi, None, :].float() * wts[lo:hi, :, None]).flatten(0, 1)
            grad += torch.ops.aten.embedding_dense_backward(part, idx[lo:hi].flatten(), num_rows, -1, False)
        return grad.to(dtype), None


def _method(table: torch.Tensor, method: str | None) -> str:
    if method is None:
        if (
            table.device.type == "cuda"
            and table.dtype in _TRITON_DTYPES
            and _triton(table.device, table.shape[1], table.dtype)
        ):
            return "triton"
        return "embedding_bag" if table.device.type in _EMBEDDING_BAG_DEVICES else "gather"
    if method not in ("triton", "embedding_bag", "gather"):
        raise ValueError(f"method={method!r}: use 'triton', 'embedding_bag', 'gather' or None (automatic)")
    if method == "triton" and not (
        table.device.type == "cuda"
        and table.dtype in _TRITON_DTYPES
        and _triton(table.device, table.shape[1], table.dtype)
    ):
        raise ValueError(
            f"method='triton' needs a CUDA table of dtype float32/bfloat16/float16 and Triton; got "
            f"{table.device} {table.dtype}"
        )
    return method


def _pieces(keys, n, merge, device, dtype, cache):
    """``{(h, w): (idx, wts)}`` for ``keys``, from ``cache`` or built in one batch (and cached)."""
    dev = str(device)
    out, missing = {}, []
    for key in keys:
        hit = cache.get((key[0], key[1], n, merge, dev, dtype)) if cache is not None else None
        if hit is None:
            missing.append(key)
        else:
            out[key] = hit
    if missing:
        # Cached tensors must be usable later under autograd, even if first built under inference_mode.
        with torch.inference_mode(False), torch.no_grad():
            idx, wts, sizes = _build(missing, n, merge, device, dtype)
        items, start = [], 0
        for key, size in zip(missing, sizes):
            pair = (idx[start : start + size], wts[start : start + size])
            out[key] = pair
            items.append(((key[0], key[1], n, merge, dev, dtype), pair[0], pair[1]))
            start += size
        if cache is not None:
            nbytes = idx.numel() * idx.element_size() + wts.numel() * wts.element_size()
            cache.put_group(items, nbytes, start)
    return out


# --------------------------------------------------------------------------------------------------------------
# Embedding table and weighted gather
# --------------------------------------------------------------------------------------------------------------
def _global_hooks() -> bool:
    mod = torch.nn.modules.module
    return bool(getattr(mod, "_global_forward_pre_hooks", None) or getattr(mod, "_global_forward_hooks", None))


def _is_plain_embedding(emb) -> bool:
    """True if reading ``emb.weight`` directly is what calling ``emb`` would do (no hooks, no renorm, ...)."""
    return (
        isinstance(emb, nn.Embedding)
        and type(emb).forward is nn.Embedding.forward
        and not emb._forward_pre_hooks
        and not emb._forward_hooks
        and not _global_hooks()
        and emb.max_norm is None
        and emb.padding_idx is None
    )


def _move_input_to_weight(module, args):
    """Forward pre-hook registered last for one call: send the row ids where the (hooked) weight now is."""
    weight = getattr(module, "weight", None)
    if weight is not None and args and args[0].device != weight.device:
        return (args[0].to(weight.device),) + tuple(args[1:])
    return None


def _table(emb, num_rows: int, device: torch.device) -> torch.Tensor:
    """The (num_rows, hidden) embedding table on ``device``, differentiable w.r.t. ``emb.weight``.

    A plain ``nn.Embedding`` gives its weight (moved to ``device`` if it lives elsewhere, e.g. offloaded to the
    CPU). Otherwise ``emb`` is called on all row ids so its hooks run (FSDP unshard / a pre-hook that moves the
    weight, field case B01) and custom forwards are honoured; the ids follow the weight wherever the hooks put it.
    """
    if _is_plain_embedding(emb):
        table = emb.weight
    else:
        handle = emb.register_forward_pre_hook(_move_input_to_weight)
        try:
            table = emb(torch.arange(num_rows, device=device))
        finally:
            handle.remove()
    if table.device != device:
        table = table.to(device)
    return table


def _weighted_gather(idx, wts, table, sparse: bool = False, method: str = "embedding_bag"):
    """``out[r] = sum_k table[idx[r, k]] * wts[r, k]``: (R, 4) int64, (R, 4) weights -> (R, hidden) table dtype."""
    if idx.shape[0] == 0:
        return table.new_zeros((0, table.shape[1]))
    if method == "embedding_bag":
        return F.embedding_bag(idx, table, mode="sum", per_sample_weights=wts, sparse=sparse)
    # Chunked gather, weighted sum in float32. Nothing large is saved for backward (the embedding saves its
    # indices; the weights need no grad).
    out = table.new_empty((idx.shape[0], table.shape[1]))
    for lo in range(0, idx.shape[0], _FALLBACK_CHUNK_ROWS):
        hi = min(lo + _FALLBACK_CHUNK_ROWS, idx.shape[0])
        rows = F.embedding(idx[lo:hi], table).float() * wts[lo:hi, :, None].float()
        out[lo:hi] = rows.sum(1).to(table.dtype)
    return out


def _read_grid(grid_thw, merge: int):
    if not isinstance(grid_thw, torch.Tensor):
        raise TypeError(
            f"grid_thw must be a torch.Tensor of shape (num_images_or_videos, 3), got {type(grid_thw).__name__}"
        )
    if grid_thw.dim() != 2 or grid_thw.shape[1] != 3 or grid_thw.is_floating_point() or grid_thw.is_complex():
        raise ValueError(
            f"grid_thw must be an integer tensor of shape (num_images_or_videos, 3) holding (t, h, w) "
            f"in patches, got dtype {grid_thw.dtype} and shape {tuple(grid_thw.shape)}"
        )
    rows = grid_thw.tolist()  # the one device-to-host read (none when grid_thw is on the CPU)
    for i, (t, h, w) in enumerate(rows):
        if t < 1 or h < 1 or w < 1 or h % merge or w % merge:
            raise ValueError(
                f"grid_thw[{i}] = {[t, h, w]}: t, h, w must be >= 1 and h, w multiples of "
                f"spatial_merge_size={merge}; fix the image processor output (patch counts per "
                f"image/video)"
            )
    return rows


# torch.compile: the plan is built on the host from grid_thw's values (one read, pinned copy) and its size depends
# on them, so this function runs outside any compiled region (a graph break at the call, as the upstream method's
# own data-dependent code causes); fake tensors never reach the host-side planning or the Triton launch.
@torch.compiler.disable
def interpolate_pos_embed(
    pos_embed,
    grid_thw: torch.Tensor,
    num_grid_per_side: int,
    spatial_merge_size: int,
    cache=_CACHE,
    method: str | None = None,
) -> torch.Tensor:
    """Bilinear position embeddings for the images/videos of ``grid_thw``, in Qwen3-VL merge order.

    Under ``torch.compile`` it runs eagerly (``torch.compiler.disable``: a graph break at the call); with
    ``fullgraph=True`` compilation stops there, as it does at the upstream method's data-dependent sizes.

    Args:
        pos_embed: the ``nn.Embedding`` (or a module called like one) with ``num_grid_per_side**2`` rows of
            width ``hidden``; any device, any floating dtype.
        grid_thw: integer tensor (num_images_or_videos, 3) of (t, h, w) in patches; ``h`` and ``w`` multiples
            of ``spatial_merge_size``. Its device is where the result is computed.
        num_grid_per_side: ``n`` (48 for Qwen3-VL: 2304 positions).
        spatial_merge_size: ``m`` (2 for Qwen3-VL).
        cache: a ``_Cache`` (default: this module's) or ``None`` to build without caching (the Triton path keeps
            no index cache and ignores it).
        method: ``"triton"`` / ``"embedding_bag"`` / ``"gather"`` or ``None`` to choose by device (see the
            module's ``_EMBEDDING_BAG_DEVICES`` notes): Triton on CUDA, embedding_bag on CPU, gather elsewhere.

    Returns:
        (sum t*h*w, hidden) tensor on ``grid_thw.device`` in the dtype of the table, differentiable w.r.t.
        ``pos_embed.weight``. The same values and rows as transformers 4.57.6 (fp32: within rounding, ~1 ulp;
        low precision: the weights are rounded to the table dtype as upstream does, the 4-tap sum accumulates in
        float32).

    Raises:
        TypeError / ValueError: ``grid_thw`` not an integer (k, 3) tensor, a non-positive size, or h/w not a
        multiple of ``spatial_merge_size``; ``pos_embed`` with fewer than ``n*n`` rows.
    """
    n, merge = int(num_grid_per_side), int(spatial_merge_size)
    if n < 1 or merge < 1:
        raise ValueError(f"num_grid_per_side={n} and spatial_merge_size={merge} must be >= 1 (vision config)")
    rows = _read_grid(grid_thw, merge)
    device = grid_thw.device
    num_rows = getattr(pos_embed, "num_embeddings", n * n)
    if num_rows < n * n:
        raise ValueError(
            f"pos_embed has {num_rows} rows but num_grid_per_side={n} needs {n * n} "
            f"(vision_config.num_position_embeddings must be a square >= {n * n})"
        )
    table = _table(pos_embed, num_rows, device)
    if not table.is_floating_point():
        raise TypeError(f"pos_embed table dtype {table.dtype} is not floating point")
    sparse = bool(getattr(pos_embed, "sparse", False)) and table is getattr(pos_embed, "weight", None)
    if not rows:
        return table.new_zeros((0, table.shape[1]))

    method = _method(table, method)
    if method == "triton":  # one fused kernel computes the indices and writes every output row (no cache)
        return _InterpolateTriton.apply(table, _plan_triton(rows, n, merge, device))
    wdtype = table.dtype if method == "embedding_bag" else torch.float32
    keys = list(dict.fromkeys((h, w) for _, h, w in rows))
    pieces = _pieces(keys, n, merge, device, wdtype, cache)
    total = sum(t * h * w for t, h, w in rows)
    distinct_rows = sum(h * w for h, w in keys)

    if len(rows) == 1 and rows[0][0] == 1:
        idx, wts = pieces[keys[0]]
        return _weighted_gather(idx, wts, table, sparse, method)
    if distinct_rows <= _REUSE_SHARE * total:
        # Few distinct grids, many copies (repeated image sizes, video frames): embed each grid once, copy.
        if len(keys) == 1:
            idx, wts = pieces[keys[0]]
        else:
            idx = torch.cat([pieces[k][0] for k in keys])
            wts = torch.cat([pieces[k][1] for k in keys])
        embedded = _weighted_gather(idx, wts, table, sparse, method)
        if len(keys) == 1:  # one grid size: a broadcast copy (backward: a sum over the copies)
            frames = sum(t for t, _, _ in rows)
            return embedded.expand(frames, *embedded.shape).reshape(total, embedded.shape[1])
        spans, start = {}, 0
        for key in keys:
            spans[key] = torch.arange(start, start + key[0] * key[1], device=device)
            start += key[0] * key[1]
        # F.embedding = index_select forward with a deterministic (sort-based) backward on CUDA.
        return F.embedding(torch.cat([spans[(h, w)] for t, h, w in rows for _ in range(t)]), embedded)
    # Mostly distinct grids: one fused gather over the full index (output written once, no copies).
    parts = [pieces[(h, w)] for t, h, w in rows for _ in range(t)]
    idx = torch.cat([p[0] for p in parts])
    wts = torch.cat([p[1] for p in parts])
    return _weighted_gather(idx, wts, table, sparse, method)


def _merge_size(self) -> int:
    merge = getattr(self, "spatial_merge_size", None)
    if merge is None:
        merge = self.config.spatial_merge_size
    return int(merge)


def fast_pos_embed_interpolate(self, grid_thw: torch.Tensor) -> torch.Tensor:
    """Drop-in replacement for ``Qwen3VLVisionModel.fast_pos_embed_interpolate`` and
    ``Qwen3VLMoeVisionModel.fast_pos_embed_interpolate`` (transformers 4.57.6, ``modeling_qwen3_vl.py``).

    Uses ``self.pos_embed`` (``nn.Embedding``, ``num_grid_per_side**2`` rows x vision ``hidden_size``),
    ``self.num_grid_per_side`` and ``self.spatial_merge_size`` (else ``self.config.spatial_merge_size``).

    Args:
        grid_thw: integer tensor (num_images_or_videos, 3) of (t, h, w) in patches (``h``, ``w`` multiples of
            the merge size), on any device.

    Returns:
        (sum t*h*w, hidden) position embeddings on ``grid_thw.device``, dtype of ``pos_embed``'s weight (as
        seen after its hooks), rows in merge-block order exactly as upstream; gradients reach
        ``pos_embed.weight`` wherever it lives. One device-to-host read of ``grid_thw`` (none on the CPU).

    Raises:
        TypeError / ValueError: see :func:`interpolate_pos_embed`.
    """
    return interpolate_pos_embed(self.pos_embed, grid_thw, int(self.num_grid_per_side), _merge_size(self))


# --------------------------------------------------------------------------------------------------------------
# Self-check
# --------------------------------------------------------------------------------------------------------------
def _reference_matrix(rows, n: int, merge: int) -> torch.Tensor:
    """Dense (sum t*h*w, n*n) float64 interpolation matrix written from the definition (slow, tiny inputs only):
    output row r = sum_p A[r, p] * table[p]."""
    out = []
    for t, h, w in rows:
        frame = []
        for by in range(h // merge):
            for bx in range(w // merge):
                for jy in range(merge):
                    for jx in range(merge):
                        y, x = by * merge + jy, bx * merge + jx
                        py = y * (n - 1) / (h - 1) if h > 1 else 0.0
                        px = x * (n - 1) / (w - 1) if w > 1 else 0.0
                        y0, x0 = min(math.floor(py), n - 1), min(math.floor(px), n - 1)
                        y1, x1 = min(y0 + 1, n - 1), min(x0 + 1, n - 1)
                        fy, fx = py - y0, px - x0
                        line = [0.0] * (n * n)
                        line[y0 * n + x0] += (1 - fy) * (1 - fx)
                        line[y0 * n + x1] += (1 - fy) * fx
                        line[y1 * n + x0] += fy * (1 - fx)
                        line[y1 * n + x1] += fy * fx
                        frame.append(line)
        out.extend(frame * t)
    return torch.tensor(out, dtype=torch.float64)


def verify() -> None:
    """Run the replacement on tiny CPU inputs against :func:`_reference_matrix` (a from-the-definition bilinear
    evaluation), for the plain, hooked-module and fallback gather paths, values and gradients.

    Raises:
        AssertionError: on any mismatch (atol 1e-5 in float32).
    """
    n, merge, hidden = 5, 2, 3
    rows = [[1, 2, 2], [2, 4, 6], [1, 6, 2], [1, 2, 8], [1, 4, 6]]
    gen = torch.Generator().manual_seed(0)

    class _Tower(nn.Module):
        def __init__(self):
            super().__init__()
            self.pos_embed = nn.Embedding(n * n, hidden)
            with torch.no_grad():
                self.pos_embed.weight.copy_(torch.randn(n * n, hidden, generator=gen))
            self.num_grid_per_side, self.spatial_merge_size = n, merge

    tower = _Tower()
    grid = torch.tensor(rows)
    matrix = _reference_matrix(rows, n, merge)
    upstream_grad = torch.randn(matrix.shape[0], hidden, generator=gen, dtype=torch.float64)
    expected = matrix @ tower.pos_embed.weight.detach().double()
    expected_grad = matrix.T @ upstream_grad

    def check(label, fn):
        tower.pos_embed.weight.grad = None
        got = fn()
        assert got.shape == expected.shape, f"{label}: shape {tuple(got.shape)} != {tuple(expected.shape)}"
        err = (got.double() - expected).abs().max().item()
        assert err < 1e-5, f"{label}: max |out - reference| = {err:.3g}"
        (got.double() * upstream_grad).sum().backward()
        gerr = (tower.pos_embed.weight.grad.double() - expected_grad).abs().max().item()
        assert gerr < 1e-5, f"{label}: max |grad - reference grad| = {gerr:.3g}"

    cache = _Cache(1 << 20, 64)
    check("plain", lambda: fast_pos_embed_interpolate(tower, grid))
    check("cached", lambda: interpolate_pos_embed(tower.pos_embed, grid, n, merge, cache))
    check("cached again", lambda: interpolate_pos_embed(tower.pos_embed, grid, n, merge, cache))
    check("gather fallback", lambda: interpolate_pos_embed(tower.pos_embed, grid, n, merge, None, method="gather"))
    handle = tower.pos_embed.register_forward_pre_hook(lambda module, args: None)
    try:
        check("hooked module", lambda: fast_pos_embed_interpolate(tower, grid))
    finally:
        handle.remove()
    for single in ([1, 4, 6], [3, 4, 6], [1, 2, 2]):  # one image; one video (frames copied)
        want = _reference_matrix([single], n, merge) @ tower.pos_embed.weight.detach().double()
        got = interpolate_pos_embed(tower.pos_embed, torch.tensor([single]), n, merge, cache)
        err = (got.double() - want).abs().max().item()
        assert got.shape == want.shape and err < 1e-5, f"grid_thw {[single]}: max |out - reference| = {err:.3g}"
