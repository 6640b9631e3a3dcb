"""Patch ``qwen3_vl.vision_pos_embed`` (vlgrpo.patches.qwen3_vl_pos_embed) against the real transformers 4.57.6.

References, never the module's own output:
- the installed transformers 4.57.6 ``Qwen3VLVisionModel`` / ``Qwen3VLMoeVisionModel.fast_pos_embed_interpolate``
  (the original, also when a vlgrpo patch replaced it: ``__wrapped__``) run on a tiny vision tower built from the
  real Qwen3-VL-30B-A3B vision config (hidden scaled down; 2304 positions, merge 2 kept);
- for bf16 accuracy, ``torch.nn.functional.interpolate(mode="bilinear", align_corners=True)`` of the same table in
  float64, reordered into merge blocks (the definition the upstream code implements).
Field case B01: the weight is kept elsewhere and a forward pre-hook on ``pos_embed`` installs the real weight
(stand-in for FSDP2 unshard). Every test runs on the CPU and, where CUDA is visible, on ``cuda`` too.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import transformers
from torch import nn
from torch.overrides import TorchFunctionMode
from transformers.models.qwen3_vl import modeling_qwen3_vl as tq
from transformers.models.qwen3_vl_moe import modeling_qwen3_vl_moe as tqm

from vlgrpo.patches import qwen3_vl_pos_embed as pe
from vlgrpo.patches import source
from vlgrpo.patches.fixes import qwen3_vl_vision_pos_embed as pos_embed_fix

ROOT = Path(__file__).resolve().parents[3]
CONFIG = ROOT / "assets" / "models" / "qwen3-vl-30b-a3b-instruct" / "config.json"
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
HIDDEN = 64


def _random_grids():
    gen = torch.Generator().manual_seed(1234)
    sizes = (torch.randint(4, 33, (256, 2), generator=gen) * 2).tolist()  # even sizes 8..64
    return [[1, h, w] for h, w in sizes]


GRIDS = {
    "dummy-4x4": [[1, 4, 4]],
    "two-images": [[1, 16, 16], [1, 32, 48]],
    "video-t2": [[2, 8, 12]],
    "64x28x28": [[1, 28, 28]] * 64,
    "256-random": _random_grids(),
}


def _original(cls):
    """The class's own method as transformers ships it (unwrapping a vlgrpo replacement if one is bound)."""
    func = cls.fast_pos_embed_interpolate
    while getattr(func, "__vlgrpo_patch__", None):
        func = func.__wrapped__
    return func


def _tower(cls, config_cls, dtype=torch.float32, device="cpu", seed=0):
    vision = json.loads(CONFIG.read_text())["vision_config"]
    assert vision["num_position_embeddings"] == 2304 and vision["spatial_merge_size"] == 2
    vision.update(
        hidden_size=HIDDEN,
        num_heads=4,
        intermediate_size=128,
        depth=1,
        out_hidden_size=HIDDEN,
        deepstack_visual_indexes=[0],
    )
    vision.pop("model_type", None)
    torch.manual_seed(seed)
    model = cls(config_cls(**vision)).eval()
    with torch.no_grad():  # unit-scale weights make the 1e-6 bound strict (init std is 0.02)
        model.pos_embed.weight.normal_(0.0, 1.0)
    return model.to(device=device, dtype=dtype)


@pytest.fixture(scope="module")
def towers():
    assert transformers.__version__ == "4.57.6", "the reference must be the pinned transformers 4.57.6"
    made = {}

    def get(kind="dense", dtype=torch.float32, device="cpu"):
        key = (kind, dtype, device)
        if key not in made:
            cls, cfg = (
                (tq.Qwen3VLVisionModel, tq.Qwen3VLVisionConfig)
                if kind == "dense"
                else (tqm.Qwen3VLMoeVisionModel, tqm.Qwen3VLMoeVisionConfig)
            )
            made[key] = _tower(cls, cfg, dtype, device)
        return made[key]

    return get


_REF_OUT: dict = {}


def _reference(model, kind, grid_name, device):
    """transformers 4.57.6's own output (cached per tower/grid: the slow part of this file)."""
    key = (kind, model.pos_embed.weight.dtype, device, grid_name)
    if key not in _REF_OUT:
        cls = tq.Qwen3VLVisionModel if kind == "dense" else tqm.Qwen3VLMoeVisionModel
        with torch.no_grad():
            _REF_OUT[key] = _original(cls)(model, torch.tensor(GRIDS[grid_name], device=device))
    return _REF_OUT[key]


def _exact(grid, weight, n=48, merge=2):
    """float64 bilinear (align_corners=True) resampling of the table to each grid, merge-block order."""
    table = weight.detach().double().reshape(n, n, -1).permute(2, 0, 1)[None]  # (1, hidden, n, n)
    outs = []
    for t, h, w in grid:
        img = F.interpolate(table, size=(h, w), mode="bilinear", align_corners=True)[0].permute(1, 2, 0)
        img = img.reshape(h // merge, merge, w // merge, merge, -1).permute(0, 2, 1, 3, 4).reshape(h * w, -1)
        outs.append(img.repeat(t, 1))
    return torch.cat(outs)


# ----------------------------------------------------------------------------------------------------------------
# Values
# ----------------------------------------------------------------------------------------------------------------
def test_reference_is_the_faulty_4576_code():
    for cls in (tq.Qwen3VLVisionModel, tqm.Qwen3VLMoeVisionModel):
        faulty, reason = pos_embed_fix.is_faulty(_original(cls))
        assert faulty and "pos_embed.weight.device" in reason, reason


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("grid_name", list(GRIDS))
def test_fp32_matches_transformers_4576(towers, grid_name, device):
    model = towers("dense", torch.float32, device)
    want = _reference(model, "dense", grid_name, device)
    got = pe.fast_pos_embed_interpolate(model, torch.tensor(GRIDS[grid_name], device=device))
    rows = sum(t * h * w for t, h, w in GRIDS[grid_name])
    assert got.shape == want.shape == (rows, HIDDEN)
    assert got.dtype == torch.float32 and got.device.type == device
    assert (got - want).abs().max().item() <= 1e-6


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("grid_name", list(GRIDS))
def test_bf16_no_farther_from_fp64_than_transformers_4576(towers, grid_name, device):
    model = towers("dense", torch.bfloat16, device)
    grid = GRIDS[grid_name]
    exact = _exact(grid, model.pos_embed.weight)
    want = _reference(model, "dense", grid_name, device)
    got = pe.fast_pos_embed_interpolate(model, torch.tensor(grid, device=device))
    assert got.dtype == want.dtype == torch.bfloat16
    err_ours = (got.double() - exact).abs().max().item()
    err_upstream = (want.double() - exact).abs().max().item()
    assert err_ours <= err_upstream, (err_ours, err_upstream)


@pytest.mark.parametrize("device", DEVICES)
def test_moe_vision_model_matches_transformers_4576(towers, device):
    model = towers("moe", torch.float32, device)
    for grid_name in ("two-images", "video-t2", "dummy-4x4"):
        want = _reference(model, "moe", grid_name, device)
        got = pe.fast_pos_embed_interpolate(model, torch.tensor(GRIDS[grid_name], device=device))
        assert got.shape == want.shape and (got - want).abs().max().item() <= 1e-6


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("method", ["gather", "embedding_bag"])
def test_every_gather_method_matches(towers, device, method):
    """The automatic choice is Triton on CUDA and embedding_bag on CPU; "gather" is the path of devices without
    either (e.g. Ascend NPU); each is checked here on every available device, values and gradients."""
    model = towers("dense", torch.float32, device)
    for grid_name in ("two-images", "video-t2", "64x28x28"):
        want = _reference(model, "dense", grid_name, device)
        grid = torch.tensor(GRIDS[grid_name], device=device)
        got = pe.interpolate_pos_embed(model.pos_embed, grid, 48, 2, cache=None, method=method)
        assert (got - want).abs().max().item() <= 1e-6
    grid = torch.tensor(GRAD_GRIDS[0], device=device)
    upstream = torch.randn(sum(t * h * w for t, h, w in GRAD_GRIDS[0]), HIDDEN).to(device)
    want = _grad(_original(tq.Qwen3VLVisionModel), model, grid, upstream)
    got = _grad(lambda m, g: pe.interpolate_pos_embed(m.pos_embed, g, 48, 2, method=method), model, grid, upstream)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the Triton path runs on CUDA")
def test_cuda_uses_the_triton_path_when_triton_is_installed():
    pytest.importorskip("triton")
    table = torch.zeros(2304, 8, dtype=torch.bfloat16, device="cuda")
    assert pe._method(table, None) == "triton"  # the first-use check passed: the fp32/bf16 tests ran Triton


def test_unknown_method_is_named(towers):
    with pytest.raises(ValueError, match="method='fast'"):
        pe.interpolate_pos_embed(towers("dense").pos_embed, torch.tensor([[1, 4, 4]]), 48, 2, method="fast")


# ----------------------------------------------------------------------------------------------------------------
# Gradients, devices, hooks (field case B01)
# ----------------------------------------------------------------------------------------------------------------
GRAD_GRIDS = [
    [[1, 16, 16], [1, 32, 48]],
    [[2, 8, 12]],
    [[1, 28, 28]] * 8,  # one size, copied (broadcast path)
    [[1, 8, 8], [1, 16, 16], [1, 8, 8]] * 6,  # few sizes, many copies (index_select path)
]


def _grad(fn, model, grid, upstream):
    model.pos_embed.weight.grad = None
    (fn(model, grid) * upstream).sum().backward()
    return model.pos_embed.weight.grad.clone()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["dense", "moe"])
def test_gradients_match_transformers_4576(kind, device):
    cls, cfg = (
        (tq.Qwen3VLVisionModel, tq.Qwen3VLVisionConfig)
        if kind == "dense"
        else (tqm.Qwen3VLMoeVisionModel, tqm.Qwen3VLMoeVisionConfig)
    )
    model = _tower(cls, cfg, device=device)
    for grid in GRAD_GRIDS:
        grid_t = torch.tensor(grid, device=device)
        rows = sum(t * h * w for t, h, w in grid)
        upstream = torch.randn(rows, HIDDEN, generator=torch.Generator().manual_seed(len(grid))).to(device)
        want = _grad(_original(cls), model, grid_t, upstream)
        got = _grad(pe.fast_pos_embed_interpolate, model, grid_t, upstream)
        assert got.abs().sum() > 0
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def _offload(model, device):
    """Make ``model.pos_embed.weight`` a NaN placeholder on the CPU until a forward pre-hook installs the real
    weight on ``device`` (what FSDP2 unshard does; B01's recipe); a forward hook puts the placeholder back."""
    emb = model.pos_embed
    full = nn.Parameter(emb.weight.detach().clone().to(device))
    placeholder = nn.Parameter(torch.full_like(emb.weight, float("nan"), device="cpu"))
    emb.weight = placeholder

    def unshard(module, args):
        module.weight = full

    def reshard(module, args, output):
        module.weight = placeholder

    handles = [emb.register_forward_pre_hook(unshard), emb.register_forward_hook(reshard)]
    return full, handles


@pytest.mark.parametrize("device", DEVICES)
def test_b01_prehook_moves_weight_gradients_reach_it(device):
    """Weight kept on the CPU (a NaN placeholder here), moved to ``device`` only by a pre-hook."""
    plain = _tower(tq.Qwen3VLVisionModel, tq.Qwen3VLVisionConfig, device=device)
    hooked = _tower(tq.Qwen3VLVisionModel, tq.Qwen3VLVisionConfig, device="cpu")
    full, handles = _offload(hooked, device)
    for grid in ([[1, 4, 4]], [[1, 16, 16], [1, 32, 48]], [[2, 8, 12]]):
        grid_t = torch.tensor(grid, device=device)
        rows = sum(t * h * w for t, h, w in grid)
        upstream = torch.randn(rows, HIDDEN).to(device)
        want = _original(tq.Qwen3VLVisionModel)(plain, grid_t)
        full.grad = None
        got = pe.fast_pos_embed_interpolate(hooked, grid_t)
        assert got.device == grid_t.device and got.shape == (rows, HIDDEN)
        assert torch.equal(got, pe.fast_pos_embed_interpolate(plain, grid_t))
        assert (got - want).abs().max().item() <= 1e-6
        (got * upstream).sum().backward()
        plain.pos_embed.weight.grad = None
        (want * upstream).sum().backward()
        torch.testing.assert_close(full.grad, plain.pos_embed.weight.grad, rtol=1e-5, atol=1e-5)
        assert hooked.pos_embed.weight.grad is None  # the placeholder never took part
    if device != "cpu":  # the upstream code fails exactly as reported in B01
        with pytest.raises(RuntimeError, match="device"):
            _original(tq.Qwen3VLVisionModel)(hooked, torch.tensor([[1, 4, 4]], device=device))
    for h in handles:
        h.remove()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a second device (CUDA)")
def test_weight_on_cpu_grid_on_cuda_without_hooks():
    plain = _tower(tq.Qwen3VLVisionModel, tq.Qwen3VLVisionConfig, device="cuda")
    offloaded = _tower(tq.Qwen3VLVisionModel, tq.Qwen3VLVisionConfig, device="cpu")
    grid = torch.tensor(GRIDS["two-images"], device="cuda")
    got = pe.fast_pos_embed_interpolate(offloaded, grid)
    assert got.device == grid.device
    want = _original(tq.Qwen3VLVisionModel)(plain, grid)
    assert (got - want).abs().max().item() <= 1e-6
    got.sum().backward()
    want.sum().backward()
    assert offloaded.pos_embed.weight.grad.device.type == "cpu"
    torch.testing.assert_close(offloaded.pos_embed.weight.grad, plain.pos_embed.weight.grad.cpu(), rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------------------------------------------
# Host reads, caching
# ----------------------------------------------------------------------------------------------------------------
_HOST_READS = {
    "tolist",
    "item",
    "__bool__",
    "__int__",
    "__index__",
    "__float__",
    "nonzero",
    "numpy",
    "cpu",
    "unique",
    "unique_consecutive",
    "__iter__",
    "__len__",
}


class _CountHostReads(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", str(func))
        if name in _HOST_READS:
            self.calls.append(name)
        return func(*args, **(kwargs or {}))


def test_one_host_read_per_call_cold_and_warm(towers):
    model = towers("dense", torch.float32, "cpu")
    grid = torch.tensor([[1, 8, 8], [3, 16, 12], [1, 8, 8], [1, 20, 20]])
    with _CountHostReads() as mode:  # the counter sees upstream's per-element reads
        _original(tq.Qwen3VLVisionModel)(model, grid)
    assert len(mode.calls) > 10
    pe.clear_cache()
    for _ in range(2):  # cold, then warm
        with _CountHostReads() as mode:
            pe.fast_pos_embed_interpolate(model, grid)
        assert mode.calls == ["tolist"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA sync debug mode")
def test_one_cuda_sync_per_call_cold_and_warm(towers):
    model = towers("dense", torch.bfloat16, "cuda")
    grid = torch.tensor([[1, 8, 8], [3, 16, 12], [1, 8, 8], [1, 20, 20]], device="cuda")
    pe.clear_cache()
    for _ in range(2):
        torch.cuda.synchronize()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                pe.fast_pos_embed_interpolate(model, grid)
            finally:
                torch.cuda.set_sync_debug_mode("default")
        syncs = [w for w in caught if "called a synchronizing CUDA operation" in str(w.message)]
        assert len(syncs) == 1, [str(w.message) for w in syncs]


def test_repeated_sizes_and_frames_built_once(towers):
    model = towers("dense", torch.float32, "cpu")
    pe.clear_cache()
    pe.fast_pos_embed_interpolate(model, torch.tensor(GRIDS["64x28x28"]))
    assert pe.cache_info()["rows_built"] == 28 * 28
    pe.fast_pos_embed_interpolate(model, torch.tensor([[16, 48, 48]]))
    assert pe.cache_info()["rows_built"] == 28 * 28 + 48 * 48
    pe.fast_pos_embed_interpolate(model, torch.tensor([[1, 48, 48], [4, 28, 28], [2, 8, 12], [1, 8, 12]]))
    info = pe.cache_info()
    assert info["rows_built"] == 28 * 28 + 48 * 48 + 8 * 12
    assert info["entries"] == 3 and info["hits"] == 2


@pytest.fixture
def small_cache():
    yield
    pe.configure_cache(max_bytes=pe._env_cache_bytes(), max_entries=4096)


def test_cache_is_bounded_and_stays_correct(towers, small_cache):
    model = towers("dense", torch.float32, "cpu")
    pe.configure_cache(max_entries=3)
    sizes = [[1, 8, 8], [1, 8, 10], [1, 10, 8], [1, 12, 12], [1, 14, 6]]
    for size in sizes:
        pe.fast_pos_embed_interpolate(model, torch.tensor([size]))
    assert pe.cache_info()["entries"] == 3
    pe.configure_cache(max_bytes=64 * 1024)
    for size in sizes * 2:
        got = pe.fast_pos_embed_interpolate(model, torch.tensor([size] * 3))
        want = _original(tq.Qwen3VLVisionModel)(model, torch.tensor([size] * 3))
        assert (got - want).abs().max().item() <= 1e-6
        assert pe.cache_info()["bytes"] <= 64 * 1024
    pe.configure_cache(max_bytes=0)
    pe.fast_pos_embed_interpolate(model, torch.tensor([[1, 30, 30]]))
    assert pe.cache_info()["entries"] == 0
    with pytest.raises(ValueError, match="max_bytes"):
        pe.configure_cache(max_bytes=-1)


def test_cache_filled_under_inference_mode_serves_training(towers):
    model = _tower(tq.Qwen3VLVisionModel, tq.Qwen3VLVisionConfig)
    grid = torch.tensor([[1, 18, 22], [2, 18, 22]])
    pe.clear_cache()
    with torch.inference_mode():
        pe.fast_pos_embed_interpolate(model, grid)
    upstream = torch.randn(3 * 18 * 22, HIDDEN)
    got = _grad(pe.fast_pos_embed_interpolate, model, grid, upstream)
    want = _grad(_original(tq.Qwen3VLVisionModel), model, grid, upstream)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------------------------------------------
# Errors, detection, verify
# ----------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "grid, match",
    [
        (torch.tensor([[1.0, 4.0, 4.0]]), "integer tensor"),
        (torch.tensor([1, 4, 4]), "shape"),
        (torch.tensor([[1, 4, 5]]), r"grid_thw\[0\].*spatial_merge_size=2"),
        (torch.tensor([[1, 4, 4], [0, 4, 4]]), r"grid_thw\[1\]"),
    ],
)
def test_bad_grid_thw_is_named(towers, grid, match):
    with pytest.raises(ValueError, match=match):
        pe.fast_pos_embed_interpolate(towers("dense"), grid)


def test_empty_grid_gives_empty_output(towers):
    out = pe.fast_pos_embed_interpolate(towers("dense"), torch.zeros(0, 3, dtype=torch.long))
    assert out.shape == (0, HIDDEN)


def test_is_faulty_on_fixed_and_faulty_code():
    verl_qwen3_vl = pytest.importorskip("verl.models.transformers.qwen3_vl")

    faulty, reason = pos_embed_fix.is_faulty(verl_qwen3_vl.fast_pos_embed_interpolate)  # verl 0.8.0: grid_thw.device
    assert not faulty, reason
    assert pos_embed_fix.is_faulty(pe.fast_pos_embed_interpolate) == (False, "already the vlgrpo replacement")
    assert not pos_embed_fix.is_faulty(source.function_node(pe.fast_pos_embed_interpolate))[0]  # by its code, too

    def loops_over_grid(self, grid_thw):
        out = []
        for t, h, w in grid_thw:
            out.append(torch.zeros(int(t * h * w), 1, device=grid_thw.device))
        return torch.cat(out)

    faulty, reason = pos_embed_fix.is_faulty(loops_over_grid)
    assert faulty and "element by element" in reason, reason


def test_is_faulty_without_source_reads_bytecode():
    import inspect
    import textwrap

    verl_qwen3_vl = pytest.importorskip("verl.models.transformers.qwen3_vl")

    for func, expected in ((_original(tq.Qwen3VLVisionModel), True), (verl_qwen3_vl.fast_pos_embed_interpolate, False)):
        namespace = {"torch": torch}
        exec(compile(textwrap.dedent(inspect.getsource(func)), "<no source>", "exec"), namespace)
        faulty, reason = pos_embed_fix.is_faulty(namespace["fast_pos_embed_interpolate"])
        assert faulty is expected and "bytecode" in reason, reason


def test_verify_passes_and_catches_a_wrong_layout(monkeypatch):
    """verify() passes on the real layout and refuses one built without the merge-block order (its cost is for a
    benchmark, not a unit test)."""
    pe.verify()
    real_build = pe._build

    def transposed_blocks(keys, n, merge, device, dtype):  # rows in raster instead of merge-block order
        idx, wts, sizes = real_build(keys, n, 1, device, dtype)
        return idx, wts, sizes

    monkeypatch.setattr(pe, "_build", transposed_blocks)
    with pytest.raises(AssertionError, match="reference"):
        pe.verify()
