# shellcheck shell=bash
# shellcheck disable=SC2034,SC2154  # variables set here are read by the .bats files; $output is set by bats' run
# Shared set-up for the entrypoint suites: recording stubs first on PATH, a clean VLGRPO_ environment,
# a model folder, data files and a checkpoint folder in the test's temp dir, and run helpers.
bats_require_minimum_version 1.5.0
bats_load_library bats-support
bats_load_library bats-assert
bats_load_library bats-file

REPO_ROOT=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)
FA=$REPO_ROOT/entrypoints/fully-async-grpo.sh
VO=$REPO_ROOT/entrypoints/veomni-grpo.sh
HARNESS=$REPO_ROOT/tests/bats/helpers/run-entry.sh

# common_setup [STUB...] — stubs default to python3 ray npu-smi (not nvidia-smi: auto-detection would
# otherwise see both platforms).
common_setup() {
  local v s
  local -a stubs=("$@")
  ((${#stubs[@]})) || stubs=(python3 ray npu-smi)
  while IFS= read -r v; do
    case $v in VLGRPO_* | WANDB_* | STUB_* | TEST_*) unset "$v" ;; esac
  done < <(compgen -e)
  unset CUDA_VISIBLE_DEVICES ASCEND_RT_VISIBLE_DEVICES RAY_ADDRESS
  # bats exports its own helper function; the entrypoints refuse exported functions (vlgrpo.launch.childenv)
  while IFS= read -r v; do export -fn "${v##* }"; done < <(declare -Fx)
  T=$BATS_TEST_TMPDIR
  mkdir -p "$T/bin" "$T/model" "$T/data" "$T/ckpt" "$T/dev" "$T/calls"
  # the launch's private working directory (mktemp -d under TMPDIR) stays after an exec'd stub verl: keep it in
  # bats' folder of this file (removed by bats), not under $T, which some tests mount as the checkpoint volume
  mkdir -p "$BATS_FILE_TMPDIR/tmp"
  export TMPDIR=$BATS_FILE_TMPDIR/tmp
  # Copies, not symlinks: a test that writes its own scripted stub over $T/bin/NAME must not write
  # through a link into the repository.
  for s in "${stubs[@]}"; do cp "$REPO_ROOT/tests/bats/stubs/recorder" "$T/bin/$s"; done
  export PATH="$T/bin:$PATH" STUB_LOG=$T/calls TEST_DEV_DIR=$T/dev STUB_PYTHON=$REPO_ROOT/.venv/bin/python
  : >"$T/model/config.json"
  : >"$T/data/train.parquet"
  : >"$T/data/test.parquet"
  export VLGRPO_MODEL_PATH=$T/model VLGRPO_TRAIN_FILE=$T/data/train.parquet VLGRPO_VAL_FILE=$T/data/test.parquet
  export VLGRPO_CHECKPOINT_DIR=$T/ckpt VLGRPO_PLATFORM=npu
  export STUB_NPU_COUNT=16 STUB_GPU_COUNT=16 WANDB_MODE=offline
  # the stubs read their STUB_* settings from the environment they get, which the entrypoints build from the
  # registry: the tests name them the way a user names a variable the launch must pass
  STUB_PASS=STUB_LOG,STUB_PYTHON,STUB_PREFLIGHT_RC,STUB_CLUSTER_WAIT_RC,STUB_CLUSTER_PROBE_RC,STUB_PYTHON3_RC,STUB_NPU_COUNT,STUB_NPU_CHIPS,STUB_GPU_COUNT
  export VLGRPO_PASS_ENV=$STUB_PASS
  # the interpreter the python3 stub hands `-m vlgrpo.environment` (the Ray job config check) to
  printf '%s\n' "$REPO_ROOT/.venv/bin/python" >"$T/real-python"
  CANARY=$T/canary
}

# entry fa|vo [WORD...] — run a recipe through the hook harness (not a container, /dev hook = $T/dev).
entry() {
  local which=$1
  shift
  run --separate-stderr "$HARNESS" "$(recipe_path "$which")" "$@"
}

# direct fa|vo [WORD...] — run the real entrypoint file as a user would (no hooks at all).
direct() {
  local which=$1
  shift
  run --separate-stderr "$(recipe_path "$which")" "$@"
}

recipe_path() {
  case $1 in
    fa) printf '%s' "$FA" ;;
    vo) printf '%s' "$VO" ;;
    *) fail "unknown recipe $1" ;;
  esac
}

# calls — the recorded stub calls, in order (file names NNNN.<stub>); the Ray job config check the python3 stub
# hands to the real interpreter (helper-NNNN.python3) is not one.
calls() {
  find "$STUB_LOG" -maxdepth 1 -type f -name '[0-9][0-9][0-9][0-9].*' ! -name '*.*.*' ! -name '*.python3-helper' -printf '%f\n' | sort
}

# call_environ N — the environment the N-th recorded call got, one NAME=VALUE per line (values with newlines
# are shown with $'...' quoting of the whole entry).
call_environ() {
  local f
  f=$(calls | sed -n "$(($1 + 1))p")
  [[ -n $f ]] || fail "no recorded call number $1"
  tr '\0' '\n' <"$STUB_LOG/$f.environ"
}

# call_env_names N — the sorted variable names the N-th recorded call got, without the tests' own STUB_* names.
call_env_names() {
  local f
  f=$(calls | sed -n "$(($1 + 1))p")
  [[ -n $f ]] || fail "no recorded call number $1"
  tr '\0' '\n' <"$STUB_LOG/$f.environ" | sed -n 's/^\([^=]*\)=.*/\1/p' | grep -v '^STUB_' | LC_ALL=C sort
}

# pass_env NAME,... — VLGRPO_PASS_ENV with these names as well as the stubs' own.
pass_env() {
  export VLGRPO_PASS_ENV=$STUB_PASS${1:+,$1}
}

# call_argv N — argv of the N-th recorded call (0-based).
call_argv() {
  local f
  f=$(calls | sed -n "$(($1 + 1))p")
  [[ -n $f ]] || fail "no recorded call number $1"
  cat "$STUB_LOG/$f"
}

# plan_argv — the argv lines of a dry run's stdout ($output), without the '# ' plan lines.
plan_argv() {
  grep -v '^# ' <<<"$output" || true
}

# expected_defaults fa|vo — the reviewed default argv (tests/bats/fixtures/<recipe>-defaults.argv) with
# @T@ replaced by the test's temp dir.
expected_defaults() {
  sed "s#@T@#$T#g" "$REPO_ROOT/tests/bats/fixtures/$1-defaults.argv"
}

# setting_names fa|vo — the declared setting names of a recipe (the launcher's reading of the registry).
setting_names() {
  "$REPO_ROOT/.venv/bin/python" -I -m vlgrpo.launch docs rows "$1" | cut -f1
}

# assert_no_python — python3 never ran (no preflight, no cluster check, no launch).
assert_no_python() {
  local c
  c=$(calls)
  [[ $c != *python3* ]] || fail "expected no python3 call, got: $c"
}

# add_stub NAME — one more recording stub on PATH for this test.
add_stub() {
  cp "$REPO_ROOT/tests/bats/stubs/recorder" "$T/bin/$1"
}
