#!/usr/bin/env bash
# make demo: the npu-async-grpo launch, end to end, on the inputs shipped in this repository, ending with
# the launch plan where a cluster run would exec verl. Nothing is trained and nothing is started.
#
#   1. the Geometry3K sample (assets/geo3k-sample) -> verl parquet with the project's own converter
#      (python -m vlgrpo data geo3k) into the output folder;
#   2. the real entrypoint of the npu-async-grpo compose service, entrypoints/fully-async-grpo.sh, in a
#      dry run (VLGRPO_DRY_RUN=1): allowlist and validation, planning for 2 trainer + 2 rollout nodes of
#      16 NPUs (Atlas A3) through its planning override (VLGRPO_PLATFORM=npu,
#      VLGRPO_PLAN_DEVICES_PER_NODE=16), then its preflight (python -m vlgrpo preflight) of the final argv
#      against the installed verl, the shipped Qwen3-VL-30B-A3B metadata (assets/models/) and the converted
#      data, token counts from the model folder's real tokenizer and image processor;
#   3. the patch self-test (python -m vlgrpo patches status --verify) against the transformers/verl classes
#      of this interpreter;
#   4. the plan: the exact command (one argument per line), topology, token budget, patches, one-line verdict.
#
# Usage: scripts/demo.sh [--python PY] [--out DIR]
#   --python PY  interpreter with the vlgrpo package, verl and transformers (default: .venv/bin/python of
#                this checkout, which `make venv` builds; inside an image: python3)
#   --out DIR    build folder for the converted data, the checkpoint folder the plan names, and logs
#                (default: build/demo in this checkout)
# Any VLGRPO_* variable already set is passed on to the entrypoint and wins over the demo's values, e.g.
# `VLGRPO_MAX_PROMPT_LENGTH=256 make demo` shows how the plan changes (or why it is refused).
# Exit status: 0 the launch would go ahead, 2 the entrypoint or a check refused the configuration, 1 other
# failure (the step that failed and its log are shown).
set -Eeuo pipefail

REPO=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd -P)
PY=""
OUT=""

usage() { sed -n '2,/^set -Eeuo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'; }

while (($#)); do
  case $1 in
    --python) PY=${2:?--python needs an interpreter}; shift 2 ;;
    --out) OUT=${2:?--out needs a folder}; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) printf 'demo: unknown argument %q (allowed: --python PY, --out DIR, --help)\n' "$1" >&2; exit 2 ;;
  esac
done

if [[ -z $PY ]]; then
  if [[ -x $REPO/.venv/bin/python ]]; then PY=$REPO/.venv/bin/python; else PY=python3; fi
fi
if ! py_path=$(command -v -- "$PY"); then
  printf 'demo: interpreter %s not found; run make demo (it builds .venv first) or pass --python PY\n' "$PY" >&2
  exit 1
fi
# absolute, without resolving the file itself (a venv's python is a symlink that must stay one)
if [[ $py_path == */* ]]; then py_path=$(cd -- "$(dirname -- "$py_path")" && pwd -P)/${py_path##*/}; fi
PY=$py_path
OUT=${OUT:-$REPO/build/demo}
mkdir -p -- "$OUT"
OUT=$(cd -- "$OUT" && pwd -P)
LOGS=$OUT/logs
rm -rf -- "${OUT:?}/logs" "${OUT:?}/geo3k" "${OUT:?}/bin"
mkdir -p -- "$LOGS" "$OUT/checkpoints" "$OUT/bin"

MODEL=$REPO/assets/models/qwen3-vl-30b-a3b-instruct
SAMPLE=$REPO/assets/geo3k-sample/hiyouga-geometry3k-format
ENTRY=$REPO/entrypoints/fully-async-grpo.sh

if [[ -t 1 ]]; then B=$'\e[1m' G=$'\e[32m' R=$'\e[31m' N=$'\e[0m'; else B="" G="" R="" N=""; fi
T0=$SECONDS
STEP=0
NSTEPS=4

say() { printf '%s\n' "$*"; }
head_line() { printf '\n%s== %s ==%s\n' "$B" "$1" "$N"; }

# run_step LABEL NAME CMD... — run CMD with stdout/stderr in $LOGS/NAME.{out,err}; show elapsed seconds while
# it runs (updated in place on a terminal, a line every 10 s otherwise); sets RC to its exit status.
run_step() {
  local label=$1 name=$2 pid t s=$SECONDS last=-1
  shift 2
  STEP=$((STEP + 1))
  printf '[%d/%d] %s ' "$STEP" "$NSTEPS" "$label"
  # its own process group (setsid), so an interrupted demo stops the whole step: see the traps below
  setsid "$@" >"$LOGS/$name.out" 2>"$LOGS/$name.err" </dev/null &
  pid=$! STEP_PID=$!
  while kill -0 "$pid" 2>/dev/null; do
    t=$((SECONDS - s))
    if [[ -t 1 ]]; then
      printf '\r[%d/%d] %s ... %ds ' "$STEP" "$NSTEPS" "$label" "$t"
    elif ((t >= 10 && t / 10 != last)); then
      last=$((t / 10))
      printf '\n      ... %ds' "$t"
    fi
    sleep 1
  done
  RC=0
  wait "$pid" || RC=$?
  STEP_PID=""
  t=$((SECONDS - s))
  if [[ -t 1 ]]; then printf '\r[%d/%d] %s ' "$STEP" "$NSTEPS" "$label"; else printf '\n      '; fi
  if ((RC == 0)); then printf -- '-> done in %ds\n' "$t"; else printf -- '-> exit %d after %ds\n' "$RC" "$t"; fi
}

# A step still running when the demo ends (Ctrl-C, a closed pipe) is stopped: SIGTERM to its process group.
STEP_PID=""
# shellcheck disable=SC2317 # called from the EXIT trap
stop_step() { if [[ -n $STEP_PID ]]; then kill -TERM -- "-$STEP_PID" 2>/dev/null || true; fi; }
trap stop_step EXIT
trap 'exit 130' INT
trap 'exit 143' TERM PIPE

show_log() { # show_log NAME — the step's output, for a failure
  local f
  for f in "$LOGS/$1.out" "$LOGS/$1.err"; do
    [[ -s $f ]] || continue
    printf -- '--- %s\n' "${f#"$OUT"/}"
    cat -- "$f"
  done
}

fail() { # fail RC WHY — verdict line for a step that could not run, then exit
  printf '\n%sverdict: NOT READY%s -- %s (logs: %s)\n' "$R" "$N" "$2" "$LOGS"
  exit "$1"
}

versions=$("$PY" -c 'import importlib.metadata as m
print(" ".join(f"{p} {m.version(p)}" for p in ("vlgrpo", "verl", "transformers", "torch")))' 2>/dev/null) ||
  fail 1 "$PY lacks the vlgrpo package or its stack (run make venv, or pass --python)"

plan_platform=${VLGRPO_PLATFORM:-npu} plan_devices=${VLGRPO_PLAN_DEVICES_PER_NODE:-16}
case $plan_platform:$plan_devices in
  npu:16) TARGET="Atlas A3 (16 NPUs per node)" ;;
  npu:8) TARGET="Atlas A2 / 910B (8 NPUs per node)" ;;
  *) TARGET="$plan_platform, $plan_devices devices per node" ;;
esac
say "${B}vlgrpo demo${N}: npu-async-grpo (entrypoints/fully-async-grpo.sh) dry run, planned for $TARGET"
say "  interpreter: $PY ($versions)"
say "  model:       ${MODEL#"$REPO"/} (Qwen3-VL-30B-A3B-Instruct metadata: config, tokenizer, chat template, processors; no weights)"
say "  data:        ${SAMPLE#"$REPO"/} (Geometry3K sample)"
say "  output:      $OUT"

# 1. data ---------------------------------------------------------------------------------------------
run_step "convert the Geometry3K sample (python -m vlgrpo data geo3k)" convert \
  "$PY" -m vlgrpo data geo3k "$SAMPLE" "$OUT/geo3k"
if ((RC != 0)); then show_log convert; fail $((RC == 2 ? 2 : 1)) "the geo3k converter failed"; fi
sed 's/^/      /' "$LOGS/convert.out"

# 2. the entrypoint -----------------------------------------------------------------------------------
# python3 for the entrypoint is this interpreter. The entrypoint sends the preflight's report to stderr
# itself (logs/entrypoint.err, next to its messages) and reads the device counter's answer from its
# stdout, so the entrypoint's own stdout holds only the plan (comment lines, then the argv).
printf '#!/bin/sh\nexec %q "$@"\n' "$PY" >"$OUT/bin/python3"
chmod +x "$OUT/bin/python3"

demo_env=(
  "PATH=$OUT/bin:$PATH"
  "VLGRPO_DRY_RUN=${VLGRPO_DRY_RUN:-1}"
  "VLGRPO_PLATFORM=${VLGRPO_PLATFORM:-npu}"
  "VLGRPO_PLAN_DEVICES_PER_NODE=${VLGRPO_PLAN_DEVICES_PER_NODE:-16}"
  "VLGRPO_TRAINER_NNODES=${VLGRPO_TRAINER_NNODES:-2}"
  "VLGRPO_ROLLOUT_NNODES=${VLGRPO_ROLLOUT_NNODES:-2}"
  "VLGRPO_MODEL_PATH=${VLGRPO_MODEL_PATH:-$MODEL}"
  "VLGRPO_TRAIN_FILE=${VLGRPO_TRAIN_FILE:-$OUT/geo3k/train.parquet}"
  "VLGRPO_VAL_FILE=${VLGRPO_VAL_FILE:-$OUT/geo3k/test.parquet}"
  "VLGRPO_CHECKPOINT_DIR=${VLGRPO_CHECKPOINT_DIR:-$OUT/checkpoints}"
)
if [[ ${VLGRPO_DRY_RUN:-1} != 1 && ${VLGRPO_DRY_RUN:-1} != true && ${VLGRPO_DRY_RUN:-1} != True ]]; then
  fail 2 "VLGRPO_DRY_RUN=$VLGRPO_DRY_RUN: the demo only plans; unset it"
fi
printf '%s\n' "${demo_env[@]:1}" >"$LOGS/entrypoint.env"
run_step "entrypoint dry run: allowlist, validation, preflight (verl schema and checks, model folder, token counts)" \
  entrypoint env "${demo_env[@]}" "$ENTRY"
ENTRY_RC=$RC
if ((ENTRY_RC != 0)) && ! grep -q '^# command (' "$LOGS/entrypoint.out"; then
  head_line "the entrypoint refused the launch (exit $ENTRY_RC)"
  cat -- "$LOGS/entrypoint.err"
  if ((ENTRY_RC == 2)); then
    fail 2 "the entrypoint refused the configuration: fix the lines above (one per problem: variable, fault, fix)"
  fi
  fail 1 "the entrypoint failed (exit $ENTRY_RC)"
fi

# 3. patches ------------------------------------------------------------------------------------------
run_step "patch self-test (python -m vlgrpo patches status --verify, real transformers/verl classes)" patches \
  "$PY" -m vlgrpo patches status --verify --json
PATCH_RC=$RC

# 4. the plan ------------------------------------------------------------------------------------------
STEP=$((STEP + 1))
printf '[%d/%d] plan\n' "$STEP" "$NSTEPS"
head_line "command (what the npu-async-grpo service would exec; one argument per line)"
sed -n '/^# command (/,$p' "$LOGS/entrypoint.out"

head_line "entrypoint plan"
sed -n '/^# command (/q;p' "$LOGS/entrypoint.out"

head_line "topology"
topo=$(sed -n 's/^# topology: //p' "$LOGS/entrypoint.out")
say "  $topo"
# the plan is for other machines (VLGRPO_PLAN_DEVICES_PER_NODE): the entrypoint names the Ray cluster it needs
cluster=$(sed -n 's/^# cluster: //p' "$LOGS/entrypoint.out")
if [[ -n $cluster ]]; then say "  $cluster"; fi
say "  $TARGET; devices per node: $(sed -n 's/^# platform: [a-z]*; devices per node on this node: //p' "$LOGS/entrypoint.out")"
say "  (on a cluster node the entrypoint counts the node's own devices: /dev/davinci* or npu-smi, nvidia-smi)"

head_line "token budget (preflight: the model folder's tokenizer, chat template and image processor on every row)"
budget=$(grep -E '^(verl [0-9]|token budget:|data [a-z]+:|token counts:|result:)' "$LOGS/entrypoint.err" || true)
if [[ -n $budget ]]; then
  printf '  %s\n' "${budget//$'\n'/$'\n'  }"
else
  say "  (the preflight printed no summary; its output: $LOGS/entrypoint.err)"
fi
findings=$(grep -E '^(ERROR|WARNING) \[' "$LOGS/entrypoint.err" || true)
if [[ -n $findings ]]; then
  say "  preflight findings:"
  printf '    %s\n' "${findings//$'\n'/$'\n'    }"
fi

head_line "patches (python -m vlgrpo patches status --verify in this interpreter)"
patch_summary=$("$PY" - "$LOGS/patches.out" <<'EOF'
import json, sys
try:
    doc = json.load(open(sys.argv[1]))
except (OSError, ValueError) as exc:
    print(f"  (no status: {exc})")
    sys.exit(0)
for p in doc.get("patches", []):
    hits = [t["target"].rsplit(".", 2)[-2] + "." + t["target"].rsplit(".", 1)[-1]
            for t in p.get("targets", []) if t.get("status") == "applied"]
    reason = p.get("reason", "").split(" | ")[0]
    where = ("on " + ", ".join(hits)) if hits else (reason if len(reason) <= 110 else reason[:107] + "...")
    print(f"  {p['id']:<32} {p['status']:<13} verify {p.get('verify') or '-':<5} {where}")
EOF
)
say "$patch_summary"
say "  (in the images the same registry runs in every process through sitecustomize; on Ascend verl's NPU"
say "   MoE block is checked too: docker compose run --rm npu-a3-doctor)"

# verdict ---------------------------------------------------------------------------------------------
elapsed=$((SECONDS - T0))
preflight=$(sed -n 's/^# preflight: //p' "$LOGS/entrypoint.out")
nwarn=$(grep -c '^WARNING \[' "$LOGS/entrypoint.err" || true)
nargs=$(sed -n 's/^# command (\([0-9]*\) arguments.*/\1/p' "$LOGS/entrypoint.out")
printf '\n'
over=0
while read -r n; do over=$((over + n)); done < <(sed -n 's/^data [a-z]*: .*; over budget: \([0-9][0-9]*\)$/\1/p' "$LOGS/entrypoint.err")
dropped=""
if ((over > 0)); then dropped="; $over prompt(s) over max_prompt_length would be dropped (filter_overlong_prompts)"; fi
if ((ENTRY_RC == 0 && PATCH_RC == 0)) && [[ $preflight == clean ]]; then
  printf '%sverdict: READY%s -- the npu-async-grpo launch would exec %s arguments on %s; preflight clean (%s warning(s))%s; patches verified; nothing started (%ds)\n' \
    "$G" "$N" "$nargs" "$topo" "$nwarn" "$dropped" "$elapsed"
  exit 0
fi
why=()
((ENTRY_RC == 0)) || why+=("entrypoint exit $ENTRY_RC")
[[ $preflight == clean ]] || why+=("preflight: ${preflight:-not run}")
((PATCH_RC == 0)) || why+=("patch self-test exit $PATCH_RC")
if ((PATCH_RC != 0)); then show_log patches; fi
printf '%sverdict: NOT READY%s -- %s (%ds; logs: %s)\n' "$R" "$N" "$(IFS=';'; printf '%s' "${why[*]}")" "$elapsed" "$LOGS"
if ((ENTRY_RC == 1 || (PATCH_RC != 0 && PATCH_RC != 2))); then exit 1; fi
exit 2
