# shellcheck shell=bash disable=SC2034 # (arrays here are read by launch.sh and the recipes)
# vlgrpo entrypoint mechanics: the settings allowlist.
#
# Each setting is one row of the registry (python/src/vlgrpo/environment.tsv, loaded by lib/registry.sh,
# which calls `vg_setting NAME TYPE ALLOWED DEFAULT MEANING`); the environment variable is VLGRPO_<NAME>. The
# Hydra keys --help shows are read from the recipe's argv template (`{NAME}` placeholders, see launch.sh); a
# test keeps the registry's hydra column equal to them. Values are validated before anything else touches them, by
# one run of python3 -I -m vlgrpo.launch (vg_read_settings below; the rules: vlgrpo.environment.validate, the
# wording: vlgrpo.launch.settings): no value is ever used in arithmetic, a path test or an argv element before it
# matched its type's pattern.
#
# Types (ALLOWED column):
#   int    "LO..HI" or alternatives "-1|1..64"      decimal, no sign except a literal -1, no leading zeros
#   float  "LO..HI"                                  1e-6, 0.6, 10 (no sign)
#   bool   ""                                        true/false/True/False/1/0 -> True/False
#   enum   "a b c"                                   one of the words
#   list   "a b c"                                   comma-separated subset of the words, no repeats -> [a,b]
#   path   "file" | "dir" | "dirw" | "any"           existing file / directory / writable directory / any;
#                                                    relative paths are made absolute against $PWD
#   name   ""                                        [A-Za-z][A-Za-z0-9._-]*, not a Hydra keyword
#   addr   ""                                        HOST:PORT (hostname or IPv4, port 1-65535)
#   ids    ""                                        comma-separated identifiers [a-z0-9_.-]
#   envnames ""                                      comma-separated variable names (VLGRPO_PASS_ENV)
#   uri    ""                                        http(s)://HOST[:PORT][/PATH] without credentials, or file:///PATH
# DEFAULT: a literal (formatted like a value), "" for "unset" (the template lines that use it are left
# out), or "@function:description" for a value the recipe derives after all settings are read.

# Every problem found is collected, then reported together (one line each) before exit status 2.
VG_PROBLEMS=()
VG_NAMES=()
declare -gA VG_TYPE=() VG_ALLOWED=() VG_DEFAULT=() VG_MEANING=() VG_VAL=() VG_RAW=() VG_SRC=()

readonly VG_EXIT_CONFIG=2 VG_EXIT_FAILURE=1

# vg_setting NAME TYPE ALLOWED DEFAULT MEANING
vg_setting() {
  local name=$1
  if [[ -n ${VG_TYPE[$name]+set} ]]; then
    vg_die_internal "setting $name declared twice"
  fi
  VG_NAMES+=("$name")
  VG_TYPE[$name]=$2
  VG_ALLOWED[$name]=$3
  VG_DEFAULT[$name]=$4
  VG_MEANING[$name]=$5
}

# vg_problem VAR FAULT FIX — one configuration problem; VAR is the full variable name.
vg_problem() {
  VG_PROBLEMS+=("$1: $2; fix: $3")
}

vg_die_internal() {
  printf '%s: internal error: %s (this is a bug in the entrypoint)\n' "${VG_PROG:-vlgrpo}" "$1" >&2
  exit "$VG_EXIT_FAILURE"
}

# Print all collected problems and exit 2 if there are any.
vg_flush_problems() {
  local p
  ((${#VG_PROBLEMS[@]} == 0)) && return 0
  for p in "${VG_PROBLEMS[@]}"; do
    printf '%s: error: %s\n' "${VG_PROG:-vlgrpo}" "$p" >&2
  done
  printf '%s: %d configuration problem(s); nothing was started (see --help)\n' \
    "${VG_PROG:-vlgrpo}" "${#VG_PROBLEMS[@]}" >&2
  exit "$VG_EXIT_CONFIG"
}

# vg_show VALUE — a value made safe to print in a message: shell-quoted, at most 40 characters.
vg_show() {
  local v=$1 q
  if ((${#v} > 40)); then
    printf -v q '%q' "${v:0:40}"
    printf '%s... (%d characters)' "$q" "${#v}"
  else
    printf -v q '%q' "$v"
    printf '%s' "$q"
  fi
}

# vg_allowed_text NAME — the ALLOWED column in words (used by --help and by error messages).
# vg_default_text NAME: the default as the --help tables show it (derived: ..., unset, or the value in backticks).
vg_default_text() {
  local def=${VG_DEFAULT[$1]}
  if [[ $def == @* ]]; then
    printf 'derived: %s' "${def#*:}"
  elif [[ -z $def ]]; then
    printf 'unset'
  else
    # shellcheck disable=SC2016 # Markdown backticks
    printf '`%s`' "$def"
  fi
}

vg_allowed_text() {
  local name=$1 t=${VG_TYPE[$1]} a=${VG_ALLOWED[$1]}
  case $t in
    int | float) printf '%s' "${a//|/ or }" ;;
    bool) printf 'true, false' ;;
    enum) printf '%s' "${a// /, }" ;;
    list) printf 'comma list of: %s' "${a// /, }" ;;
    path)
      case $a in
        file) printf 'existing file' ;;
        dir) printf 'existing directory' ;;
        dirw) printf 'writable directory' ;;
        *) printf 'path' ;;
      esac
      ;;
    name) printf 'letters, digits, . _ - (not a number)' ;;
    addr) printf 'HOST:PORT' ;;
    ids) printf 'comma list of ids' ;;
    envnames) printf 'comma list of variable names' ;;
    ipv4) printf 'IPv4 address' ;;
    uri) printf 'http(s) URL or file: path' ;;
  esac
}

# ---- the settings step: python3 -I -m vlgrpo.launch (python/src/vlgrpo/launch/settings.py) ------------------
# The values, their refusals and the names are checked in Python, by the registry's one value rule
# (vlgrpo.environment.validate): bash hands over the exported VLGRPO_* variables as it sees them (NUL-separated
# NAME=VALUE on stdin, in compgen -e order) and reads back NUL-separated records (v: value, r: raw, s: source,
# p: a value's problem, u: a name's problem, end:), only for the names this entrypoint declared; nothing is
# evaluated. The interpreter is python3 from PATH, as for every other step of the launch, started with an empty
# environment and -I (no user site folder, no working directory on sys.path): the settings step runs before the
# environment is built.
VG_NAME_PROBLEMS=() # u: records, added by vg_check_unknown_vars
VG_SETTINGS_READ=0

# _vg_launch STEP [FLAG] — one request to the launcher, `python3 -I -m vlgrpo.launch serve OWNER --registry FILE --fd 3`,
# a coprocess started on the first request (one interpreter for the settings and the derived step): STEP, the
# working directory, FLAG and VG_LAUNCH_IN (NUL-separated records) go to it; VG_LAUNCH_OUT gets its answer (on its
# fd 3; its stdout goes to stderr, so nothing else it prints can mix with the records) without the final end:
# record. A launcher that does not answer to the end is an internal failure (exit 1). It ends when this shell closes
# its input (vg_launch_stop, or at exec/exit: the coprocess's pipes are not inherited).
VG_LAUNCH_IN=()
VG_LAUNCH_OUT=()
VG_LAUNCH=()
VG_LAUNCH_PID=""
VG_LAUNCH_CWD=""      # the working directory of the first request (PWD is gone once the environment is built)
_vg_launch() {
  local step=$1 flag=${2-} rec w r py ok=0
  VG_LAUNCH_OUT=()
  if [[ -z $VG_LAUNCH_PID ]]; then
    VG_LAUNCH_CWD=${PWD-}
    [[ $VG_LAUNCH_CWD == /* ]] || VG_LAUNCH_CWD=$(pwd)
    # an empty environment: everything the launcher needs comes over the pipe, so no inherited variable acts on its
    # interpreter before the environment was checked (LD_LIBRARY_PATH and LD_PRELOAD for python3's own libraries,
    # OPENSSL_CONF, PYTHONEXECUTABLE, which -I does not ignore, a locale that would decode paths another way); the
    # interpreter is python3 from PATH (found by bash, nothing run to find it)
    py=$(type -P python3) || py=python3
    coproc VG_LAUNCH { env -i "$py" -I -m vlgrpo.launch serve "$VG_OWNER" --registry "$VG_REGISTRY" --fd 3 3>&1 1>&2; }
  fi
  w=${VG_LAUNCH[1]-} r=${VG_LAUNCH[0]-}
  if [[ -n $w && -n $r ]]; then
    # SIGPIPE ignored while writing (a launcher that died is a failed write here, not the end of the launch), then
    # the launch's own trap again (lib/launch.sh vg_signals_on)
    trap '' PIPE
    if printf '%s\0' "$step" "$VG_LAUNCH_CWD" "$flag" "${#VG_LAUNCH_IN[@]}" "${VG_LAUNCH_IN[@]}" 1>&"$w" 2>/dev/null; then
      ok=1
    fi
    if ((VG_SIGNALS)); then trap '_vg_on_signal PIPE 13' PIPE; else trap - PIPE; fi
  fi
  if ((ok)); then
    while IFS= read -r -d '' -u "$r" rec; do
      [[ $rec == end: ]] && return 0
      VG_LAUNCH_OUT+=("$rec")
    done
  fi
  printf '%s: the settings could not be checked (python3 -I -m vlgrpo.launch %s did not finish; python3 must have the vlgrpo package, as the images do); nothing was started\n' \
    "${VG_PROG:-vlgrpo}" "$step" >&2
  exit "$VG_EXIT_FAILURE"
}

# vg_launch_stop — end the launcher coprocess (its input closed, then waited for).
vg_launch_stop() {
  local pid=$VG_LAUNCH_PID w=${VG_LAUNCH[1]-}
  [[ -n $pid ]] || return 0
  if [[ -n $w ]]; then exec {w}>&-; fi
  wait "$pid" 2>/dev/null || true
  VG_LAUNCH_PID=""
}

# _vg_take RECORD — store one v:/r:/s: record of a declared setting (anything else is a bug).
_vg_take() {
  local kind=${1%%:*} kv=${1#*:} name
  name=${kv%%=*}
  [[ -n ${VG_TYPE[$name]+set} ]] || vg_die_internal "vlgrpo.launch answered for ${name@Q}, which is no setting of $VG_PROG"
  case $kind in
    v) VG_VAL[$name]=${kv#*=} ;;
    r) VG_RAW[$name]=${kv#*=} ;;
    s) VG_SRC[$name]=${kv#*=} ;;
  esac
}

# _vg_exported_settings — VG_LAUNCH_IN: NAME=VALUE of every exported VLGRPO_* variable, in compgen -e order.
_vg_exported_settings() {
  local v
  VG_LAUNCH_IN=()
  while IFS= read -r v; do
    case $v in VLGRPO_*) VG_LAUNCH_IN+=("$v=${!v-}") ;; esac
  done < <(compgen -e)
  return 0
}

# vg_read_settings — read every declared VLGRPO_<NAME> from the environment (empty counts as unset), validate it,
# and fill in literal defaults (VG_VAL, VG_RAW, VG_SRC; problems recorded). Derived defaults ("@fn:...") are
# resolved by vg_resolve_derived after the recipe has the other values. The names are checked in the same run
# (vg_check_unknown_vars records those problems).
vg_read_settings() {
  local rec
  _vg_exported_settings
  _vg_launch settings
  for rec in "${VG_LAUNCH_OUT[@]}"; do
    case $rec in
      [vrs]:*) _vg_take "$rec" ;;
      p:*) VG_PROBLEMS+=("${rec#p:}") ;;
      u:*) VG_NAME_PROBLEMS+=("${rec#u:}") ;;
      *) vg_die_internal "vlgrpo.launch settings gave an unknown record" ;;
    esac
  done
  VG_SETTINGS_READ=1
}

# vg_check_unknown_vars — every exported VLGRPO_* must be a setting of this entrypoint, or of a sibling
# entrypoint of the same image (the recipes and ray-node.sh accept and ignore each other's, so one environment
# may configure a container's Ray node and its recipe); otherwise the nearest declared one is named
# (vlgrpo.launch.settings unknown_vars), as vg_read_settings found them.
vg_check_unknown_vars() {
  ((VG_SETTINGS_READ)) || vg_die_internal "vg_check_unknown_vars before vg_read_settings"
  VG_PROBLEMS+=("${VG_NAME_PROBLEMS[@]}")
  VG_NAME_PROBLEMS=()
  return 0
}
