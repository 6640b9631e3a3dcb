# shellcheck shell=bash
# What an entrypoint does before any Python runs; the launch itself is python/src/vlgrpo/launch/entry.py.
#
# The script runs as `#!/bin/bash -p`: bash reads no BASH_ENV or ENV file, imports no exported function and
# ignores SHELLOPTS and BASHOPTS. Nothing here runs a program found on the inherited PATH (the entrypoint found
# this file from its own path, without realpath or dirname): the interpreter is named by absolute path, by
# VLGRPO_PYTHON when it is set (bare metal), else by lib/interpreter (one line; the images write it at build,
# `make venv` in a checkout). vg_shim reads this process's environment as it was at exec (/proc/$$/environ:
# names bash cannot hold and repeated names included) and replaces the shell with the launcher,
# `PYTHON -I -m vlgrpo.launch entry NAME`, started with an empty environment (`exec -c`: no inherited variable
# acts on the interpreter before the launcher has checked it: LD_LIBRARY_PATH, LD_PRELOAD, OPENSSL_CONF,
# PYTHONEXECUTABLE, which -I does not ignore, a locale); the entries reach it on fd 3, the command-line words as
# its arguments (it judges them), with this folder (--lib: the registry and the recipe files are here in the
# images). The launcher checks the interpreter it runs in, its sys.path and this folder by the path rule.

VG_SHIM_LIB=${BASH_SOURCE[0]%/*}
readonly VG_SHIM_LIB

# vg_shim NAME [WORD...] — exec the launcher for NAME (fully-async-grpo, veomni-grpo, doctor, ray-node).
vg_shim() {
  local name=$1 py=${VLGRPO_PYTHON-}
  shift
  local -a entries=() from=(--environ-fd 3)
  LC_ALL=C
  if [[ -z $py ]] && [[ -f $VG_SHIM_LIB/interpreter ]]; then
    IFS= read -r py <"$VG_SHIM_LIB/interpreter" || true
  fi
  if [[ $py != /* || ! -f $py || ! -x $py ]]; then
    if [[ -n ${VLGRPO_PYTHON-} ]]; then
      printf '%s.sh: error: VLGRPO_PYTHON=%q is not an absolute path to an executable file; name the python3 that has the vlgrpo package by its absolute path; nothing was started\n' "$name" "$py" >&2
    elif [[ -n $py ]]; then
      printf '%s.sh: error: %s names %q, which is not an absolute path to an executable file (a checkout that moved: run make venv again); or set VLGRPO_PYTHON to the absolute path of the python3 that has the vlgrpo package; nothing was started\n' "$name" "$VG_SHIM_LIB/interpreter" "$py" >&2
    else
      printf '%s.sh: error: no interpreter is recorded in %s (the images write it; in a checkout make venv does); set VLGRPO_PYTHON to the absolute path of the python3 that has the vlgrpo package; nothing was started\n' "$name" "$VG_SHIM_LIB/interpreter" >&2
    fi
    exit 2
  fi
  if ! mapfile -d '' -t entries 2>/dev/null </proc/$$/environ; then from=(--environ-unreadable "/proc/$$/environ"); fi
  exec -c "$py" -I -m vlgrpo.launch entry "$name" --lib "$VG_SHIM_LIB" "${from[@]}" -- "$@" 3< <(printf '%s\0' "${entries[@]}")
}
