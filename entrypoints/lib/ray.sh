# shellcheck shell=bash
# Mechanics for entrypoints/ray-node.sh: accelerator discovery, "cards in use" checks, socket-interface
# checks, and the `ray start` argv. Functions only; nothing runs when this file is sourced.
#
# Every function reports a problem by printing one line "ray-node: <VARIABLE>: <what is wrong>; <fix>"
# to stderr and returning 2 (invalid configuration / refused) — the caller exits with that status.
#
# Upstream behaviour mirrored here (Ray 2.48.0, python/ray/_private/accelerators/npu.py): Ray counts Ascend
# NPUs as /dev/davinci[0-9]* and names the resource "NPU"; ASCEND_RT_VISIBLE_DEVICES is set per worker
# unless RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES is set.

# ray_node_die MESSAGE: print one error line.
ray_node_err() {
  printf 'ray-node: %s\n' "$1" >&2
}

# ray_node_count_npus: print the number of Ascend NPU logical devices of this node.
# /dev/davinci[0-9]* first (what Ray itself counts); if none, `npu-smi info -m` (one row per chip with a
# numeric "Chip Logic ID"; MCU rows show "-"). Prints 0 when neither finds any.
ray_node_count_npus() {
  local -a devs=()
  local dev
  for dev in /dev/davinci[0-9]*; do
    [[ -e $dev ]] && devs+=("$dev")
  done
  if ((${#devs[@]} > 0)); then
    printf '%d\n' "${#devs[@]}"
    return 0
  fi
  if command -v npu-smi >/dev/null 2>&1; then
    local out
    if out=$(npu-smi info -m 2>/dev/null); then
      # rows: NPU ID, Chip ID, Chip Logic ID, Chip Name...; count rows whose 3rd field is an integer
      awk '$1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ && $3 ~ /^[0-9]+$/ {n++} END {print n+0}' <<<"$out"
      return 0
    fi
  fi
  printf '0\n'
}

# ray_node_count_gpus: number of NVIDIA GPUs from `nvidia-smi --query-gpu=index` (0 if unavailable).
ray_node_count_gpus() {
  local out
  if command -v nvidia-smi >/dev/null 2>&1 && out=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null); then
    awk '$1 ~ /^[0-9]+$/ {n++} END {print n+0}' <<<"$out"
    return 0
  fi
  printf '0\n'
}

# ray_node_detect_platform: print npu or gpu from what this node has, or nothing.
ray_node_detect_platform() {
  local dev
  for dev in /dev/davinci[0-9]*; do
    if [[ -e $dev ]]; then
      printf 'npu\n'
      return 0
    fi
  done
  if command -v npu-smi >/dev/null 2>&1; then
    printf 'npu\n'
  elif command -v nvidia-smi >/dev/null 2>&1; then
    printf 'gpu\n'
  fi
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
# Checks the syntax and that each name matches an interface under /sys/class/net (skipped for "^" lists).
ray_node_check_ifname() {
  local var=$1 value=$2 exact=$3
  local re='^[=^]?[A-Za-z0-9_.:-]{1,15}(,[A-Za-z0-9_.:-]{1,15})*$'
  if [[ ! $value =~ $re ]]; then
    ray_node_err "$var: ${#value}-character value is not a network interface list; set it to the interface of the cluster network, e.g. $var=eth0"
    return 2
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
      ray_node_err "$var=$value: no network interface named '$name' on this node (have: ${have% }); set $var to one of them"
      return 2
    fi
  done
}
