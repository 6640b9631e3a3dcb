#!/usr/bin/env bats
# Edge values the hostile corpus (hostile.bats) does not reach, found by a mutation check (each
# protection weakened in a scratch copy; these tests are the ones that then failed or were missing):
# number spellings Hydra or bash arithmetic read differently, files whose *names* carry Hydra syntax
# (they exist, so only the character check stops them), over-long existing paths, and W&B key files
# that would block (FIFO) or that are huge.

setup() {
  load helpers/common
  common_setup
  export VLGRPO_DRY_RUN=1
}

# refused VAR VALUE — exit 2 naming VAR, nothing ran.
refused() {
  run --separate-stderr env "VLGRPO_$1=$2" "$HARNESS" "$FA"
  [[ $status -eq 2 ]] || fail "VLGRPO_$1=$(printf '%q' "$2"): exit $status, stderr: $stderr"
  [[ $stderr == *"error: VLGRPO_$1: "* ]] || fail "VLGRPO_$1=$(printf '%q' "$2") not named: $stderr"
  assert_no_python
}

@test "integers: leading zeros (bash reads 08 as octal and fails), signs, hex, exponents and blanks are refused" {
  local v
  for v in 08 010 00 0x10 +1 -0 1e3 1.0 ' 1' '1 ' 1_000 9999999999; do
    refused TRAINER_NNODES "$v"
  done
  for v in 05 -01 +5; do refused TEST_FREQ "$v"; done
  # the plain spellings pass
  VLGRPO_TRAINER_NNODES=4 VLGRPO_TEST_FREQ=-1 entry fa
  assert_success
  assert_line trainer.nnodes=4
  assert_line trainer.test_freq=-1
}

@test "floats: nan, inf, signs, hex floats, bare points and out-of-range spellings are refused" {
  local v
  for v in nan NaN inf -inf +1e-6 -1e-6 0x1p-3 .5 5. 1e-13 2 1e100 1e-6e1 1,5; do
    refused LR "$v"
  done
  VLGRPO_LR=5e-7 VLGRPO_GPU_MEMORY_UTILIZATION=0.9 entry fa
  assert_success
  assert_line actor_rollout_ref.actor.optim.lr=5e-7
}

@test "lists: repeated, empty, bracketed and nested elements are refused (no element can be smuggled in)" {
  local v
  for v in console,console console, ,console '[console]' 'console,[wandb]' 'console,{a:b}' 'console,wandb]' \
    "console,'x'" 'console,${oc.env:HOME}' 'Console' 'console;wandb'; do
    refused LOGGER "$v"
  done
}

@test "existing files whose names carry Hydra syntax are refused: only the character check stops them" {
  local n
  for n in 'a,b' 'a=b' 'a b' "a'b" 'a"b' '${oc.env:HOME}' '${oc.decode:1}' 'a:b' '[a]' '{a}' 'a\b' 'a$b' 'a#b' 'a@b'; do
    : >"$T/data/$n.parquet"
    refused TRAIN_FILE "$T/data/$n.parquet"
  done
  for n in '~x' '+x' '-x'; do
    : >"$T/data/$n"
  done
  (cd "$T/data" && refused TRAIN_FILE '~x' && refused TRAIN_FILE '+x' && refused TRAIN_FILE '-x')
}

@test "an existing path longer than 1024 characters is refused (very long values never reach argv)" {
  local p=$T/model a
  a=$(printf 'a%.0s' {1..200})
  while ((${#p} <= 1024)); do p+=/$a; done
  mkdir -p "$p"
  refused MODEL_PATH "$p"
  [[ $stderr == *"longer than 1024"* ]] || fail "$stderr"
}

@test "WANDB_API_KEY_FILE: a FIFO (would block the launch), a directory and a huge file are refused unseen and at once" {
  unset VLGRPO_DRY_RUN
  export WANDB_MODE=online
  mkfifo "$T/key.fifo"
  run --separate-stderr timeout 20 env WANDB_API_KEY_FILE="$T/key.fifo" "$HARNESS" "$FA"
  [[ $status -eq 2 ]] || fail "FIFO: exit $status (124 = blocked)"
  [[ $stderr == *"error: WANDB_API_KEY_FILE: "*"is not a regular file"* ]] || fail "$stderr"
  WANDB_API_KEY_FILE=$T entry fa
  assert_failure 2
  [[ $stderr == *"error: WANDB_API_KEY_FILE: "*"is not a regular file"* ]] || fail "$stderr"
  head -c 3000000 /dev/zero | tr '\0' k >"$T/huge.key"
  chmod 600 "$T/huge.key"
  WANDB_API_KEY_FILE=$T/huge.key entry fa
  assert_failure 2
  [[ $stderr == *"error: WANDB_API_KEY_FILE: the file is larger than 4 KiB (contents not shown)"* ]] || fail "$stderr"
  [[ $stderr != *kkkkkkkkkk* && $output != *kkkkkkkkkk* ]] || fail "contents shown"
  assert_no_python
}

@test "VLGRPO_RAY_ADDRESS: ports outside 1..65535 and hosts with a leading '-' or '.' are refused" {
  local v
  for v in host:0 host:65536 host:99999 host:065 -host:6379 .host:6379 host. host:6379:1 'host:6379/x' '[::1]:6379'; do
    refused RAY_ADDRESS "$v"
  done
}

@test "resume: resume_path needs a global_step_N folder, and a folder without resume_path is refused (never ignored)" {
  mkdir -p "$T/ckpt/global_step_5" "$T/ckpt/step_5"
  VLGRPO_RESUME_MODE=resume_path entry fa
  assert_failure 2
  [[ $stderr == *"error: VLGRPO_RESUME_FROM_PATH: unset, but VLGRPO_RESUME_MODE=resume_path"* ]] || fail "$stderr"
  VLGRPO_RESUME_FROM_PATH=$T/ckpt/global_step_5 entry vo
  assert_failure 2
  [[ $stderr == *"error: VLGRPO_RESUME_FROM_PATH: set, but VLGRPO_RESUME_MODE=auto ignores it"* ]] || fail "$stderr"
  VLGRPO_RESUME_MODE=resume_path VLGRPO_RESUME_FROM_PATH=$T/ckpt/step_5 entry fa
  assert_failure 2
  [[ $stderr == *"is not a global_step_N folder"* ]] || fail "$stderr"
  assert_no_python
  VLGRPO_RESUME_MODE=resume_path VLGRPO_RESUME_FROM_PATH=$T/ckpt/global_step_5 entry fa
  assert_success
  assert_line "trainer.resume_from_path=$T/ckpt/global_step_5"
}

@test "id lists: upper case (a patch id that would silently match nothing), empty items and separators are refused" {
  local v
  for v in Vision.Pos 'a,,b' ',a' 'a,' 'a;b' '_a' '.a' "$(printf 'a%.0s' {1..65})"; do
    refused PATCHES_DISABLED "$v"
  done
  VLGRPO_PATCHES_DISABLED=vision.pos_embed,moe-block entry fa
  assert_success
}

@test "a checkpoint folder the launching user cannot write is refused (a real write, run as uid 65534)" {
  local d py
  command -v setpriv >/dev/null || skip "setpriv (util-linux) not installed"
  ((EUID == 0)) || skip "needs root to switch to uid 65534"
  d=$(mktemp -d /tmp/vlgrpo-bats-ro.XXXXXX)
  chmod 755 "$d"
  mkdir -p "$d/bin" "$d/model" "$d/data" "$d/ckpt" "$d/dev" "$d/calls"
  chown 65534:65534 "$d/calls" && chmod 700 "$d/calls" # the stub log of uid 65534 (a folder every user can write fails the path rule)
  mkdir -p "$d/tmp" && chmod 1777 "$d/tmp" # a TMPDIR uid 65534 can write (the tests' own is root's)
  cp "$T/bin/python3" "$T/bin/npu-smi" "$d/bin/"
  : >"$d/data/train.parquet"
  : >"$d/data/test.parquet"
  if ! setpriv --reuid=65534 --regid=65534 --clear-groups test -r "$HARNESS" -a -r "$FA"; then
    rm -rf "$d"
    skip "uid 65534 cannot read the checkout"
  fi
  # the device counter (stdlib only) runs with the system interpreter: uid 65534 cannot run the venv's under /root
  py=$(PATH=/usr/bin:/bin command -v python3) || skip "no system python3 for uid 65534"
  # the entrypoint's own checks of typed variables (python3 -m vlgrpo.environment) run without PYTHONPATH (it is one
  # of them): the stub hands them to this interpreter, which finds the checkout's package by itself; the settings
  # step runs isolated (-I, which ignores PYTHONPATH: the images install the package), here -P -s instead
  printf '#!/bin/sh\nif [ "$1" = -I ]; then shift; set -- -P -s "$@"; fi\nPYTHONPATH=%s exec %s "$@"\n' \
    "$REPO_ROOT/python/src" "$py" >"$d/py-helper"
  chmod 755 "$d/py-helper"
  printf '%s\n' "$d/py-helper" >"$d/real-python"
  run --separate-stderr setpriv --reuid=65534 --regid=65534 --clear-groups env PATH="$d/bin:$PATH" STUB_LOG="$d/calls" \
    STUB_PYTHON="$py" PYTHONPATH="$REPO_ROOT/python/src" VLGRPO_PASS_ENV="$STUB_PASS,PYTHONPATH" \
    TMPDIR="$d/tmp" TEST_DEV_DIR="$d/dev" VLGRPO_MODEL_PATH="$d/model" VLGRPO_TRAIN_FILE="$d/data/train.parquet" \
    VLGRPO_VAL_FILE="$d/data/test.parquet" VLGRPO_CHECKPOINT_DIR="$d/ckpt" "$HARNESS" "$FA"
  rm -rf "$d"
  assert_failure 2
  [[ $stderr == *"error: VLGRPO_CHECKPOINT_DIR: $d/ckpt is not writable by uid 65534"* ]] || fail "$stderr"
}
