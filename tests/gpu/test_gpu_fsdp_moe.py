"""FSDP2 of a 2-layer Qwen3-VL-MoE at real widths with the grouped experts (patch ``qwen3_vl_moe.grouped_experts``),
with and without CPU offload, 3 AdamW steps, against transformers 4.57.6's own per-expert loop; through
tests/gpu/gpu_fsdp_moe.py under torchrun (see its docstring). One GPU and two GPUs (the
experts sharded on dim 0 across the ranks; skipped with the reason on one GPU).

Tolerances (bf16 compute, fp32 master weights): losses of the grouped and the loop runs within 1e-2 relative at
every step (the two sum the same bf16 products in another order; a few near-tie top-8 choices of the second layer
can flip); every parameter's gradient norm within 1e-2 relative; offload against no offload with
the same experts code within 2e-3 (offload moves the fp32 master weights and the optimizer to the CPU only).
"""

from __future__ import annotations

import pytest

from gpu_helpers import HERE, load_json, log_dir, run_script, torchrun

SCRIPT = str(HERE / "gpu_fsdp_moe.py")
STEPS = 3
LOSS_RTOL = 1e-2
NORM_RTOL = 1e-2
OFFLOAD_LOSS_RTOL = 2e-3
GROUPED = "qwen3_vl_moe.grouped_experts"


def _run(nproc: int) -> dict:
    out = log_dir() / f"fsdp_moe_{nproc}gpu.json"
    proc = run_script(
        torchrun(nproc) + [SCRIPT, "--steps", str(STEPS), "--out", str(out)],
        patched=True,
        name=f"fsdp_moe_{nproc}gpu",
        timeout=600,
    )
    rep = load_json(out, proc)
    assert "crash" not in rep, rep["crash"]
    assert rep["world_size"] == nproc and rep["transformers"] == "4.57.6" and rep["vlgrpo_loaded"]
    return rep


def _check(rep: dict, nproc: int):
    runs = {r["run"]: r for r in rep["runs"]}
    assert set(runs) == {"grouped", "grouped-offload", "loop", "loop-offload"}, list(runs)
    for name, run in runs.items():
        assert "error" not in run, (name, run["error"])
        assert run["finite"] and len(run["losses"]) == STEPS, (name, run["losses"])
        gu = run["gate_up_proj"]
        assert gu["type"] == "DTensor" and gu["full"] == [128, 2048, 1536], gu
        assert gu["local"] == [128 // nproc, 2048, 1536], gu  # the experts' dim 0, sharded over the ranks
        assert gu["device"].startswith("cpu" if run["offload"] else "cuda"), gu
        if name.startswith("grouped"):
            assert run["experts_patch"] == GROUPED, run["experts_forward"]
        else:
            assert run["experts_patch"] is None and run["experts_forward"].startswith("transformers."), run
    bad = []
    for offload in ("", "-offload"):
        grouped, loop = runs["grouped" + offload], runs["loop" + offload]
        for step, (a, b) in enumerate(zip(grouped["losses"], loop["losses"])):
            if abs(a - b) > LOSS_RTOL * abs(b):
                bad.append(f"loss step {step}{offload}: grouped {a} vs loop {b}")
        for param, ref in loop["grad_norms"].items():
            got = grouped["grad_norms"][param]
            if abs(got - ref) > NORM_RTOL * max(ref, 1e-30):
                bad.append(f"grad norm {param}{offload}: grouped {got:.6g} vs loop {ref:.6g}")
    for a, b in zip(runs["grouped-offload"]["losses"], runs["grouped"]["losses"]):
        if abs(a - b) > OFFLOAD_LOSS_RTOL * abs(b):
            bad.append(
                f"offload changes the grouped losses: {runs['grouped-offload']['losses']} vs {runs['grouped']['losses']}"
            )
    assert not bad, "\n".join(bad[:20])


def test_fsdp2_grouped_experts_match_the_loop_1gpu():
    _check(_run(1), 1)


@pytest.mark.two_gpus
def test_fsdp2_grouped_experts_match_the_loop_2gpus():
    """Two GPUs: the experts' 128 rows split 64/64 over two GPUs, all-gathered per layer in forward/backward."""
    _check(_run(2), 2)
