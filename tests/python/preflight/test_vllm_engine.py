"""B08/B09: the vLLM engine arguments verl 0.8.0 builds from the argv, resolved, against vLLM 0.13.0's own rules.

References: verl 0.8.0's own build_cli_args_from_config (run from the installed source), and vLLM 0.13.0's own config
classes (SchedulerConfig, CacheConfig, MultiModalConfig, _get_and_verify_max_len) from the real wheel in
.cache/vllm-0.13.0 (``make vllm-0.13.0``), run in a child interpreter on the same resolved values as the mirror."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from preflight_helpers import MODEL_30B, REPO, UPSTREAM_VEOMNI, read_argv, set_override

from vlgrpo.preflight import run_preflight
from vlgrpo.preflight.vllm_engine import drops_false, mirrored_rules, text_config_of

VLLM = os.path.join(REPO, ".cache", "vllm-0.13.0")
EK = "actor_rollout_ref.rollout.engine_kwargs.vllm"


def _veomni(**overrides) -> list[str]:
    """The upstream VeOmni argv (chunked prefill False, max_num_batched_tokens 5120) with its known B06 fault fixed."""
    argv = set_override(read_argv(UPSTREAM_VEOMNI), "data.image_patch_size", "16")
    for key, value in overrides.items():
        argv = set_override(argv, key, value)
    return argv


def _run(argv):
    return run_preflight(argv, check_data=False, model_path=MODEL_30B)


def _by_code(report, code):
    return [f for f in report.findings if f.code == code]


def test_verl_drops_false_booleans_from_vllms_command_line():
    """verl 0.8.0 vllm_rollout/utils.py build_cli_args_from_config, run from the installed source."""
    from vlgrpo.preflight.verl_checks import load_function

    build = load_function(
        "workers/rollout/vllm_rollout/utils.py", "build_cli_args_from_config", {"json": json}, import_fallback=False
    )
    assert build({"enable_chunked_prefill": False, "enforce_eager": True, "max_model_len": 4096}) == [
        "--enforce_eager",
        "--max_model_len",
        "4096",
    ]
    assert drops_false() is True


def test_b08_veomni_chunked_prefill_off_budget_below_the_context():
    """The VeOmni argv with enable_chunked_prefill=False, max_num_batched_tokens=5120 and max_model_len unset: verl
    resolves max_model_len to 32768 (the recipe's override_config). On the pinned verl the False never reaches vLLM
    (chunked prefill stays on): exit 2 naming the setting and, what vLLM would do were it off, both numbers."""
    argv = _veomni(**{"actor_rollout_ref.rollout.max_model_len": None, f"+{EK}.max_model_len": None})
    argv = [a for a in argv if not a.startswith(f"+{EK}.max_model_len=")]
    report = _run(argv)
    assert report.exit_code == 2
    (f,) = [x for x in _by_code(report, "vllm.setting-dropped") if "enable_chunked_prefill" in x.what]
    assert f.where.key == "actor_rollout_ref.rollout.enable_chunked_prefill"
    assert f.where.position == argv.index("actor_rollout_ref.rollout.enable_chunked_prefill=False")
    assert "max_num_batched_tokens 5120 < max_model_len 32768" in f.what
    assert f"+{EK}.no_enable_chunked_prefill=True" in f.fix
    assert report.summary["vllm"]["engine_args"]["max_model_len"] == 32768
    assert report.summary["vllm"]["engine_args"]["enable_chunked_prefill"] is True


def test_b08_when_chunked_prefill_really_is_off():
    """vLLM's --no-enable-chunked-prefill (BooleanOptionalAction) through engine_kwargs does reach vLLM: then
    SchedulerConfig refuses max_num_batched_tokens 5120 < max_model_len, 32768 through override_config or 262144
    from the model itself."""
    base = [
        a
        for a in _veomni(
            **{
                "actor_rollout_ref.rollout.max_model_len": None,
                "actor_rollout_ref.rollout.enable_chunked_prefill": None,
            }
        )
        if not a.startswith(f"+{EK}.max_model_len=")
    ] + [f"+{EK}.no_enable_chunked_prefill=True"]
    for argv, mml in (
        (base, 32768),
        (set_override(base, "actor_rollout_ref.model.override_config.max_position_embeddings", None), 262144),
    ):
        report = _run(argv)
        (f,) = _by_code(report, "vllm.max-num-batched-tokens")
        assert f"max_num_batched_tokens (5120) is smaller than max_model_len ({mml})" in f.what
        assert f.where.position == argv.index("actor_rollout_ref.rollout.max_num_batched_tokens=5120")
        assert f"at least {mml}" in f.fix and report.exit_code == 2
    ok = set_override(base, "actor_rollout_ref.rollout.max_num_batched_tokens", "32768")
    assert _by_code(_run(ok), "vllm.max-num-batched-tokens") == []


def test_prefix_caching_false_is_dropped_too():
    report = _run(_veomni())  # upstream sets enable_chunked_prefill=False and enable_prefix_caching=False
    dropped = sorted(f.where.key for f in _by_code(report, "vllm.setting-dropped"))
    assert dropped == [
        "actor_rollout_ref.rollout.enable_chunked_prefill",
        "actor_rollout_ref.rollout.enable_prefix_caching",
    ]
    fixed = _veomni(
        **{
            "actor_rollout_ref.rollout.enable_chunked_prefill": "True",
            "actor_rollout_ref.rollout.enable_prefix_caching": "True",
        }
    )
    fixed.append(f"+{EK}.limit_mm_per_prompt={{image:1,video:0}}")  # upstream allows video (rules.video-enabled)
    assert _run(fixed).errors == []


def test_more_vllm_engine_rules():
    """Three more of vLLM 0.13.0's config rules on the arguments verl builds."""
    ok = _veomni(
        **{
            "actor_rollout_ref.rollout.enable_chunked_prefill": "True",
            "actor_rollout_ref.rollout.enable_prefix_caching": "True",
        }
    )
    # SchedulerConfig: max_num_batched_tokens >= max_num_seqs (verl's default max_num_seqs is 1024)
    r = _run(set_override(ok, "actor_rollout_ref.rollout.max_num_batched_tokens", "1000"))
    (f,) = _by_code(r, "vllm.max-num-batched-tokens")
    assert "max_num_batched_tokens (1000) is smaller than max_num_seqs (1024)" in f.what
    # CacheConfig: 0 < gpu_memory_utilization <= 1
    for bad in ("1.2", "0"):
        r = _run(set_override(ok, "actor_rollout_ref.rollout.gpu_memory_utilization", bad))
        assert [x.where.key for x in _by_code(r, "vllm.gpu-memory-utilization")] == [
            "actor_rollout_ref.rollout.gpu_memory_utilization"
        ], bad
    # _get_and_verify_max_len: vLLM checks against the folder's own 262144 (verl's override_config does not reach it)
    long = [f"+{EK}.max_model_len=300000" if a.startswith(f"+{EK}.max_model_len=") else a for a in ok]
    r = _run(set_override(long, "actor_rollout_ref.rollout.max_model_len", "300000"))
    (f,) = _by_code(r, "vllm.max-model-len")
    assert "max_model_len (300000)" in f.what and "max_position_embeddings=262144" in f.what
    # SchedulerConfig: partial prefills need chunked prefill; max_long_partial_prefills <= max_num_partial_prefills
    r = _run(ok + [f"+{EK}.max_num_partial_prefills=2", f"+{EK}.max_long_partial_prefills=3"])
    assert (
        "max_long_partial_prefills (3) is larger than max_num_partial_prefills (2)"
        in _by_code(r, "vllm.partial-prefill")[0].what
    )
    r = _run(
        ok
        + [
            f"+{EK}.max_num_partial_prefills=2",
            f"+{EK}.no_enable_chunked_prefill=True",
            "actor_rollout_ref.rollout.max_num_batched_tokens=8192",
        ]
    )
    assert "needs chunked prefill on" in _by_code(r, "vllm.partial-prefill")[0].what
    # MultiModalConfig: limit_mm_per_prompt counts >= 0
    r = _run(ok + [f"+{EK}.limit_mm_per_prompt={{image:-1,video:0}}"])
    assert _by_code(r, "vllm.limit-mm-per-prompt")


def test_rollout_parallel_sizes_against_the_rollouts_devices(fixed_argv):
    """verl 0.8.0 places vLLM replicas of TP x DP x PP devices (replica.py, llm_server.py, vllm_async_server.py)."""

    def run(**kw):
        argv = list(fixed_argv)
        for k, v in kw.items():
            argv = set_override(argv, f"actor_rollout_ref.rollout.{k}", v)
        return _by_code(run_preflight(argv, check_data=False), "rules.rollout-parallel")

    assert run() == []  # TP 2 on 2 x 16 rollout devices: 16 replicas
    (f,) = run(tensor_model_parallel_size="64", expert_parallel_size="64")
    assert f.severity == "error" and "needs tensor_model_parallel_size 64" in f.what and "has 32" in f.what
    hits = run(tensor_model_parallel_size="24", expert_parallel_size="24")
    assert [f.severity for f in hits] == ["error", "warning"] and "does not fill whole nodes of 16" in hits[0].what
    (f,) = run(tensor_model_parallel_size="12", expert_parallel_size="12")
    assert f.severity == "warning" and "8 stay idle" in f.what
    hits = run(tensor_model_parallel_size="3", data_parallel_size="2", expert_parallel_size="6")
    assert any("n_gpus_per_node (16) divisible by tensor_model_parallel_size 3" in f.what for f in hits)


CASES = [
    # (max_model_len, max_num_batched_tokens, max_num_seqs, chunked, gpu_memory_utilization, extra)
    (32768, 5120, 1024, False, 0.6, {}),
    (262144, 5120, 1024, False, 0.6, {}),
    (4096, 5120, 1024, False, 0.6, {}),
    (5120, 5120, 1024, False, 0.6, {}),
    (32768, 5120, 1024, True, 0.6, {}),
    (4096, 1000, 1024, True, 0.6, {}),
    (4096, 1024, 1024, True, 1.0, {}),
    (4096, 8192, 1024, True, 1.2, {}),
    (4096, 8192, 1024, True, 0, {}),
    (300000, 8192, 1024, True, 0.5, {}),
    (262144, 8192, 1024, True, 0.5, {}),
    (4096, 8192, 256, True, 0.5, {"max_num_partial_prefills": 2}),
    (4096, 8192, 256, False, 0.5, {"max_num_partial_prefills": 2}),
    (4096, 8192, 256, True, 0.5, {"max_num_partial_prefills": 2, "long_prefill_token_threshold": 5000}),
    (4096, 8192, 256, True, 0.5, {"max_num_partial_prefills": 2, "max_long_partial_prefills": 3}),
    (4096, 8192, 256, True, 0.5, {"limit_mm_per_prompt": {"image": 1, "video": 0}}),
    (4096, 8192, 256, True, 0.5, {"limit_mm_per_prompt": {"image": -1}}),
    (4096, 0, 256, True, 0.5, {}),
]


def test_mirror_gives_vllms_own_verdict_on_every_case():
    """vLLM 0.13.0's own classes (the real wheel, child interpreter) and the preflight's mirror break the same rules
    on every case (and name the same numbers for the batched-tokens rule); a pin change shows up here."""
    if not os.path.isfile(os.path.join(VLLM, ".installed")):
        pytest.fail(f"vLLM 0.13.0 is not installed in {VLLM}; run `make vllm-0.13.0` (make test-python does)")
    resolved = [
        {
            "max_model_len": m,
            "max_num_batched_tokens": b,
            "max_num_seqs": s,
            "enable_chunked_prefill": c,
            "gpu_memory_utilization": g,
            **extra,
        }
        for m, b, s, c, g, extra in CASES
    ]
    code = (
        "import json, sys\nfrom vlgrpo.preflight.vllm_engine import check_with_vllm\n"
        f"print('RESULT ' + json.dumps([check_with_vllm(c, {MODEL_30B!r}) for c in json.load(sys.stdin)]))\n"
    )
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(
            [os.path.join(VLLM, "src"), os.path.join(VLLM, "deps"), os.path.join(REPO, "python", "src")]
        ),
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps(resolved),
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert proc.returncode == 0 and line, proc.stdout[-2000:] + proc.stderr[-3000:]
    real = json.loads(line[len("RESULT ") :])
    text_config = text_config_of(MODEL_30B)
    broke_something = 0
    for case, theirs in zip(resolved, real):
        ours = mirrored_rules(case, text_config)
        assert [r for r, _ in ours] == [r for r, _ in theirs], (case, ours, theirs)
        for (rule, mine), (_, vllms) in zip(ours, theirs):
            if rule == "vllm.max-num-batched-tokens":
                assert mine.split(")")[0] == vllms.split(")")[0], (mine, vllms)
        broke_something += bool(theirs)
    assert broke_something >= 10  # the cases probe each rule from both sides
