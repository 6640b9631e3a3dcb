# shellcheck shell=bash disable=SC2153 # (VG_OWNER and VG_OWNERS are set by lib/registry.sh)
# vlgrpo entrypoint mechanics: the environment of every child, built from the registry, not inherited.
#
# The entrypoints run as `#!/bin/bash -p`: privileged mode makes this bash ignore BASH_ENV, ENV, SHELLOPTS,
# BASHOPTS and functions exported in the environment (BASH_FUNC_name%%), which otherwise act before the first
# line of the script. The fixed path /bin/bash also keeps PATH from choosing the shell.
#
# Every child of the launch (the preflight, the cluster tool, verl, `ray start`, and the short commands the
# checks run) gets an environment made from the registry (python/src/vlgrpo/environment.tsv, lib/registry.sh):
#   - the inherited variables whose row is `pass` (checked by their type where one is given), those whose row
#     is `pass-on-request` or that have no row, when VLGRPO_PASS_ENV names them, and the VLGRPO_* settings a
#     Python reader owns (the patch switches);
#   - the values the entrypoint sets (`set` rows: PYTHONSAFEPATH=1, PYTHONNOUSERSITE=1, RAY_ADDRESS, ...), and
#     what the image's own CANN file (BASH_ENV=/opt/vlgrpo/image/cann-env.sh) exports when it is sourced after
#     the environment was built.
# The rules are Python's (python/src/vlgrpo/launch/childenv.py, asked once per launch through the launcher of
# lib/settings.sh); this file sends the environment and applies the answer.
# Everything else is dropped (listed by name in the dry-run plan, values never shown): valid names are
# un-exported in this shell (`export -n`), names bash cannot hold are removed with `env -u` in front of each
# child (vg_child). A variable whose row is `refused` (it makes a process import or run what its value names,
# or cannot be made safe) stops the launch with exit 2 while it is non-empty, whatever VLGRPO_PASS_ENV says;
# `drop` rows can never be passed.
#
# Shell variables bash itself takes from the environment and that change how this script runs are cleared
# here, when the library is sourced and before any function runs (not refused: TMOUT is often exported by
# login profiles): TMOUT (a read timeout: a `while read` loop over the environment would end early and skip
# checks), BASH_COMPAT (compatibility level 31 changes regular expressions), FUNCNEST (aborts the checks
# half-way), EXECIGNORE (hides programs from the PATH search), POSIXLY_CORRECT (posix mode: different
# builtins and expansions than the ones tested).
unset TMOUT BASH_COMPAT FUNCNEST EXECIGNORE POSIXLY_CORRECT
set +o posix

# Test hook (like those of lib/node.sh): VG_ENVIRON_FILE is a plain shell variable, never read from the
# environment.
VG_ENVIRON_FILE=/proc/$$/environ
readonly VG_IMAGE_BASH_ENV=/opt/vlgrpo/image/cann-env.sh

VG_ENV_PASSED=()     # inherited names the children get
VG_ENV_REQUESTED=()  # of those, the ones only VLGRPO_PASS_ENV let through
VG_ENV_DROPPED=()    # inherited names dropped (settings read here are not listed)
VG_ENV_ODD=()        # dropped names that are not shell identifiers (removed with env -u)
VG_ENV_UNSET_NAMED=() # names VLGRPO_PASS_ENV lists that are not set
VG_ENV_NONASCII=()   # inherited names with non-ASCII characters (vg_check_values)
VG_ENV_TYPED=()      # passed names whose registry row has a type (checked by vg_check_values)

# The ERR trap of the entrypoints (set by the recipes and ray-node.sh): an unexpected failing command is a bug.
# shellcheck disable=SC2016 # expanded when the trap runs
readonly VG_ERR_TRAP='vg_die_internal "status $? at ${BASH_SOURCE[0]##*/} line $LINENO"'

# vg_image_env — what BASH_ENV did for the image before `bash -p`: source the image's own CANN environment file
# (a fixed path) when the image points BASH_ENV at it. Called after the environment was built, so CANN's
# exports (ASCEND_*, LD_LIBRARY_PATH, PYTHONPATH, PATH) extend the built values and reach the children. CANN's
# scripts run commands that fail: the ERR trap is off while they run.
vg_image_env() {
  local had=""
  if [[ ${BASH_ENV-} == "$VG_IMAGE_BASH_ENV" && -f $VG_IMAGE_BASH_ENV ]]; then
    had=$(trap -p ERR)
    trap - ERR
    # shellcheck source=docker/image/cann-env.sh
    source "$VG_IMAGE_BASH_ENV"
    # shellcheck disable=SC2064 # the fixed trap text
    if [[ -n $had ]]; then trap "$VG_ERR_TRAP" ERR; fi
  fi
  return 0
}

# vg_environment_check — classify every variable of this process's environment as it was at exec
# (VG_ENVIRON_FILE, names bash cannot hold included) under the registry, for the entrypoint whose view
# vg_registry_load loaded: one `environment` request to the launcher (python/src/vlgrpo/launch/childenv.py holds
# the rules). Bash sends the file's entries, the values it holds for its exported variables (what the children
# get: bash sets PWD, SHLVL and _ itself) and VLGRPO_PASS_ENV; it gets back VG_ENV_PASSED / VG_ENV_REQUESTED /
# VG_ENV_DROPPED / VG_ENV_ODD / VG_ENV_TYPED / VG_ENV_UNSET_NAMED / VG_ENV_NONASCII and the problems (an inherited
# RAY_ADDRESS other than VLGRPO_RAY_ADDRESS, refused variables, names VLGRPO_PASS_ENV may not pass, names set twice,
# exported functions, near misses of a setting).
# No program runs here: the next one (vg_check_values) runs in the built environment. Call after vg_read_settings.
vg_environment_check() {
  local e rec
  VG_LAUNCH_IN=("f:$VG_ENVIRON_FILE")
  if [[ -r $VG_ENVIRON_FILE ]]; then
    while IFS= read -r -d '' e || [[ -n $e ]]; do VG_LAUNCH_IN+=("x:$e"); done <"$VG_ENVIRON_FILE"
  else
    VG_LAUNCH_IN+=("n:")
  fi
  VG_LAUNCH_IN+=("e:${VG_VAL[PASS_ENV]-}" "A:${VG_VAL[RAY_ADDRESS]-}")
  while IFS= read -r e; do VG_LAUNCH_IN+=("h:$e=${!e-}"); done < <(compgen -e)
  _vg_launch environment
  for rec in "${VG_LAUNCH_OUT[@]}"; do
    case $rec in
      P:*) VG_ENV_PASSED+=("${rec#P:}") ;;
      Q:*) VG_ENV_REQUESTED+=("${rec#Q:}") ;;
      D:*) VG_ENV_DROPPED+=("${rec#D:}") ;;
      O:*) VG_ENV_ODD+=("${rec#O:}") ;;
      T:*) VG_ENV_TYPED+=("${rec#T:}") ;;
      U:*) VG_ENV_UNSET_NAMED+=("${rec#U:}") ;;
      N:*) VG_ENV_NONASCII+=("${rec#N:}") ;;
      p:*) VG_PROBLEMS+=("${rec#p:}") ;;
      *) vg_die_internal "vlgrpo.launch environment gave an unknown record" ;;
    esac
  done
  return 0
}

# vg_check_values — the type checks of the passed variables whose registry row has one (VG_ENV_TYPED:
# PYTHONWARNINGS, BASH_ENV, RAY_JOB_CONFIG_JSON_ENV_VAR, TMPDIR, HOME, a requested PYTHONPATH, ...) with the values
# bash exports, and the look-alike check of the names with non-ASCII characters (VG_ENV_NONASCII: VLGRΡO_LR with a
# Greek Rho would be ignored without a word): one `values` request to the launcher (vlgrpo.launch.childenv, which
# calls vlgrpo.environment check_values, the same rule a Ray job's runtime_env env_vars get). The checkpoint folder
# (and, in a container, the volume it is mounted from: vlgrpo.mounts, with this file's test hooks VG_MOUNTINFO and
# VG_CONTAINER_MARKERS) is protected: folders there are refused for TMPDIR, HOME, caches and PYTHONPATH. Problems
# are recorded.
vg_check_values() {
  local n rec m
  VG_LAUNCH_IN=("e:${VG_VAL[PASS_ENV]-}" "c:${VG_VAL[CHECKPOINT_DIR]-}" "M:$VG_MOUNTINFO")
  for m in "${VG_CONTAINER_MARKERS[@]}"; do VG_LAUNCH_IN+=("m:$m"); done
  for n in "${VG_ENV_TYPED[@]}"; do VG_LAUNCH_IN+=("v:$n=${!n-}"); done
  for n in "${VG_ENV_NONASCII[@]}"; do VG_LAUNCH_IN+=("a:$n"); done
  if ((${#VG_ENV_TYPED[@]} + ${#VG_ENV_NONASCII[@]})); then
    _vg_launch values
    for rec in "${VG_LAUNCH_OUT[@]}"; do
      [[ $rec == p:* ]] || vg_die_internal "vlgrpo.launch values gave an unknown record"
      VG_PROBLEMS+=("${rec#p:}")
    done
  fi
  return 0
}

# vg_build_child_environment — the children's environment, in the order every entrypoint needs it: classify the
# inherited variables (vg_environment_check, after vg_read_settings), make this shell's exports the built set
# (vg_environment_apply), then check the passed values and the non-ASCII names (vg_check_values). Problems are
# recorded, not printed: the caller adds its own, then vg_flush_problems.
vg_build_child_environment() {
  vg_environment_check
  vg_environment_apply
  vg_check_values
}

# vg_environment_apply — make this shell's exported variables the children's environment: every inherited
# variable not passed is unset (not only un-exported: the image's CANN file, sourced later by vg_image_env, runs
# `export PYTHONPATH=...:$PYTHONPATH` and the like, which would bring a dropped value back), then the `set` rows
# with a fixed value are exported. Kept as unexported shell variables: the few the entrypoints read themselves
# (VG_KEEP_LOCAL), this entrypoint's `set` rows (ray-node.sh checks an inherited TP_SOCKET_IFNAME before it sets it)
# and bash's own dynamic variables (SECONDS, RANDOM, ...: unset, they lose their meaning). Values
# the code computes (RAY_ADDRESS, WANDB_API_KEY from its file, ray-node.sh's) are exported where they are computed.
readonly VG_KEEP_LOCAL=" WANDB_API_KEY_FILE SLURM_STEP_ID "
vg_environment_apply() {
  local _vg_n _vg_keep=" ${VG_ENV_PASSED[*]} "
  while IFS= read -r _vg_n; do
    [[ $_vg_keep == *" $_vg_n "* ]] && continue
    if [[ $VG_KEEP_LOCAL == *" $_vg_n "* || -n ${VG_SET[$_vg_n]+x} || $_vg_n =~ ^(BASH.*|SECONDS|RANDOM|SRANDOM|LINENO|EPOCHSECONDS|EPOCHREALTIME|HISTCMD|GROUPS|DIRSTACK|FUNCNAME|OPTIND|OPTERR|IFS|PS[0-4]|COLUMNS|LINES|UID|EUID|PPID|SHELLOPTS|HOSTTYPE|OSTYPE|MACHTYPE)$ ]]; then
      export -n -- "${_vg_n?}" 2>/dev/null || true
    else
      unset -v -- "${_vg_n?}" 2>/dev/null || export -n -- "${_vg_n?}" 2>/dev/null || true
    fi
  done < <(compgen -e)
  for _vg_n in "${VG_SET_NAMES[@]}"; do
    [[ ${VG_SET[$_vg_n]} == - ]] && continue
    export "${_vg_n?}=${VG_SET[$_vg_n]}"
  done
  return 0
}

# vg_helper_prefix — VG_HELPER_PREFIX: vg_child_prefix, and the typed names (VG_ENV_TYPED) removed as well, for the
# entrypoint's own short Python helpers that run before those values were checked. PATH stays: the helper's
# python3 is found through it, as every step of the launch is (its entries are checked all the same).
VG_HELPER_PREFIX=()
vg_helper_prefix() {
  local n
  VG_HELPER_PREFIX=(env)
  for n in "${VG_ENV_ODD[@]}" "${VG_ENV_TYPED[@]}"; do
    if [[ $n != PATH ]]; then VG_HELPER_PREFIX+=(-u "$n"); fi
  done
  VG_HELPER_PREFIX+=(--)
}

# vg_child_prefix — VG_CHILD_PREFIX: what goes in front of a child's argv so that it runs in the built
# environment: `env -u NAME ... --` for the inherited names bash cannot hold (everything else was un-exported
# by vg_environment_apply), else nothing.
VG_CHILD_PREFIX=()
vg_child_prefix() {
  local n
  VG_CHILD_PREFIX=()
  ((${#VG_ENV_ODD[@]})) || return 0
  VG_CHILD_PREFIX=(env)
  for n in "${VG_ENV_ODD[@]}"; do VG_CHILD_PREFIX+=(-u "$n"); done
  VG_CHILD_PREFIX+=(--)
}


# vg_env_plan PREFIX CHILDREN — the plan's environment lines: the names every child (CHILDREN, in words) gets
# (values not shown, the fixed values this entrypoint sets shown), the names VLGRPO_PASS_ENV let through and
# the names dropped.
vg_env_plan() {
  local p=$1 who=$2 n got="" fixed=""
  while IFS= read -r n; do [[ $n == _ ]] || got+=" $n"; done < <(compgen -e | LC_ALL=C sort)
  for n in "${VG_SET_NAMES[@]}"; do
    [[ -n ${!n+x} ]] || continue
    if [[ $n == WANDB_API_KEY || $n == SWANLAB_API_KEY ]]; then fixed+=" $n=(not shown)"; else fixed+=" $n=${!n}"; fi
  done
  printf '%schild environment (%s; %d names, values not shown):%s\n' "$p" "$who" "$(wc -w <<<"$got")" "$got"
  if [[ -n $fixed ]]; then printf '%sset by the entrypoint:%s\n' "$p" "$fixed"; fi
  if ((${#VG_ENV_REQUESTED[@]})); then printf '%spassed because VLGRPO_PASS_ENV names them: %s\n' "$p" "$(_vg_sorted VG_ENV_REQUESTED)"; fi
  if ((${#VG_ENV_UNSET_NAMED[@]})); then printf '%snamed in VLGRPO_PASS_ENV but not set: %s\n' "$p" "$(_vg_sorted VG_ENV_UNSET_NAMED)"; fi
  printf '%sdropped from the environment (%d names, values not shown): %s\n' "$p" "${#VG_ENV_DROPPED[@]}" "$(_vg_sorted VG_ENV_DROPPED)"
}

# _vg_sorted ARRAY_NAME — the array's words, sorted (C locale), on one line
_vg_sorted() {
  local -n _words=$1
  ((${#_words[@]})) || return 0
  printf '%s\n' "${_words[@]}" | LC_ALL=C sort | tr '\n' ' ' | sed 's/ $//'
}
