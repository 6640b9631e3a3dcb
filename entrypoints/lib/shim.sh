# shellcheck shell=bash
# What a recipe entrypoint does before any Python runs; the launch itself is python/src/vlgrpo/launch/entry.py.
#
# The script runs as `#!/bin/bash -p`: bash reads no BASH_ENV or ENV file, imports no exported function and
# ignores SHELLOPTS and BASHOPTS. vg_shim then reads this process's environment as it was at exec
# (/proc/$$/environ: names bash cannot hold and repeated names included), and replaces the shell with the launcher,
# `python3 -I -m vlgrpo.launch entry RECIPE`, started with an empty environment (`exec -c`: no inherited variable
# acts on the interpreter before the launcher has checked it: LD_LIBRARY_PATH, LD_PRELOAD, OPENSSL_CONF,
# PYTHONEXECUTABLE, which -I does not ignore, a locale); the entries reach it on fd 3, the command-line words as
# its arguments (it refuses all but --help and --dry-run), with this folder (--lib: the image's copy of the
# registry and the recipe files are here). The interpreter is python3 from PATH, found by bash
# (nothing runs to find it), as the images and a bare-metal venv provide it.

VG_SHIM_LIB=${BASH_SOURCE[0]%/*} # the recipe sources this file by its real path
readonly VG_SHIM_LIB

# vg_shim RECIPE [WORD...] — exec the launcher for RECIPE (fully-async-grpo, veomni-grpo).
vg_shim() {
  local recipe=$1 py
  shift
  local -a entries=() from=(--environ-fd 3)
  LC_ALL=C
  if ! py=$(type -P python3); then
    printf '%s.sh: no python3 on PATH; nothing was started (the images have one; elsewhere put the interpreter that has the vlgrpo package first on PATH)\n' "$recipe" >&2
    exit 1
  fi
  if ! mapfile -d '' -t entries 2>/dev/null </proc/$$/environ; then from=(--environ-unreadable "/proc/$$/environ"); fi
  exec -c "$py" -I -m vlgrpo.launch entry "$recipe" --lib "$VG_SHIM_LIB" "${from[@]}" -- "$@" 3< <(printf '%s\0' "${entries[@]}")
}
