# shellcheck shell=bash disable=SC2034 # (arrays here are read by settings.sh, environment.sh and the recipes)
# vlgrpo entrypoint mechanics: the launch environment registry (python/src/vlgrpo/environment.tsv; in the
# images a copy next to this file, docker/*.Dockerfile). One row per variable a launch reads, sets or passes;
# the same file is read by the Python side (vlgrpo.environment), so a setting or a rule exists once.
#
# vg_registry_load OWNER (node: ray-node.sh) declares OWNER's VLGRPO_* settings in file order (vg_setting, so
# --help keeps that order), records which entrypoint owns each other setting (VG_OWNERS) and this entrypoint's
# `set` rows (VG_SET); the other kinds are the launcher's (python/src/vlgrpo/launch/childenv.py).

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
# _vg_has_owner LIST TOKEN — TOKEN is one of the comma-separated LIST
_vg_has_owner() { [[ ,$1, == *,"$2",* ]]; }

# vg_registry_load OWNER
vg_registry_load() {
  local owner=$1 name own kind type allowed def hydra meaning fix short
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
        _vg_has_owner "$own" "$owner" || continue
        vg_setting "$short" "$type" "$allowed" "$def" "$meaning"
        VG_HYDRA[$short]=${hydra#-}
        VG_READERS[$short]=$own
        continue
        ;;
      set)
        if _vg_has_owner "$own" "$owner"; then
          VG_SET[$name]=${def:--}
          VG_SET_NAMES+=("$name")
        fi
        ;;
      pass | pass-on-request | drop | refused) ;; # the launcher's (python/src/vlgrpo/launch/childenv.py)
      *) vg_die_internal "registry row $name has unknown kind $kind" ;;
    esac
  done <"$VG_REGISTRY"
  return 0
}
