"""FSDP2 (+ CPU offload) training steps of the scaled-down Qwen3-VL-30B-A3B on CUDA; one JSON result.

Run under torchrun (one process per GPU); tests/gpu/test_gpu_fsdp_offload.py starts it in subprocesses,
with and without the vlgrpo sitecustomize on PYTHONPATH, so the patch loader works exactly as in an
image (interpreter start-up, post-import hooks), never imported by hand.

Wrapping mirrors verl 0.8.0 ``verl/utils/fsdp_utils.py`` (``apply_fsdp2`` /
``_select_fsdp2_wrap_targets``) and ``verl/workers/engine/fsdp/transformer_impl.py``: every module whose
class is in the model's ``_no_split_modules`` (Qwen3VLMoeTextDecoderLayer, Qwen3VLMoeVisionBlock) and,
because the config has ``tie_word_embeddings=False``, every ``nn.Embedding`` (this includes
``model.visual.pos_embed``) gets its own ``fully_shard``; then the root. Mixed precision as verl's
actor: fp32 parameters (``--param-dtype bfloat16``: verl's forward-only ref model, B01's set-up),
``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32, cast_forward_inputs=True)``; offload as verl's
ref / offload_policy: ``CPUOffloadPolicy(pin_memory=True)``.

Because ``pos_embed`` is its own FSDP unit, its sharded parameter lives on the CPU outside its own
forward: only its pre-forward hook (unshard) puts a GPU copy in place, and the post-forward hook
(reshard) takes it away again. transformers 4.57.x ``fast_pos_embed_interpolate`` reads
``self.pos_embed.weight.device`` *before* calling ``self.pos_embed``: it gets ``cpu`` and builds the
index / weight tensors there, while the unsharded weight is on the GPU -> the device error of field case
B01.

Runs (``--runs``, comma separated, in this order):
  ref        no offload: first loss, all gradients after one backward, losses of ``--steps`` AdamW
             steps. With ``--save-ref PATH`` (one GPU) the first run's numbers are saved there (the
             reference for later processes).
  offload    the same with CPUOffloadPolicy. An exception in the forward is caught and recorded
             (type, message, innermost frames) instead of the numbers.
Each run builds the model afresh from the same seed. Every run is compared (see :func:`compare`) with
each ``--ref LABEL=PATH`` (a saved one-GPU run) and, from the second run on, with the first run of
this process (label ``first_run``: same code, same sharding, so e.g. offload vs no offload alone):
|loss - ref| / ref per step, and per parameter ||g - g_ref|| / ||g_ref|| computed over each rank's own
shard and summed with all_reduce (no gather of full gradients).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
import torch.distributed as dist

import gpu_tinyqwen as tinyqwen

DEV = "cuda"


def fsdp2_wrap(model, mesh, offload: bool) -> list[str]:
    """Apply ``fully_shard`` the way verl 0.8.0's apply_fsdp2 selects modules; returns wrapped names."""
    from torch import nn
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    kwargs = {
        "mesh": mesh,
        "mp_policy": MixedPrecisionPolicy(
            param_dtype=torch.bfloat16, reduce_dtype=torch.float32, cast_forward_inputs=True
        ),
        "reshard_after_forward": True,
    }
    if offload:
        kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=True)
    layer_classes = set(model._no_split_modules or [])
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    wrapped = []
    for name, module in model.named_modules():
        leaf = name.rsplit(".", 1)[-1]
        if (
            type(module).__name__ in layer_classes
            or (isinstance(module, nn.Embedding) and not tied)
            or (not tied and leaf in ("embed_tokens", "lm_head") and hasattr(module, "weight"))
        ):
            fully_shard(module, **kwargs)
            wrapped.append(name)
    fully_shard(model, **kwargs)
    return wrapped


def local_rows(full: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    """The rows of ``full`` that FSDP2's Shard(0) gives ``rank`` (torch.chunk semantics)."""
    chunks = torch.chunk(full, world, dim=0)
    if rank < len(chunks):
        return chunks[rank]
    return full.new_empty((0,) + tuple(full.shape[1:]))


def local_grad(p) -> torch.Tensor | None:
    g = p.grad
    if g is None:
        return None
    if hasattr(g, "to_local"):
        g = g.to_local()
    return g.detach().float().cpu()


def frames_of(exc: BaseException) -> list[str]:
    return [f"{fs.name} ({Path(fs.filename).name}:{fs.lineno})" for fs in traceback.extract_tb(exc.__traceback__)]


def compare(ref: dict, losses: list, grads: dict, rank: int, world: int) -> dict:
    """Loss and gradient differences against ``ref`` ({"losses", "grads", "local"}).

    ``ref["local"]``: its gradients are this rank's shards (an earlier run in this process); otherwise
    full tensors (a saved one-GPU run), cut to this rank's rows. Per parameter ||g - g_ref|| / ||g_ref||,
    with the squared sums all-reduced over ranks.
    """
    names = sorted(ref["grads"])
    diff = torch.zeros(len(names), dtype=torch.float64)
    norm = torch.zeros(len(names), dtype=torch.float64)
    missing = 0
    for i, n in enumerate(names):
        r = ref["grads"][n] if ref.get("local") else local_rows(ref["grads"][n], rank, world)
        r = r.double()
        g = grads.get(n)
        if g is None:
            missing += 1
            g = torch.zeros_like(r)
        g = g.double().reshape(r.shape)
        diff[i] = (g - r).pow(2).sum()
        norm[i] = r.pow(2).sum()
    both = torch.stack([diff, norm]).to(DEV)
    dist.all_reduce(both)
    diff, norm = both[0].cpu().sqrt(), both[1].cpu().sqrt()
    rel = (diff / norm.clamp_min(1e-30)).tolist()
    per = dict(zip(names, rel))
    worst = sorted(per.items(), key=lambda kv: -kv[1])[:5]
    n = min(len(losses), len(ref["losses"]))
    return {
        "loss0_rel": abs(losses[0] - ref["losses"][0]) / abs(ref["losses"][0]),
        "loss_traj_max_rel": max(abs(a - b) / abs(b) for a, b in zip(losses[:n], ref["losses"][:n])),
        "grad_rel_all": float(diff.pow(2).sum().sqrt() / norm.pow(2).sum().sqrt()),
        "grad_rel_pos_embed": per.get("model.visual.pos_embed.weight"),
        "grad_rel_max_param": worst[0][1],
        "grad_rel_worst": worst,
        "grad_rel_median_param": sorted(rel)[len(rel) // 2],
        "missing_grads": missing,
        "ref_losses": ref["losses"],
    }


def one_run(kind: str, args, mesh, batch, rank: int, world: int, refs: dict) -> dict:
    offload = kind == "offload"
    res: dict = {"run": kind, "offload": offload, "world_size": world, "param_dtype": args.param_dtype}
    model = tinyqwen.build_model(getattr(torch, args.param_dtype), seed=args.seed)
    model.train()
    res["wrapped"] = len(fsdp2_wrap(model, mesh, offload))
    pe = model.model.visual.pos_embed.weight
    res["pos_embed_weight_device_after_wrap"] = str(pe.device)
    res["pos_embed_weight_type"] = type(pe).__name__
    fn = type(model.model.visual).fast_pos_embed_interpolate
    res["pos_embed_fn"] = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', '?')}"
    res["pos_embed_patch"] = getattr(fn, "__vlgrpo_patch__", None)  # set by vlgrpo's patch engine
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    losses = []
    grads: dict[str, torch.Tensor] = {}
    t0 = time.perf_counter()
    for step in range(args.steps):
        try:
            out = model(**batch)
        except Exception as exc:  # the device error of B01 is the expected outcome without the patch
            res["error"] = {
                "type": type(exc).__name__,
                "message": str(exc)[:2000],
                "frames": frames_of(exc)[-8:],
                "step": step,
                "phase": "forward",
            }
            return res
        loss = out.loss
        loss.backward()
        losses.append(float(loss.detach().float().cpu()))
        if step == 0:
            for name, p in model.named_parameters():
                g = local_grad(p)
                if g is not None:
                    grads[name] = g
            res["params_with_grad"] = len(grads)
            res["params_total"] = sum(1 for _ in model.parameters())
            peg = grads.get("model.visual.pos_embed.weight")
            sq = torch.tensor([0.0 if peg is None else float(peg.double().pow(2).sum())], device=DEV)
            dist.all_reduce(sq)
            res["pos_embed_grad_norm"] = math.sqrt(float(sq))
        opt.step()
        opt.zero_grad(set_to_none=True)
    if DEV != "cpu":
        torch.cuda.synchronize()
    res["seconds"] = round(time.perf_counter() - t0, 3)
    res["losses"] = losses
    res["finite"] = all(math.isfinite(x) for x in losses)
    if args.save_ref and not refs.get("first_run") and world == 1 and rank == 0:
        torch.save({"losses": losses, "grads": grads}, args.save_ref)  # the first run of this process
        res["saved_ref"] = args.save_ref
    res["compare"] = {label: compare(r, losses, grads, rank, world) for label, r in refs.items()}
    res["_grads"] = grads  # kept for the next run's "first_run" comparison, dropped before writing JSON
    return res


def base_parser(description: str, runs: str, steps: int, lr: float) -> argparse.ArgumentParser:
    """The arguments every FSDP2 script of this folder takes (runs, steps, lr, seed, batch, out)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--runs", default=runs)
    ap.add_argument("--steps", type=int, default=steps)
    ap.add_argument("--lr", type=float, default=lr)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=2, help="Geometry3K samples per batch (same on every rank)")
    ap.add_argument("--out", required=True)
    return ap


def init_distributed():
    """torchrun's rank, world size and local rank; the process group (NCCL on CUDA, gloo on a CPU-only machine,
    to smoke-test a harness); the device string and a 1-D device mesh over all ranks."""
    from torch.distributed.device_mesh import init_device_mesh

    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        torch.cuda.set_device(local)
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
        dev = f"cuda:{local}"
    else:  # only to smoke-test a harness on a CPU machine (no offload meaning there)
        dist.init_process_group("gloo")
        dev = "cpu"
    return rank, world, local, dev, init_device_mesh(dev.split(":")[0], (world,))


def finish(report: dict, out: str, rank: int) -> int:
    """Rank 0 writes ``report`` as JSON to ``out``; every rank then leaves the process group. Returns 0."""
    if rank == 0:
        Path(out).write_text(json.dumps(report, indent=1))
    dist.barrier()
    dist.destroy_process_group()
    return 0


def main(argv=None) -> int:
    ap = base_parser(__doc__.splitlines()[0], "ref,offload", 4, 1e-3)
    ap.add_argument(
        "--param-dtype",
        default="float32",
        choices=["float32", "bfloat16"],
        help="parameter dtype: float32 (verl's actor) or bfloat16 (verl's forward-only ref model, "
        "the set-up of field case B01); compute is bf16 either way",
    )
    ap.add_argument("--save-ref", default=None, help="one GPU: save the first run's losses and gradients here")
    ap.add_argument(
        "--ref",
        action="append",
        default=[],
        metavar="LABEL=PATH",
        help="compare every run with this saved run (repeatable)",
    )
    args = ap.parse_args(argv)

    global DEV
    rank, world, local, DEV, mesh = init_distributed()
    import transformers

    report = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "transformers_file": transformers.__file__,
        "gpu": torch.cuda.get_device_name(local) if DEV != "cpu" else "cpu",
        "world_size": world,
        "sitecustomize": getattr(sys.modules.get("sitecustomize"), "__file__", None),
        "vlgrpo_loaded": "vlgrpo" in sys.modules or any(m.startswith("vlgrpo") for m in sys.modules),
        "runs": [],
    }
    batch = tinyqwen.to_device(tinyqwen.build_batch(args.batch), DEV)
    report["image_grid_thw"] = batch["image_grid_thw"].tolist()
    report["seq_len"] = int(batch["input_ids"].shape[1])
    refs = {}
    for spec in args.ref:
        label, _, path = spec.partition("=")
        refs[label] = torch.load(path, weights_only=True)
    for kind in args.runs.split(","):
        torch.manual_seed(args.seed)
        res = one_run(kind, args, mesh, batch, rank, world, refs)
        grads = res.pop("_grads", None)
        if grads is not None and "first_run" not in refs:
            refs["first_run"] = {"losses": res["losses"], "grads": grads, "local": True, "run": kind}
        report["runs"].append(res)
        if DEV != "cpu":
            torch.cuda.empty_cache()
    return finish(report, args.out, rank)


if __name__ == "__main__":
    sys.exit(main())
