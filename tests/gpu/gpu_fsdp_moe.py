"""FSDP2 (+ CPU offload) AdamW steps of a 2-layer Qwen3-VL-MoE at real widths, grouped experts against the
4.57.6 loop; one JSON result. Run under torchrun (one process per GPU) by tests/gpu/test_gpu_fsdp_moe.py, with
the vlgrpo sitecustomize on PYTHONPATH, so ``Qwen3VLMoeTextExperts.forward`` is the patch
``qwen3_vl_moe.grouped_experts`` as in an image; the "loop" runs bind its ``__wrapped__`` (transformers' own
forward) back on the class for their duration. Every other patch stays on in all runs (the pos-embed and
text-rotary fixes are what make CPU offload work at all on 4.57.6: field case B01).

Model: the real Qwen3-VL-30B-A3B config (hidden 2048, 128 experts, moe_intermediate 768, top-8, vocabulary 151936,
vision hidden 1152) cut to 2 text layers and 1 vision block (gpu_tinyqwen.REAL_WIDTH_2_LAYERS), fp32 parameters
built on the GPU from one seed (identical on every rank and in every run). Wrapping and mixed precision as verl
0.8.0's actor (gpu_fsdp_offload.fsdp2_wrap): every decoder layer (its 3-D expert parameters sharded on dim 0),
vision block and embedding its own ``fully_shard`` unit, bf16 compute, fp32 reduction; offload runs add
``CPUOffloadPolicy(pin_memory=True)``. Batch: 2 Geometry3K rows through the real processor, the same on every rank.

Runs (``--runs``, comma separated): ``grouped``, ``grouped-offload``, ``loop``, ``loop-offload``; each builds the
model afresh and takes ``--steps`` AdamW steps. Recorded per run: the bound experts forward, losses, the wall time
of each step (forward + backward + optimizer step, synchronized) and the norm of every parameter's gradient after
the first backward (squared shard norms, computed where the shard lives, all-reduced over the ranks).
"""

from __future__ import annotations

import math
import statistics
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
import torch.distributed as dist

import gpu_tinyqwen as tinyqwen
from gpu_fsdp_offload import base_parser, finish, frames_of, fsdp2_wrap, init_distributed

DEV = "cuda"


def _sync():
    if DEV != "cpu":
        torch.cuda.synchronize()


def experts_class():
    from transformers.models.qwen3_vl_moe import modeling_qwen3_vl_moe as m

    return m.Qwen3VLMoeTextExperts


def build(seed: int):
    from transformers import Qwen3VLMoeForConditionalGeneration

    cfg = tinyqwen.config_with(*tinyqwen.REAL_WIDTH_2_LAYERS)
    torch.manual_seed(seed)
    with torch.device(DEV):
        model = Qwen3VLMoeForConditionalGeneration._from_config(cfg, dtype=torch.float32)
    return model.to(DEV, torch.float32)


def grad_norms(model) -> dict:
    """Norm of every parameter's gradient: squared norms of the local shards, all-reduced over the ranks."""
    names, sq = [], []
    for name, p in model.named_parameters():
        if p.grad is not None:
            g = p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad
            names.append(name)
            sq.append(torch.linalg.vector_norm(g.detach(), dtype=torch.float64).pow(2).to(DEV))
    total = torch.stack(sq)
    dist.all_reduce(total)
    return dict(zip(names, total.sqrt().tolist()))


def one_run(kind: str, args, mesh, batch, world) -> dict:
    offload = kind.endswith("-offload")
    cls = experts_class()
    patched = cls.forward
    res: dict = {"run": kind, "offload": offload, "world_size": world}
    if kind.startswith("loop"):
        original = getattr(patched, "__wrapped__", None)
        if original is None:
            res["error"] = {"message": "the bound experts forward is not a vlgrpo replacement (no __wrapped__)"}
            return res
        cls.forward = original
    try:
        fwd = cls.forward
        res["experts_forward"] = f"{fwd.__module__}.{fwd.__qualname__}"
        res["experts_patch"] = getattr(fwd, "__vlgrpo_patch__", None)
        model = build(args.seed)
        model.train()
        res["params_total"] = sum(p.numel() for p in model.parameters())
        fsdp2_wrap(model, mesh, offload)
        gu = model.model.language_model.layers[0].mlp.experts.gate_up_proj
        res["gate_up_proj"] = {
            "type": type(gu).__name__,
            "device": str(gu.device),
            "full": list(gu.shape),
            "local": list(gu.to_local().shape) if hasattr(gu, "to_local") else list(gu.shape),
        }
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
        losses, seconds = [], []
        for step in range(args.steps):
            _sync()
            t0 = time.perf_counter()
            loss = model(**batch).loss
            loss.backward()
            if step == 0:
                res["grad_norms"] = grad_norms(model)
            opt.step()
            opt.zero_grad(set_to_none=True)
            _sync()
            seconds.append(time.perf_counter() - t0)
            losses.append(float(loss.detach().float().cpu()))
        res["losses"], res["step_seconds"] = losses, [round(s, 4) for s in seconds]
        res["step_seconds_median_after_first"] = statistics.median(seconds[1:]) if len(seconds) > 1 else seconds[0]
        res["finite"] = all(math.isfinite(x) for x in losses)
        del model, opt
    except Exception as exc:
        res["error"] = {"type": type(exc).__name__, "message": str(exc)[:2000], "frames": frames_of(exc)[-8:]}
    finally:
        cls.forward = patched
        if DEV != "cpu":
            torch.cuda.empty_cache()
    return res


def main(argv=None) -> int:
    args = base_parser(__doc__.splitlines()[0], "grouped,grouped-offload,loop,loop-offload", 3, 1e-4).parse_args(argv)
    global DEV
    rank, world, local, DEV, mesh = init_distributed()
    import transformers

    report = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "gpu": torch.cuda.get_device_name(local) if DEV != "cpu" else "cpu",
        "world_size": world,
        "vlgrpo_loaded": any(m == "vlgrpo" or m.startswith("vlgrpo.") for m in sys.modules),
        "runs": [],
    }
    try:
        batch = tinyqwen.to_device(tinyqwen.build_batch(args.batch), DEV)
        report["seq_len"] = int(batch["input_ids"].shape[1])
        for kind in args.runs.split(","):
            report["runs"].append(one_run(kind, args, mesh, batch, world))
    except Exception:
        report["crash"] = traceback.format_exc()
    return finish(report, args.out, rank)


if __name__ == "__main__":
    sys.exit(main())
