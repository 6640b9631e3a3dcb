#!/usr/bin/env bats
# Every allowlisted variable of both recipes: one accepted value (exactly the expected argv elements
# change) and one refused value (exit 2, the variable named, nothing started). The values live in
# fixtures/settings-values.txt; a declared setting without a row fails the coverage test.

setup() {
  load helpers/common
  common_setup python3 ray npu-smi nvidia-smi
  mkdir -p "$T/model2" "$T/ckpt2" "$T/ckpt/global_step_5" "$T/cache"
  : >"$T/model2/config.json"
  : >"$T/data/train2.parquet"
  : >"$T/data/test2.parquet"
  printf 'actor_rollout_ref.actor.optim.lr_warmup_steps_ratio: 0.1\n' >"$T/overrides.yaml"
  export VLGRPO_DRY_RUN=1
}

# rows RECIPE — the table rows of one recipe, @T@ replaced.
rows() {
  grep "^$1|" "$REPO_ROOT/tests/bats/fixtures/settings-values.txt" | sed "s#@T@#$T#g; s#@STUB@#$STUB_PASS#g"
}

@test "every declared setting of both recipes has an accepted and a refused value in the table" {
  local r name missing=()
  for r in fa vo; do
    while IFS= read -r name; do
      rows "$r" | grep -q "^$r|$name|" || missing+=("$r:$name")
    done < <(setting_names "$r")
    [[ $(setting_names "$r" | wc -l) -ge 30 ]] || fail "$r declares suspiciously few settings"
  done
  ((${#missing[@]} == 0)) || fail "settings without test values: ${missing[*]}"
}

# run_with RECIPE VAR=VALUE [VAR=VALUE] — entry with the variables set, then restored.
run_with() {
  local r=$1 a b old_a old_b
  a=${2%%=*} b=${3%%=*}
  old_a=${!a-__unset__}
  [[ -n $b ]] && old_b=${!b-__unset__}
  export "${2?}"
  [[ -n $b ]] && export "${3?}"
  entry "$r"
  if [[ $old_a == __unset__ ]]; then unset "$a"; else export "$a=$old_a"; fi
  if [[ -n $b ]]; then
    if [[ $old_b == __unset__ ]]; then unset "$b"; else export "$b=$old_b"; fi
  fi
  return 0
}

# check_accepted RECIPE — run every accepted value; the argv must differ from the reviewed defaults in
# exactly the expected elements.
check_accepted() {
  local r=$1 recipe var acc exp ref extra failures=() added want removed line key
  while IFS='|' read -r recipe var acc exp ref extra; do
    rm -rf "${STUB_LOG:?}"/*
    run_with "$r" "VLGRPO_$var=$acc" "$extra"
    if [[ $status -ne 0 ]]; then failures+=("$var=$acc: exit $status: $stderr"); continue; fi
    added=$(comm -13 <(expected_defaults "$r" | sort) <(plan_argv | sort))
    removed=$(comm -23 <(expected_defaults "$r" | sort) <(plan_argv | sort))
    if [[ $exp == - ]]; then want=""; else want=$(tr ';' '\n' <<<"$exp" | sort); fi
    if [[ $added != "$want" ]]; then
      failures+=("$var=$acc: changed elements [$added] expected [$want]")
      continue
    fi
    while IFS= read -r line; do
      [[ -n $line ]] || continue
      key=${line%%=*}
      grep -q "^${key//+/\\+}=" <<<"$want" || failures+=("$var=$acc: element $line changed unexpectedly")
    done <<<"$removed"
  done < <(rows "$r")
  ((${#failures[@]} == 0)) || fail "$(printf '%s\n' "${failures[@]}")"
}

# check_refused RECIPE — every refused value: exit 2, its variable named, python3 never called (no
# preflight, no launch), no plan.
check_refused() {
  local r=$1 recipe var acc exp ref extra failures=()
  while IFS='|' read -r recipe var acc exp ref extra; do
    rm -rf "${STUB_LOG:?}"/*
    run_with "$r" "VLGRPO_$var=$ref" "$extra"
    if [[ $status -ne 2 ]]; then failures+=("$var=$ref: exit $status, expected 2"); continue; fi
    [[ $stderr == *"VLGRPO_$var"* ]] || failures+=("$var=$ref: message does not name VLGRPO_$var: $stderr")
    [[ -z $output ]] || failures+=("$var=$ref: printed a plan")
    ! calls | grep -q python3 || failures+=("$var=$ref: python3 ran: $(calls)")
  done < <(rows "$r")
  ((${#failures[@]} == 0)) || fail "$(printf '%s\n' "${failures[@]}")"
}

@test "fully-async: each accepted value changes exactly its Hydra keys" {
  check_accepted fa
}

@test "fully-async: each refused value exits 2 naming the variable, nothing started" {
  check_refused fa
}

@test "veomni: each accepted value changes exactly its Hydra keys" {
  check_accepted vo
}

@test "veomni: each refused value exits 2 naming the variable, nothing started" {
  check_refused vo
}
