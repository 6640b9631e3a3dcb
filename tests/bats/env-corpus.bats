#!/usr/bin/env bats
# The corpus of fixtures/env-corpus.txt: variables of the pinned Ray, verl, vLLM, vLLM-Ascend, torch, triton,
# transformers, huggingface_hub, NCCL, W&B, glibc, bash and Python that load code, open or write files, or
# change addresses, each with a canary value (the file names where each is read). Each must be refused (exit 2,
# named) or never reach a child: with all of them set the launch is refused naming some; with the others set
# it runs, and no child's environment (preflight, verl, ray start) holds a canary.

setup() {
  load helpers/common
  common_setup
  CORPUS=()
  local name value effect where
  while IFS='|' read -r name value effect where; do
    [[ -z $name || $name == '#'* ]] && continue
    [[ -n $where && $effect =~ ^(code|file|address)$ ]] || fail "corpus row $name lacks its effect or source"
    CORPUS+=("$name=$value")
  done <"$REPO_ROOT/tests/bats/fixtures/env-corpus.txt"
}

# no_canary_in_children — no recorded call got a variable whose value holds "canary"
no_canary_in_children() {
  local f
  for f in "$STUB_LOG"/*.environ; do
    ! tr '\0' '\n' <"$f" | grep -q canary || fail "${f##*/}: $(tr '\0' '\n' <"$f" | grep canary)"
  done
}

@test "the corpus has at least 40 variables from the pinned sources" {
  [[ ${#CORPUS[@]} -ge 40 ]] || fail "only ${#CORPUS[@]}"
}

@test "recipes: every corpus variable is refused or never reaches a child" {
  local e refused=() rest=() name
  # the entrypoint files themselves (#!/bin/bash -p): the test harness is a plain bash, which would itself obey
  # SHELLOPTS=xtrace or BASH_ENV from the corpus
  run --separate-stderr env "${CORPUS[@]}" "$FA"
  assert_failure 2
  assert_no_python
  for e in "${CORPUS[@]}"; do
    name=${e%%=*}
    if [[ $stderr == *"error: $name: "* ]]; then refused+=("$name"); else rest+=("$e"); fi
  done
  echo "refused: ${refused[*]}" >&3
  # every refusal names the variable and never shows the value (the dynamic loader's own complaints about
  # LD_PRELOAD / LD_AUDIT come from the test's bash and env, which get the corpus, not from the entrypoint)
  ! grep -v '^ERROR: ld.so: ' <<<"$stderr" | grep -q canary || fail "a value was shown: $stderr"
  # the rest: the launch runs (the preflight and verl start) and no child got a canary
  # (the harness for the rest: none of the variables a plain bash obeys is left, all were refused above)
  run --separate-stderr env "${rest[@]}" "$HARNESS" "$VO"
  assert_success
  [[ $(calls) == *python3*python3* ]] || fail "no preflight and launch: $(calls)"
  no_canary_in_children
  echo "dropped: ${rest[*]%%=*}" >&3
  ((${#refused[@]} + ${#rest[@]} == ${#CORPUS[@]}))
  ((${#refused[@]} > 0 && ${#rest[@]} > 0))
}

@test "ray-node.sh: every corpus variable is refused or never reaches ray start" {
  local e rest=() name
  unset VLGRPO_MODEL_PATH VLGRPO_TRAIN_FILE VLGRPO_VAL_FILE VLGRPO_CHECKPOINT_DIR
  export HCCL_SOCKET_IFNAME=lo GLOO_SOCKET_IFNAME=lo VLGRPO_RAY_CARDS_WAIT=0
  run --separate-stderr env "${CORPUS[@]}" "$REPO_ROOT/entrypoints/ray-node.sh" head
  assert_failure 2
  for e in "${CORPUS[@]}"; do
    name=${e%%=*}
    [[ $stderr == *"error: $name: "* ]] || rest+=("$e")
  done
  ! grep -v '^ERROR: ld.so: ' <<<"$stderr" | grep -q canary || fail "a value was shown"
  run --separate-stderr env "${rest[@]}" "$HARNESS" "$REPO_ROOT/entrypoints/ray-node.sh" head
  [[ $(calls | tail -n 1) == *.ray ]] || fail "ray start did not run: $(calls) $stderr"
  no_canary_in_children
}
