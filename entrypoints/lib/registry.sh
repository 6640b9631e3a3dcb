# shellcheck shell=bash disable=SC2034 # (arrays here are read by settings.sh, environment.sh and the recipes)
# vlgrpo entrypoint mechanics: the launch environment registry (python/src/vlgrpo/environment.tsv; in the
# images a copy next to this file, docker/*.Dockerfile). One row per variable a launch reads, sets or passes;
# the same file is read by the Python side (vlgrpo.environment), so a setting or a rule exists once.
#
# vg_registry_load OWNER (fa, vo, node or doctor) declares OWNER's VLGRPO_* settings in file order (vg_setting, so
# --help keeps that order), records which entrypoint owns each other setting (VG_OWNERS) and loads the rows
# of the other kinds for vg_env_row (exact names and '*' patterns).

VG_REGISTRY=""
for VG_REGISTRY in "$VG_LIB_DIR/environment.tsv" "$VG_LIB_DIR/../../python/src/vlgrpo/environment.tsv"; do
  [[ -f $VG_REGISTRY ]] && break
done
readonly VG_REGISTRY

VG_OWNER=""               # fa | vo | node: whose view of the registry was loaded
declare -gA VG_OWNERS=()  # setting NAME (no VLGRPO_) -> owners of every row of that name, comma-joined
declare -gA VG_HYDRA=()   # setting NAME -> the registry's Hydra keys (';'-separated), for the template test
declare -gA VG_READERS=() # setting NAME -> its owner column (readers beyond the entrypoints, e.g. patches)
declare -gA VG_SET=()     # variable -> value this entrypoint sets for its children ("-": computed by the code)
VG_SET_NAMES=()           # the same names, in file order
# env rows: exact name -> row fields; patterns kept in order of decreasing literal length
declare -gA VG_E_KIND=() VG_E_TYPE=() VG_E_ALLOWED=() VG_E_MEANING=() VG_E_FIX=() VG_E_OWNER=()
VG_E_PATTERNS=()

# _vg_has_owner LIST TOKEN — TOKEN is one of the comma-separated LIST
_vg_has_owner() { [[ ,$1, == *,"$2",* ]]; }

# vg_registry_load OWNER
vg_registry_load() {
  local owner=$1 name own kind type allowed def hydra meaning fix short
  local -a pats=()
  VG_OWNER=$owner
  [[ -r $VG_REGISTRY ]] || vg_die_internal "the registry $VG_REGISTRY is missing or unreadable"
  while IFS=$'\t' read -r name own kind type allowed def hydra meaning fix; do
    [[ -z $name || $name == '#'* || $name == name ]] && continue
    [[ $allowed == - ]] && allowed=""
    [[ $def == - ]] && def=""
    case $kind in
      setting)
        short=${name#VLGRPO_}
        VG_OWNERS[$short]+="${VG_OWNERS[$short]:+,}$own"
        # the doctor's view: the settings it reads and the patch switches (its patches check reports them)
        _vg_has_owner "$own" "$owner" || { [[ $owner == doctor ]] && _vg_has_owner "$own" patches; } || continue
        vg_setting "$short" "$type" "$allowed" "$def" "$meaning"
        VG_HYDRA[$short]=${hydra#-}
        VG_READERS[$short]=$own
        continue
        ;;
      set)
        if _vg_has_owner "$own" "$owner"; then
          VG_SET[$name]=${def:--}
          VG_SET_NAMES+=("$name")
          # this entrypoint's own row wins over a pass row of the same name
        else
          continue
        fi
        ;;
      pass | pass-on-request | drop | refused)
        # a set row of this entrypoint (loaded earlier or later) keeps precedence
        [[ -n ${VG_SET[$name]+x} ]] && continue
        ;;
      *) vg_die_internal "registry row $name has unknown kind $kind" ;;
    esac
    if [[ $name == *'*'* ]]; then
      pats+=("${#name} $name")
    fi
    VG_E_KIND[$name]=$kind VG_E_TYPE[$name]=${type#-} VG_E_ALLOWED[$name]=$allowed
    VG_E_MEANING[$name]=$meaning VG_E_FIX[$name]=${fix#-} VG_E_OWNER[$name]=$own
  done <"$VG_REGISTRY"
  # longer patterns first (the '*' count too); equal lengths in reverse byte order (C locale), as in Python
  local p
  VG_E_PATTERNS=()
  while IFS= read -r p; do VG_E_PATTERNS+=("${p#* }"); done < <(printf '%s\n' "${pats[@]}" | LC_ALL=C sort -rn)
  return 0
}

# vg_env_row NAME — sets REPLY to the registry key (exact name or pattern) whose rule applies to NAME for this
# entrypoint, or "" when no row does (then the variable is dropped unless VLGRPO_PASS_ENV names it).
vg_env_row() {
  local n=$1 p
  if [[ -n ${VG_E_KIND[$n]+x} ]]; then
    REPLY=$n
    return 0
  fi
  for p in "${VG_E_PATTERNS[@]}"; do
    # shellcheck disable=SC2053 # p is a glob pattern on purpose
    if [[ $n == $p ]]; then
      REPLY=$p
      return 0
    fi
  done
  REPLY=""
}

# vg_env_names KIND — the registry names (exact names and patterns) of KIND in this entrypoint's view, as one
# Markdown list (`A`, `B*`, ...), in file order.
vg_env_names() {
  local name own kind rest out=""
  while IFS=$'\t' read -r name own kind rest; do
    [[ $kind == "$1" && -n ${VG_E_KIND[$name]+x} && ${VG_E_KIND[$name]} == "$1" ]] || continue
    [[ " $out " == *" \`$name\`, "* ]] && continue
    out+="\`$name\`, "
  done <"$VG_REGISTRY"
  printf '%s' "${out%, }"
}

# vg_env_table — every row of the registry that is not a setting, as a Markdown table (docs/settings.md).
vg_env_table() {
  local name own kind type allowed def hydra meaning fix
  # shellcheck disable=SC2016 # Markdown backticks
  printf '| Variable | Kind | Read or set by | Check | Meaning | Fix |\n|---|---|---|---|---|---|\n'
  while IFS=$'\t' read -r name own kind type allowed def hydra meaning fix; do
    [[ -z $name || $name == '#'* || $name == name || $kind == setting ]] && continue
    [[ $kind == set && $def != - ]] && meaning="\`$name=$def\`: $meaning"
    # shellcheck disable=SC2016 # Markdown backticks
    printf '| `%s` | %s | %s | %s | %s | %s |\n' "${name//|/\\|}" "$kind" "$own" "${type#-}" "${meaning//|/\\|}" "${fix#-}"
  done <"$VG_REGISTRY"
}
