"""FSDP2 on the CPU (gloo, started by torch.distributed.run): two real transformers 4.57.6 sparse MoE blocks whose
experts are their own ``fully_shard`` unit (3-D parameters sharded on dim 0 across the ranks, unsharded by FSDP's
pre-forward hook), with the grouped experts forward, against an unsharded copy running the original per-expert
loop; 3 AdamW steps in train mode, then one eval forward. Rank 0 prints one JSON line. Run by test_moe_experts.py.
"""

import copy
import json
import os
import sys
import traceback
import types

out = {}
try:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from transformers.models.qwen3_vl_moe import modeling_qwen3_vl_moe as m
    from transformers.models.qwen3_vl_moe.configuration_qwen3_vl_moe import Qwen3VLMoeTextConfig

    from vlgrpo.patches import moe_experts as me

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    cfg = Qwen3VLMoeTextConfig(
        hidden_size=32, moe_intermediate_size=16, num_experts=8, num_experts_per_tok=2, hidden_act="silu"
    )

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList([m.Qwen3VLMoeTextSparseMoeBlock(cfg) for _ in range(2)])

        def forward(self, x):
            for block in self.layers:
                x = x + block(x)[0]
            return x

    torch.manual_seed(0)
    net = Net()
    for block in net.layers:
        with torch.no_grad():
            block.experts.gate_up_proj.normal_(0, 0.2)
            block.experts.down_proj.normal_(0, 0.2)
    ref = copy.deepcopy(net)
    original = m.Qwen3VLMoeTextExperts.forward
    for block in ref.layers:  # the reference keeps the original loop (instance attribute over the class one)
        block.experts.forward = types.MethodType(original, block.experts)
    m.Qwen3VLMoeTextExperts.forward = me.make_grouped_experts_forward(original)
    for block in net.layers:
        fully_shard(block.experts, mesh=mesh)
        fully_shard(block, mesh=mesh)
    fully_shard(net, mesh=mesh)
    p = net.layers[0].experts.gate_up_proj
    out["param_type"] = type(p).__name__
    out["local_shape"] = list(p.to_local().shape)
    out["full_shape"] = list(p.shape)
    opts = [torch.optim.AdamW(model.parameters(), lr=1e-2) for model in (net, ref)]
    x = torch.randn(2, 6, 32, generator=torch.Generator().manual_seed(1))
    out["loss"], out["loss_ref"], out["grad_rel"] = [], [], {}
    for step in range(3):
        for model, opt, key in ((net, opts[0], "loss"), (ref, opts[1], "loss_ref")):
            opt.zero_grad(set_to_none=True)
            loss = model(x).pow(2).mean()
            loss.backward()
            out[key].append(loss.item())
            if step == 0 and model is ref:
                for (name, g), (_, r) in zip(net.named_parameters(), ref.named_parameters()):
                    local, want = g.grad.to_local(), torch.chunk(r.grad, world, 0)[rank]
                    diff = torch.tensor([(local - want).pow(2).sum(), want.pow(2).sum()], dtype=torch.float64)
                    dist.all_reduce(diff)
                    out["grad_rel"][name] = float(diff[0].sqrt() / diff[1].sqrt())
            opt.step()
    net.eval()
    ref.eval()
    with torch.no_grad():
        out["eval_max_abs_diff"] = (net(x) - ref(x)).abs().max().item()
    out["world"] = world
    dist.barrier()
    dist.destroy_process_group()
except Exception:
    out["crash"] = traceback.format_exc()
if os.environ.get("RANK", "0") == "0":
    print(json.dumps(out))
sys.stdout.flush()
