#!/usr/bin/env bash
# The whole GPU suite in one command: tests/gpu (pytest), the benchmarks (bench/moe_experts.py,
# bench/model_step.py, bench/pos_embed.py, bench/startup.py) and the CUDA variants of the pos-embed tests.
#
# usage: tests/gpu/run.sh [LOGDIR]        (make test-gpu)
#   LOGDIR  where logs go (default: $OUT if set, else out/gpu): env.txt, pytest.log, bench_<name>.log and
#           gpu-logs.tar.gz, which packs the per-test logs and every JSON result (work/).
# env:
#   PYTHON            interpreter with a CUDA torch (default python3)
#   VLGRPO_GPU_SITE   --target dir for the carried wheels (default /tmp/vlgrpo-site)
#   VLGRPO_WHEELS     folder of wheels to install there (default .whl): transformers 4.57.6 and what it
#                     requires that the machine lacks (tokenizers 0.22.1, huggingface-hub 0.36.0)
#   VLGRPO_GPU_WORK   folder for the per-test logs and JSON (default LOGDIR/work)
#   VLGRPO_GIT_REV    commit id to record in env.txt (the device copy of the tree has no .git)
#   VLGRPO_GPU_PYTEST_ARGS    extra pytest arguments for tests/gpu (e.g. "-k status")
#   VLGRPO_GPU_SKIP_POSEMBED_TESTS=1   do not run tests/python/patches/test_pos_embed.py (its CUDA variants)
#   VLGRPO_GPU_SKIP_BENCH=1   run only pytest
#   VLGRPO_GPU_PARTS  which parts run, comma separated (default pytest,bench,cuda-tests)
#   VLGRPO_GPU_BENCHES  which benchmarks run (default moe_experts,model_step,pos_embed,startup)
#
# Two GPUs: the tests marked two_gpus -- FSDP2 CPU offload of the pos-embed fix over 2 ranks
# (test_gpu_fsdp_offload.py) and the 2-rank FSDP2 of a 2-layer Qwen3-VL-MoE at real widths with the grouped
# experts, with and without CPU offload, 3 AdamW steps against the 4.57.6 loop (test_gpu_fsdp_moe.py: losses,
# per-parameter gradient norms within 1e-2, step times) -- run in the pytest part whenever 2 CUDA devices are
# visible and are skipped with the reason otherwise. On the lent nvidia-h200-x2, in one call:
#   tests/gpu/run.sh                                          (everything), or only the two-GPU cases:
#   VLGRPO_GPU_PARTS=pytest VLGRPO_GPU_PYTEST_ARGS="-m two_gpus" tests/gpu/run.sh
#
# On the lent H200 (python3 3.12, torch 2.11, transformers 5.17, no package index) the wheels are
# installed with --target and put first on PYTHONPATH, so transformers 4.57.6 shadows 5.17 in the
# processes of this suite; the benchmark reaches the machine's own transformers through
# VLGRPO_ALT_TRANSFORMERS_PATH (its site-packages folder), found below before PYTHONPATH is set.
# Exit status: pytest's (benchmarks that fail are logged and make the status 1).
set -Eeuo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

PY=${PYTHON:-python3}
LOGDIR=${1:-${OUT:-out/gpu}}
SITE=${VLGRPO_GPU_SITE:-/tmp/vlgrpo-site}
WHEELS=${VLGRPO_WHEELS:-.whl}
mkdir -p "$LOGDIR"
LOGDIR=$(cd "$LOGDIR" && pwd)
WORK=${VLGRPO_GPU_WORK:-$LOGDIR/work}   # per-test logs and JSON (packed into gpu-logs.tar.gz)
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)

export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false

START=$SECONDS
log() { printf '[run.sh %s +%ds] %s\n' "$(date -u +%H:%M:%S)" "$((SECONDS - START))" "$*" | tee -a "$WORK/run.log"; }
PARTS=",${VLGRPO_GPU_PARTS:-pytest,bench,cuda-tests},"
BENCHES=",${VLGRPO_GPU_BENCHES:-moe_experts,model_step,pos_embed,startup},"
part() { [[ $PARTS == *",$1,"* ]]; }

# the machine's own transformers (5.x on the H200 image), located before the wheels shadow it
ALT=$("$PY" -c 'import os, transformers; print(os.path.dirname(os.path.dirname(transformers.__file__)))' 2>/dev/null || true)
export VLGRPO_ALT_TRANSFORMERS_PATH=${VLGRPO_ALT_TRANSFORMERS_PATH:-$ALT}

shopt -s nullglob
whls=("$WHEELS"/*.whl)
if ((${#whls[@]})); then
    log "installing ${#whls[@]} wheels into $SITE: ${whls[*]##*/}"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "${whls[@]}" \
        2>&1 | tee -a "$WORK/run.log"
    export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" VLGRPO_GPU_SITE="$SITE"
else
    log "no wheels in $WHEELS: using the interpreter's own packages"
fi

{
    echo "# command: tests/gpu/run.sh (PYTHON=$PY, PYTHONPATH=${PYTHONPATH:-})"
    date -u +"# date: %Y-%m-%dT%H:%M:%SZ"
    # the device copy of the tree has no .git: pass VLGRPO_GIT_REV=$(git rev-parse HEAD) from where it came
    echo "# git: ${VLGRPO_GIT_REV:-$(git rev-parse --verify -q HEAD 2>/dev/null || echo unknown)}"
    nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv 2>&1 || true
    "$PY" - <<'EOF' 2>&1 || true
import platform, sys, torch, os
print("python", platform.python_version(), sys.executable)
print("torch", torch.__version__, "cuda", torch.version.cuda, "devices", torch.cuda.device_count())
for name in ("transformers", "tokenizers", "huggingface_hub", "numpy", "PIL", "torchvision"):
    try:
        m = __import__(name)
        print(name, getattr(m, "__version__", "?"), os.path.dirname(m.__file__))
    except Exception as e:
        print(name, "NOT IMPORTABLE", e)
print("alt transformers path", os.environ.get("VLGRPO_ALT_TRANSFORMERS_PATH"))
EOF
} >"$LOGDIR/env.txt"
cat "$LOGDIR/env.txt"

TF=$("$PY" -c 'import transformers; print(transformers.__version__)' 2>/dev/null || echo none)
if [[ $TF != 4.57.6 ]]; then
    log "error: the GPU suite needs transformers 4.57.6 (the pinned version) in the test processes, found '$TF';" \
        "fix: run tests/gpu/fetch-wheels.sh where PyPI is reachable (wheels into $WHEELS), or set VLGRPO_WHEELS"
    exit 2
fi

status=0
NGPU=$("$PY" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
if ((NGPU < 2)); then
    log "two-GPU cases (marker two_gpus): skipped here ($NGPU CUDA device(s)); they run where 2 are visible"
fi
if part pytest; then
    log "pytest tests/gpu ${VLGRPO_GPU_PYTEST_ARGS:-}"
    set +e
    # shellcheck disable=SC2086  # VLGRPO_GPU_PYTEST_ARGS is a word list on purpose (e.g. -k status)
    eval "VLGRPO_GPU_LOGDIR=\"\$WORK\" \"\$PY\" -m pytest tests/gpu -v -rA --durations=0 -p no:cacheprovider \
        --junitxml \"\$WORK/junit.xml\" ${VLGRPO_GPU_PYTEST_ARGS:-}" 2>&1 | tee "$LOGDIR/pytest.log"
    status=${PIPESTATUS[0]}
    set -e
    log "pytest exit $status"
fi
pack() {  # the per-test logs/JSON as one file in LOGDIR (done now too, so a later timeout keeps them)
    rm -f "$WORK"/*.pt
    cp "$LOGDIR/env.txt" "$LOGDIR/pytest.log" "$WORK/" 2>/dev/null || true
    tar -czf "$LOGDIR/gpu-logs.tar.gz" -C "$(dirname "$WORK")" "$(basename "$WORK")"
}
pack

# run_bench NAME CMD...: log to LOGDIR/bench_NAME.log (its JSON goes to WORK); a failing benchmark makes the
# exit status 1; each benchmark is stopped after VLGRPO_GPU_BENCH_TIMEOUT seconds (default 300)
run_bench() {
    local name=$1 rc
    shift
    [[ $BENCHES == *",$name,"* ]] || return 0
    log "bench $name: $*"
    set +e
    timeout "${VLGRPO_GPU_BENCH_TIMEOUT:-300}" "$@" 2>&1 | tee "$LOGDIR/bench_$name.log"
    rc=${PIPESTATUS[0]}
    set -e
    log "bench $name exit $rc"
    ((rc == 0)) || status=1
    pack  # after every step, so a later timeout keeps what ran
}

if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    log "no CUDA device: benchmarks not run (the pytest suite above skipped)"
    VLGRPO_GPU_SKIP_BENCH=1
fi
if [[ ${VLGRPO_GPU_SKIP_BENCH:-0} != 1 ]] && part bench; then
    # moe_experts / pos_embed: the machine's own transformers (5.17: its experts implementations, the
    # vision_utils helper) is imported, 4.57.6's method is compiled from the wheel by the benchmark itself,
    # vlgrpo comes from python/src: all contenders in one process.
    tf457=("$WHEELS"/transformers-4.57.6-*.whl)
    src_args=()
    ((${#tf457[@]})) && src_args=(--transformers-source "${tf457[0]}")
    run_bench moe_experts env PYTHONPATH="$PWD/python/src" "$PY" bench/moe_experts.py --device cuda \
        "${src_args[@]}" --out "$WORK/bench_moe_experts.json"
    # the whole-model step: child interpreters on transformers 4.57.6 (the carried wheels): the fp32 reference,
    # the pinned loop and the vlgrpo sitecustomize, text-only and image batches (the Liger contenders need
    # liger-kernel carried: bench/RESULTS.md)
    run_bench model_step "$PY" bench/model_step.py --site "$SITE" --contenders fp32,pinned,patched \
        --out "$WORK/bench_model_step.json"
    run_bench pos_embed env PYTHONPATH="$PWD/python/src" "$PY" bench/pos_embed.py --device cuda \
        "${src_args[@]}" --out "$WORK/bench_pos_embed.json"
    run_bench startup env PYTHONPATH= "$PY" bench/startup.py --runs 30 --markdown
fi

# The pos-embed tests of the CPU suite run their CUDA variants here (on CPU and CUDA;
# torch.compile on CUDA, compilations counted over 60 batches): transformers 4.57.6 from the wheels, vlgrpo
# from python/src.
if [[ ${VLGRPO_GPU_SKIP_POSEMBED_TESTS:-0} != 1 ]] && part cuda-tests && [[ -f tests/python/patches/test_pos_embed.py ]]; then
    log "pytest tests/python/patches/test_pos_embed.py test_pos_embed_compile.py (CUDA variants)"
    set +e
    PYTHONPATH="$PWD/python/src${PYTHONPATH:+:$PYTHONPATH}" VLGRPO_PATCHES_STRICT=1 "$PY" -m pytest \
        tests/python/patches/test_pos_embed.py tests/python/patches/test_pos_embed_compile.py -v -rA \
        -p no:cacheprovider 2>&1 | tee "$WORK/pytest_pos_embed_cuda.log"
    rc=${PIPESTATUS[0]}
    set -e
    log "pytest test_pos_embed.py test_pos_embed_compile.py exit $rc"
    ((rc == 0)) || status=1
    grep -E '^(=+ .*(passed|failed|skipped|error).* =+)$' "$WORK/pytest_pos_embed_cuda.log" | tail -1 >>"$LOGDIR/pytest.log" || true
fi

pack
log "done: exit $status; logs in $LOGDIR"
exit "$status"
