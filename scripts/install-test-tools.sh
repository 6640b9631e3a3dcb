#!/usr/bin/env bash
# Install the system tools the test suites need, from Debian's repositories, if they are missing:
# bats-core with bats-support, bats-assert and bats-file (loaded with bats_load_library), GNU parallel (bats --jobs:
# tests/bats/run.sh runs two files at a time), shellcheck, and
# Slurm 22.05 (slurm-wlm: slurmctld, slurmd, the client commands) with munge for tests/slurm (a private
# two-node Slurm on loopback that the test starts itself, by absolute path: the daemons live in /usr/sbin).
set -Eeuo pipefail

# Debian installs system tools such as debootstrap, dockerd, slurmctld, slurmd, munged in /usr/sbin, which the PATH of a
# non-login shell (env -i, cron, CI runners: /usr/local/bin:/usr/bin:/bin) lacks: append the sbin folders, so
# they are found where Debian puts them while a tool earlier on the caller's PATH still wins.
for _sbin in /usr/local/sbin /usr/sbin /sbin; do [[ :$PATH: == *:$_sbin:* ]] || PATH=$PATH:$_sbin; done
unset _sbin

need=()
command -v bats >/dev/null 2>&1 || need+=(bats)
for lib in bats-support bats-assert bats-file; do
  [[ -d /usr/lib/bats/$lib ]] || need+=("$lib")
done
command -v shellcheck >/dev/null 2>&1 || need+=(shellcheck)
command -v parallel >/dev/null 2>&1 || need+=(parallel)
for bin in /usr/sbin/slurmctld /usr/sbin/slurmd /usr/bin/sbatch; do
  [[ -x $bin ]] || { need+=(slurm-wlm); break; }
done
[[ -x /usr/sbin/munged && -x /usr/sbin/mungekey ]] || need+=(munge)

if ((${#need[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "install-test-tools: missing ${need[*]}; run as root or: sudo apt-get install -y ${need[*]}" >&2
    exit 1
  fi
  echo "install-test-tools: apt-get install ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
