# shellcheck shell=bash disable=SC2034,SC2153 # (globals from settings.sh)
# vlgrpo entrypoint mechanics that ray-node.sh still runs in bash: the experiment trackers' settings, the stop
# signals with the children of the checks, the plan's W&B line and the --help wrapper. The recipe entrypoints are
# shims over the launcher (lib/shim.sh; python/src/vlgrpo/launch/entry.py holds their launch).

VG_DRY_RUN=0

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

# vg_signals_on — install the traps (before the first check), and the EXIT trap that removes the
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

# _vg_cleanup — the EXIT trap (vg_signals_on): the device counter's answer file goes.
_vg_cleanup() {
  if [[ -n $VG_DEV_FILE ]]; then rm -f -- "$VG_DEV_FILE"; fi
  return 0
}
