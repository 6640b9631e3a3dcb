# shellcheck shell=bash disable=SC2034 # (arrays here are read by launch.sh and the recipes)
# vlgrpo entrypoint mechanics: the settings allowlist.
#
# Each setting is one row of the registry (python/src/vlgrpo/environment.tsv, loaded by lib/registry.sh,
# which calls `vg_setting NAME TYPE ALLOWED DEFAULT MEANING`); the environment variable is VLGRPO_<NAME>. The
# Hydra keys --help shows are read from the recipe's argv template (`{NAME}` placeholders, see launch.sh); a
# test keeps the registry's hydra column equal to them. Values are validated here before anything else touches them: no value is ever used in
# arithmetic, a path test or an argv element before it matched its type's pattern.
#
# Types (ALLOWED column):
#   int    "LO..HI" or alternatives "-1|1..64"      decimal, no sign except a literal -1, no leading zeros
#   float  "LO..HI"                                  1e-6, 0.6, 10 (no sign); bounds checked with awk
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
readonly VG_MAX_LEN=1024

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

# vg_settings_rows — NAME<TAB>TYPE<TAB>ALLOWED<TAB>DEFAULT<TAB>MEANING per declared setting (allowed values and
# default in words, as --help shows them, without Markdown backticks): scripts/gen-docs builds the env file
# template from it.
vg_settings_rows() {
  local name d
  for name in "${VG_NAMES[@]}"; do
    d=$(vg_default_text "$name")
    printf '%s\t%s\t%s\t%s\t%s\n' "$name" "${VG_TYPE[$name]}" "$(vg_allowed_text "$name")" "${d//\`/}" "${VG_MEANING[$name]}"
  done
}

# Generic shape check shared by every type: printable ASCII without spaces, bounded length.
_vg_plain_ascii() {
  local v=$1 LC_ALL=C
  ((${#v} <= VG_MAX_LEN)) || return 1
  [[ $v != *[![:graph:]]* ]]
}

# _vg_int_in RANGE VALUE — VALUE (already matched the int pattern) lies in one of the alternatives.
_vg_int_in() {
  local spec=$1 v=$2 alt lo hi
  local -a alts
  IFS='|' read -r -a alts <<<"$spec"
  for alt in "${alts[@]}"; do
    if [[ $alt == *..* ]]; then
      lo=${alt%%..*} hi=${alt##*..}
      if ((v >= lo && v <= hi)); then return 0; fi
    elif [[ $v == "$alt" ]]; then
      return 0
    fi
  done
  return 1
}

_vg_float_in() {
  local lo=${1%%..*} hi=${1##*..}
  awk -v x="$2" -v lo="$lo" -v hi="$hi" 'BEGIN { exit !((x + 0) >= (lo + 0) && (x + 0) <= (hi + 0)) }'
}

# vg_validate NAME RAW — sets VG_VAL[NAME] to the formatted value, or records a problem.
vg_validate() {
  local name=$1 raw=$2 var="VLGRPO_$1" t=${VG_TYPE[$1]} a=${VG_ALLOWED[$1]} LC_ALL=C
  local allowed=${VG_ALLOWED[$1]// /, } # the words of the ALLOWED column, for messages
  allowed=${allowed//|/ or }
  if ! _vg_plain_ascii "$raw"; then
    vg_problem "$var" "value $(vg_show "$raw") contains spaces, control or non-ASCII characters, or is longer than $VG_MAX_LEN" \
      "use a plain value ($(vg_allowed_text "$name"))"
    return 0
  fi
  case $t in
    int)
      if [[ $raw =~ ^(-1|0|[1-9][0-9]{0,8})$ ]] && _vg_int_in "$a" "$raw"; then
        VG_VAL[$name]=$raw
      else
        vg_problem "$var" "$(vg_show "$raw") is not an integer in $allowed" "set a decimal integer in $allowed (no sign, no leading zeros)"
      fi
      ;;
    float)
      if [[ $raw =~ ^(0|[1-9][0-9]{0,8})(\.[0-9]{1,9})?([eE]-?[0-9]{1,2})?$ ]] && _vg_float_in "$a" "$raw"; then
        VG_VAL[$name]=$raw
      else
        vg_problem "$var" "$(vg_show "$raw") is not a number in $allowed" "set a decimal number such as 0.5 or 1e-6 in $allowed"
      fi
      ;;
    bool)
      case $raw in
        true | True | 1) VG_VAL[$name]=True ;;
        false | False | 0) VG_VAL[$name]=False ;;
        *) vg_problem "$var" "$(vg_show "$raw") is not a boolean" "set true or false" ;;
      esac
      ;;
    enum)
      if [[ $raw =~ ^[a-z0-9_]+$ && " $a " == *" $raw "* ]]; then
        VG_VAL[$name]=$raw
      else
        vg_problem "$var" "$(vg_show "$raw") is not one of $allowed" "set one of: $allowed"
      fi
      ;;
    list)
      local -a items
      local item seen=" " ok=1
      if [[ $raw =~ ^[a-z0-9_]+(,[a-z0-9_]+)*$ ]]; then
        IFS=, read -r -a items <<<"$raw"
        for item in "${items[@]}"; do
          if [[ " $a " != *" $item "* || $seen == *" $item "* ]]; then ok=0; fi
          seen+="$item "
        done
      else
        ok=0
      fi
      if ((ok)); then
        VG_VAL[$name]="[$raw]"
      else
        vg_problem "$var" "$(vg_show "$raw") is not a comma list of distinct values from: ${a// /, }" \
          "set e.g. ${a%% *} or ${a%% *},${a#* }; no brackets, quotes or spaces"
        VG_VAL[$name]=${VG_VAL[$name]-}
      fi
      ;;
    path) _vg_validate_path "$name" "$raw" ;;
    name)
      # Hydra would turn a number-like word or true/false/null/nan/inf into a non-string.
      if [[ $raw =~ ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$ && ! $raw =~ ^([0-9][0-9_]*(\.[0-9_]*)?|\.[0-9][0-9_]*)([eE]-?[0-9_]+)?$ && ! ${raw,,} =~ ^(true|false|null|nan|inf)$ ]]; then
        VG_VAL[$name]=$raw
      else
        vg_problem "$var" "$(vg_show "$raw") is not a plain name" \
          "use 1-128 letters, digits, '.', '_' or '-' (starting with a letter or digit, not a number, not true/false/null)"
      fi
      ;;
    addr)
      local host="" port=""
      if [[ $raw =~ ^([^:]{1,253}):([1-9][0-9]{0,4})$ ]]; then host=${BASH_REMATCH[1]} port=${BASH_REMATCH[2]}; fi
      if [[ -n $port ]] && ((port <= 65535)) && _vg_host "$host"; then
        VG_VAL[$name]="$host:$port"
      else
        vg_problem "$var" "$(vg_show "$raw") is not HOST:PORT (HOST a dotted-quad IPv4 address without leading zeros or a hostname)" \
          "set the Ray head's GCS address, e.g. 10.0.0.1:6379 or ray-head:6379 (the resolver reads 010.0.0.1 as 8.0.0.1, 10.1 as 10.0.0.1, 167772161 as 10.0.0.1)"
      fi
      ;;
    ids)
      if [[ $raw =~ ^[a-z0-9][a-z0-9_.-]{0,63}(,[a-z0-9][a-z0-9_.-]{0,63}){0,31}$ ]]; then
        VG_VAL[$name]=$raw
      else
        vg_problem "$var" "$(vg_show "$raw") is not a comma list of ids" "use ids of lower-case letters, digits, '_', '.', '-' separated by commas"
      fi
      ;;
    envnames)
      local -a vars=()
      local one dup=""
      local -A have=()
      if [[ $raw =~ ^[A-Za-z_][A-Za-z0-9_]{0,127}(,[A-Za-z_][A-Za-z0-9_]{0,127}){0,63}$ ]]; then
        IFS=, read -r -a vars <<<"$raw"
        for one in "${vars[@]}"; do
          [[ -n ${have[$one]+x} ]] && dup=$one
          have[$one]=1
        done
      fi
      if ((${#vars[@]})) && [[ -z $dup ]]; then
        VG_VAL[$name]=$raw
      else
        vg_problem "$var" "$(vg_show "$raw") is not a comma list of distinct variable names" \
          "list names such as NCCL_NET_PLUGIN,PYTHONPATH (letters, digits, '_'; at most 64)"
      fi
      ;;
    uri)
      # http(s)://HOST[:PORT][/PATH] (HOST as for addr; no user:password@, query or fragment) or file:///PATH, file:/PATH;
      # a file: store's folder is checked by vlgrpo.trackers (the path rule)
      local ure='^https?://([^/:@?#]{1,253})(:([1-9][0-9]{0,4}))?(/[A-Za-z0-9._~/-]*)?$' fre='^file:(///|/)([A-Za-z0-9._-][A-Za-z0-9._/-]*)?$' uok=0 uh up
      if [[ $raw =~ $ure ]]; then
        uh=${BASH_REMATCH[1]} up=${BASH_REMATCH[3]-}
        if _vg_host "$uh" && { [[ -z $up ]] || ((up <= 65535)); }; then uok=1; fi
      elif [[ $raw =~ $fre ]]; then
        uok=1
      fi
      if ((uok)); then
        VG_VAL[$name]=$raw
      elif [[ $raw == *@* ]]; then
        vg_problem "$var" "holds credentials (user:password@ or a token; value not shown): a URL is printed in plans and logs" \
          "set the URL without them; credentials go in MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN)"
      else
        vg_problem "$var" "$(vg_show "$raw") is not an http(s)://HOST[:PORT][/PATH] URL without credentials, query or fragment, nor a file:///PATH" \
          "set e.g. http://mlflow:5000 or file:///checkpoints/mlruns; credentials go in MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN)"
      fi
      ;;
    ipv4)
      # no leading zeros: inet_aton and some resolvers read 010 as octal (8), others as decimal
      local o='(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])'
      if [[ $raw =~ ^$o\.$o\.$o\.$o$ ]]; then
        VG_VAL[$name]=$raw
      else
        vg_problem "$var" "$(vg_show "$raw") is not an IPv4 address" "set a dotted-quad address such as 10.0.0.2 (0-255, no leading zeros)"
      fi
      ;;
    *) vg_die_internal "setting $name has unknown type $t" ;;
  esac
}

# _vg_host HOST — HOST is a dotted-quad IPv4 address (four decimal parts 0-255, no leading zeros) or a hostname
# (RFC 1123 labels of letters, digits and '-', 1-63 characters, not starting or ending with '-'; the last label
# has a letter and is not a hexadecimal number). Anything else that glibc's inet_aton still reads as an address --
# 010.0.0.1 (octal: 8.0.0.1), 0x0a.0.0.1, 167772161, 10.1 (10.0.0.1) -- is refused: the launch would join a
# different host than the one written.
_vg_host() {
  local h=$1 o='(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])' l='[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?' last
  [[ $h =~ ^$o\.$o\.$o\.$o$ ]] && return 0
  [[ $h =~ ^($l\.)*$l$ ]] || return 1
  last=${h##*.}
  [[ $last == *[A-Za-z]* && ! $last =~ ^0[xX][0-9A-Fa-f]*$ ]]
}

# Paths: plain characters only (Hydra reads ',' as a sweep, '=' and quotes as syntax, '$' as
# interpolation, a leading '~' or '+' or '-' as something else), then made absolute without resolving
# symlinks, then the kind checked.
_vg_validate_path() {
  local name=$1 raw=$2 var="VLGRPO_$1" kind=${VG_ALLOWED[$1]} abs
  if ! [[ $raw =~ ^[A-Za-z0-9._/][A-Za-z0-9._/-]*$ ]]; then
    vg_problem "$var" "path $(vg_show "$raw") has characters the launch cannot pass safely" \
      "use a path of letters, digits, '/', '.', '_' and '-' only (no spaces, commas, '=', quotes, '~', '\$')"
    return 0
  fi
  if [[ $raw == /* ]]; then abs=$raw; else abs=$PWD/$raw; fi
  abs=$(realpath -s -m -- "$abs")
  if ! [[ $abs =~ ^/[A-Za-z0-9._/-]*$ ]]; then
    vg_problem "$var" "relative path $(vg_show "$raw") resolves to $(vg_show "$abs"), which has characters Hydra cannot take" \
      "give an absolute path of plain characters"
    return 0
  fi
  case $kind in
    file)
      if [[ ! -f $abs || ! -r $abs ]]; then
        vg_problem "$var" "$abs is not a readable file" "point it at an existing file (mount it into the container)"
        return 0
      fi
      ;;
    dir | dirw)
      if [[ ! -d $abs || ! -r $abs ]]; then
        vg_problem "$var" "$abs is not a readable directory" "create it or mount it (e.g. docker -v HOST_DIR:$abs)"
        return 0
      fi
      ;;
  esac
  VG_VAL[$name]=$abs
}

# vg_read_settings — read every declared VLGRPO_<NAME> from the environment (empty counts as unset),
# validate it, and fill in literal defaults. Derived defaults ("@fn:...") are resolved by
# vg_resolve_derived after the recipe has the other values.
vg_read_settings() {
  local name var raw def
  for name in "${VG_NAMES[@]}"; do
    var="VLGRPO_$name"
    raw=${!var-}
    def=${VG_DEFAULT[$name]}
    if [[ -n $raw ]]; then
      VG_RAW[$name]=$raw
      VG_SRC[$name]="env"
      vg_validate "$name" "$raw"
    elif [[ $def == @* ]]; then
      VG_SRC[$name]=derived
      VG_VAL[$name]=""
    elif [[ -n $def ]]; then
      VG_SRC[$name]=default
      VG_RAW[$name]=$def
      vg_validate "$name" "$def"
    else
      VG_SRC[$name]="unset"
      VG_VAL[$name]=""
    fi
  done
}

# vg_resolve_derived — for each setting left to a derived default, call its function; the function
# prints the raw value (it may use VG_VAL of other settings), which is then validated like user input.
# The settings a function reads (each VG_VAL[NAME] in its body) are its inputs: while one of them has no
# value the derived one has none either (that input's own problem is reported), and a derived value out
# of range is reported with the inputs it came from, not as a value of a variable the user never set.
vg_resolve_derived() {
  local name def fn raw n input from
  for name in "${VG_NAMES[@]}"; do
    [[ ${VG_SRC[$name]} == derived ]] || continue
    def=${VG_DEFAULT[$name]}
    fn=${def#@}
    fn=${fn%%:*}
    [[ -n $fn ]] || continue # determined by the entrypoint itself (e.g. PLATFORM)
    _vg_derived_inputs "$fn"
    for input in "${VG_INPUTS[@]}"; do
      [[ -n ${VG_VAL[$input]-} ]] || continue 2
    done
    raw=$("$fn")
    if [[ -z $raw ]]; then
      VG_VAL[$name]=""
      continue
    fi
    VG_RAW[$name]=$raw
    n=${#VG_PROBLEMS[@]}
    vg_validate "$name" "$raw"
    ((${#VG_PROBLEMS[@]} > n)) || continue
    VG_PROBLEMS=("${VG_PROBLEMS[@]:0:n}")
    from=""
    for input in "${VG_INPUTS[@]}"; do
      from+="${from:+, }VLGRPO_$input=${VG_VAL[$input]}"
      if [[ ${VG_SRC[$input]-} == derived ]]; then from+=" (${VG_DEFAULT[$input]#*:})"; fi
    done
    vg_problem "VLGRPO_$name" "not set, so derived as ${def#*:} = $(vg_show "$raw") from $from, which is not in $(vg_allowed_text "$name")" \
      "change those settings, or set VLGRPO_$name to a value in $(vg_allowed_text "$name")"
  done
}

# _vg_derived_inputs FN — VG_INPUTS: the settings function FN reads (VG_VAL[NAME] in its body), in order.
VG_INPUTS=()
_vg_derived_inputs() {
  local body re='VG_VAL\[([A-Z][A-Z0-9_]*)\]'
  VG_INPUTS=()
  body=$(declare -f "$1")
  while [[ $body =~ $re ]]; do
    [[ " ${VG_INPUTS[*]} " == *" ${BASH_REMATCH[1]} "* ]] || VG_INPUTS+=("${BASH_REMATCH[1]}")
    body=${body#*"${BASH_REMATCH[0]}"}
  done
}

# vg_check_unknown_vars — every exported VLGRPO_* must be a setting of this entrypoint, or of a sibling
# entrypoint of the same image (the recipes and ray-node.sh accept and ignore each other's, so one environment
# may configure a container's Ray node and its recipe); otherwise name the nearest declared one. `VLGRPO_` itself
# (an empty name, as a blank line of an env-file template gives) is an error like any other.
# shellcheck disable=SC2153 # VG_OWNER is set by lib/registry.sh
vg_check_unknown_vars() {
  local v short owners LC_ALL=C
  local -a unknown=()
  local -A best=()
  while IFS= read -r v; do
    [[ $v == VLGRPO_* ]] || continue
    short=${v#VLGRPO_}
    if [[ -z $short ]]; then
      vg_problem VLGRPO_ "no setting name after VLGRPO_ (an env-file line with an empty name gives this)" \
        "remove the VLGRPO_= line, or complete the name (--help lists the settings)"
      continue
    fi
    [[ -n ${VG_TYPE[$short]+set} ]] && continue
    if [[ $short != "${short^^}" && -n ${VG_OWNERS[${short^^}]+x} ]]; then
      _vg_near_miss "$v" "VLGRPO_${short^^}" "only by case" # lib/environment.sh
      continue
    fi
    owners=${VG_OWNERS[$short]-}
    if [[ -n $owners ]]; then
      # the doctor runs with the recipes' env file (compose): their settings are accepted and not passed
      if [[ $VG_OWNER == doctor ]]; then continue; fi
      if [[ $VG_OWNER == node ]] && { _vg_has_owner "$owners" fa || _vg_has_owner "$owners" vo; }; then continue; fi
      if [[ $VG_OWNER != node ]] && _vg_has_owner "$owners" node; then continue; fi
      vg_problem "$v" "a setting of $(_vg_owner_prog "$owners"), not of $VG_PROG" \
        "unset it for this recipe (keep one env file per recipe)"
      continue
    fi
    unknown+=("$short")
  done < <(compgen -e)
  ((${#unknown[@]})) || return 0
  vg_nearest unknown best
  for short in "${unknown[@]}"; do
    vg_problem "VLGRPO_$short" "not a setting of $VG_PROG (unknown VLGRPO_ variable)" \
      "unset it${best[$short]:+, or did you mean VLGRPO_${best[$short]}?} (--help lists the settings)"
  done
  return 0
}

# _vg_owner_prog OWNERS — the entrypoint file names of a registry owner list (fa, vo, node; others skipped).
_vg_owner_prog() {
  local o out="" own
  local -a list=()
  IFS=, read -r -a list <<<"$1"
  for o in "${list[@]}"; do
    case $o in fa) own=fully-async-grpo.sh ;; vo) own=veomni-grpo.sh ;; node) own=ray-node.sh ;; *) continue ;; esac
    [[ " $out " == *" $own "* ]] || out+="${out:+ and }$own"
  done
  printf '%s' "$out"
}

# vg_nearest WORDS_ARRAY RESULT_ASSOC — for each word (a setting name without VLGRPO_, at most 64 characters) the
# declared setting with the smallest edit distance (Levenshtein; the first in --help order on a tie), when at most
# about a third of the word differs (distance * 3 <= length + 2); words with nothing that close get no entry.
# One awk process for all the words; a candidate whose length alone differs by more than the bound is skipped and a
# distance stops as soon as a row of the table exceeds it, so any input takes milliseconds (the bash loop this
# replaces took 25.6 s for 20 unknown names of 62 characters).
vg_nearest() {
  local -n _words=$1 _best=$2
  local w c
  while IFS=$'\t' read -r w c; do
    [[ -n $w && -n $c ]] && _best["$w"]=$c
  done < <({ printf '%s\n' "${VG_NAMES[@]}" ""; printf '%s\n' "${_words[@]}"; } | LC_ALL=C awk '
    function lev(a, b, lim,    la, lb, i, j, ca, x, m, prev, cur) {
      la = length(a); lb = length(b)
      for (j = 0; j <= lb; j++) prev[j] = j
      for (i = 1; i <= la; i++) {
        cur[0] = i; m = i; ca = substr(a, i, 1)
        for (j = 1; j <= lb; j++) {
          x = prev[j - 1] + (ca != substr(b, j, 1))
          if (prev[j] + 1 < x) x = prev[j] + 1
          if (cur[j - 1] + 1 < x) x = cur[j - 1] + 1
          cur[j] = x
          if (x < m) m = x
        }
        if (m > lim) return lim + 1
        for (j = 0; j <= lb; j++) prev[j] = cur[j]
      }
      return prev[lb]
    }
    !words { if ($0 == "") { words = 1 } else { cand[++n] = $0 }; next }
    length($0) <= 64 {
      lim = int((length($0) + 2) / 3); best = ""
      for (k = 1; k <= n; k++) {
        dl = length(cand[k]) - length($0)
        if (dl > lim || -dl > lim) continue
        d = lev($0, cand[k], lim)
        if (d <= lim) { best = cand[k]; lim = d - 1 }
        if (lim < 0) break
      }
      if (best != "") print $0 "\t" best
    }')
  return 0
}
