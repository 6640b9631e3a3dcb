#!/usr/bin/env python3
"""Benchmark: one Qwen3-VL-30B-A3B MoE experts layer, all contenders side by side in one process.

Contenders (each included when available, otherwise listed under "skipped" with the reason):

- ``transformers 4.57.6 [from wheel]``: ``Qwen3VLMoeTextExperts.forward`` of a ``--transformers-source`` (the
  pinned wheel), compiled in this process from the wheel's ``modeling_qwen3_vl_moe.py`` (it needs only torch): the
  per-expert loop in train mode, the ``repeat(num_experts)`` path in eval mode. If the installed transformers is a
  4.57.x, its own method is used (``__wrapped__`` if a vlgrpo patch replaced it).
- ``transformers <v> eager`` / ``transformers <v> grouped_mm``: the installed transformers' (5.x)
  ``Qwen3VLMoeTextExperts`` with ``config._experts_implementation`` set to ``"eager"`` / ``"grouped_mm"``; its
  weights are stored (experts, out, in), so it gets transposed copies of the same weights, and it takes the top-k
  weights gathered from the same dense routing matrix.
- ``vlgrpo grouped experts``: ``vlgrpo.patches.moe_experts.grouped_experts_forward`` (the patch
  ``qwen3_vl_moe.grouped_experts``) on the 4.57 layout, method chosen by its first-use check; ``vlgrpo sliced``:
  the same with the per-expert-slices fallback forced (what runs where no grouped GEMM is available).
- ``VeOmni <v> fused_<kernel> (4.57 layout)`` / ``(merged fc1)``: VeOmni's fused MoE experts
  (``veomni.ops.kernels.moe.fused_moe_forward`` after ``apply_veomni_fused_moe_patch(kernel)``; kernel ``triton``,
  VeOmni's default ``moe_implementation=fused_triton``, and ``quack``, what its legacy ``fused`` resolves to on
  SM90+), from ``--veomni-source`` (a dir holding ``veomni/``, e.g. ``.cache/veomni-0.1.9a5``). "4.57 layout":
  the weights stay in the 4.57 (experts, in, out) layout and every call makes the transposed gate / up / down
  copies, as VeOmni 0.1.9a5's own ``Qwen3VLMoeTextExperts.fused_moe_forward`` for transformers 4.x does; "merged
  fc1": the weights stored once as (experts, 2 x inter, hidden) / (experts, hidden, inter), the layout its
  transformers-5 adapter passes as ``fc1_1_2_weight`` with no per-call copies. VeOmni calls the fused path in
  train mode only (eval falls back to the 4.57 forward); here the eval row runs the fused kernel under no_grad.
  The kernels take bf16/fp16 only, so they have no fp32-gradient row (their bf16 gradients are checked against
  the fp32 loop's in the ``bf16 gradients`` table).

Sizes: the real text config (``assets/models/qwen3-vl-30b-a3b-instruct/config.json``): hidden 2048, 128 experts,
moe_intermediate 768, top-8; bf16; tokens from ``--tokens`` (4,096 and 16,384). Inputs: hidden states N(0, 1),
weights N(0, initializer_range), the routing the 4.57.6 block computes from random router logits (softmax, top-8,
renormalised, scattered into a dense bf16 matrix), the same for every contender.

Measured per contender and token count:
- train fwd+bwd (``train()``, gradients to the hidden states, the routing matrix and both weights) and eval fwd
  (``eval()``, ``torch.no_grad()``): CUDA events after a synchronize, median and IQR over the repetitions after
  warm-up; the first call of each contender in this process is timed too (host clock, synchronized: it includes
  one-time work such as the first-use check);
- peak extra memory: ``max_memory_allocated`` during one call minus the allocation before it (output included),
  eval and train;
- max |output - float64 reference| of the same routing (reference: a per-expert loop in float64 written here),
  train and eval output;
- float32 gradients against the 4.57.6 loop (same routing, every tensor float32, at the smallest token count):
  relative L2 error of the gradients w.r.t. the hidden states, the routing weights (chosen entries), gate_up_proj
  and down_proj.

Usage (see bench/RESULTS.md for the committed runs):
    python bench/moe_experts.py --transformers-source .whl/transformers-4.57.6-py3-none-any.whl --out r.json
    python bench/moe_experts.py --device cpu --tokens 256 --experts 16 --hidden 128 --inter 64   # smoke test
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from upstream_source import compile_functions, kind
from upstream_source import sources as upstream_sources

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "assets" / "models" / "qwen3-vl-30b-a3b-instruct" / "config.json"
MODELING = "transformers/models/qwen3_vl_moe/modeling_qwen3_vl_moe.py"
GIB = 1 << 30


def _import_vlgrpo():
    try:
        from vlgrpo.patches import moe_experts
    except ImportError:
        sys.path.insert(0, str(REPO / "python" / "src"))
        from vlgrpo.patches import moe_experts
    return moe_experts


class Experts457(torch.nn.Module):
    """The attributes ``Qwen3VLMoeTextExperts.forward`` of transformers 4.57.x reads (its layout)."""

    def __init__(self, gate_up, down):
        super().__init__()
        self.num_experts, self.hidden_size, self.expert_dim = gate_up.shape[0], gate_up.shape[1], down.shape[1]
        self.intermediate_size = self.expert_dim
        self.gate_up_proj = torch.nn.Parameter(gate_up)
        self.down_proj = torch.nn.Parameter(down)
        self.act_fn = torch.nn.SiLU()


# ----------------------------------------------------------------------------------------------------------------
# Contenders: each is ("layout", make(gate_up, down) -> module, call(module, x, dense, idx) -> out, grads(module))
# ----------------------------------------------------------------------------------------------------------------
def _installed_457_method():
    try:
        import transformers
        from transformers.models.qwen3_vl_moe import modeling_qwen3_vl_moe as m
    except ImportError:
        return None, None
    method = m.Qwen3VLMoeTextExperts.forward
    while getattr(method, "__vlgrpo_patch__", None):
        method = method.__wrapped__
    if "router_indices" not in method.__code__.co_varnames:
        return None, transformers.__version__
    return method, transformers.__version__


def _import_veomni(source):
    """VeOmni's fused-MoE entry points from ``source`` (a dir holding ``veomni/``) or the installed package."""
    if source and str(source) not in sys.path:
        sys.path.insert(0, str(source))
    import veomni
    from veomni.ops.kernels import moe as vm

    return getattr(veomni, "__version__", "?"), vm


def veomni_contenders(source, skipped):
    out = {}
    try:
        version, vm = _import_veomni(source)
    except Exception as exc:
        skipped.append(f"VeOmni ({source or 'installed'}): {type(exc).__name__}: {exc}"[:300])
        return out
    for kernel in ("triton", "quack"):
        try:
            vm.apply_veomni_fused_moe_patch(kernel)
        except Exception as exc:
            skipped.append(f"VeOmni {version} fused_{kernel}: {type(exc).__name__}: {exc}"[:300])
            continue
        for layout in ("4.57 layout", "merged fc1"):
            out[f"VeOmni {version} fused_{kernel} ({layout})"] = ("veomni", (vm, kernel, layout == "merged fc1"))
    return out


def discover(paths, me, veomni_source=None):
    contenders, skipped = {}, []
    method, installed = _installed_457_method()
    if method is not None:
        contenders[f"transformers {installed} (installed)"] = ("457", method)
    for src, version, text in upstream_sources(paths, MODELING):
        funcs = compile_functions(text, ["Qwen3VLMoeTextExperts.forward"], f"{src}::{MODELING}") if text else {}
        func = funcs.get("Qwen3VLMoeTextExperts.forward")
        if func is None or "router_indices" not in func.__code__.co_varnames:
            skipped.append(f"transformers {version} ({src.name}): no 4.57-style Qwen3VLMoeTextExperts.forward")
        elif not any(label.startswith(f"transformers {version}") for label in contenders):
            contenders[f"transformers {version} [{kind(src)}]"] = ("457", func)
    try:
        import transformers
        from transformers.models.qwen3_vl_moe import modeling_qwen3_vl_moe as m

        if "top_k_index" in m.Qwen3VLMoeTextExperts.forward.__code__.co_varnames or hasattr(
            m.Qwen3VLMoeTextExperts, "_apply_gate"
        ):
            for impl in ("eager", "grouped_mm"):
                contenders[f"transformers {transformers.__version__} {impl}"] = ("5x", impl)
        else:
            skipped.append(
                f"transformers {transformers.__version__} eager/grouped_mm: no experts implementations "
                f"in this version (5.x has them)"
            )
    except ImportError as exc:
        skipped.append(f"installed transformers: {exc}")
    contenders["vlgrpo grouped experts"] = ("457", me.grouped_experts_forward)
    contenders["vlgrpo sliced (fallback forced)"] = ("457", "sliced")
    if veomni_source is not False:
        contenders.update(veomni_contenders(veomni_source, skipped))
    return contenders, skipped


def _make_5x(gate_up, down, impl):
    from transformers import Qwen3VLMoeTextConfig
    from transformers.models.qwen3_vl_moe import modeling_qwen3_vl_moe as m

    num_experts, hidden, two_inter = gate_up.shape
    cfg = Qwen3VLMoeTextConfig(
        hidden_size=hidden,
        moe_intermediate_size=two_inter // 2,
        num_experts=num_experts,
        num_experts_per_tok=8,
        hidden_act="silu",
    )
    cfg._experts_implementation = impl
    mod = m.Qwen3VLMoeTextExperts(cfg).to(device=gate_up.device, dtype=gate_up.dtype)
    with torch.no_grad():
        mod.gate_up_proj.copy_(gate_up.transpose(1, 2))
        mod.down_proj.copy_(down.transpose(1, 2))
    return mod


class Runner:
    """One contender: builds its module from the shared weights and calls it with the shared routing."""

    def __init__(self, label, spec, gate_up, down, me):
        self.label, (self.layout, self.impl) = label, spec
        self.me = me
        if self.layout == "5x":
            self.mod = _make_5x(gate_up, down, self.impl)
        elif self.layout == "veomni" and self.impl[2]:  # merged fc1: (E, 2I, H) and (E, H, I), stored once
            self.mod = Experts457(gate_up.transpose(1, 2).contiguous(), down.transpose(1, 2).contiguous())
        else:
            self.mod = Experts457(gate_up.clone(), down.clone())

    def __call__(self, x, dense, idx):
        if self.layout == "5x":
            return self.mod(x.reshape(-1, x.shape[-1]), idx, dense.gather(1, idx))
        if self.layout == "veomni":
            return self._veomni(x, dense, idx)
        if self.impl == "sliced":
            saved = dict(self.me._SUPPORT)
            self.me._SUPPORT[(str(x.device), x.dtype)] = ("sliced", "forced by the benchmark")
            try:
                return self.me.grouped_experts_forward(self.mod, x, dense, idx)
            finally:
                self.me._SUPPORT.clear()
                self.me._SUPPORT.update(saved)
        return self.impl(self.mod, x, dense, idx)

    def _veomni(self, x, dense, idx):
        vm, kernel, merged = self.impl
        if getattr(vm, "_vlgrpo_bench_kernel", None) != kernel:
            vm.apply_veomni_fused_moe_patch(kernel)
            vm._vlgrpo_bench_kernel = kernel
        mod, h = self.mod, x.reshape(-1, x.shape[-1])
        weights = dense.gather(1, idx).to(h.dtype)  # the compact top-k weights VeOmni's block passes
        if merged:
            out = vm.fused_moe_forward(
                mod.num_experts, weights, idx, h, None, None, mod.down_proj, fc1_1_2_weight=mod.gate_up_proj
            )
        else:  # per-call transposed copies of the 4.57-layout weights, as VeOmni's 4.x experts module makes
            inter = mod.down_proj.shape[1]
            gate = mod.gate_up_proj[..., :inter].transpose(1, 2).contiguous()
            up = mod.gate_up_proj[..., inter:].transpose(1, 2).contiguous()
            out = vm.fused_moe_forward(
                mod.num_experts, weights, idx, h, gate, up, mod.down_proj.transpose(1, 2).contiguous()
            )
        return out.view(x.shape)

    def grads(self):
        """Gradients of (gate_up_proj, down_proj) in the 4.57 layout."""
        g1, g2 = self.mod.gate_up_proj.grad, self.mod.down_proj.grad
        if self.layout == "5x" or (self.layout == "veomni" and self.impl[2]):
            g1, g2 = g1.transpose(1, 2), g2.transpose(1, 2)
        return g1, g2


# ----------------------------------------------------------------------------------------------------------------
# Inputs, reference, measurement
# ----------------------------------------------------------------------------------------------------------------
def text_config(args) -> dict:
    cfg = json.loads(CONFIG.read_text())["text_config"]
    sizes = {
        "hidden": cfg["hidden_size"],
        "experts": cfg["num_experts"],
        "inter": cfg["moe_intermediate_size"],
        "top_k": cfg["num_experts_per_tok"],
        "std": cfg.get("initializer_range", 0.02),
    }
    for key in ("hidden", "experts", "inter", "top_k"):
        if getattr(args, key) is not None:
            sizes[key] = getattr(args, key)
    return sizes


def make_weights(sizes, device, dtype, seed=0):
    gen = torch.Generator(device=device).manual_seed(seed)
    e, h, i = sizes["experts"], sizes["hidden"], sizes["inter"]
    gate_up = torch.empty(e, h, 2 * i, device=device, dtype=torch.float32).normal_(0, sizes["std"], generator=gen)
    down = torch.empty(e, i, h, device=device, dtype=torch.float32).normal_(0, sizes["std"], generator=gen)
    return gate_up.to(dtype), down.to(dtype)


def make_inputs(sizes, tokens, device, dtype, seed=1):
    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(1, tokens, sizes["hidden"], device=device, generator=gen).to(dtype)
    logits = torch.randn(tokens, sizes["experts"], device=device, generator=gen).to(dtype)
    probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
    w, idx = torch.topk(probs, sizes["top_k"], dim=-1)
    w = w / w.sum(-1, keepdim=True)
    dense = torch.zeros_like(logits).scatter_(1, idx, w.to(dtype))
    return x, dense, idx


def reference_fp64(x, dense, idx, gate_up, down):
    """float64 per-expert loop of the same routing (the definition): (tokens, hidden)."""
    x64 = x.reshape(-1, x.shape[-1]).double()
    out = torch.zeros_like(x64)
    w64 = dense.double()
    for e in range(gate_up.shape[0]):
        tok = (idx == e).any(-1).nonzero().squeeze(-1)
        if tok.numel() == 0:
            continue
        gate, up = (x64[tok] @ gate_up[e].double()).chunk(2, dim=-1)
        out.index_add_(0, tok, ((F.silu(gate) * up) @ down[e].double()) * w64[tok, e, None])
    return out


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_calls(fn, device, reps, warmup, budget_s):
    for _ in range(warmup):
        fn()
    _sync(device)
    times, start = [], time.perf_counter()
    while len(times) < reps:
        if device.type == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        if len(times) >= 3 and time.perf_counter() - start > budget_s:
            break
    q = statistics.quantiles(times, n=4, method="inclusive") if len(times) > 1 else [times[0]] * 3
    return {"median_ms": statistics.median(times), "p25_ms": q[0], "p75_ms": q[2], "reps": len(times)}


def peak_extra(fn, device):
    if device.type != "cuda":
        return None
    _sync(device)
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    fn()
    _sync(device)
    return torch.cuda.max_memory_allocated(device) - base


def train_step(runner, x, dense, idx):
    runner.mod.train()
    runner.mod.zero_grad(set_to_none=True)
    xi = x.detach().requires_grad_(True)
    di = dense.detach().requires_grad_(True)
    out = runner(xi, dense=di, idx=idx)
    out.float().sum().backward()
    return out, xi.grad, di.grad


def eval_call(runner, x, dense, idx):
    runner.mod.eval()
    with torch.no_grad():
        return runner(x, dense, idx)


def fp32_gradients(contenders, me, sizes, tokens, device, loop_label, compute_dtype=torch.float32):
    """Relative L2 errors of each contender's gradients against the 4.57.6 loop's in float32 (same routing).

    ``compute_dtype`` bf16: each contender gets bf16 copies of the same float32 weights, inputs and output
    gradient, and its bf16 gradients are compared with the float32 loop's (the loop always runs in float32)."""
    gate_up, down = make_weights(sizes, device, torch.float32)
    x, dense, idx = make_inputs(sizes, tokens, device, torch.float32)
    gy = torch.randn(x.shape, device=device, generator=torch.Generator(device=device).manual_seed(5))
    results = {}
    errors = {}
    for label, spec in contenders.items():
        dt = torch.float32 if label == loop_label else compute_dtype
        try:
            runner = Runner(label, spec, gate_up.to(dt, copy=True), down.to(dt, copy=True), me)
            runner.mod.train()
            xi, di = x.to(dt, copy=True).requires_grad_(True), dense.to(dt, copy=True).requires_grad_(True)
            out = runner(xi, di, idx)
            (out.reshape(gy.shape).float() * gy).sum().backward()
            g1, g2 = runner.grads()
            results[label] = {
                "x": xi.grad.detach(),
                "w": di.grad.detach().gather(1, idx),
                "gate_up": g1.detach(),
                "down": g2.detach(),
            }
            del runner, out
        except Exception as exc:  # e.g. a grouped GEMM without float32 support
            errors[label] = f"{type(exc).__name__}: {exc}"[:300]
    ref = results.get(loop_label)
    if ref is None:
        return {}
    rel = {label: {"error": err} for label, err in errors.items()}
    for label, g in results.items():
        rel[label] = {k: float((g[k].double() - ref[k].double()).norm() / ref[k].double().norm()) for k in g}
    return rel


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--tokens", type=int, nargs="+", default=[4096, 16384])
    ap.add_argument("--hidden", type=int, default=None, help="override the config (smoke tests)")
    ap.add_argument("--experts", type=int, default=None)
    ap.add_argument("--inter", type=int, default=None)
    ap.add_argument("--top-k", dest="top_k", type=int, default=None)
    ap.add_argument(
        "--transformers-source",
        action="append",
        default=[],
        metavar="PATH",
        help="a transformers wheel or dir with transformers/ (repeatable): its 4.57-style experts forward "
        "joins the run",
    )
    ap.add_argument(
        "--veomni-source",
        default=None,
        metavar="DIR",
        help="a dir holding veomni/ (VeOmni's fused MoE joins the run; default: an installed veomni)",
    )
    ap.add_argument("--no-veomni", action="store_true", help="leave VeOmni's fused MoE out")
    ap.add_argument("--contender", action="append", default=None, help="only contenders whose label contains this")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--budget-s", type=float, default=4.0, help="stop timing one contender/case after this long")
    ap.add_argument(
        "--grad-tokens",
        type=int,
        default=None,
        help="tokens of the fp32 gradient check (default: the smallest --tokens)",
    )
    ap.add_argument("--out", help="also write the results as JSON here")
    args = ap.parse_args(argv)

    device = torch.device(args.device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    dtype = getattr(torch, args.dtype)
    me = _import_vlgrpo()
    contenders, skipped = discover(args.transformers_source, me, False if args.no_veomni else args.veomni_source)
    if args.contender:
        contenders = {k: v for k, v in contenders.items() if any(s in k for s in args.contender)}
    sizes = text_config(args)
    loop_label = next((k for k in contenders if k.startswith("transformers 4.57")), None)
    results = []
    gate_up, down = make_weights(sizes, device, dtype)
    for tokens in args.tokens:
        x, dense, idx = make_inputs(sizes, tokens, device, dtype)
        ref = reference_fp64(x, dense, idx, gate_up, down)
        for label, spec in contenders.items():
            row = {"tokens": tokens, "contender": label}
            try:
                runner = Runner(label, spec, gate_up, down, me)
                _sync(device)
                t0 = time.perf_counter()
                out, _, _ = train_step(runner, x, dense, idx)
                _sync(device)
                row["first_train_call_ms"] = (time.perf_counter() - t0) * 1e3
                row["train_out_dtype"] = str(out.dtype).replace("torch.", "")
                row["train_max_abs_err"] = float((out.reshape(ref.shape).double() - ref).abs().max())
                del out
                row["train_peak_extra_gib"] = (peak_extra(lambda: train_step(runner, x, dense, idx), device) or 0) / GIB
                row["train"] = time_calls(
                    lambda: train_step(runner, x, dense, idx), device, args.reps, args.warmup, args.budget_s
                )
                out = eval_call(runner, x, dense, idx)
                row["eval_out_dtype"] = str(out.dtype).replace("torch.", "")
                row["eval_max_abs_err"] = float((out.reshape(ref.shape).double() - ref).abs().max())
                del out
                runner.mod.zero_grad(set_to_none=True)
                row["eval_peak_extra_gib"] = (peak_extra(lambda: eval_call(runner, x, dense, idx), device) or 0) / GIB
                row["eval"] = time_calls(
                    lambda: eval_call(runner, x, dense, idx), device, args.reps, args.warmup, args.budget_s
                )
                del runner
            except Exception as exc:  # one failing contender must not hide the others
                row["error"] = f"{type(exc).__name__}: {exc}"[:300]
            results.append(row)
            print(
                f"  {tokens:6d} {label:44s} train {row.get('train', {}).get('median_ms', float('nan')):9.3f} ms  "
                f"eval {row.get('eval', {}).get('median_ms', float('nan')):9.3f} ms {row.get('error', '')}",
                file=sys.stderr,
                flush=True,
            )
            if device.type == "cuda":
                torch.cuda.empty_cache()
        del x, dense, idx, ref
    grad_tokens = args.grad_tokens or min(args.tokens)
    grads = fp32_gradients(contenders, me, sizes, grad_tokens, device, loop_label) if loop_label else {}
    bf16 = {
        k: v
        for k, v in contenders.items()
        if k == loop_label or k == "vlgrpo grouped experts" or v[0] == "veomni" or k.endswith(" grouped_mm")
    }
    grads_bf16 = (
        fp32_gradients(bf16, me, sizes, grad_tokens, device, loop_label, torch.bfloat16)
        if loop_label and device.type == "cuda"
        else {}
    )
    meta = {
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.machine(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "triton": _version("triton"),
        "driver": _driver(),
        "dtype": args.dtype,
        "sizes": sizes,
        "skipped": skipped,
        "loop": loop_label,
        "grad_tokens": grad_tokens,
        "vlgrpo_method": me.support_info(),
    }
    print(render(meta, results, grads, grads_bf16))
    if args.out:
        Path(args.out).write_text(
            json.dumps(
                {"meta": meta, "results": results, "fp32_grad_rel": grads, "bf16_grad_rel_vs_fp32_loop": grads_bf16},
                indent=1,
            )
            + "\n"
        )
    return 0


def _version(name):
    try:
        return __import__(name).__version__
    except Exception:
        return None


def _driver():
    try:
        import subprocess

        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        return out.stdout.strip() or None
    except Exception:
        return None


def _find(results, tokens, prefix):
    return next(
        (r for r in results if r["tokens"] == tokens and r["contender"].startswith(prefix) and "error" not in r), None
    )


def render(meta, results, grads, grads_bf16=None) -> str:
    s = meta["sizes"]
    lines = [
        f"Device: {meta['device']}; torch {meta['torch']} (CUDA {meta['cuda']}), triton {meta['triton']}, "
        f"driver {meta['driver']}; python {meta['python']}; {meta['dtype']}; hidden {s['hidden']}, "
        f"{s['experts']} experts, moe_intermediate {s['inter']}, top-{s['top_k']}; {meta['utc']}",
        f"vlgrpo method: {json.dumps(meta['vlgrpo_method'])}",
        "",
    ]
    lines += [f"- skipped: {note}" for note in meta["skipped"]]
    lines += [
        "",
        "| tokens | contender | train fwd+bwd median ms (IQR) | eval fwd median ms (IQR) | first train call ms "
        "| train peak extra GiB | eval peak extra GiB | max abs err vs fp64 train / eval | train speed-up vs "
        "4.57.6 | vs 5.x grouped_mm |",
        "|---:|---|---|---|---:|---:|---:|---|---:|---:|",
    ]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['tokens']} | {r['contender']} | error: {r['error']} ||||||||")
            continue
        loop = _find(results, r["tokens"], "transformers 4.57")
        grouped = next(
            (
                x
                for x in results
                if x["tokens"] == r["tokens"]
                and x["contender"].endswith(" grouped_mm")
                and x["contender"].startswith("transformers")
                and "error" not in x
            ),
            None,
        )
        t, e = r["train"], r["eval"]
        lines.append(
            f"| {r['tokens']} | {r['contender']} | {t['median_ms']:.2f} ({t['p25_ms']:.2f}-{t['p75_ms']:.2f}) | "
            f"{e['median_ms']:.2f} ({e['p25_ms']:.2f}-{e['p75_ms']:.2f}) | {r['first_train_call_ms']:.1f} | "
            f"{r['train_peak_extra_gib']:.2f} | {r['eval_peak_extra_gib']:.2f} | "
            f"{r['train_max_abs_err']:.3g} / {r['eval_max_abs_err']:.3g} | "
            + (f"{loop['train']['median_ms'] / t['median_ms']:.1f}x" if loop else "n/a")
            + " | "
            + (f"{grouped['train']['median_ms'] / t['median_ms']:.2f}x" if grouped else "n/a")
            + " |"
        )
    if grads:
        lines += [
            "",
            f"fp32 gradients against {meta['loop']} ({meta['grad_tokens']} tokens), relative L2 error:",
            "",
            "| contender | hidden states | routing weights (chosen) | gate_up_proj | down_proj |",
            "|---|---:|---:|---:|---:|",
        ]
        for label, g in grads.items():
            if "error" in g:
                lines.append(f"| {label} | error: {g['error']} ||||")
                continue
            lines.append(f"| {label} | {g['x']:.2g} | {g['w']:.2g} | {g['gate_up']:.2g} | {g['down']:.2g} |")
    if grads_bf16:
        lines += [
            "",
            f"bf16 gradients against {meta['loop']} in float32 ({meta['grad_tokens']} tokens, bf16 copies of "
            "the same weights and inputs), relative L2 error:",
            "",
            "| contender | hidden states | routing weights (chosen) | gate_up_proj | down_proj |",
            "|---|---:|---:|---:|---:|",
        ]
        for label, g in grads_bf16.items():
            if label == meta["loop"]:
                continue
            if "error" in g:
                lines.append(f"| {label} | error: {g['error']} ||||")
                continue
            lines.append(f"| {label} | {g['x']:.2g} | {g['w']:.2g} | {g['gate_up']:.2g} | {g['down']:.2g} |")
    lines += ["", "Targets:"] + verdicts(results)
    return "\n".join(lines)


def verdicts(results) -> list:
    out = []
    ours = "vlgrpo grouped experts"
    tokens = sorted({r["tokens"] for r in results})
    for n in tokens:
        mine, loop = _find(results, n, ours), _find(results, n, "transformers 4.57")
        grouped = next(
            (
                x
                for x in results
                if x["tokens"] == n
                and x["contender"].startswith("transformers")
                and x["contender"].endswith(" grouped_mm")
                and "error" not in x
            ),
            None,
        )
        if not mine:
            out.append(f"- {n} tokens: no result for {ours}")
            continue
        if loop:
            speed = loop["train"]["median_ms"] / mine["train"]["median_ms"]
            out.append(
                f"- {n} tokens: train fwd+bwd {speed:.1f}x faster than 4.57.6"
                + (" (bar at 4,096: >= 40x: " + ("met" if speed >= 40 else "NOT met") + ")" if n == 4096 else "")
            )
            for mode in ("train", "eval"):
                ratio = mine[f"{mode}_max_abs_err"] / max(loop[f"{mode}_max_abs_err"], 1e-30)
                out.append(
                    f"- {n} tokens: {mode} max abs err vs fp64 {ratio:.2f}x 4.57.6's (bar <= 1.25x: "
                    + ("met" if ratio <= 1.25 else "NOT met")
                    + ")"
                )
        if grouped:
            faster = mine["train"]["median_ms"] < grouped["train"]["median_ms"]
            out.append(
                f"- {n} tokens: train {mine['train']['median_ms']:.2f} ms vs {grouped['contender']} "
                f"{grouped['train']['median_ms']:.2f} ms (bar: faster: " + ("met" if faster else "NOT met") + ")"
            )
        for vo in (x for x in results if x["tokens"] == n and x["contender"].startswith("VeOmni") and "error" not in x):
            ratio = vo["train"]["median_ms"] / mine["train"]["median_ms"]
            out.append(
                f"- {n} tokens: vlgrpo train {mine['train']['median_ms']:.2f} ms / {vo['contender']} "
                f"{vo['train']['median_ms']:.2f} ms = {ratio:.2f}x"
                f" in vlgrpo's favour; train peak extra {mine['train_peak_extra_gib']:.2f} vs "
                f"{vo['train_peak_extra_gib']:.2f} GiB; first call {mine['first_train_call_ms']:.0f} vs "
                f"{vo['first_train_call_ms']:.0f} ms"
            )
        if n == 16384:
            peak = mine["eval_peak_extra_gib"]
            out.append(
                f"- 16384 tokens: eval peak extra {peak:.2f} GiB (bar <= 2.5 GiB: "
                + ("met" if peak <= 2.5 else "NOT met")
                + ")"
            )
    return out


if __name__ == "__main__":
    sys.exit(main())
