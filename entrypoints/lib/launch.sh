# shellcheck shell=bash disable=SC2016,SC2034,SC2153 # (Markdown backticks in single quotes; globals from settings.sh)
# vlgrpo entrypoint mechanics: from validated settings to the exec of verl.
#
# A recipe is data: python/src/vlgrpo/recipes/<entrypoint>.argv, beside the registry (in the images a copy in
# lib/recipes/), read here by vg_recipe_load for --help and the overrides check, and by the launcher
# (python/src/vlgrpo/launch/recipes.py), which holds the recipe's rules: derived defaults, cross-field checks, the
# topology and the argv (vg_recipe). A recipe file sets VG_PROG, calls vg_recipe_load and vg_registry_load, and
# passes its command-line words to vg_cli, then calls vg_entry.

VG_DRY_RUN=0
VG_HELP=0
VG_ARGV=()
VG_PROGRAM=()     # the fixed program and module, e.g. (python3 -m verl.trainer.main_ppo)
VG_TEMPLATE=()    # the Hydra overrides with {NAME} placeholders (the recipe file's elements)
VG_SUMMARY=""     # one line saying what the recipe launches (--help)
VG_FIXED_NOTE=""  # the keys no setting reaches (--help, the overrides check)
VG_DERIVED_NAMES=()
declare -gA VG_DERIVED_TEXT=()
VG_TOPOLOGY=""
VG_CLUSTER_NODES=0 VG_CLUSTER_PER_NODE=0 VG_CLUSTER_DEVICES=0

# vg_recipe_load — read this entrypoint's recipe file (recipes/${VG_PROG%.sh}.argv beside the registry): its
# `#: summary:`, `#: program:`, `#: derived: NAME: TEXT` and `#: fixed:` lines and its elements (every other line that
# is neither empty nor a # comment), as data: nothing in it is evaluated.
vg_recipe_load() {
  local file line key text
  file=${VG_REGISTRY%/*}/recipes/${VG_PROG%.sh}.argv
  [[ -r $file ]] || vg_die_internal "the recipe file $file is missing or unreadable"
  VG_TEMPLATE=()
  while IFS= read -r line || [[ -n $line ]]; do
    case $line in
      '#: '*)
        key=${line#'#: '}
        text=${key#*: } key=${key%%: *}
        case $key in
          summary) VG_SUMMARY=$text ;;
          fixed) VG_FIXED_NOTE=$text ;;
          program) read -r -a VG_PROGRAM <<<"$text" ;;
          derived)
            VG_DERIVED_NAMES+=("${text%%: *}")
            VG_DERIVED_TEXT[${text%%: *}]=${text#*: }
            ;;
          *) vg_die_internal "the recipe file $file has an unknown line '#: $key'" ;;
        esac
        ;;
      '' | '#'*) ;;
      *) VG_TEMPLATE+=("$line") ;;
    esac
  done <"$file"
  ((${#VG_PROGRAM[@]} >= 3 && ${#VG_TEMPLATE[@]})) || vg_die_internal "the recipe file $file has no program or no elements"
}

# vg_cli WORD — one command-line word. Only --help/-h and --dry-run exist; everything else is refused
# (settings come from VLGRPO_* variables, never from arguments).
vg_cli() {
  case $1 in
    -h | --help) VG_HELP=1 ;;
    --dry-run) VG_DRY_RUN=1 ;;
    *)
      vg_problem "argument $(vg_show "$1")" "this entrypoint takes no arguments or Hydra overrides" \
        "use only --help or --dry-run, and set VLGRPO_* variables for settings ($VG_PROG --help lists them)"
      ;;
  esac
}

# vg_template_keys NAME — the Hydra keys whose template element uses {NAME}, comma-separated.
vg_template_keys() {
  local el out=""
  for el in "${VG_TEMPLATE[@]}"; do
    [[ $el == *"{$1}"* ]] || continue
    out+="${out:+, }\`${el%%=*}\`"
  done
  printf '%s' "$out"
}

# vg_recipe — the recipe step, one `recipe` request to the launcher (vlgrpo.launch.recipes): bash sends every
# setting's value, raw value and source, the platform and this node's device count; the launcher fills in the derived
# defaults (their problems end the launch here, as a refused setting does), then checks the recipe's cross-field
# rules and the checkpoint folder's storage (with lib/node.sh's test hooks VG_MOUNTINFO and VG_CONTAINER_MARKERS;
# problems recorded, planning warnings noted), and answers the topology, the cluster's size and the argv (VG_ARGV: the program and the
# template with every placeholder replaced).
vg_recipe() {
  local n rec m halt=0
  VG_LAUNCH_IN=("P:$VG_PLATFORM" "n:$VG_NODE_DEVICES" "f:$VG_NODE_DEVICES_FROM" "M:$VG_MOUNTINFO" "d:$VG_DRY_RUN")
  for m in "${VG_CONTAINER_MARKERS[@]}"; do VG_LAUNCH_IN+=("m:$m"); done
  for n in "${VG_NAMES[@]}"; do
    VG_LAUNCH_IN+=("v:$n=${VG_VAL[$n]-}" "s:$n=${VG_SRC[$n]-}")
    if [[ -n ${VG_RAW[$n]+x} ]]; then VG_LAUNCH_IN+=("r:$n=${VG_RAW[$n]}"); fi
  done
  _vg_launch recipe
  VG_ARGV=()
  for rec in "${VG_LAUNCH_OUT[@]}"; do
    case $rec in
      v:*=*)
        n=${rec#v:} n=${n%%=*}
        # shellcheck disable=SC2004 # VG_VAL is associative (lib/settings.sh)
        VG_VAL[$n]=${rec#v:"$n"=}
        ;;
      r:*=*)
        n=${rec#r:} n=${n%%=*}
        # shellcheck disable=SC2004 # VG_RAW is associative (lib/settings.sh)
        VG_RAW[$n]=${rec#r:"$n"=}
        ;;
      x:*) unset 'VG_RAW[${rec#x:}]' ;;
      p:*) VG_PROBLEMS+=("${rec#p:}") ;;
      w:*) VG_NOTES+=("${rec#w:}") ;;
      t:*) VG_TOPOLOGY=${rec#t:} ;;
      c:*) read -r VG_CLUSTER_NODES VG_CLUSTER_PER_NODE VG_CLUSTER_DEVICES <<<"${rec#c:}" ;;
      a:*) VG_ARGV+=("${rec#a:}") ;;
      i:*) vg_die_internal "${rec#i:}" ;;
      halt:) halt=1 ;;
      *) vg_die_internal "vlgrpo.launch recipe gave an unknown record" ;;
    esac
  done
  if ((halt)); then vg_flush_problems; fi
  return 0
}

# vg_build_argv — VG_ARGV (made by vg_recipe) with VLGRPO_OVERRIDES_FILE's accepted overrides in place.
vg_build_argv() {
  if [[ -n ${VG_VAL[OVERRIDES_FILE]-} ]]; then vg_overrides; fi
  return 0
}

# vg_overrides — VLGRPO_OVERRIDES_FILE: `python3 -m vlgrpo.preflight.overrides` checks the file against the pinned
# verl and the recipe (exit 2 with the reasons) and prints the accepted `key=value` overrides, NUL-terminated; each
# takes the place of the template's element of the same key, or is appended, and is listed in the plan (vg_check_argv).
vg_overrides() {
  local f el rc=0
  local -a cmd=()
  if ! f=$(mktemp "${TMPDIR:-/tmp}/vlgrpo-overrides.XXXXXX" 2>/dev/null); then
    printf '%s: cannot create a temporary file in %s (set TMPDIR to a writable folder); nothing was started\n' \
      "$VG_PROG" "$(vg_show "${TMPDIR:-/tmp}")" >&2
    exit "$VG_EXIT_FAILURE"
  fi
  VG_ARGV_FILE=$f
  vg_child_prefix
  cmd=("${VG_CHILD_PREFIX[@]}" python3 -P -s -m vlgrpo.preflight.overrides --owner "$VG_OWNER" --module "${VG_PROGRAM[2]}"
    --prog "$VG_PROG" --file "${VG_VAL[OVERRIDES_FILE]}" --fixed "$VG_FIXED_NOTE" -- "${VG_TEMPLATE[@]}")
  vg_run_child cmd >"$f" || rc=$?
  if ((rc != 0)); then
    ((rc == 2)) || printf '%s: the VLGRPO_OVERRIDES_FILE check could not run (exit %s); nothing was started\n' "$VG_PROG" "$rc" >&2
    exit $((rc == 2 ? VG_EXIT_CONFIG : VG_EXIT_FAILURE))
  fi
  while IFS= read -r -d '' el; do VG_OVERRIDES+=("$el"); done <"$f"
  rm -f -- "$f"
  VG_ARGV_FILE=""
}

# vg_check_argv — one `argv` request to the launcher (vlgrpo.launch.recipes): the accepted overrides (VG_OVERRIDES)
# in place of the template's element of the same key or appended (a plan note each), and every key the final argv
# sets twice refused (field case B11: Hydra would keep the last without a word).
VG_OVERRIDES=()
vg_check_argv() {
  local el rec
  VG_LAUNCH_IN=("n:${#VG_PROGRAM[@]}")
  for el in "${VG_ARGV[@]}"; do VG_LAUNCH_IN+=("a:$el"); done
  for el in "${VG_OVERRIDES[@]}"; do VG_LAUNCH_IN+=("o:$el"); done
  _vg_launch argv
  VG_ARGV=()
  for rec in "${VG_LAUNCH_OUT[@]}"; do
    case $rec in
      a:*) VG_ARGV+=("${rec#a:}") ;;
      w:*) VG_NOTES+=("${rec#w:}") ;;
      p:*) VG_PROBLEMS+=("${rec#p:}") ;;
      *) vg_die_internal "vlgrpo.launch argv gave an unknown record" ;;
    esac
  done
  return 0
}

# vg_trackers — the experiment trackers' settings (registry rows owned by `trackers`: VLGRPO_TENSORBOARD_DIR,
# VLGRPO_MLFLOW_TRACKING_URI, VLGRPO_SWANLAB_*) and the W&B key (WANDB_API_KEY_FILE), by the one rule,
# vlgrpo.trackers plan: checked against the logger list (a selected logger without its required setting or key is a
# problem, a note in a dry run for a key; a setting of a logger not selected a note), the key file by the path rule
# for key files and the W&B client's key form, and what verl's loggers read (TENSORBOARD_DIR, MLFLOW_TRACKING_URI,
# SWANLAB_API_KEY and WANDB_API_KEY from their files, ...) exported for the children, a key never printed;
# ray-node.sh (no logger list) exports every one given. One `trackers` request to the launcher: the settings, with
# WANDB_API_KEY_FILE and WANDB_MODE as inherited and, for an inherited WANDB_API_KEY, the word `set` (its value
# stays here); the launcher (its interpreter runs as this user, as a child would) reads the key files.
vg_trackers() {
  local n rec given="" loggers=${VG_VAL[LOGGER]-}
  local -a sent=()
  for n in "${VG_NAMES[@]}"; do
    _vg_has_owner "${VG_READERS[$n]-}" trackers && sent+=("$n")
  done
  # an inherited value of a variable set here never reaches the children (kind set): only the setting's
  for n in "${!VG_SET[@]}"; do
    case $n in TENSORBOARD_DIR | MLFLOW_TRACKING_URI | SWANLAB_*) unset -v "$n" ;; esac
  done
  for n in "${sent[@]}"; do given+=${VG_VAL[$n]:+1}; done
  # nothing to check or export: no tracker setting or key file given, no logger that needs one
  [[ -n $given || -n ${WANDB_API_KEY_FILE-} || $loggers == *wandb* || $loggers == *tensorboard* || $loggers == *mlflow* ||
    $loggers == *swanlab* ]] || return 0
  VG_LAUNCH_IN=("o:$loggers" "d:$VG_DRY_RUN")
  for n in "${sent[@]}"; do
    if [[ -n ${VG_VAL[$n]-} ]]; then VG_LAUNCH_IN+=("v:VLGRPO_$n=${VG_VAL[$n]}"); fi
  done
  if [[ -n ${WANDB_API_KEY_FILE-} ]]; then VG_LAUNCH_IN+=("v:WANDB_API_KEY_FILE=$WANDB_API_KEY_FILE"); fi
  if [[ -n ${WANDB_API_KEY-} ]]; then VG_LAUNCH_IN+=("v:WANDB_API_KEY=set"); fi
  if [[ -n ${WANDB_MODE-} ]]; then VG_LAUNCH_IN+=("v:WANDB_MODE=$WANDB_MODE"); fi
  _vg_launch trackers
  for rec in "${VG_LAUNCH_OUT[@]}"; do
    case $rec in
      p:*) VG_PROBLEMS+=("${rec#p:}") ;;
      w:*) VG_NOTES+=("${rec#w:}") ;;
      X:*=*)
        n=${rec#X:} n=${n%%=*}
        # WANDB_API_KEY is a pass row (an inherited key passes as it is); the others are this entrypoint's set rows
        [[ -n ${VG_SET[$n]+x} || $n == WANDB_API_KEY ]] || vg_die_internal "vlgrpo.trackers exports $n, which is no set row of $VG_OWNER"
        export "$n=${rec#X:"$n"=}"
        ;;
      *) vg_die_internal "vlgrpo.launch trackers gave an unknown record" ;;
    esac
  done
  return 0
}

VG_NOTES=()

# ---- signals during the checks -------------------------------------------------------------------------------
# From the start of the checks to the exec of verl, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 and SIGPIPE
# (VG_STOP_SIGNALS) sent to the entrypoint (`docker stop` sends SIGTERM to PID 1 alone; Ctrl-C, Ctrl-\ or a closed
# terminal reach it too; QUIT, USR1, USR2 and PIPE would otherwise end bash alone, or be ignored, with its child
# left running) end the launch at once with exit 128+signal: bash runs a trap only after the foreground command
# has finished, so each long child of the checks (the preflight, `vlgrpo cluster wait`/`probe`) runs in the background in a process group of its own
# (vg_run_child), the entrypoint waits for it, and on a signal sends that signal to the whole group, gives the
# child up to 1 s to exit, then SIGKILLs what is left of the group (a grandchild that ignores the signal too) and
# exits; nothing is exec'd. After the exec the signals are verl's (the traps do not survive exec; nothing here
# ignores a signal).
VG_CHILD_PID=""
VG_SIGNALS=0 # 1 once vg_signals_on installed the traps (vg_run_child's callers may rely on them)
# name:number of each signal that stops the launch (numbers as on Linux x86-64 and arm64)
readonly VG_STOP_SIGNALS=(INT:2 TERM:15 HUP:1 QUIT:3 USR1:10 USR2:12 PIPE:13)

# vg_signals_on — install the traps (vg_entry, before the first check), and the EXIT trap that removes the
# launch's own temporary files (_vg_cleanup).
vg_signals_on() {
  local s
  for s in "${VG_STOP_SIGNALS[@]}"; do
    # shellcheck disable=SC2064 # the name and number are fixed above
    trap "_vg_on_signal ${s%:*} ${s#*:}" "${s%:*}"
  done
  trap _vg_cleanup EXIT
  VG_SIGNALS=1
}

# _vg_alive PID — PID exists and is not a zombie
_vg_alive() {
  local s
  s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  s=${s##*) }
  [[ -n $s && ${s%% *} != Z ]]
}

# _vg_on_signal NAME NUMBER — the trap: stop the running child's process group, report, exit 128+NUMBER.
_vg_on_signal() {
  local sig=$1 num=$2 pid=$VG_CHILD_PID i fwd=$1
  trap '' INT TERM HUP QUIT USR1 USR2 PIPE # a second signal does not restart the stop
  # INT, TERM and HUP go on as they came; the others as TERM (SIGQUIT would make every process of the group dump
  # core first, seconds for a Python with torch loaded; SIGPIPE/SIGUSR* mean nothing to the checks)
  case $sig in INT | TERM | HUP) ;; *) fwd=TERM ;; esac
  if [[ -n $pid ]]; then
    # its process group (vg_run_child); a child that leads none (ray-node.sh's TCP probe) by its pid
    kill -s "$fwd" -- "-$pid" 2>/dev/null || kill -s "$fwd" "$pid" 2>/dev/null || true
    for ((i = 0; i < 20; i++)); do
      _vg_alive "$pid" || break
      sleep 0.05
    done
    kill -s KILL -- "-$pid" 2>/dev/null || kill -s KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  # (stderr may be the closed pipe that sent SIGPIPE: a failed message does not change the exit status)
  printf '%s: stopped by SIG%s during the checks; nothing was started\n' "${VG_PROG:-vlgrpo}" "$sig" >&2 || true
  exit $((128 + num))
}

# vg_run_child ARRAY_NAME — run the argv in that array, a child of the checks in the background, in its own process group (set -m: its
# SIGINT is not ignored, and a signal can reach everything it started), stdin from /dev/null, and wait for it.
# Returns its exit status; a signal to the entrypoint meanwhile ends the launch (_vg_on_signal).
vg_run_child() {
  local -n _argv=$1
  local rc=0
  set -m
  "${_argv[@]}" </dev/null &
  VG_CHILD_PID=$!
  set +m
  wait "$VG_CHILD_PID" || rc=$?
  VG_CHILD_PID=""
  return "$rc"
}

# vg_cluster — cluster mode (VLGRPO_RAY_ADDRESS): bounded wait for the nodes, then the visibility probe (both
# print their progress on stderr: stdout carries only the plan). RAY_ADDRESS is already that address (vg_entry).
# Exit 2 when the cluster is not ready, 1 when the check itself failed.
vg_cluster() {
  local addr=${VG_VAL[RAY_ADDRESS]-} res rc
  local -a cmd=()
  [[ -n $addr ]] || return 0
  res=${VG_PLATFORM^^}
  printf '%s: cluster %s: waiting for %s node(s) with %s %s each (timeout %ss)\n' \
    "$VG_PROG" "$addr" "$VG_CLUSTER_NODES" "$VG_CLUSTER_PER_NODE" "$res" "${VG_VAL[RAY_WAIT_TIMEOUT]}" >&2
  rc=0
  vg_child_prefix
  cmd=("${VG_CHILD_PREFIX[@]}" python3 -P -s -m vlgrpo cluster wait --address "$addr" --resource "$res"
    --nodes "$VG_CLUSTER_NODES" --per-node "$VG_CLUSTER_PER_NODE" --timeout "${VG_VAL[RAY_WAIT_TIMEOUT]}")
  vg_run_child cmd >&2 || rc=$?
  if ((rc != 0)); then
    printf '%s: cluster %s is not ready (vlgrpo cluster wait exit %s); nothing was started\n' "$VG_PROG" "$addr" "$rc" >&2
    exit $((rc == 2 ? VG_EXIT_CONFIG : VG_EXIT_FAILURE))
  fi
  local loggers=${VG_VAL[LOGGER]-}
  loggers=${loggers#[}
  cmd=("${VG_CHILD_PREFIX[@]}" python3 -P -s -m vlgrpo cluster probe --address "$addr" --resource "$res"
    --nodes "$VG_CLUSTER_NODES" --per-node "$VG_CLUSTER_PER_NODE" --loggers "${loggers%]}")
  vg_run_child cmd >&2 || rc=$?
  if ((rc != 0)); then
    printf '%s: device probe on cluster %s failed (vlgrpo cluster probe exit %s); nothing was started\n' "$VG_PROG" "$addr" "$rc" >&2
    exit $((rc == 2 ? VG_EXIT_CONFIG : VG_EXIT_FAILURE))
  fi
}

# vg_preflight — `python3 -P -s -m vlgrpo preflight --purpose launch|plan [--devices-per-node N] --argv-file FILE`
# on the final argv (one element per line; plan in a dry run: too little checkpoint space is then a warning, not an
# error). Exit 0 clean; 2 findings -> exit 2; anything else is a failure of the check itself -> exit 1. With
# VLGRPO_PREFLIGHT=warn the preflight gets --waive: it exits 3 when no finding is about code the launch would run
# (the launch goes on, the findings are reported) and still 2 when one is (auto_map or Python files in the model
# folder, remote-code or code-loading keys, or a code-loading check that could not run): no switch waives a
# refusal of code loading.
VG_PREFLIGHT_RESULT="not run"
vg_preflight() {
  local f rc warn=0 purpose=launch
  local -a waive=() count=() cmd=()
  if [[ ${VG_VAL[PREFLIGHT]} == warn ]]; then warn=1 waive=(--waive); fi
  if ((VG_DRY_RUN)); then purpose=plan; fi
  if ! f=$(mktemp "${TMPDIR:-/tmp}/vlgrpo-argv.XXXXXX" 2>/dev/null); then
    printf '%s: cannot create the preflight argv file in %s (set TMPDIR to a writable folder); nothing was started\n' \
      "$VG_PROG" "$(vg_show "${TMPDIR:-/tmp}")" >&2
    exit "$VG_EXIT_FAILURE"
  fi
  # the argv file goes whatever ends this step (a signal too: _vg_cleanup); the report goes to stderr so stdout
  # carries only the plan and the command
  VG_ARGV_FILE=$f
  printf '%s\n' "${VG_ARGV[@]}" >"$f"
  # the node's count (lib/node.sh, the one device counter) goes with it, so both check the same number
  # (--devices-source plan: the planning override's count, for other machines; the layout rules then only warn)
  if ((VG_NODE_DEVICES > 0)); then count=(--devices-per-node "$VG_NODE_DEVICES" --devices-source "$VG_NODE_DEVICES_KIND"); fi
  rc=0
  vg_child_prefix
  cmd=("${VG_CHILD_PREFIX[@]}" python3 -P -s -m vlgrpo preflight --purpose "$purpose" "${count[@]}" --argv-file "$f" "${waive[@]}")
  vg_run_child cmd >&2 || rc=$?
  rm -f -- "$f"
  VG_ARGV_FILE=""
  case $rc:$warn in
    0:*) VG_PREFLIGHT_RESULT="clean" ;;
    3:1)
      VG_PREFLIGHT_RESULT="findings (VLGRPO_PREFLIGHT=warn: continuing; none of them is about code the launch would run)"
      printf '%s: warning: preflight reported findings; continuing because VLGRPO_PREFLIGHT=warn\n' "$VG_PROG" >&2
      ;;
    2:1)
      printf '%s: preflight found problems that VLGRPO_PREFLIGHT=warn cannot waive: code the launch would run (above); nothing was started\n' "$VG_PROG" >&2
      exit "$VG_EXIT_CONFIG"
      ;;
    2:0)
      printf '%s: preflight found problems in the configuration (above); nothing was started\n' "$VG_PROG" >&2
      exit "$VG_EXIT_CONFIG"
      ;;
    *)
      printf '%s: preflight could not run (python3 -m vlgrpo preflight exit %s); nothing was started\n' "$VG_PROG" "$rc" >&2
      exit "$VG_EXIT_FAILURE"
      ;;
  esac
}

# vg_help — usage and the settings table (Markdown). The README's settings section is this output.
vg_help() {
  local name keys d
  printf '#### `entrypoints/%s`\n\n' "$VG_PROG"
  printf '%s\n\n' "$VG_SUMMARY"
  printf 'Usage: `%s [--dry-run]` or `%s --help`. Settings come only from these environment variables\n' "$VG_PROG" "$VG_PROG"
  printf '(an empty value counts as unset); arguments, Hydra overrides and unknown `VLGRPO_*` variables are\n'
  printf 'refused. Exit status: 0 started (or, in a dry run, planned), 2 invalid configuration or preflight\n'
  printf 'findings, 1 any other failure.\n\n'
  printf '| Variable | Type | Allowed | Default | Hydra key(s) | Meaning |\n'
  printf '|---|---|---|---|---|---|\n'
  for name in "${VG_NAMES[@]}"; do
    keys=$(vg_template_keys "$name")
    printf '| `VLGRPO_%s` | %s | %s | %s | %s | %s |\n' "$name" "${VG_TYPE[$name]}" "$(vg_allowed_text "$name")" \
      "$(vg_default_text "$name")" "${keys:-—}" "${VG_MEANING[$name]}"
  done
  if ((${#VG_DERIVED_NAMES[@]})); then
    printf '\nDerived (not settable):\n\n| Hydra key(s) | Value |\n|---|---|\n'
    for d in "${VG_DERIVED_NAMES[@]}"; do
      printf '| %s | %s |\n' "$(vg_template_keys "$d")" "${VG_DERIVED_TEXT[$d]}"
    done
  fi
  printf '\nFixed for every launch (no variable reaches them): %s\n' "$VG_FIXED_NOTE"
  printf '\nSecrets: `WANDB_API_KEY`, or `WANDB_API_KEY_FILE` naming a file that holds it (never printed; the file is\n'
  printf 'yours, mode 0600 or 0400, in folders no other user can write, and holds one W&B API key on one line);\n'
  printf 'a logger list with wandb needs one of them (or `WANDB_MODE=offline`) for a real launch. The other trackers\n'
  printf 'need their settings (tensorboard `VLGRPO_TENSORBOARD_DIR`, mlflow `VLGRPO_MLFLOW_TRACKING_URI`, swanlab\n'
  printf '`VLGRPO_SWANLAB_API_KEY_FILE`); on a Ray cluster every node carries them too (docs/cluster.md).\n'
  local set="" n
  for n in "${VG_SET_NAMES[@]}"; do
    if [[ ${VG_SET[$n]} == - ]]; then set+="${set:+, }\`$n\`"; else set+="${set:+, }\`$n=${VG_SET[$n]}\`"; fi
  done
  printf '\nEnvironment (the rules of every variable: docs/settings.md): the entrypoint runs as `#!/bin/bash -p` and\n'
  printf 'builds the environment of every child (preflight, cluster tool, verl) instead of passing its own: it sets\n'
  printf '%s (`RAY_ADDRESS`: `VLGRPO_RAY_ADDRESS` after the checks, else `local`), the working directory is a\n' "$set"
  printf 'fresh private folder (mktemp -d under TMPDIR, mode 0700; never the checkpoint folder, which Ray would put on\n'
  printf 'every worker'"'"'s sys.path), and of the inherited variables only these pass (typed ones checked): %s; ' "$(vg_env_names pass)"
  printf 'these only when named in `VLGRPO_PASS_ENV` (as any unlisted variable may be): %s. ' "$(vg_env_names pass-on-request)"
  printf 'Never passed: %s. Everything else is dropped (the dry-run plan lists the names). ' "$(vg_env_names drop)"
  printf 'A launch is refused (exit 2) while any of these is set, since they make a process import or run what they\n'
  printf 'name: %s; so is `RAY_ADDRESS` unless it equals `VLGRPO_RAY_ADDRESS`.\n' "$(vg_env_names refused)"
  printf '\nSignals: SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 or SIGPIPE sent to the entrypoint during the\n'
  printf 'checks (`docker stop` sends SIGTERM to PID 1) stop the running check with everything it started and end the\n'
  printf 'launch with exit 128+signal, nothing started; once verl runs (exec, same PID) the signals are verl'"'"'s.\n'
}

# vg_help_text — the Markdown of --help (stdin) as plain text for a terminal of COLUMNS columns (when that is a
# number of at least 40, else 80): headings and paragraphs wrapped, each table row a block
# (its first cell, then one indented "Header: value" line per other cell, wrapped), backticks and escapes
# dropped. The entrypoints print it when stdout is a terminal; a pipe or file gets the Markdown, the source of
# docs/settings.md. awk alone: --help runs before any check of the environment.
vg_help_text() {
  local w=${COLUMNS:-80}
  [[ $w =~ ^[0-9]{2,3}$ ]] && ((w >= 40)) || w=80
  LC_ALL=C awk -v W="$w" '
    function plain(t) { gsub(/`/, "", t); gsub(/\\\|/, "|", t); gsub(/\*\*/, "", t); return t }
    # wrap text t at W columns, first line prefixed by p1, the others by p2
    function wrap(t, p1, p2,    n, i, words, line, out) {
      n = split(t, words, / +/); line = p1; out = ""
      for (i = 1; i <= n; i++) {
        if (words[i] == "") continue
        if (line != p1 && line != p2 && length(line) + 1 + length(words[i]) > W) { out = out line "\n"; line = p2 }
        line = (line == p1 || line == p2) ? line words[i] : line " " words[i]
      }
      printf "%s%s\n", out, line
    }
    function flush() { if (para != "") { wrap(para, "", ""); para = "" } }
    function cells(line, arr,    n, i) {
      sub(/^\| */, "", line); sub(/ *\|$/, "", line)
      gsub(/\\\|/, "\001", line)
      n = split(line, arr, / *\| */)
      for (i = 1; i <= n; i++) { gsub(/\001/, "|", arr[i]); arr[i] = plain(arr[i]) }
      return n
    }
    /^\|/ {
      flush()
      if (!intable) { nh = cells($0, head); intable = 1; next }
      if ($0 ~ /^\|[-| ]+\|$/) next
      n = cells($0, c)
      print c[1]
      for (i = 2; i <= n; i++) if (c[i] != "" && c[i] != "—") wrap(c[i], "    " head[i] ": ", "        ")
      next
    }
    { intable = 0 }
    /^#+ / { flush(); t = $0; sub(/^#+ /, "", t); print plain(t); next }
    /^$/ { flush(); print ""; next }
    { para = para (para == "" ? "" : " ") plain($0) }
    END { flush() }'
}

# vg_wandb_plan PREFIX — the plan's W&B line, when the logger list has wandb or a W&B server or entity is given:
# the server (WANDB_BASE_URL) and entity (WANDB_ENTITY) the children get, which are no secrets (their registry types,
# checked by vg_check_values, keep them plain: an http(s) URL without credentials, a plain name), and the mode.
vg_wandb_plan() {
  local p=$1 server entity mode
  [[ ${VG_VAL[LOGGER]-} == *wandb* || -n ${WANDB_BASE_URL-} || -n ${WANDB_ENTITY-} ]] || return 0
  server=${WANDB_BASE_URL:-"https://api.wandb.ai (the client's default)"}
  if [[ -z ${WANDB_BASE_URL-} && " ${VG_ENV_DROPPED[*]} " == *" WANDB_BASE_URL "* ]]; then
    server="https://api.wandb.ai (the client's default; WANDB_BASE_URL is set but dropped: name it in VLGRPO_PASS_ENV)"
  fi
  entity=${WANDB_ENTITY:-"(the key's default entity)"}
  if [[ -n ${WANDB_MODE-} ]]; then mode=$(vg_show "$WANDB_MODE"); else mode="online (the client's default)"; fi
  printf '%sW&B: server %s, entity %s, mode %s\n' "$p" "$server" "$entity" "$mode"
}

# vg_plan — the dry-run output: comment lines ("# ...") with the plan, then the exact argv, one
# element per line.
vg_plan() {
  local n
  printf '# %s dry run: configuration valid, nothing started\n' "$VG_PROG"
  printf '# platform: %s; devices per node on this node: %s (%s)\n' "$VG_PLATFORM" "$VG_NODE_DEVICES" "$VG_NODE_DEVICES_FROM"
  printf '# topology: %s\n' "$VG_TOPOLOGY"
  if [[ -n ${VG_VAL[RAY_ADDRESS]-} ]]; then
    printf '# cluster: %s ready and probed\n' "${VG_VAL[RAY_ADDRESS]}"
  elif [[ $VG_NODE_DEVICES_KIND == plan ]] && ((${VG_CLUSTER_DEVICES:-0} > VG_NODE_DEVICES)); then
    printf '# cluster: this plan needs a Ray cluster of %s node(s) with %s %s each (set VLGRPO_RAY_ADDRESS to launch it)\n' \
      "$VG_CLUSTER_NODES" "$VG_CLUSTER_PER_NODE" "$VG_PLATFORM"
  fi
  printf '# working directory of the children: %s\n' "$PWD"
  vg_env_plan '# ' 'every child: preflight, cluster tool, verl'
  if [[ -n ${WANDB_API_KEY-} ]]; then printf '# environment: WANDB_API_KEY (set, not shown)\n'; fi
  vg_wandb_plan '# '
  for n in "${VG_NOTES[@]}"; do printf '# %s\n' "$n"; done
  printf '# preflight: %s\n' "$VG_PREFLIGHT_RESULT"
  printf '# command (%d arguments, one per line):\n' "${#VG_ARGV[@]}"
  printf '%s\n' "${VG_ARGV[@]}"
}

# vg_enter_workdir — the children's working directory: a fresh empty folder of this user, mode 0700, made by
# `mktemp -d` under TMPDIR (checked by vg_check_values: an existing folder of this user, off the checkpoint folder
# and its volume, not writable by others), never the checkpoint folder: Ray 2.48.0 puts the driver's working
# directory first on every worker's sys.path (_private/worker.py connect: the job config's code search path), so a
# folder others can write there (a planted omegaconf/ or verl/) would be imported by every worker, whatever -P and
# PYTHONSAFEPATH do for the driver. verl's outputs that default to the working directory (the file logger without
# VERL_FILE_LOGGER_ROOT, tensorboard_log/, wandb/) land there. Removed at exit unless verl is exec'd in it.
VG_WORKDIR=""
VG_ARGV_FILE=""
vg_enter_workdir() {
  local d
  if ! d=$(mktemp -d "${TMPDIR:-/tmp}/vlgrpo-run.XXXXXX" 2>/dev/null) || ! cd -- "$d"; then
    vg_problem TMPDIR "no private working directory could be made in $(vg_show "${TMPDIR:-/tmp}") (mktemp -d failed)" \
      "point TMPDIR at an existing folder this user can write (or unset it for /tmp)"
    vg_flush_problems
  fi
  VG_WORKDIR=$d
}

# _vg_cleanup — the EXIT trap (vg_signals_on): the device counter's answer file, the preflight's argv file and
# the working directory go.
_vg_cleanup() {
  if [[ -n $VG_ARGV_FILE ]]; then rm -f -- "$VG_ARGV_FILE"; fi
  if [[ -n $VG_DEV_FILE ]]; then rm -f -- "$VG_DEV_FILE"; fi
  if [[ -n $VG_WORKDIR ]]; then
    cd / && rm -rf -- "$VG_WORKDIR"
  fi
  return 0
}

# vg_entry — the whole launch. Called by a recipe after vg_cli has seen every command-line word.
vg_entry() {
  if ((VG_HELP)); then
    VG_PROBLEMS=()
    if [[ -t 1 ]]; then vg_help | vg_help_text; else vg_help; fi
    exit 0
  fi
  vg_signals_on
  vg_read_settings
  if [[ ${VG_VAL[DRY_RUN]-} == True ]]; then VG_DRY_RUN=1; fi
  vg_check_unknown_vars
  vg_build_child_environment
  vg_flush_problems
  vg_image_env
  export RAY_ADDRESS=${VG_VAL[RAY_ADDRESS]:-local}

  vg_detect_node
  vg_flush_problems
  vg_recipe
  vg_trackers
  vg_build_argv
  vg_check_argv
  vg_launch_stop
  vg_flush_problems

  vg_enter_workdir
  vg_cluster
  vg_preflight

  if ((VG_DRY_RUN)); then
    vg_plan
    exit 0 # the EXIT trap removes the working directory
  fi
  printf '%s: launching %s (%s; preflight %s)\n' "$VG_PROG" "${VG_PROGRAM[2]}" "$VG_TOPOLOGY" "$VG_PREFLIGHT_RESULT" >&2
  vg_child_prefix
  trap - INT TERM HUP QUIT USR1 USR2 PIPE EXIT # the working directory stays: it is verl's
  exec "${VG_CHILD_PREFIX[@]}" "${VG_ARGV[@]}"
}
