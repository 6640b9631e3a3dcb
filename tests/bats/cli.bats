#!/usr/bin/env bats
# The command line and the environment surface of the real entrypoint files: --help equals the README
# table, positional arguments and Hydra overrides are refused, unknown VLGRPO_ variables are refused
# with the nearest known name, and the files follow the hardening rules.

setup() {
  load helpers/common
  common_setup
}

# readme_region NAME — the lines between the README's generated-region markers.
readme_region() {
  awk -v b="<!-- BEGIN GENERATED: $1 -->" -v e="<!-- END GENERATED: $1 -->" \
    '$0 == e { inside = 0 } inside { print } $0 == b { inside = 1 }' "$REPO_ROOT/README.md"
}

@test "--help of each recipe appears verbatim in the README's settings region (drift test)" {
  local region fa_help vo_help
  region=$(readme_region settings)
  [[ -n $region ]] || fail "README.md has no settings region"
  direct fa --help
  assert_success
  fa_help=$output
  direct vo --help
  assert_success
  vo_help=$output
  [[ $region == *"$fa_help"* ]] || fail "README settings region differs from fully-async-grpo.sh --help; run make docs-settings"
  [[ $region == *"$vo_help"* ]] || fail "README settings region differs from veomni-grpo.sh --help; run make docs-settings"
  # and the region holds nothing but the two tables and their one-paragraph introduction
  [[ $(wc -l <<<"$region") -eq $(($(wc -l <<<"$fa_help") + $(wc -l <<<"$vo_help") + 5)) ]] || fail "extra text in the region"
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
  for f in "$FA" "$VO" "$REPO_ROOT"/entrypoints/lib/*.sh; do
    ! grep -nE '"\$@"|\$\*|\$\{@|\beval\b' "$f" || fail "$f"
    # lib/ only, and the image's own CANN environment file at its fixed (readonly) path
    ! grep -nE '^\s*(source|\.)\s' "$f" | grep -v 'lib/\|VG_LIB_DIR' | grep -vx '[0-9]*:    source "$VG_IMAGE_BASH_ENV"' || fail "$f sources something else"
  done
  grep -qx 'readonly VG_IMAGE_BASH_ENV=/opt/vlgrpo/image/cann-env.sh' "$REPO_ROOT/entrypoints/lib/environment.sh"
  command -v shellcheck >/dev/null || skip "shellcheck not installed (make tools)"
  cd "$REPO_ROOT" # source= directives are relative to the repository root
  run shellcheck -x entrypoints/fully-async-grpo.sh entrypoints/veomni-grpo.sh entrypoints/lib/*.sh
  assert_success
}

@test "sourcing an entrypoint runs nothing (the guard), so its functions can be tested" {
  run bash -c 'source "$1"; echo sourced; declare -F vg_entry' _ "$FA"
  assert_success
  assert_output $'sourced\nvg_entry'
  assert_no_python
}

@test "ray-node.sh's own variables are accepted and ignored by the recipes; the sibling list matches its declarations" {
  local rn=$REPO_ROOT/entrypoints/ray-node.sh theirs ours shared
  [[ -f $rn ]] || skip "entrypoints/ray-node.sh not present"
  theirs=$(bash -c 'source "$1"; ray_node_declare; printf "%s\n" "${VG_NAMES[@]}"' _ "$rn" | sort)
  shared=$( (setting_names fa; setting_names vo) | sort -u)
  ours=$(bash -c 'source "$1"; printf "%s\n" "${!VG_SIBLING[@]}"' _ "$FA" | sort)
  assert_equal "$ours" "$(comm -23 <(printf '%s\n' "$theirs") <(printf '%s\n' "$shared"))"
  VLGRPO_RAY_HEAD=10.0.0.1:6379 VLGRPO_RAY_NODE_IP=10.0.0.2 VLGRPO_DRY_RUN=1 entry fa
  assert_success
  assert_equal "$(plan_argv)" "$(expected_defaults fa)"
}
