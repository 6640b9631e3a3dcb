# shellcheck shell=bash
# vlgrpo entrypoint mechanics: cross-field checks both recipes share. Each records problems with
# vg_problem; arguments are validated integers.

# vg_check_lengths PROMPT RESPONSE [MAX_MODEL_LEN] — field case B09(a): with max_model_len below
# prompt + response verl does not fail, it clamps each request's max_tokens, so long answers are cut.
vg_check_lengths() {
  local p=$1 r=$2 mml=${3-}
  [[ -n $mml ]] || return 0
  if ((mml < p + r)); then
    vg_problem VLGRPO_MAX_MODEL_LEN "$mml is below max prompt + max response = $p + $r = $((p + r)); verl would silently clamp responses" \
      "set VLGRPO_MAX_MODEL_LEN to at least $((p + r)), or lower VLGRPO_MAX_PROMPT_LENGTH / VLGRPO_MAX_RESPONSE_LENGTH"
  fi
  return 0
}

# vg_check_rollout_layout TP DP EP NNODES PER_NODE — a vLLM replica (TP x DP devices) must fit the
# rollout devices evenly and either sit inside one node or span whole nodes (verl RolloutReplica);
# expert parallel is 1 or TP x DP (verl RolloutConfig asserts this).
vg_check_rollout_layout() {
  local tp=$1 dp=$2 ep=$3 nn=$4 pn=$5
  local rep=$((tp * dp)) world=$((nn * pn))
  if ((world % rep != 0)); then
    vg_problem VLGRPO_ROLLOUT_TP "a vLLM replica of TP x DP = $tp x $dp = $rep devices does not divide the $world rollout devices ($nn x $pn)" \
      "choose the rollout TP (and DP) so that TP x DP divides $world"
  elif ((pn % rep != 0 && rep % pn != 0)); then
    vg_problem VLGRPO_ROLLOUT_TP "a vLLM replica of $rep devices neither fits a node of $pn nor spans whole nodes" \
      "choose TP x DP dividing $pn or a multiple of it"
  fi
  if ((ep != 1 && ep != rep)); then
    vg_problem VLGRPO_ROLLOUT_EP "$ep must be 1 or rollout TP x DP = $rep (verl asserts expert_parallel_size == TP x DP)" \
      "set VLGRPO_ROLLOUT_EP=1 or $rep"
  fi
  return 0
}

# vg_check_resume — resume_path needs a global_step_N folder (verl asserts the name), and a path given
# without that mode would be ignored silently.
vg_check_resume() {
  local mode=${VG_VAL[RESUME_MODE]} path=${VG_VAL[RESUME_FROM_PATH]}
  if [[ $mode == resume_path && -z $path ]]; then
    vg_problem VLGRPO_RESUME_FROM_PATH "unset, but VLGRPO_RESUME_MODE=resume_path" \
      "set it to a checkpoint folder .../global_step_N, or use VLGRPO_RESUME_MODE=auto"
  elif [[ $mode != resume_path && -n $path ]]; then
    vg_problem VLGRPO_RESUME_FROM_PATH "set, but VLGRPO_RESUME_MODE=$mode ignores it" \
      "set VLGRPO_RESUME_MODE=resume_path, or unset VLGRPO_RESUME_FROM_PATH"
  elif [[ -n $path && ${path##*/} != global_step_* ]]; then
    vg_problem VLGRPO_RESUME_FROM_PATH "$path is not a global_step_N folder (verl requires that name)" \
      "point it at .../global_step_N inside the checkpoint folder"
  fi
  return 0
}
