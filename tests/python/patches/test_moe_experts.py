"""Grouped Qwen3-VL-MoE experts (patch ``qwen3_vl_moe.grouped_experts``) on the CPU, against the real transformers
4.57.6 ``Qwen3VLMoeTextExperts.forward`` (its train-mode loop and its eval-mode repeat path) and the float64
per-expert loop of the definition.

The replacement is called directly or bound with pytest's monkeypatch (restored after each test), so this pytest
process's transformers classes stay unpatched for other suites. Both CPU methods run: ``grouped_mm`` (where this
torch has a CPU grouped GEMM that passes the first-use check) and ``sliced``.
"""

from __future__ import annotations

import ast

import pytest
import torch
from patch_helpers import NPU_STUB, SCENARIOS, VEOMNI, VERL_071, run_py
from transformers.models.qwen3_vl_moe import modeling_qwen3_vl_moe as m
from transformers.models.qwen3_vl_moe.configuration_qwen3_vl_moe import Qwen3VLMoeTextConfig

from vlgrpo.patches import moe_experts as me
from vlgrpo.patches import source
from vlgrpo.patches.fixes import qwen3_vl_moe_grouped_experts as fix

ORIGINAL = getattr(m.Qwen3VLMoeTextExperts.forward, "__wrapped__", m.Qwen3VLMoeTextExperts.forward)
CPU_METHODS = [me.SLICED] + ([me.GROUPED] if me.method_for("cpu", torch.float32)[0] == me.GROUPED else [])


@pytest.fixture
def fresh_support(monkeypatch):
    """An empty first-use table for this test (restored afterwards)."""
    monkeypatch.setattr(me, "_SUPPORT", {})
    return me._SUPPORT


@pytest.fixture
def force(monkeypatch):
    """``force(method)``: make every device/dtype use ``method`` in this test."""

    def _force(method):
        table = {}
        monkeypatch.setattr(me, "_SUPPORT", table)
        monkeypatch.setattr(me, "method_for", lambda device, dtype: (method, "forced by the test"))

    return _force


def make_experts(experts=8, hidden=16, inter=8, top_k=2, seed=0, dtype=torch.float32):
    cfg = Qwen3VLMoeTextConfig(
        hidden_size=hidden,
        moe_intermediate_size=inter,
        num_experts=experts,
        num_experts_per_tok=top_k,
        hidden_act="silu",
    )
    torch.manual_seed(seed)
    mod = m.Qwen3VLMoeTextExperts(cfg)
    with torch.no_grad():
        mod.gate_up_proj.normal_(0, hidden**-0.5)
        mod.down_proj.normal_(0, inter**-0.5)
    mod.config = cfg
    return mod.to(dtype)


def routing(tokens, experts, top_k, seed=1, dtype=torch.float32, only=None):
    """Dense (tokens, experts) routing matrix and (tokens, top_k) indices as the 4.57.6 block builds them
    (softmax, top-k, renormalised, scattered); ``only`` restricts the choice to the first ``only`` experts."""
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(tokens, experts, generator=gen)
    if only is not None:
        logits[:, only:] = -1e9
    probs = torch.softmax(logits, dim=-1)
    w, idx = torch.topk(probs, top_k, dim=-1)
    w = w / w.sum(-1, keepdim=True)
    return torch.zeros(tokens, experts).scatter_(1, idx, w).to(dtype), idx


def run(fn, mod, x, dense, idx, grad_out):
    mod.zero_grad(set_to_none=True)
    xi, di = x.clone().requires_grad_(True), dense.clone().requires_grad_(True)
    out = fn(mod, xi, di, idx)
    (out.float() * grad_out).sum().backward()
    return out.detach(), {
        "hidden_states": xi.grad,
        "routing_weights": di.grad,
        "gate_up_proj": mod.gate_up_proj.grad.clone(),
        "down_proj": mod.down_proj.grad.clone(),
    }


def rel(a, b):
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


# --- values and gradients against the real 4.57.6 forward ----------------------------------------------------------

SHAPES = {  # (experts, hidden, inter, top_k, batch, seq, only): `only` < experts leaves experts without tokens
    "tiny": (8, 16, 8, 2, 1, 4, None),
    "batch of 3, unused experts": (16, 32, 16, 4, 3, 7, 9),
    "top-1": (8, 16, 8, 1, 2, 5, None),
    "128 experts top-8": (128, 32, 16, 8, 1, 40, None),
}


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("method", CPU_METHODS)
def test_fp32_matches_transformers_4576(shape, training, method, force):
    force(method)
    experts, hidden, inter, top_k, batch, seq, only = SHAPES[shape]
    mod = make_experts(experts, hidden, inter, top_k).train(training)
    x = torch.randn(batch, seq, hidden)
    dense, idx = routing(batch * seq, experts, top_k, only=only)
    grad_out = torch.randn(batch, seq, hidden)
    want, want_g = run(ORIGINAL, mod, x, dense, idx, grad_out)
    got, got_g = run(me.grouped_experts_forward, mod, x, dense, idx, grad_out)
    assert got.shape == want.shape == (batch, seq, hidden) and got.dtype == want.dtype == torch.float32
    assert rel(got, want) < 1e-5
    if not training:
        # the eval path multiplies every expert's output by the dense matrix, so its gradient also fills the entries
        # of unchosen experts; the block builds that matrix by scattering into zeros, which passes on only the chosen
        # entries (the replacement's gradient elsewhere is 0, as in the original's training path)
        assert got_g["routing_weights"].scatter(1, idx, 0.0).abs().max() == 0
        got_g["routing_weights"], want_g["routing_weights"] = (
            g["routing_weights"].gather(1, idx) for g in (got_g, want_g)
        )
    for name in want_g:
        assert rel(got_g[name], want_g[name]) < 1e-5, name
    if only is not None:  # experts without tokens get exactly zero gradients
        assert got_g["gate_up_proj"][only:].abs().max() == 0 and got_g["down_proj"][only:].abs().max() == 0


@pytest.mark.parametrize("method", CPU_METHODS)
def test_bf16_no_farther_from_fp64_than_transformers_4576(method, force):
    force(method)
    mod = make_experts(32, 64, 32, 4, dtype=torch.bfloat16)
    x = torch.randn(2, 96, 64).to(torch.bfloat16)
    dense, idx = routing(192, 32, 4, dtype=torch.bfloat16)
    ref = me._loop_reference(x.reshape(-1, 64), dense.gather(1, idx), idx, mod.gate_up_proj, mod.down_proj)
    for training in (True, False):
        mod.train(training)
        with torch.no_grad():
            want = ORIGINAL(mod, x, dense, idx)
            got = me.grouped_experts_forward(mod, x, dense, idx)
        assert got.dtype == want.dtype == torch.bfloat16
        err_ours = (got.reshape(-1, 64).double() - ref).abs().max().item()
        err_457 = (want.reshape(-1, 64).double() - ref).abs().max().item()
        assert err_ours <= 1.25 * err_457, (training, err_ours, err_457)


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_autocast_dtypes_and_values_match_transformers_4576(training):
    # fp32 parameters and hidden states under bf16 autocast (mixed precision without FSDP): the original computes
    # in bf16 and returns fp32 in training (index_add_ into zeros_like(hidden)) and bf16 in eval (bf16 product
    # times the bf16 routing matrix); the replacement returns the same dtypes
    mod = make_experts(16, 32, 16, 4).train(training)
    x = torch.randn(1, 24, 32)
    dense, idx = routing(24, 16, 4, dtype=torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16), torch.no_grad():
        want = ORIGINAL(mod, x, dense, idx)
        got = me.grouped_experts_forward(mod, x, dense, idx)
    assert got.dtype == want.dtype == (torch.float32 if training else torch.bfloat16)
    assert rel(got, want) < 2e-2


def test_eval_dtype_promotes_with_fp32_routing_like_transformers_4576():
    mod = make_experts(dtype=torch.bfloat16).eval()
    x = torch.randn(1, 4, 16).to(torch.bfloat16)
    dense, idx = routing(4, 8, 2)  # float32 routing matrix
    with torch.no_grad():
        assert (
            ORIGINAL(mod, x, dense, idx).dtype == me.grouped_experts_forward(mod, x, dense, idx).dtype == torch.float32
        )


def test_wrong_routing_shapes_are_named():
    mod = make_experts()
    x = torch.randn(1, 4, 16)
    dense, idx = routing(4, 8, 2)
    with pytest.raises(
        ValueError,
        match=r"routing_weights has shape \(4, 2\); expected the dense \(tokens=4, "
        r"num_experts=8\)",
    ):
        me.grouped_experts_forward(mod, x, dense.gather(1, idx), idx)  # compact top-k weights (the B04 kind)
    with pytest.raises(ValueError, match=r"router_indices has shape \(3, 2\)"):
        me.grouped_experts_forward(mod, x, dense, idx[:3])


def test_no_tokens_gives_empty_output():
    mod = make_experts().train()
    out = me.grouped_experts_forward(mod, torch.zeros(1, 0, 16), torch.zeros(0, 8), torch.zeros(0, 2, dtype=torch.long))
    assert out.shape == (1, 0, 16)


def test_other_devices_run_the_original():
    # Ascend NPU and any device other than CUDA/CPU keep the original forward (verl ships NPU experts of its own)
    calls = []

    def original(self, hidden_states, routing_weights, router_indices):
        calls.append(hidden_states.device.type)
        return hidden_states

    forward = me.make_grouped_experts_forward(original)
    mod = make_experts()
    meta = torch.empty(1, 4, 16, device="meta")
    assert (
        forward(mod, meta, torch.empty(4, 8, device="meta"), torch.empty(4, 2, dtype=torch.long, device="meta")) is meta
    )
    dense, idx = routing(4, 8, 2)
    forward(mod, torch.randn(1, 4, 16), dense, idx)
    assert calls == ["meta"]
    assert forward.__code__ in me.make_grouped_experts_forward.__vlgrpo_code__


# --- the routing plan: sorted once, counted once --------------------------------------------------------------------


def test_routing_plan_is_a_stable_sort_with_group_ends():
    idx = torch.tensor([[3, 0], [0, 2], [3, 2], [1, 0]])
    order, inverse, ends = me.routing_plan(idx, 5)
    flat = idx.reshape(-1)
    assert order.tolist() == [1, 2, 7, 6, 3, 5, 0, 4]  # expert 0: pairs 1, 2, 7 in token order; ...
    assert torch.equal(flat[order], torch.sort(flat, stable=True).values)
    assert torch.equal(order[inverse], torch.arange(8))
    assert ends.tolist() == [3, 4, 6, 8, 8] and ends.dtype == torch.int32  # expert 4: empty group


# --- the first-use check --------------------------------------------------------------------------------------------


def test_first_use_check_runs_once_per_device_and_dtype(fresh_support, monkeypatch):
    calls = []
    real = me.check_method
    monkeypatch.setattr(me, "check_method", lambda *a, **k: calls.append(a[:3]) or real(*a, **k))
    first = me.method_for("cpu", torch.float32)
    assert me.method_for("cpu", torch.float32) == first and me.method_for(torch.device("cpu"), torch.float32) == first
    me.method_for("cpu", torch.bfloat16)
    if me._grouped_mm_function() is not None:
        assert calls == [
            (torch.device("cpu"), torch.float32, me.GROUPED),
            (torch.device("cpu"), torch.bfloat16, me.GROUPED),
        ]
    assert set(me.support_info()) == {"cpu float32", "cpu bfloat16"}


def test_first_use_check_falls_back_when_grouped_mm_raises(fresh_support, monkeypatch):
    def broken(a, b, offs=None):
        raise RuntimeError("grouped gemm is only supported on SM90")

    monkeypatch.setattr(me, "_grouped_mm_function", lambda: broken)
    method, reason = me.method_for("cpu", torch.float32)
    assert method == me.SLICED and "failed its first-use check" in reason and "SM90" in reason
    mod = make_experts(16, 32, 16, 4).train()  # and the experts still run (sliced), matching the original
    x = torch.randn(1, 12, 32)
    dense, idx = routing(12, 16, 4)
    assert rel(me.grouped_experts_forward(mod, x, dense, idx), ORIGINAL(mod, x, dense, idx)) < 1e-5


def test_first_use_check_falls_back_when_grouped_mm_is_wrong(fresh_support, monkeypatch):
    real = me._grouped_mm_function()
    if real is None:
        pytest.skip("this torch has no grouped GEMM")

    def off_by_one_group(a, b, offs=None):  # a kernel bug of the kind the check exists for: groups shifted
        return real(a, b.roll(1, dims=0), offs=offs)

    monkeypatch.setattr(me, "_grouped_mm_function", lambda: off_by_one_group)
    method, reason = me.method_for("cpu", torch.float32)
    assert method == me.SLICED and "disagrees with the per-expert loop" in reason


def test_first_use_check_catches_garbage_in_unused_experts(fresh_support, monkeypatch):
    real = me._grouped_mm_function()
    if real is None:
        pytest.skip("this torch has no grouped GEMM")

    class Garbage(torch.autograd.Function):  # right forward, stale values in the weight gradient of empty groups
        @staticmethod
        def forward(ctx, a, b, offs):
            ctx.save_for_backward(a, b, offs)
            return real(a, b, offs=offs)

        @staticmethod
        def backward(ctx, g):
            a, b, offs = ctx.saved_tensors
            with torch.enable_grad():
                a2, b2 = a.detach().requires_grad_(True), b.detach().requires_grad_(True)
                ga, gb = torch.autograd.grad(real(a2, b2, offs=offs), (a2, b2), g)
            return ga, gb + 1e-3, None

    monkeypatch.setattr(me, "_grouped_mm_function", lambda: lambda a, b, offs=None: Garbage.apply(a, b, offs))
    method, reason = me.method_for("cpu", torch.float32)
    assert method == me.SLICED and "unused_expert_grad" in reason


def test_check_method_reports_small_errors_for_both_methods():
    for method in CPU_METHODS:
        res = me.check_method(torch.device("cpu"), torch.float32, method)
        assert res["unused_expert_grad"] == 0.0
        assert max(v for k, v in res.items() if k != "unused_expert_grad") < 1e-5, (method, res)


# --- stacking with the router-dtype fix, inside the real 4.57.6 block and model ----------------------------------


def test_real_block_with_router_fix_and_grouped_experts_matches_original(monkeypatch):
    from vlgrpo.patches import moe_routing

    block = m.Qwen3VLMoeTextSparseMoeBlock(make_experts(16, 32, 16, 4).config)
    block.experts = make_experts(16, 32, 16, 4, seed=2)
    x = torch.randn(2, 9, 32)
    want = {t: block.train(t)(x)[0] for t in (True, False)}  # all fp32: the original works
    monkeypatch.setattr(m.Qwen3VLMoeTextSparseMoeBlock, "forward", moe_routing.sparse_moe_block_forward)
    want_autocast = {}
    for training in (True, False):  # B03's mixed precision needs the router fix; original experts
        with torch.autocast("cpu", dtype=torch.bfloat16):
            want_autocast[training] = block.train(training)(x)[0]
    monkeypatch.setattr(m.Qwen3VLMoeTextExperts, "forward", me.make_grouped_experts_forward(ORIGINAL))
    for training in (True, False):
        assert rel(block.train(training)(x)[0], want[training]) < 1e-5
        with torch.autocast("cpu", dtype=torch.bfloat16):  # both fixes together
            out, logits = block(x)
        assert logits.dtype == torch.bfloat16 and out.dtype == want_autocast[training].dtype
        assert rel(out, want_autocast[training]) < 2e-2


# --- torch.compile and FSDP2 -------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_torch_compile_of_a_caller_gives_the_same_values(dtype):
    # the first-use decisions of this process (grouped_mm on this CPU where it passes); under torch.compile the
    # grouped GEMM is traced only in a dtype its shape function takes (some torch builds: bf16 only), else sliced
    mod = make_experts(16, 32, 16, 4, dtype=dtype).train()
    x = torch.randn(1, 20, 32).to(dtype)
    dense, idx = routing(20, 16, 4, dtype=dtype)

    def layer(x, dense, idx):
        return me.grouped_experts_forward(mod, x, dense, idx) * 2 + 1

    want = layer(x, dense, idx)
    torch._dynamo.reset()
    compiled = torch.compile(layer, backend="aot_eager")
    assert rel(compiled(x, dense, idx), want) < (1e-6 if dtype == torch.float32 else 1e-2)
    assert me._TRACEABLE[dtype] == me._traceable(dtype)


# --- detection on the real code of the releases installed for the tests ------------------------------------------


def _veomni_experts():
    path = VEOMNI / "veomni" / "models" / "transformers" / "qwen3_vl_moe" / "modeling_qwen3_vl_moe.py"
    if not path.is_file():
        pytest.fail(f"VeOmni 0.1.9a5 is not installed in {VEOMNI}; run `make veomni-0.1.9a5`")
    return source.find_function(path.read_text(), "Qwen3VLMoeTextExperts.forward")


def test_detector_on_real_code(verl_071):
    faulty, reason = fix.is_faulty(ORIGINAL)
    assert faulty and "modeling_qwen3_vl_moe.py" in reason
    assert "loop over the experts with `where`" in reason and "repeat(self.num_experts" in reason
    faulty, reason = fix.is_faulty(me.make_grouped_experts_forward(ORIGINAL))
    assert not faulty and "no per-expert host-sync loop" in reason
    faulty, reason = fix.is_faulty(_veomni_experts())  # VeOmni's fused-MoE experts subclass: left alone
    assert not faulty and "not the 3-argument" in reason and "calls super().forward" in reason
    # verl's NPU experts have the eval repeat too, but they are not a target of this patch (NPU: verl's experts)
    npu = source.find_function(
        (VERL_071 / "verl/models/transformers/npu_patch.py").read_text(), "NPUQwen3VLMoeTextExperts.forward"
    )
    assert fix.is_faulty(npu)[0] is True


def test_detector_on_a_5x_style_dispatching_forward():
    # transformers 5.x binds a forward that dispatches on config._experts_implementation ("eager", "grouped_mm",
    # ...); its eager loop uses the (experts, out, in) layout through F.linear (the real 5.17 source is checked on
    # the GPU machine, whose transformers is 5.17: tests/gpu/test_gpu_patches_status.py)
    wrapper = ast.parse(
        "def forward(self, *args, **kwargs):\n"
        "    experts_forward = experts_interface.get_interface(self.config._experts_implementation, original)\n"
        "    return experts_forward(self, *args, **kwargs)\n"
    ).body[0]
    faulty, reason = fix.is_faulty(wrapper)
    assert not faulty and "transformers' own experts implementations" in reason
    eager_5x = ast.parse(
        "def forward(self, hidden_states, top_k_index, top_k_weights):\n"
        "    for expert_idx in expert_hit:\n"
        "        top_k_pos, token_idx = torch.where(expert_mask[expert_idx])\n"
        "        gate, up = nn.functional.linear(hidden_states[token_idx], self.gate_up_proj[expert_idx]).chunk(2, -1)\n"
    ).body[0]
    faulty, reason = fix.is_faulty(eager_5x)
    assert not faulty and "weight layout" in reason


def test_verify_passes_and_catches_a_wrong_combine(monkeypatch):
    me.verify()
    monkeypatch.setattr(me._Unsort, "forward", staticmethod(lambda ctx, y, order, inverse: y))  # rows left sorted
    with pytest.raises(AssertionError, match="output off the float64 per-expert loop"):
        me.verify()


def test_fsdp2_sharded_experts_on_two_cpu_ranks_match_the_unsharded_loop():
    # gloo on the CPU: the experts' 3-D parameters sharded on dim 0 over 2 ranks (the real training layout), 3 AdamW
    # steps against an unsharded copy running the original loop (tests/gpu checks the same on CUDA, with offload)
    launch = (
        "import runpy, sys; sys.argv = ['torchrun', '--standalone', '--nproc_per_node', '2', "
        f"{str(SCENARIOS / 'fsdp_experts.py')!r}]; runpy.run_module('torch.distributed.run', run_name='__main__')"
    )
    out = run_py(launch, env={"OMP_NUM_THREADS": "1"}).json
    assert out and "crash" not in out, out
    assert out["world"] == 2 and out["param_type"] == "DTensor"
    assert out["full_shape"] == [8, 32, 32] and out["local_shape"] == [4, 32, 32]
    assert max(abs(a - b) / b for a, b in zip(out["loss"], out["loss_ref"])) < 1e-5, (out["loss"], out["loss_ref"])
    assert max(out["grad_rel"].values()) < 1e-5, out["grad_rel"]
    assert out["eval_max_abs_diff"] < 1e-4


def test_all_three_moe_patches_in_one_process(shim_dir, verl_071):
    # start-up shim + verl 0.7.1's real NPU layer (torch_npu stand-in): the router-dtype and grouped-experts fixes on
    # transformers' block and experts, the train-routing fix on verl's NPU block, whose NPU experts stay verl's
    out = run_py(SCENARIOS / "moe_stack.py", path=[shim_dir, verl_071, NPU_STUB]).json
    assert "crash" not in out, out.get("crash")
    for pid in ("qwen3_vl_moe.grouped_experts", "npu.qwen3_vl_moe.train_routing"):
        assert out["status"][pid] == "applied", (pid, out["status"])
    # the router fix sits on transformers' block class; the module's name now holds verl's NPU class, whose
    # forward casts correctly, so the per-name status of that patch is "not needed"
    assert out["block_forward_patches"] == ["qwen3_vl_moe.router_dtype", "npu.qwen3_vl_moe.train_routing"]
    assert out["experts_forward"] == ["moe_experts.py", "qwen3_vl_moe.grouped_experts"]
    assert out["npu_experts_forward"] == ["npu_patch.py", None]  # not a target: verl's NPU experts
    assert out["block_classes"] == [
        "transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe",
        "verl.models.transformers.npu_patch",
    ]
    assert out["npu"]["experts_class"] == "NPUQwen3VLMoeTextExperts"
    for name, tol in (("transformers", 0.03), ("npu", 1e-5)):  # bf16 autocast (B03) / fp32
        for mode in ("train", "eval"):
            res = out[name][mode]
            assert "error" not in res, (name, mode, res)
            assert res["err"] < tol * max(1.0, res["ref_max"]), (name, mode, res)
