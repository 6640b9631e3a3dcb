#!/usr/bin/env bats
# What the node is: platform detection, devices per node (/dev/davinci*, npu-smi, nvidia-smi,
# visibility variables, the dry-run planning override) and the checkpoint folder inside a container
# (mountinfo). The /dev, mountinfo and container-marker hooks are set through tests/bats/helpers/
# run-entry.sh; the entrypoints never read them from the environment.

setup() {
  load helpers/common
  common_setup python3 ray
  unset VLGRPO_PLATFORM
  export VLGRPO_DRY_RUN=1
}

davinci() {
  local i
  for ((i = 0; i < $1; i++)); do : >"$T/dev/davinci$i"; done
  : >"$T/dev/davinci_manager" # a control device, not an NPU
}

argv_value() { plan_argv | sed -n "s/^$1=//p"; }

@test "Ascend detected from /dev/davinci[0-9]* (16 on an A3 node): platform npu, 16 per node, fsdp 32" {
  davinci 16
  entry fa
  assert_success
  assert_line '# platform: npu; devices per node on this node: 16 ('"$T"'/dev/davinci[0-9]*)'
  assert_equal "$(argv_value trainer.n_gpus_per_node)" 16
  assert_equal "$(argv_value rollout.n_gpus_per_node)" 16
  assert_equal "$(argv_value actor_rollout_ref.actor.fsdp_config.fsdp_size)" 32
}

@test "Ascend from npu-smi info -l when /dev shows none: A2 (8 x 1 chip) and A3 (8 x 2 chips)" {
  add_stub npu-smi
  STUB_NPU_COUNT=8 STUB_NPU_CHIPS=1 entry vo
  assert_success
  assert_equal "$(argv_value trainer.n_gpus_per_node)" 8
  assert_equal "$(argv_value trainer.experiment_name)" grpo-8gpu
  STUB_NPU_COUNT=8 STUB_NPU_CHIPS=2 entry vo
  assert_success
  assert_equal "$(argv_value trainer.n_gpus_per_node)" 16
}

@test "NVIDIA detected from nvidia-smi -L; CUDA_VISIBLE_DEVICES limits the count" {
  add_stub nvidia-smi
  STUB_GPU_COUNT=8 entry vo
  assert_success
  assert_line --partial '# platform: gpu; devices per node on this node: 8 (nvidia-smi -L)'
  assert_equal "$(argv_value actor_rollout_ref.actor.veomni.fsdp_size)" 16
  STUB_GPU_COUNT=8 CUDA_VISIBLE_DEVICES=0,1,2,3 entry vo
  assert_success
  assert_equal "$(argv_value trainer.n_gpus_per_node)" 4
}

@test "visibility lists read as CUDA/Ray read them: empty hides all, the list ends at an invalid entry, a repeat is refused" {
  add_stub nvidia-smi
  # set but empty: CUDA and Ray see no GPU (Ray would declare 0 and placement would wait forever)
  STUB_GPU_COUNT=8 CUDA_VISIBLE_DEVICES= entry vo
  assert_failure 2
  [[ $stderr == *"error: VLGRPO_PLATFORM: platform gpu but no device found (CUDA_VISIBLE_DEVICES)"* ]] || fail "$stderr"
  STUB_GPU_COUNT=8 CUDA_VISIBLE_DEVICES=NoDevFiles entry vo
  assert_failure 2
  # CUDA stops at the first invalid ordinal: 0,1,-1,3 leaves 2
  STUB_GPU_COUNT=8 CUDA_VISIBLE_DEVICES=0,1,-1,3 VLGRPO_TRAINER_DEVICES_PER_NODE=4 entry vo
  assert_failure 2
  [[ $stderr == *"VLGRPO_TRAINER_DEVICES_PER_NODE: 4 devices per node, but this node has 2 (CUDA_VISIBLE_DEVICES)"* ]] || fail "$stderr"
  # a repeated id is refused (two workers would share a device; field case C06)
  STUB_GPU_COUNT=8 CUDA_VISIBLE_DEVICES=0,0,1,1 entry vo
  assert_failure 2
  [[ $stderr == *"error: CUDA_VISIBLE_DEVICES: CUDA_VISIBLE_DEVICES=0,0,1,1 repeats device 0, 1"*"fix: list each device once"* ]] || fail "$stderr"
  STUB_GPU_COUNT=8 CUDA_VISIBLE_DEVICES=GPU-0a1b2c3d-0000-1111-2222-333344445555,1 entry vo
  assert_success
  assert_equal "$(argv_value trainer.n_gpus_per_node)" 2
  davinci 8
  VLGRPO_PLATFORM=npu ASCEND_RT_VISIBLE_DEVICES= entry fa
  assert_failure 2
  [[ $stderr == *"no device found (ASCEND_RT_VISIBLE_DEVICES)"* ]] || fail "$stderr"
}

@test "C06, C12: unordered, repeated, out-of-range and (under NOSET) shifted Ascend lists are refused naming the list" {
  davinci 8
  ASCEND_RT_VISIBLE_DEVICES=7,6,5,4,3,2,1,0 entry fa
  assert_failure 2
  [[ $stderr == *"error: ASCEND_RT_VISIBLE_DEVICES: ASCEND_RT_VISIBLE_DEVICES=7,6,5,4,3,2,1,0 is not in ascending order"* ]] || fail "$stderr"
  ASCEND_RT_VISIBLE_DEVICES=0,1,3,8 entry fa
  assert_failure 2
  [[ $stderr == *"id 8 is not below the 8 devices this node enumerates"*"fix: use enumeration indices: ASCEND_RT_VISIBLE_DEVICES=0,1,2,3"* ]] || fail "$stderr"
  RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES=1 ASCEND_RT_VISIBLE_DEVICES=4,5,6,7 VLGRPO_TRAINER_DEVICES_PER_NODE=4 entry fa
  assert_failure 2
  [[ $stderr == *"so set_device(4) is out of range"*"fix: give the container only these devices"* ]] || fail "$stderr"
  ASCEND_RT_VISIBLE_DEVICES=4,5,6,7 VLGRPO_TRAINER_DEVICES_PER_NODE=4 VLGRPO_ROLLOUT_DEVICES_PER_NODE=4 entry fa
  assert_success
}

@test "devices per node above what the node has is refused (placement would pend forever)" {
  davinci 8
  VLGRPO_TRAINER_DEVICES_PER_NODE=16 entry fa
  assert_failure 2
  [[ $stderr == *"VLGRPO_TRAINER_DEVICES_PER_NODE: 16 devices per node, but this node has 8"* ]] || fail "$stderr"
  VLGRPO_ROLLOUT_DEVICES_PER_NODE=9 entry fa
  assert_failure 2
  [[ $stderr == *"VLGRPO_ROLLOUT_DEVICES_PER_NODE: 9 devices per node, but this node has 8"* ]] || fail "$stderr"
}

@test "no accelerator and no platform: refused with the planning fix; the planning override is dry-run only" {
  entry fa
  assert_failure 2
  [[ $stderr == *"VLGRPO_PLATFORM: no Ascend NPU"*"VLGRPO_PLAN_DEVICES_PER_NODE=N"* ]] || fail "$stderr"
  VLGRPO_PLATFORM=npu entry fa
  assert_failure 2
  [[ $stderr == *"platform npu but no device found"* ]] || fail "$stderr"
  VLGRPO_PLATFORM=npu VLGRPO_PLAN_DEVICES_PER_NODE=16 entry fa
  assert_success
  unset VLGRPO_DRY_RUN
  davinci 16
  rm -rf "${STUB_LOG:?}"/*
  WANDB_MODE=offline VLGRPO_PLAN_DEVICES_PER_NODE=16 entry fa
  assert_failure 2
  [[ $stderr == *"VLGRPO_PLAN_DEVICES_PER_NODE: a planning override, refused for a real launch"* ]] || fail "$stderr"
  assert_no_python
}

mountinfo() {
  # a realistic container mountinfo: overlay root, proc, shm tmpfs, plus the given extra lines
  {
    printf '%s\n' '612 540 0:52 / / rw,relatime master:297 - overlay overlay rw,lowerdir=/var/lib/docker/overlay2/l/A:/var/lib/docker/overlay2/l/B,upperdir=/var/lib/docker/overlay2/x/diff,workdir=/var/lib/docker/overlay2/x/work'
    printf '%s\n' '613 612 0:55 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw'
    printf '%s\n' '620 612 0:60 / /dev/shm rw,nosuid,nodev,noexec,relatime - tmpfs shm rw,size=65536k'
    printf '%s\n' "$@"
  } >"$T/mountinfo"
  export TEST_MOUNTINFO=$T/mountinfo TEST_CONTAINER_MARKER=$T/.dockerenv
  : >"$T/.dockerenv"
}

@test "in a container the checkpoint folder must be a mount: container layer refused, bind mount accepted" {
  davinci 16
  unset VLGRPO_DRY_RUN
  mountinfo
  entry fa
  assert_failure 2
  [[ $stderr == *"VLGRPO_CHECKPOINT_DIR: $T/ckpt is inside the container's own file system, so checkpoints vanish with the container; fix: mount a host or shared volume there"* ]] || fail "$stderr"
  assert_no_python
  mountinfo "700 612 8:1 /srv/ckpt $T/ckpt rw,relatime - ext4 /dev/sda1 rw"
  entry fa
  assert_success
}

@test "in a container a tmpfs checkpoint mount is refused; a mount point with an escaped space is parsed" {
  davinci 16
  unset VLGRPO_DRY_RUN
  mountinfo "701 612 0:70 / $T/ckpt rw,relatime - tmpfs tmpfs rw"
  entry vo
  assert_failure 2
  [[ $stderr == *"is on a tmpfs mount ($T/ckpt) that does not outlive the container"* ]] || fail "$stderr"
  # an overlay mounted there (a second container layer) vanishes as well
  mountinfo "701 612 0:70 / $T/ckpt rw,relatime - overlay overlay rw,lowerdir=/a,upperdir=/b,workdir=/c"
  entry vo
  assert_failure 2
  [[ $stderr == *"is on a overlay mount ($T/ckpt) that does not outlive the container"* ]] || fail "$stderr"
  # a mount of "$T/ck pt" (octal \040) must not count as a mount of $T/ckpt
  mountinfo "702 612 8:1 /x $T/ck\\040pt rw - ext4 /dev/sda1 rw"
  entry vo
  assert_failure 2
  # a parent folder mounted from the host covers the checkpoint folder (the volume holds nothing else of the
  # launch: a PATH entry on it is refused, as TMPDIR, HOME and PYTHONPATH there are)
  mkdir -p "$T/vol/ckpt" "$T/vol/bin"
  mountinfo "703 612 0:80 / $T/vol rw,relatime - nfs4 server:/export rw"
  VLGRPO_CHECKPOINT_DIR=$T/vol/ckpt entry vo
  assert_success
  VLGRPO_CHECKPOINT_DIR=$T/vol/ckpt run --separate-stderr env "PATH=$T/vol/bin:$PATH" "$HARNESS" "$(recipe_path vo)"
  assert_failure 2
  [[ $stderr == *"error: PATH: has an entry that lies in $T/vol (the checkpoint folder or its volume)"* ]] || fail "$stderr"
}

@test "a container without marker files (Kubernetes: containerd, CRI-O) is told by its overlay root; its layer is refused" {
  davinci 16
  unset VLGRPO_DRY_RUN
  mountinfo
  rm -f "$T/.dockerenv"
  entry fa
  assert_failure 2
  [[ $stderr == *"VLGRPO_CHECKPOINT_DIR: $T/ckpt is inside the container's own file system"* ]] || fail "$stderr"
  assert_no_python
  mountinfo "700 612 8:1 /srv/ckpt $T/ckpt rw,relatime - ext4 /dev/sda1 rw"
  rm -f "$T/.dockerenv"
  entry fa
  assert_success
}

@test "in a container with /proc/self/mountinfo unreadable the checkpoint folder cannot be shown to be a mount: refused" {
  davinci 16
  unset VLGRPO_DRY_RUN
  mountinfo
  export TEST_MOUNTINFO=$T/no-such-mountinfo
  entry fa
  assert_failure 2
  [[ $stderr == *"VLGRPO_CHECKPOINT_DIR: inside a container, and $T/no-such-mountinfo is unreadable"* ]] || fail "$stderr"
  assert_no_python
}

@test "a planning dry run in a container only warns about the checkpoint mount; a plain dry run refuses" {
  mountinfo
  VLGRPO_PLATFORM=npu VLGRPO_PLAN_DEVICES_PER_NODE=16 entry fa
  assert_success
  assert_line --partial "# warning: VLGRPO_CHECKPOINT_DIR: $T/ckpt is inside the container's own file system"
  davinci 16
  entry fa
  assert_failure 2
}

@test "outside a container no mount is required; an unreadable checkpoint path is refused" {
  davinci 16
  # a host: no marker file, root on a disk file system
  printf '%s\n' '27 1 254:0 / / rw,relatime - ext4 /dev/vda rw' '22 27 0:21 / /proc rw,relatime - proc proc rw' >"$T/host-mountinfo"
  export TEST_MOUNTINFO=$T/host-mountinfo
  entry fa
  assert_success
  VLGRPO_CHECKPOINT_DIR=$T/missing entry fa
  assert_failure 2
  [[ $stderr == *"VLGRPO_CHECKPOINT_DIR: $T/missing is not a readable directory"* ]] || fail "$stderr"
}

@test "the real entrypoint file inspects the real node (no hook reachable from the environment)" {
  # TEST_* hooks are read by the test harness only; the real file ignores them
  TEST_DEV_DIR=$T/dev TEST_CONTAINER_MARKER=/nonexistent VLGRPO_PLATFORM=npu VLGRPO_PLAN_DEVICES_PER_NODE=16 direct fa
  if [[ -e /.dockerenv || -e /run/.containerenv ]]; then
    # this machine is a container: the real markers are seen
    assert_success
    assert_line --partial '# warning: VLGRPO_CHECKPOINT_DIR'
  else
    assert_success
  fi
  ! grep -nE 'TEST_(DEV_DIR|MOUNTINFO|CONTAINER_MARKER)' "$REPO_ROOT"/entrypoints/*.sh "$REPO_ROOT"/entrypoints/lib/*.sh "$REPO_ROOT"/python/src/vlgrpo/launch/*.py || fail "an entrypoint reads a test hook variable"
}

@test "checkpoint volume: checkpoint mounts of a non-volume type are refused (devtmpfs, hugetlbfs, fuse-overlayfs, aufs, ramfs)" {
  davinci 16
  unset VLGRPO_DRY_RUN
  local t
  for t in "0:5 / $T/ckpt rw,nosuid - devtmpfs udev rw" "0:40 / $T/ckpt rw,relatime - hugetlbfs hugetlbfs rw,pagesize=2M" \
    "0:41 / $T/ckpt rw - fuse.fuse-overlayfs fuse-overlayfs rw,user_id=0" "0:42 / $T/ckpt rw - aufs none rw" \
    "0:43 / $T/ckpt rw - ramfs ramfs rw" "0:44 / $T/ckpt rw - proc proc rw"; do
    mountinfo "710 612 $t"
    entry fa
    assert_failure 2
    [[ $stderr == *"VLGRPO_CHECKPOINT_DIR: $T/ckpt is on a ${t#* - } "* || $stderr == *"is on a "*" mount ($T/ckpt) that does not outlive the container or is not a volume"* ]] || fail "$t: $stderr"
    assert_no_python
  done
  for t in "xfs /dev/nvme0n1p1 rw" "btrfs /dev/sdb rw" "lustre 10.0.0.1@tcp:/fs rw" "ceph 10.0.0.2:/ rw" "beegfs beegfs_nodev rw" "gpfs gpfs0 rw"; do
    mountinfo "711 612 8:2 / $T/ckpt rw,relatime - $t"
    entry fa
    assert_success
  done
}

@test "checkpoint volume: a folder named 'mnt\\057vol' on the container layer is not taken for the mount mnt/vol (path compared as bytes)" {
  davinci 16
  unset VLGRPO_DRY_RUN
  mkdir -p "$T/mnt/vol" "$T/mnt\\057vol"
  mountinfo "712 612 8:1 /srv $T/mnt/vol rw,relatime - ext4 /dev/sda1 rw"
  # the value itself is refused by its type (no backslash); a symlink to it is what reaches the mount check
  VLGRPO_CHECKPOINT_DIR="$T/mnt\\057vol" entry fa
  assert_failure 2
  ln -s "$T/mnt\\057vol" "$T/link"
  VLGRPO_CHECKPOINT_DIR="$T/link" entry fa
  assert_failure 2
  [[ $stderr == *"VLGRPO_CHECKPOINT_DIR: $T/link is inside the container's own file system"* ]] || fail "$stderr"
  assert_no_python
  VLGRPO_CHECKPOINT_DIR="$T/mnt/vol" entry fa
  assert_success
}

@test "checkpoint volume: a real ext4 loop mount is accepted in a container, the real /dev (devtmpfs) is refused" {
  # mkfs.ext4 lives in /usr/sbin, which the CI's PATH (env -i: /usr/local/bin:/usr/bin:/bin) lacks
  local mkfs
  mkfs=$(PATH=$PATH:/usr/sbin:/sbin command -v mkfs.ext4) || mkfs=""
  [[ $(id -u) == 0 && -n $mkfs ]] || skip "needs root and mkfs.ext4 (CI runs as root)"
  davinci 16
  unset VLGRPO_DRY_RUN
  : >"$T/.dockerenv"
  export TEST_CONTAINER_MARKER=$T/.dockerenv
  unset TEST_MOUNTINFO  # the real /proc/self/mountinfo
  truncate -s 16M "$T/ext4.img"
  "$mkfs" -q -F "$T/ext4.img"
  mkdir -p "$T/vol"
  mount -o loop "$T/ext4.img" "$T/vol" || skip "loop mounts are not permitted here"
  VLGRPO_CHECKPOINT_DIR=$T/vol entry fa
  local rc=$status
  umount "$T/vol"
  ((rc == 0)) || fail "ext4 loop mount refused: $stderr"
  VLGRPO_CHECKPOINT_DIR=/dev entry fa
  assert_failure 2
  [[ $stderr == *"VLGRPO_CHECKPOINT_DIR: /dev is on a devtmpfs mount (/dev)"* || $stderr == *"VLGRPO_CHECKPOINT_DIR: /dev is on a tmpfs mount (/dev)"* ]] || fail "$stderr"
}

@test "checkpoint volume: VLGRPO_RESUME_FROM_PATH outside the checkpoint folder needs a vlgrpo manifest" {
  davinci 16
  mkdir -p "$T/elsewhere/global_step_7" "$T/ckpt/global_step_3"
  VLGRPO_RESUME_MODE=resume_path VLGRPO_RESUME_FROM_PATH=$T/elsewhere/global_step_7 entry fa
  assert_failure 2
  [[ $stderr == *"VLGRPO_RESUME_FROM_PATH: $T/elsewhere/global_step_7 lies outside the checkpoint folder"*"python -m vlgrpo checkpoint trust $T/elsewhere/global_step_7"* ]] || fail "$stderr"
  assert_no_python
  : >"$T/elsewhere/global_step_7/vlgrpo-manifest-trusted.json"
  VLGRPO_RESUME_MODE=resume_path VLGRPO_RESUME_FROM_PATH=$T/elsewhere/global_step_7 entry fa
  assert_success
  VLGRPO_RESUME_MODE=resume_path VLGRPO_RESUME_FROM_PATH=$T/ckpt/global_step_3 entry fa
  assert_success
}
