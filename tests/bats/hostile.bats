#!/usr/bin/env bats
# A corpus of hostile values (command substitution, backticks, separators, newlines, quotes, spaces,
# '=', ',', ${...} interpolation, leading '+'/'~', very long and non-ASCII strings, ...). Each value is
# given to one variable of every type at once (path, name, int, float, enum, list, bool, addr, ids; a
# plain ',' is legitimate only inside the list types, so the corpus uses ',x' and 'x,y=1'); each
# variable must be refused by name, python3 must never run (nothing reaches an argv), and the canary
# file that several values try to create must never appear.

setup() {
  load helpers/common
  common_setup
  CORPUS=(
    "\$(touch $CANARY)"
    "\`touch $CANARY\`"
    ";touch $CANARY"
    "|touch $CANARY"
    "&& touch $CANARY"
    "1; touch $CANARY"
    "a[\$(touch $CANARY)]"
    "x"$'\n'"touch $CANARY"
    "\$((1+1))"
    'a b'
    "'single'"
    '"double"'
    'key=value'
    ',x'
    'x,y=1'
    '${HOME}'
    '${oc.env:WANDB_API_KEY}'
    '$IFS'
    '+extra.key=1'
    '~trainer.logger'
    'hydra.run.dir=/tmp'
    "$(printf 'a%.0s' {1..5000})"
    'modèle'
    '/models/模型'
    $'\tx'
    $'x\r'
    $'\e[31mred'
    $'x\x7f'
    '-rf'
    '--help'
    '*'
    '?'
    '[console,wandb]'
    '{MODEL_PATH}'
    'a\b'
    '#comment'
    '%s%n'
    '>out'
    '<in'
    '(x)'
    '!event'
    'x@y'
    "' OR 1=1 --"
  )
  TARGETS=(MODEL_PATH EXPERIMENT_NAME TRAINER_NNODES TEST_FREQ LR RESUME_MODE LOGGER ACTOR_OFFLOAD RAY_ADDRESS PATCHES_DISABLED)
}

# hostile_run RECIPE VALUE — every target variable set to VALUE; all must be refused by name.
hostile_run() {
  local r=$1 v=$2 t
  local -a envs=()
  for t in "${TARGETS[@]}"; do envs+=("VLGRPO_$t=$v"); done
  run --separate-stderr env "${envs[@]}" "$(recipe_path "$r")"
  [[ $status -eq 2 ]] || return 1
  for t in "${TARGETS[@]}"; do
    [[ $stderr == *"error: VLGRPO_$t: "* ]] || { echo "VLGRPO_$t not named" >&2; return 1; }
  done
  [[ -z $output ]] || return 1
  return 0
}

@test "the corpus has at least 30 distinct hostile values" {
  [[ $(printf '%s\0' "${CORPUS[@]}" | sort -zu | tr -cd '\0' | wc -c) -ge 30 ]]
}

@test "fully-async: every hostile value is refused for every variable type, nothing runs, no canary" {
  local v bad=()
  for v in "${CORPUS[@]}"; do
    hostile_run fa "$v" || bad+=("$(printf '%q' "${v:0:60}") (exit $status)")
  done
  ((${#bad[@]} == 0)) || fail "not refused everywhere: ${bad[*]}"
  assert_no_python
  assert_file_not_exists "$CANARY"
}

@test "veomni: every hostile value is refused for every variable type, nothing runs, no canary" {
  local v bad=()
  for v in "${CORPUS[@]}"; do
    hostile_run vo "$v" || bad+=("$(printf '%q' "${v:0:60}") (exit $status)")
  done
  ((${#bad[@]} == 0)) || fail "not refused everywhere: ${bad[*]}"
  assert_no_python
  assert_file_not_exists "$CANARY"
}

@test "hostile values as command-line arguments: each refused, nothing runs, no canary" {
  local n
  run --separate-stderr "$FA" "${CORPUS[@]}"
  assert_failure 2
  n=$(grep -c 'this entrypoint takes no arguments' <<<"$stderr")
  # --help in the corpus is a known flag, every other value is refused on its own line
  assert_equal "$n" $((${#CORPUS[@]} - 1))
  assert_no_python
  assert_file_not_exists "$CANARY"
}

@test "refused values are shown shell-quoted and cut short, so messages cannot inject terminal escapes or floods" {
  VLGRPO_EXPERIMENT_NAME=$'\e[31mred' direct fa
  assert_failure 2
  [[ $stderr != *$'\e'* ]] || fail "raw escape printed"
  [[ $stderr == *"\$'\\E[31mred'"* ]] || fail "$stderr"
  VLGRPO_EXPERIMENT_NAME=$(printf 'b%.0s' {1..5000}) direct fa
  [[ ${#stderr} -lt 600 ]] || fail "message of ${#stderr} characters"
  [[ $stderr == *"(5000 characters)"* ]]
}

@test "a hostile value in one setting does not stop the others from being checked (all problems in one go)" {
  VLGRPO_LR="\$(touch $CANARY)" VLGRPO_MODEL_PATH=';rm -rf /' VLGRPO_ROLLOUT_N='1 2' direct fa
  assert_failure 2
  [[ $(grep -c ': error: ' <<<"$stderr") -eq 3 ]] || fail "$stderr"
  assert_file_not_exists "$CANARY"
}
