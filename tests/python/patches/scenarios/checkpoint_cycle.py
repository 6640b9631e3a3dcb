"""A save or a resume of a verl v0.8.0 checkpoint with verl's real code on the CPU: ``FSDPCheckpointManager`` on a
tiny FSDP2 Llama over 2 gloo ranks (torch.multiprocessing), and the real ``FullyAsyncRollouter.save_checkpoint`` /
``load_checkpoint`` on a torchdata ``StatefulDataLoader`` with verl's ``create_rl_sampler`` (the rollouter object is
built without Ray, ``object.__new__`` of the class Ray would pickle). Run by test_checkpoint_manifest.py in fresh
interpreters with the sitecustomize shim, so ``checkpoint.manifest`` is applied by the real post-import hook (or not,
under VLGRPO_PATCHES_DISABLED). Packages the CPU test environment lacks (peft, accelerate, tensordict; vLLM's
cachetools/uvicorn/fastapi/zmq/msgspec) are automatic stand-ins.

Environment: ``VLGRPO_TEST_CKPT_MODE`` = ``save`` (writes ROOT/global_step_1 and the tracker) or ``load``;
``VLGRPO_TEST_CKPT_ROOT`` = ROOT (environment, not argv: torch.multiprocessing re-imports this file). Prints one JSON line:
``{"status": ..., "ranks": {rank: {"ok": bool, "error": str, "equal": bool}}, "rollouter": {...}}``.
"""

import asyncio
import json
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stub_modules import StubFinder

STUBBED = ("peft", "accelerate", "tensordict", "cachetools", "uvicorn", "fastapi", "vllm", "zmq", "msgspec")
sys.meta_path.append(StubFinder(STUBBED))

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 2


def _model(seed):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    model = LlamaForCausalLM(cfg)
    mesh = init_device_mesh("cpu", (WORLD,))
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 10))
    return model, opt, sched


def _rank(rank, mode, root, port, results):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    out = {"ok": False}
    try:
        from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager

        model, opt, sched = _model(seed=0 if mode == "save" else 1)
        path = os.path.join(root, "global_step_1", "actor")
        if mode == "save":
            loss = model(torch.randint(0, 64, (2, 8)), labels=torch.randint(0, 64, (2, 8))).loss
            loss.backward()
            opt.step()
            sched.step()
        mgr = FSDPCheckpointManager(model=model, optimizer=opt, lr_scheduler=sched, processing_class=None)
        if mode == "save":
            mgr.save_checkpoint(path, global_step=1)
            torch.save(
                {k: v.full_tensor() for k, v in model.state_dict().items()},
                os.path.join(root, f"reference_rank_{rank}.pt"),
            )
        else:
            try:
                mgr.load_checkpoint(path)
            except Exception as exc:  # the refusal, or verl's own error
                out["error"] = f"{type(exc).__name__}: {exc}"
                dist.destroy_process_group()
                results[rank] = out
                return
            ref = torch.load(os.path.join(root, f"reference_rank_{rank}.pt"))
            now = {k: v.full_tensor() for k, v in model.state_dict().items()}
            out["equal"] = all(torch.equal(now[k], ref[k]) for k in ref)
            out["lr_step"] = sched.last_epoch
        out["ok"] = True
    except Exception:
        out["error"] = traceback.format_exc()
    dist.barrier()
    dist.destroy_process_group()
    results[rank] = out


def _rollouter(mode, root):
    from omegaconf import OmegaConf
    from torchdata.stateful_dataloader import StatefulDataLoader
    from verl.experimental.fully_async_policy import fully_async_rollouter as fr
    from verl.trainer.main_ppo import create_rl_sampler

    cls = fr.FullyAsyncRollouter.__ray_metadata__.modified_class
    ro = object.__new__(cls)
    ro.config = OmegaConf.create(
        {
            "trainer": {
                "resume_mode": "auto",
                "default_local_dir": root,
                "default_hdfs_dir": None,
                "resume_from_path": None,
            },
            "async_training": {"trigger_parameter_sync_step": 4},
        }
    )
    ro.required_samples = 2
    ro.dataloader_lock = asyncio.Lock()
    data = list(range(40))
    ro.train_dataloader = StatefulDataLoader(
        data,
        batch_size=1,
        drop_last=True,
        num_workers=0,
        sampler=create_rl_sampler(OmegaConf.create({"shuffle": True, "seed": 3}), data),
    )
    it = iter(ro.train_dataloader)
    _drawn = [int(next(it)) for _ in range(6)]  # six prompts drawn before the save
    if mode == "save":
        asyncio.run(ro.save_checkpoint(os.path.join(root, "global_step_1")))
        with open(os.path.join(root, "latest_checkpointed_iteration.txt"), "w") as fh:
            fh.write("1")
        return {"ok": True, "next": [int(next(it)) for _ in range(4)]}
    ro2 = object.__new__(cls)
    ro2.__dict__.update(ro.__dict__)
    ro2.train_dataloader = StatefulDataLoader(
        data,
        batch_size=1,
        drop_last=True,
        num_workers=0,
        sampler=create_rl_sampler(OmegaConf.create({"shuffle": True, "seed": 3}), data),
    )
    ro2.load_checkpoint()
    it2 = iter(ro2.train_dataloader)
    return {"ok": True, "next": [int(next(it2)) for _ in range(4)], "global_steps": ro2.global_steps}


def main():
    mode, root = os.environ["VLGRPO_TEST_CKPT_MODE"], os.environ["VLGRPO_TEST_CKPT_ROOT"]
    import vlgrpo.patches

    out = {}
    try:
        with mp.Manager() as manager:
            results = manager.dict()
            # fork: the ranks inherit verl as imported (and patched) here, instead of importing it again
            import verl.utils.checkpoint.fsdp_checkpoint_manager  # noqa: F401
            from transformers import LlamaForCausalLM  # noqa: F401

            mp.start_processes(
                _rank, args=(mode, root, 29000 + os.getpid() % 1000, results), nprocs=WORLD, start_method="fork"
            )
            out["ranks"] = dict(results)
        try:
            out["rollouter"] = _rollouter(mode, root)
        except Exception as exc:  # verl's own error after loading (e.g. the canary's dict as dataloader state)
            out["rollouter"] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        rows = {r["id"]: r for r in vlgrpo.patches.status(import_targets=False)}
        out["status"] = rows["checkpoint.manifest"]["status"]
    except Exception:
        out["crash"] = traceback.format_exc()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
