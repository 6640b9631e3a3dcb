# shellcheck shell=bash
# vlgrpo entrypoint mechanics: cross-field checks both recipes share. Each records problems with
# vg_problem; arguments are validated integers.

# vg_check_lengths PROMPT RESPONSE [MAX_MODEL_LEN] — field case B09(a): with max_model_len below
# prompt + response verl does not fail, it clamps each request's max_tokens, so long answers are cut.
vg_check_lengths() {
  local p=$1 r=$2 mml=${3-}
  [[ -n $mml ]] || return 0
  if ((mml < p + r)); then
    vg_problem VLGRPO_MAX_MODEL_LEN "$mml is below max prompt + max response = $p + $r = $((p + r)); verl would silently clamp responses" \
      "set VLGRPO_MAX_MODEL_LEN to at least $((p + r)), or lower VLGRPO_MAX_PROMPT_LENGTH / VLGRPO_MAX_RESPONSE_LENGTH"
  fi
  return 0
}

# vg_check_rollout_layout TP DP EP NNODES PER_NODE — a vLLM replica (TP x DP devices) must fit the
# rollout devices evenly and either sit inside one node or span whole nodes (verl RolloutReplica);
# expert parallel is 1 or TP x DP (verl RolloutConfig asserts this).
vg_check_rollout_layout() {
  local tp=$1 dp=$2 ep=$3 nn=$4 pn=$5
  local rep=$((tp * dp)) world=$((nn * pn))
  if ((world % rep != 0)); then
    vg_problem VLGRPO_ROLLOUT_TP "a vLLM replica of TP x DP = $tp x $dp = $rep devices does not divide the $world rollout devices ($nn x $pn)" \
      "choose the rollout TP (and DP) so that TP x DP divides $world"
  elif ((pn % rep != 0 && rep % pn != 0)); then
    vg_problem VLGRPO_ROLLOUT_TP "a vLLM replica of $rep devices neither fits a node of $pn nor spans whole nodes" \
      "choose TP x DP dividing $pn or a multiple of it"
  fi
  if ((ep != 1 && ep != rep)); then
    vg_problem VLGRPO_ROLLOUT_EP "$ep must be 1 or rollout TP x DP = $rep (verl asserts expert_parallel_size == TP x DP)" \
      "set VLGRPO_ROLLOUT_EP=1 or $rep"
  fi
  return 0
}

# vg_check_resume — resume_path needs a global_step_N folder (verl asserts the name), and a path given
# without that mode would be ignored silently.
vg_check_resume() {
  local mode=${VG_VAL[RESUME_MODE]} path=${VG_VAL[RESUME_FROM_PATH]}
  if [[ $mode == resume_path && -z $path ]]; then
    vg_problem VLGRPO_RESUME_FROM_PATH "unset, but VLGRPO_RESUME_MODE=resume_path" \
      "set it to a checkpoint folder .../global_step_N, or use VLGRPO_RESUME_MODE=auto"
  elif [[ $mode != resume_path && -n $path ]]; then
    vg_problem VLGRPO_RESUME_FROM_PATH "set, but VLGRPO_RESUME_MODE=$mode ignores it" \
      "set VLGRPO_RESUME_MODE=resume_path, or unset VLGRPO_RESUME_FROM_PATH"
  elif [[ -n $path && ${path##*/} != global_step_* ]]; then
    vg_problem VLGRPO_RESUME_FROM_PATH "$path is not a global_step_N folder (verl requires that name)" \
      "point it at .../global_step_N inside the checkpoint folder"
  elif [[ -n $path ]]; then
    # outside the checkpoint folder only with a manifest (its contents are checked before loading, C03)
    local real root
    real=$(realpath -e -- "$path" 2>/dev/null) || real=$path
    root=$(realpath -e -- "${VG_VAL[CHECKPOINT_DIR]-}" 2>/dev/null) || root=${VG_VAL[CHECKPOINT_DIR]-}
    if [[ $real != "$root"/* ]] && ! compgen -G "$real/vlgrpo-manifest-*.json" >/dev/null; then
      vg_problem VLGRPO_RESUME_FROM_PATH "$path lies outside the checkpoint folder $root and carries no vlgrpo manifest, so nothing shows who wrote it (its files are unpickled at resume)" \
        "copy it into VLGRPO_CHECKPOINT_DIR, or check it and run: python -m vlgrpo checkpoint trust $path"
    fi
  fi
  return 0
}

# File-system types that hold a checkpoint volume (field case C03; the checkpoint-volume threat model): disk and network/cluster file
# systems. An allowlist: anything else (tmpfs, ramfs, devtmpfs, hugetlbfs, overlay, aufs, fuse-overlayfs, proc,
# sysfs, ...) vanishes with the container or the node, or is not a volume at all.
VG_VOLUME_FS='^(ext2|ext3|ext4|xfs|btrfs|zfs|f2fs|jfs|nfs|nfs4|lustre|gpfs|ceph|cephfs|fuse\.ceph|beegfs|glusterfs|fuse\.glusterfs|cifs|smb3|virtiofs|wekafs|fuse\.juicefs|fuse\.s3fs|fuse\.gcsfuse)$'
VG_VOLUME_FS_LIST="ext4, xfs, btrfs, zfs, f2fs, nfs/nfs4, lustre, gpfs, cephfs, beegfs, glusterfs, cifs, virtiofs, wekafs"

# vg_mount_of PATH — prints "MOUNTPOINT<TAB>FSTYPE" of the deepest mount containing PATH, from VG_MOUNTINFO
# (proc(5) mountinfo: field 5 is the mount point with the kernel's octal escapes \040 \011 \012 \134, the field
# after " - " the file-system type). PATH reaches awk through the environment, not -v (which would decode
# backslash escapes: a folder named 'mnt\057vol' would pass for 'mnt/vol'); LC_ALL=C compares bytes.
vg_mount_of() {
  VG_MOUNT_PATH=$1 LC_ALL=C awk '
    function unescape(s,   out, i, c) {
      out = ""
      for (i = 1; i <= length(s); i++) {
        c = substr(s, i, 1)
        if (c == "\\" && substr(s, i + 1, 3) ~ /^[0-7][0-7][0-7]$/) {
          out = out sprintf("%c", (substr(s, i + 1, 1) * 64) + (substr(s, i + 2, 1) * 8) + substr(s, i + 3, 1))
          i += 3
        } else out = out c
      }
      return out
    }
    BEGIN { p = ENVIRON["VG_MOUNT_PATH"] }
    {
      mp = unescape($5); fs = ""
      for (i = 6; i <= NF; i++) if ($i == "-") { fs = $(i + 1); break }
      inside = (mp == "/") || (p == mp) || (index(p, mp "/") == 1)
      if (inside && length(mp) >= length(best)) { best = mp; bestfs = fs }
    }
    END { if (best != "") printf "%s\t%s\n", best, bestfs }' "$VG_MOUNTINFO"
}

# vg_check_checkpoint_dir VAR DIR — DIR (already validated as an existing directory) must take a real write,
# and inside a container it must be a mount of its own, of a volume file-system type (VG_VOLUME_FS). Free space
# against one checkpoint's size is checked by the preflight (it knows the model).
vg_check_checkpoint_dir() {
  local var=$1 dir=$2 probe mount mp fs real
  if ! probe=$(mktemp "$dir/.vlgrpo-write-test.XXXXXX" 2>/dev/null); then
    vg_problem "$var" "$dir is not writable by uid $(id -u)" \
      "mount it read-write and make it writable for this user (checkpoints go there)"
    return 0
  fi
  rm -f -- "$probe"
  vg_in_container || return 0
  if [[ ! -r $VG_MOUNTINFO ]]; then
    vg_problem "$var" "inside a container, and $VG_MOUNTINFO is unreadable, so $dir cannot be shown to be a mount" \
      "run with /proc mounted (the default for docker and podman)"
    return 0
  fi
  # mountinfo lists real paths: resolve symlinks (a symlink into a mount is fine).
  real=$(realpath -e -- "$dir")
  mount=$(vg_mount_of "$real")
  mp=${mount%$'\t'*} fs=${mount##*$'\t'}
  if [[ -z $mount || $mp == / ]]; then
    _vg_storage_problem "$var" "$dir is inside the container's own file system, so checkpoints vanish with the container" \
      "mount a host or shared volume there (docker run -v HOST_DIR:$dir, or a compose volume)"
  elif ! [[ $fs =~ $VG_VOLUME_FS ]]; then
    _vg_storage_problem "$var" "$dir is on a $fs mount ($mp) that does not outlive the container or is not a volume (accepted file systems: $VG_VOLUME_FS_LIST)" \
      "mount a persistent host or shared volume at $dir"
  fi
}

# A planning dry run (VLGRPO_PLAN_DEVICES_PER_NODE) describes another machine, so this container's
# storage only earns a warning in the plan; every other run refuses.
_vg_storage_problem() {
  if ((${VG_DRY_RUN:-0})) && [[ -n ${VG_VAL[PLAN_DEVICES_PER_NODE]-} ]]; then
    VG_NOTES+=("warning: $1: $2 (planning dry run: not refused here; a launch on this machine would be)")
  else
    vg_problem "$1" "$2" "$3"
  fi
}
