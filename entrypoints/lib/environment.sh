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
VG_ENV_NONASCII=()   # inherited names with non-ASCII characters (vg_check_lookalikes)
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

# _vg_env_in LIST NAME — NAME is one of the comma-separated LIST
_vg_env_in() { [[ ,$1, == *,"$2",* ]]; }

# _vg_env_own_value ROW VALUE: true when VALUE is one of the refused ROW's allowed values (exact words; '-' = none)
_vg_env_own_value() {
  local w
  for w in ${VG_E_ALLOWED[$1]-}; do
    [[ $w != - && $w == "$2" ]] && return 0
  done
  return 1
}

# vg_environment_check — classify every variable of this process's environment as it was at exec
# (VG_ENVIRON_FILE, names bash cannot hold included) under the registry, for the entrypoint whose view
# vg_registry_load loaded. Records a problem for each refused variable (value not shown) and for each name
# VLGRPO_PASS_ENV may not pass; fills VG_ENV_PASSED / VG_ENV_DROPPED / VG_ENV_ODD. Call after vg_read_settings.
vg_environment_check() {
  local e name val envval kind type short requested=${VG_VAL[PASS_ENV]-} n LC_ALL=C # names are bytes
  local -A seen=()
  if [[ ! -r $VG_ENVIRON_FILE ]]; then
    vg_problem environment "$VG_ENVIRON_FILE is unreadable, so the inherited environment cannot be checked" \
      "run with /proc mounted (the default for docker and podman)"
    return 0
  fi
  while IFS= read -r -d '' e || [[ -n $e ]]; do
    name=${e%%=*} val=${e#*=}
    if [[ -n ${seen[$name]+x} ]]; then
      # a name twice in the environment (execve allows it; an env file or template can produce it): getenv() in
      # the C and Python readers sees the first copy, bash exports the last, so no check can speak for both
      if ((seen[$name] == 1)); then
        seen[$name]=2
        vg_problem "$(vg_show "$name")" "set more than once in the environment (the copies may differ: C and Python programs read the first, bash passes on the last; values not shown)" \
          "set it once (look for a repeated line in the env file, job template or runtime_env)"
      fi
      continue
    fi
    seen[$name]=1
    # what this bash holds is what the children get: the type checks classify that value (the same as the only
    # copy, unless the entrypoint changed it, as bash does for PWD, SHLVL and _); a refused row is refused by the
    # inherited value (bash fills BASHOPTS and SHELLOPTS itself: they are dropped)
    envval=$val
    if [[ $name =~ ^[A-Za-z_][A-Za-z0-9_]*$ && -n ${!name+x} ]]; then val=${!name}; fi
    if [[ $name == *[![:ascii:]]* ]]; then
      # a look-alike of a setting (Greek or Cyrillic letters, fullwidth forms) is checked by vg_check_lookalikes
      VG_ENV_NONASCII+=("$name")
    elif [[ $name != VLGRPO_* && ${name^^} == VLGRPO_* ]]; then
      # vlgrpo_lr=5 would be ignored without a word
      _vg_near_miss "$name" "${name^^}" "only by case"
    fi
    if [[ $name == VLGRPO_* ]]; then
      if [[ ! $name =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]]; then
        # invisible to vg_check_unknown_vars (compgen -e), yet passed on by bash
        [[ $name == *[![:ascii:]]* ]] ||
          vg_problem "$(vg_show "$name")" "not a setting (not even a valid variable name)" "unset it (--help lists the settings)"
        continue
      fi
      short=${name#VLGRPO_}
      # a setting of this entrypoint that a Python reader owns (the patch switches) reaches the children; the
      # doctor's settings reach the doctor, which checks them itself (doctor.sh)
      if [[ -n $short && -n ${VG_TYPE[$short]+x} && ( ${VG_READERS[$short]} == *patches* || $VG_OWNER == doctor ) ]]; then
        VG_ENV_PASSED+=("$name")
      fi
      continue
    fi
    if [[ ! $name =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]]; then
      if [[ $name == BASH_FUNC_* && -n $val ]]; then
        vg_problem "$(vg_show "$name")" "an exported shell function: every bash the launch starts would run it in place of the command of that name" \
          "unset it before the launch (export -fn NAME; Lmod: unset -f module ml; Slurm: --export=NONE or a list)"
      else
        VG_ENV_ODD+=("$name")
        VG_ENV_DROPPED+=("$(vg_show "$name")")
      fi
      continue
    fi
    vg_env_row "$name"
    kind=${REPLY:+${VG_E_KIND[$REPLY]}} type=${REPLY:+${VG_E_TYPE[$REPLY]}}
    case $kind in
      refused)
        # the row's allowed values are what a program sets itself (Ray 2.48.0's job driver and workers set
        # PYTHONBREAKPOINT to its debugger, ray/_private/worker.py): dropped, not refused; any other value is refused
        if [[ -n $envval ]] && ! _vg_env_own_value "$REPLY" "$envval"; then
          vg_problem "$name" "${VG_E_MEANING[$REPLY]} (value not shown)" "${VG_E_FIX[$REPLY]:-unset it for the launch}"
        else
          VG_ENV_DROPPED+=("$name")
        fi
        ;;
      pass)
        VG_ENV_PASSED+=("$name")
        if [[ -n $type ]]; then VG_ENV_TYPED+=("$name"); fi
        ;;
      pass-on-request | "")
        if _vg_env_in "$requested" "$name"; then
          VG_ENV_PASSED+=("$name") VG_ENV_REQUESTED+=("$name")
          # a name without a row is checked too (vlgrpo.environment UNLISTED: a path-shaped name gets the dirs rule)
          if [[ -n $type || -z $kind ]]; then VG_ENV_TYPED+=("$name"); fi
        else
          VG_ENV_DROPPED+=("$name")
        fi
        ;;
      *) VG_ENV_DROPPED+=("$name") ;; # drop, or a value this entrypoint sets itself
    esac
  done <"$VG_ENVIRON_FILE"
  _vg_env_check_requested
  return 0
}

# _vg_near_miss SHOWN CANONICAL HOW — the inherited name SHOWN (made safe to print) reads as CANONICAL (VLGRPO_*)
# once HOW ("only by case", "by a look-alike character ...") is undone: a setting there is named, else any
# VLGRPO_-looking name is refused as one.
_vg_near_miss() {
  local shown=$1 canon=$2 how=$3 short=${2#VLGRPO_}
  if [[ -n $short && -n ${VG_OWNERS[$short]+x} ]]; then
    vg_problem "$shown" "differs from the setting $canon $how, so it would be ignored" "rename it $canon"
  else
    vg_problem "$shown" "looks like a VLGRPO_ variable (it differs $how from $canon) but is no setting" \
      "rename or unset it (--help lists the settings)"
  fi
}

# vg_build_child_environment — the children's environment, in the order every entrypoint needs it: classify the
# inherited variables (vg_environment_check, after vg_read_settings), make this shell's exports the built set
# (vg_environment_apply), then check the passed values (vg_check_values) and the non-ASCII names
# (vg_check_lookalikes). Problems are recorded, not printed: the caller adds its own, then vg_flush_problems.
vg_build_child_environment() {
  vg_environment_check
  vg_environment_apply
  vg_check_values
  vg_check_lookalikes
}

# vg_check_lookalikes — each inherited name with non-ASCII characters (VG_ENV_NONASCII) is reduced to its
# skeleton by vlgrpo.environment (Unicode NFKC, upper case, Greek/Cyrillic/Cherokee letters that look Latin mapped
# to those letters); a skeleton that is a declared setting (or any VLGRPO_* name) is refused naming the setting:
# VLGRΡO_LR (Greek Rho) would otherwise be ignored without a word. Runs the image's python3 in the built
# environment (after vg_environment_apply), only when such a name is set; problems are recorded.
vg_check_lookalikes() {
  local out rc i skel
  local -a skels=()
  ((${#VG_ENV_NONASCII[@]})) || return 0
  rc=0
  vg_helper_prefix
  out=$("${VG_HELPER_PREFIX[@]}" python3 -P -s -m vlgrpo.environment skeleton "${VG_ENV_NONASCII[@]}" 2>&1) || rc=$?
  mapfile -t skels <<<"$out"
  if ((rc != 0 || ${#skels[@]} != ${#VG_ENV_NONASCII[@]})); then
    vg_problem environment "the names with non-ASCII characters ($(_vg_sorted_shown VG_ENV_NONASCII)) could not be checked for look-alikes of a setting (python3 -m vlgrpo.environment exit $rc)" \
      "unset them, or run the launch in the image (its python3 has the vlgrpo package)"
    return 0
  fi
  for ((i = 0; i < ${#skels[@]}; i++)); do
    skel=${skels[i]}
    [[ $skel == VLGRPO_* ]] || continue
    _vg_near_miss "$(vg_show "${VG_ENV_NONASCII[i]}")" "$skel" "by a look-alike character (a non-ASCII letter)"
  done
  return 0
}

# _vg_sorted_shown ARRAY_NAME — the array's words made safe to print (vg_show), space-separated
_vg_sorted_shown() {
  local -n _shown=$1
  local w out=""
  for w in "${_shown[@]}"; do out+="${out:+ }$(vg_show "$w")"; done
  printf '%s' "$out"
}

# _vg_env_check_requested — every name in VLGRPO_PASS_ENV must be one a launch may pass.
_vg_env_check_requested() {
  local n kind
  local -a names=()
  [[ -n ${VG_VAL[PASS_ENV]-} ]] || return 0
  IFS=, read -r -a names <<<"${VG_VAL[PASS_ENV]}"
  for n in "${names[@]}"; do
    if [[ $n == VLGRPO_* ]]; then
      vg_problem VLGRPO_PASS_ENV "names $n: settings are not passed this way (the patch switches reach the children by themselves)" \
        "remove $n from VLGRPO_PASS_ENV"
      continue
    fi
    vg_env_row "$n"
    kind=${REPLY:+${VG_E_KIND[$REPLY]}}
    case $kind in
      refused) vg_problem VLGRPO_PASS_ENV "names $n, which is refused: ${VG_E_MEANING[$REPLY]}" "remove $n from VLGRPO_PASS_ENV and unset it" ;;
      drop) vg_problem VLGRPO_PASS_ENV "names $n, which is never passed: ${VG_E_MEANING[$REPLY]}" "remove $n from VLGRPO_PASS_ENV" ;;
      set) vg_problem VLGRPO_PASS_ENV "names $n, which this entrypoint sets itself: ${VG_E_MEANING[$REPLY]}" "remove $n from VLGRPO_PASS_ENV" ;;
    esac
    if [[ -z ${!n+x} ]]; then VG_ENV_UNSET_NAMED+=("$n"); fi
  done
  return 0
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

# vg_check_values — the type checks of the passed variables whose registry row has one (VG_ENV_TYPED:
# PYTHONWARNINGS, BASH_ENV, RAY_JOB_CONFIG_JSON_ENV_VAR, TMPDIR, HOME, a requested PYTHONPATH, ...), by the one
# implementation of those rules, vlgrpo.environment check_value (the same that checks a Ray job's runtime_env
# env_vars): the values bash exports go NUL-separated on stdin, and the checker runs with those variables removed
# from its own environment (a dotted PYTHONWARNINGS category would otherwise be imported by the checker itself).
# The checkpoint folder (and, in a container, the volume it is mounted from) is protected: folders there are
# refused for TMPDIR, HOME, caches and PYTHONPATH. Runs the image's python3 in the built environment (after
# vg_environment_apply); problems are recorded.
vg_check_values() {
  local out rc name why fix n ck mp
  local -a protect=()
  ((${#VG_ENV_TYPED[@]})) || return 0
  ck=${VG_VAL[CHECKPOINT_DIR]-}
  if [[ -n $ck ]] && ck=$(realpath -e -- "$ck" 2>/dev/null); then
    protect+=("--protect=$ck")
    if vg_in_container && [[ -r $VG_MOUNTINFO ]]; then
      mp=$(vg_mount_of "$ck")
      mp=${mp%$'\t'*}
      if [[ -n $mp && $mp != / ]]; then protect+=("--protect=$mp"); fi
    fi
  fi
  rc=0
  vg_helper_prefix
  out=$(for n in "${VG_ENV_TYPED[@]}"; do printf '%s=%s\0' "$n" "${!n-}"; done |
    "${VG_HELPER_PREFIX[@]}" python3 -P -s -m vlgrpo.environment check-values "--owner=$VG_OWNER" \
      "--pass-env=${VG_VAL[PASS_ENV]-}" "${protect[@]}" 2>&1) || rc=$?
  case $rc in
    0) return 0 ;;
    2)
      while IFS=$'\t' read -r name why fix; do
        [[ -n $name ]] && vg_problem "$name" "$why (value not shown)" "$fix"
      done <<<"$out"
      ;;
    *) vg_problem "$(_vg_sorted VG_ENV_TYPED)" "could not be checked (python3 -m vlgrpo.environment check-values exit $rc)" \
      "run the launch in the image (its python3 has the vlgrpo package), or unset them" ;;
  esac
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
