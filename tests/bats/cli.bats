#!/usr/bin/env bats
# The command line and the environment surface of the real entrypoint files: --help equals the README
# table, positional arguments and Hydra overrides are refused, unknown VLGRPO_ variables are refused
# with the nearest known name, and the files follow the hardening rules.

setup() {
  load helpers/common
  common_setup
}

@test "--help of each entrypoint is in docs/settings.md verbatim; it, the README summary and the env example equal the registry" {
  local doc fa_help vo_help rn_help
  doc=$(cat "$REPO_ROOT/docs/settings.md")
  direct fa --help
  assert_success
  fa_help=$output
  direct vo --help
  assert_success
  vo_help=$output
  run --separate-stderr "$REPO_ROOT/entrypoints/ray-node.sh" --help
  assert_success
  rn_help=$output
  [[ $doc == *"$fa_help"* ]] || fail "docs/settings.md differs from fully-async-grpo.sh --help; run make docs-settings"
  [[ $doc == *"$vo_help"* ]] || fail "docs/settings.md differs from veomni-grpo.sh --help; run make docs-settings"
  [[ $doc == *"$rn_help"* ]] || fail "docs/settings.md differs from ray-node.sh --help; run make docs-settings"
  run "$REPO_ROOT/scripts/gen-docs" --check
  assert_success
  # the env file template names exactly the recipes' settings of the registry
  assert_equal "$(grep -o '^#VLGRPO_[A-Z0-9_]*' "$REPO_ROOT/docker/vlgrpo.env.example" | cut -c2- | sort)" \
    "$(awk -F'\t' '$3 == "setting" && ($2 ~ /(^|,)(fa|vo)(,|$)/) {print $1}' "$REPO_ROOT/python/src/vlgrpo/environment.tsv" | sort -u)"
}

@test "--help lists every declared setting once, with type, allowed values, default, keys and meaning" {
  local name
  direct fa -h
  assert_success
  while IFS= read -r name; do
    run grep -c "^| \`VLGRPO_$name\` | " <<<"$output"
    [[ $output == 1 ]] || fail "VLGRPO_$name listed $output times"
    direct fa --help
  done < <(setting_names fa)
  assert_line '| `VLGRPO_MAX_RESPONSE_LENGTH` | int | 1..1048576 | `8192` | `data.max_response_length`, `+reward_model.reward_kwargs.max_resp_len` | response token budget |'
  direct vo --help
  assert_line --partial '| `VLGRPO_MAX_MODEL_LEN` | int | 1..1048576 | `4096` | `actor_rollout_ref.rollout.max_model_len`, `+actor_rollout_ref.rollout.engine_kwargs.vllm.max_model_len` |'
}

@test "--help works with a broken environment and starts nothing" {
  VLGRPO_BOGUS='$(touch '"$CANARY"')' VLGRPO_LR=x direct fa --help
  assert_success
  assert_no_python
  assert_file_not_exists "$CANARY"
}

@test "positional arguments and Hydra overrides are refused with the allowed arguments listed" {
  local a
  for a in data.trust_remote_code=True +reward.reward_manager._target_=os.system train foo.yaml -- --config-name=x '$(id)'; do
    direct fa "$a"
    [[ $status -eq 2 ]] || fail "argument $a: exit $status"
    [[ $stderr == *"this entrypoint takes no arguments or Hydra overrides; fix: use only --help or --dry-run"* ]] || fail "argument $a: $stderr"
    assert_no_python
  done
  direct vo --dry-run actor_rollout_ref.rollout.n=16
  assert_failure 2
  direct vo --help extra
  assert_failure 2
}

@test "unknown VLGRPO_ variables are refused, naming the nearest known one" {
  VLGRPO_MODLE_PATH=/x direct fa
  assert_failure 2
  [[ $stderr == *"VLGRPO_MODLE_PATH: not a setting of fully-async-grpo.sh (unknown VLGRPO_ variable); fix: unset it, or did you mean VLGRPO_MODEL_PATH?"* ]] || fail "$stderr"
  VLGRPO_TRAINER_NNODE=2 direct vo
  assert_failure 2
  [[ $stderr == *"VLGRPO_TRAINER_NNODE: not a setting of veomni-grpo.sh"*"did you mean VLGRPO_TRAINER_NNODES?"* ]] || fail "$stderr"
  # a setting of the other recipe is named as such
  VLGRPO_ROLLOUT_NNODES=2 direct vo
  assert_failure 2
  [[ $stderr == *"VLGRPO_ROLLOUT_NNODES: a setting of fully-async-grpo.sh, not of veomni-grpo.sh; fix: unset it for this recipe"* ]] || fail "$stderr"
  VLGRPO_EP_SIZE=2 direct fa
  assert_failure 2
  [[ $stderr == *"VLGRPO_EP_SIZE: a setting of veomni-grpo.sh, not of fully-async-grpo.sh"* ]] || fail "$stderr"
  VLGRPO_TRUST_REMOTE_CODE=True direct fa
  assert_failure 2
  [[ $stderr == *"VLGRPO_TRUST_REMOTE_CODE: not a setting"* ]]
  VLGRPO_PROBE_DEVICE_MODULE=os direct fa
  assert_failure 2
  VLGRPO_X=1 direct vo
  assert_failure 2
  [[ $stderr == *"VLGRPO_X: not a setting"* && $stderr != *"did you mean"* ]] || fail "$stderr"
  assert_no_python
}

@test "the entrypoints and lib/ hold no \"\$@\", \$*, eval or source of anything but lib/ and run shellcheck-clean" {
  local f
  for f in "$FA" "$VO" "$REPO_ROOT/entrypoints/doctor.sh" "$REPO_ROOT/entrypoints/ray-node.sh" "$REPO_ROOT"/entrypoints/lib/*.sh; do
    # the words reach the launcher only, which refuses all but --help and --dry-run: the shims' call and its exec
    ! grep -nE '"\$@"|\$\*|\$\{@|\beval\b' "$f" |
      grep -vxE '[0-9]+:if \[\[ \$\{BASH_SOURCE\[0\]\} == "\$0" \]\]; then vg_shim (fully-async-grpo|veomni-grpo|doctor|ray-node) "\$@"; fi' |
      grep -vxE '[0-9]+:  exec -c "\$py" -I -m vlgrpo\.launch entry "\$name" --lib "\$VG_SHIM_LIB" "\$\{from\[@\]\}" -- "\$@" .*' || fail "$f"
    # lib/ only (the image's own CANN environment file is sourced by the launcher, from its fixed path)
    ! grep -nE '^\s*(source|\.)\s' "$f" | grep -v 'lib/' || fail "$f sources something else"
  done
  grep -qx 'IMAGE_BASH_ENV = "/opt/vlgrpo/image/cann-env.sh"' "$REPO_ROOT/python/src/vlgrpo/launch/entry.py"
  command -v shellcheck >/dev/null || skip "shellcheck not installed (make tools)"
  cd "$REPO_ROOT" # source= directives are relative to the repository root
  run shellcheck -x entrypoints/*.sh entrypoints/lib/*.sh
  assert_success
}

@test "sourcing an entrypoint runs nothing (the guard), so its functions can be tested" {
  run bash -c 'source "$1"; echo sourced; declare -F vg_shim' _ "$FA"
  assert_success
  assert_output $'sourced\nvg_shim'
  assert_no_python
}

@test "ray-node.sh's own variables are accepted and ignored by the recipes, and the recipes' by ray-node.sh (registry owners)" {
  local rn=$REPO_ROOT/entrypoints/ray-node.sh node_only
  [[ -f $rn ]] || skip "entrypoints/ray-node.sh not present"
  # the settings only ray-node.sh owns, straight from the registry file
  node_only=$(awk -F'\t' '$3 == "setting" && $2 == "node" {print $1}' "$REPO_ROOT/python/src/vlgrpo/environment.tsv")
  [[ $node_only == *VLGRPO_RAY_HEAD* && $node_only == *VLGRPO_RAY_STOP_GRACE* ]] || fail "registry: $node_only"
  VLGRPO_RAY_HEAD=10.0.0.1:6379 VLGRPO_RAY_NODE_IP=10.0.0.2 VLGRPO_RAY_STOP_GRACE=5 VLGRPO_DRY_RUN=1 entry fa
  assert_success
  assert_equal "$(plan_argv)" "$(expected_defaults fa)"
  VLGRPO_RAY_HEAD=x:0 VLGRPO_DRY_RUN=1 entry vo
  assert_success
}

@test "a new setting is one registry row: --help lists it, its type is enforced (the image layout: registry and recipes in lib/)" {
  cp -r "$REPO_ROOT/entrypoints" "$T/entrypoints"
  cp "$REPO_ROOT/python/src/vlgrpo/environment.tsv" "$T/entrypoints/lib/environment.tsv"
  cp -r "$REPO_ROOT/python/src/vlgrpo/recipes" "$T/entrypoints/lib/recipes"
  printf 'VLGRPO_NEW_KNOB\tfa\tsetting\tint\t1..8\t3\t-\ta knob added by one row\t-\n' >>"$T/entrypoints/lib/environment.tsv"
  run --separate-stderr "$T/entrypoints/fully-async-grpo.sh" --help
  assert_success
  assert_line '| `VLGRPO_NEW_KNOB` | int | 1..8 | `3` | — | a knob added by one row |'
  run --separate-stderr env VLGRPO_NEW_KNOB=9 "$HARNESS" "$T/entrypoints/fully-async-grpo.sh" --dry-run
  assert_failure 2
  [[ $stderr == *"error: VLGRPO_NEW_KNOB: 9 is not an integer in 1..8"* ]] || fail "$stderr"
  # the other recipe refuses it as a setting of fully-async-grpo.sh
  run --separate-stderr env VLGRPO_NEW_KNOB=2 "$HARNESS" "$T/entrypoints/veomni-grpo.sh" --dry-run
  assert_failure 2
  [[ $stderr == *"error: VLGRPO_NEW_KNOB: a setting of fully-async-grpo.sh, not of veomni-grpo.sh"* ]] || fail "$stderr"
}

@test "review A4: an entrypoint started by a relative path does what the same file by its absolute path does" {
  local rel plan
  entry fa --dry-run
  assert_success
  plan=$output
  # the shim hands the launcher its own folder as the entrypoint was named: entrypoints/lib, ./lib
  for rel in entrypoints/fully-async-grpo.sh ./entrypoints/fully-async-grpo.sh; do
    run --separate-stderr bash -c 'cd "$1" && TEST_LIB_AS_GIVEN=1 exec "$2" "$3" --dry-run' _ "$REPO_ROOT" "$HARNESS" "$rel"
    assert_success
    [[ $stderr != *"internal error"* && $stderr != *Traceback* ]] || fail "$stderr"
    # the same plan but for the private working folder's random name (and the harness's own TEST_ name dropped)
    assert_equal "$(grep -v '^# dropped' <<<"$output" | sed 's/vlgrpo-run\.[A-Za-z0-9_]*/W/g')" \
      "$(grep -v '^# dropped' <<<"$plan" | sed 's/vlgrpo-run\.[A-Za-z0-9_]*/W/g')"
  done
  run --separate-stderr bash -c 'cd "$1/entrypoints" && TEST_LIB_AS_GIVEN=1 exec "$2" ./veomni-grpo.sh --dry-run' _ "$REPO_ROOT" "$HARNESS"
  assert_success
  assert_line --partial 'verl.trainer.main_ppo'
}
