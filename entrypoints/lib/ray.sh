# shellcheck shell=bash
# Mechanics for entrypoints/ray-node.sh that the recipes do not need: who holds the cards, and whether a
# socket-interface setting names an interface of this node. Functions only; nothing runs when sourced.
# Settings validation and device counting are the shared ones of lib/settings.sh and lib/node.sh.
#
# Upstream behaviour mirrored here (Ray 2.48.0, python/ray/_private/accelerators/npu.py): Ray counts Ascend
# NPUs as /dev/davinci[0-9]* and names the resource "NPU"; ASCEND_RT_VISIBLE_DEVICES is set per worker
# unless RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES is set.

# ray_node_err MESSAGE: print one error line (runtime refusals; configuration problems use vg_problem).
ray_node_err() {
  printf 'ray-node: %s\n' "$1" >&2
}

# ray_node_npu_holders: print "NPU <id> chip <chip>: pid <pid> <name>" for each process in the process
# table of `npu-smi info`. Returns 0 when the table was read, 3 when npu-smi failed; a failure whose
# output carries -8005 or -8020 (device busy / held by another container) returns 4.
ray_node_npu_holders() {
  local out rc=0
  out=$(npu-smi info 2>&1) || rc=$?
  if [[ $out == *-8005* || $out == *-8020* ]]; then
    return 4
  fi
  if ((rc != 0)); then
    return 3
  fi
  # The process table follows the header line that names "Process id"; a busy row looks like
  # "| 2       0                 | 1333928       | python3         | 37709                   |".
  awk -F'|' '
    /Process id/ { table = 1; next }
    table && NF >= 5 {
      split($2, a, " "); pid = $3; name = $4
      gsub(/ /, "", pid); gsub(/^ +| +$/, "", name)
      if (a[1] ~ /^[0-9]+$/ && pid ~ /^[0-9]+$/) printf "NPU %s chip %s: pid %s %s\n", a[1], a[2], pid, name
    }' <<<"$out"
}

# ray_node_gpu_holders: print "GPU <uuid>: pid <pid> <name>" per compute process (nvidia-smi).
ray_node_gpu_holders() {
  local out
  out=$(nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name --format=csv,noheader 2>&1) || return 3
  awk -F', *' 'NF >= 3 && $2 ~ /^[0-9]+$/ {printf "GPU %s: pid %s %s\n", $1, $2, $3}' <<<"$out"
}

# ray_node_check_ifname VAR VALUE EXACT: VALUE is an interface list as NCCL/HCCL read it (optional leading
# "^" to exclude or "=" for exact names, comma-separated names; names are prefixes unless "=" or EXACT=1).
# Checks the syntax and that each name matches an interface under /sys/class/net (skipped for "^" lists);
# records problems with vg_problem.
ray_node_check_ifname() {
  local var=$1 value=$2 exact=$3
  local re='^[=^]?[A-Za-z0-9_.:-]{1,15}(,[A-Za-z0-9_.:-]{1,15})*$'
  if [[ ! $value =~ $re ]]; then
    vg_problem "$var" "$(vg_show "$value") is not a network interface list" \
      "set it to the interface of the cluster network, e.g. $var=eth0"
    return 0
  fi
  [[ $value == ^* ]] && return 0
  [[ $value == =* ]] && exact=1
  local names=${value#=} name ifc found
  local -a list=()
  IFS=, read -r -a list <<<"$names"
  for name in "${list[@]}"; do
    found=0
    for ifc in /sys/class/net/*; do
      ifc=${ifc##*/}
      if [[ $ifc == "$name" ]] || { [[ $exact != 1 ]] && [[ $ifc == "$name"* ]]; }; then
        found=1
        break
      fi
    done
    if ((found == 0)); then
      local have="" n
      for n in /sys/class/net/*; do have+="${n##*/} "; done
      vg_problem "$var" "no network interface $(vg_show "$name") on this node (it has: ${have% })" "set $var to one of them"
      return 0
    fi
  done
}
