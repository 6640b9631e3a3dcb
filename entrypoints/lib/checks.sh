# shellcheck shell=bash
# vlgrpo entrypoint mechanics: the checkpoint folder's storage (the recipes' cross-field rules are the launcher's:
# python/src/vlgrpo/launch/recipes.py). Each records problems with vg_problem.

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
