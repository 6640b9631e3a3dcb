#!/usr/bin/env bats
# The shims' own hardening: before the launcher runs they start no program found on the inherited PATH (no
# realpath, dirname or python3 from it); the interpreter is named by absolute path (VLGRPO_PYTHON, else
# entrypoints/lib/interpreter); the launcher refuses to go on when that interpreter, its sys.path or the
# entrypoints' lib folder can be written by another user (the one path rule). Real entrypoint files, run directly.

setup() {
  load helpers/common
  common_setup
  # every program a shim could be tempted to run from PATH, planted: each writes the canary
  mkdir -p "$T/evil"
  local p
  for p in python3 python realpath dirname readlink env cat bash sh ls uname; do
    printf '#!/bin/sh\necho "%s ran" >>%q\nexit 0\n' "$p" "$CANARY" >"$T/evil/$p"
    chmod +x "$T/evil/$p"
  done
}

# tree — a copy of the entrypoints (shims and lib/, no recorded interpreter) at $T/tree/entrypoints
tree() {
  mkdir -p "$T/tree"
  cp -r "$REPO_ROOT/entrypoints" "$T/tree/"
  rm -f "$T/tree/entrypoints/lib/interpreter"
}

assert_no_canary() {
  [[ ! -e $CANARY ]] || fail "a program from PATH ran: $(cat "$CANARY")"
}

@test "the shims start the recorded interpreter and run nothing from PATH, even a PATH of planted tools first" {
  local f
  [[ -s $REPO_ROOT/entrypoints/lib/interpreter ]] || fail "no entrypoints/lib/interpreter: make venv writes it"
  for f in "$FA" "$VO"; do
    run --separate-stderr /usr/bin/env PATH=$T/evil:/usr/bin:/bin "$f" --help
    assert_success
    [[ $output == *VLGRPO_MODEL_PATH* ]] || fail "no settings table from $f: $output"
    assert_no_canary
  done
  run --separate-stderr /usr/bin/env PATH=$T/evil "$REPO_ROOT/entrypoints/doctor.sh" --help
  assert_success
  assert_no_canary
}

@test "a PATH entry every user can write, or a relative one, holding planted tools: exit 2 naming PATH, none of them ran" {
  local entry
  chmod 0777 "$T/evil"
  for entry in "$T/evil" "evil" "."; do
    rm -f "$CANARY"
    (cd "$T" && run --separate-stderr /usr/bin/env PATH=$entry:/usr/bin:/bin "$FA" --dry-run
      ((status == 2)) || fail "PATH=$entry: exit $status: $stderr"
      [[ $stderr == *"error: PATH: "* ]] || fail "PATH=$entry not named: $stderr")
    assert_no_canary
  done
}

@test "VLGRPO_PYTHON names the interpreter by absolute path; a bare name, a relative path or a folder is exit 2 and runs nothing" {
  local v
  for v in python3 ./python3 ../bin/python3 "$T/evil" "$T/missing/python3"; do
    run --separate-stderr /usr/bin/env VLGRPO_PYTHON=$v PATH=$T/evil:/usr/bin:/bin "$VO" --help
    ((status == 2)) || fail "VLGRPO_PYTHON=$v: exit $status, expected 2: $output $stderr"
    [[ $stderr == *"VLGRPO_PYTHON="*"absolute path"* ]] || fail "VLGRPO_PYTHON=$v: no message naming it: $stderr"
    [[ -z $output ]] || fail "VLGRPO_PYTHON=$v: printed $output"
    assert_no_canary
  done
  run --separate-stderr /usr/bin/env VLGRPO_PYTHON=$REPO_ROOT/.venv/bin/python3 PATH=$T/evil "$VO" --help
  assert_success
  assert_no_canary
}

@test "no recorded interpreter and no VLGRPO_PYTHON: exit 2 naming both fixes; a stale record names the file" {
  tree
  run --separate-stderr /usr/bin/env PATH=$T/evil:/usr/bin:/bin "$T/tree/entrypoints/fully-async-grpo.sh" --help
  ((status == 2)) || fail "exit $status: $stderr"
  [[ $stderr == *"no interpreter is recorded in $T/tree/entrypoints/lib/interpreter"*"set VLGRPO_PYTHON"* ]] ||
    fail "message: $stderr"
  printf '%s\n' "$T/moved/.venv/bin/python3" >"$T/tree/entrypoints/lib/interpreter"
  run --separate-stderr /usr/bin/env PATH=$T/evil:/usr/bin:/bin "$T/tree/entrypoints/veomni-grpo.sh" --help
  ((status == 2)) || fail "exit $status: $stderr"
  [[ $stderr == *"lib/interpreter names $T/moved/.venv/bin/python3"*"make venv"* ]] || fail "message: $stderr"
  assert_no_canary
  # the same copy with VLGRPO_PYTHON starts, and finds the registry of the installed package
  run --separate-stderr /usr/bin/env VLGRPO_PYTHON=$REPO_ROOT/.venv/bin/python3 PATH=$T/evil "$T/tree/entrypoints/veomni-grpo.sh" --help
  assert_success
  assert_no_canary
}

@test "an entrypoint run through a symbolic link is refused before anything runs (its lib/ is not beside the link)" {
  ln -s "$FA" "$T/fa-link.sh"
  run --separate-stderr /usr/bin/env PATH=$T/evil:/usr/bin:/bin "$T/fa-link.sh" --help
  ((status == 2)) || fail "exit $status: $stderr"
  [[ $stderr == *"not a link"* ]] || fail "message: $stderr"
  assert_no_canary
}

@test "a lib folder or a sys.path entry another user can write is refused by the launcher, naming it (the path rule)" {
  tree
  printf '%s\n' "$REPO_ROOT/.venv/bin/python3" >"$T/tree/entrypoints/lib/interpreter"
  chmod g+w "$T/tree/entrypoints/lib"
  run --separate-stderr /usr/bin/env PATH=/usr/bin:/bin "$T/tree/entrypoints/fully-async-grpo.sh" --dry-run
  ((status == 2)) || fail "exit $status: $stderr"
  [[ $stderr == *"error: the interpreter: the entrypoints' lib folder $T/tree/entrypoints/lib can be written by its group"* ]] ||
    fail "message: $stderr"
  chmod g-w "$T/tree/entrypoints/lib"
  # a venv whose site-packages others can write: a copy of the checkout's venv layout is too big; a fresh venv
  # (system site-packages, so the vlgrpo package of the checkout is importable through a .pth) stands in
  /usr/bin/python3 -m venv --without-pip --system-site-packages "$T/venv"
  local site
  site=$("$T/venv/bin/python3" -I -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  printf '%s\n' "$REPO_ROOT/python/src" >"$site/vlgrpo-src.pth"
  chmod o+w "$site"
  run --separate-stderr /usr/bin/env VLGRPO_PYTHON=$T/venv/bin/python3 PATH=/usr/bin:/bin "$FA" --dry-run
  ((status == 2)) || fail "exit $status: $stderr"
  [[ $stderr == *"error: VLGRPO_PYTHON: the sys.path entry $site can be written by every user"* ]] || fail "message: $stderr"
  assert_no_python
}

@test "in an image (lib/image-path written at build) the children get the image's PATH, never the environment's" {
  tree
  printf '%s\n' "$T/bin:/usr/bin:/bin" >"$T/tree/entrypoints/lib/image-path"
  mkdir -p "$T/elsewhere"
  # the environment's PATH names another folder first (and an empty entry, which alone would be refused)
  PATH=$T/bin:$T/elsewhere:$PATH: run --separate-stderr "$HARNESS" "$T/tree/entrypoints/fully-async-grpo.sh" --dry-run
  assert_success
  assert_line "# PATH: the image's (lib/image-path), not the environment's: $T/bin:/usr/bin:/bin"
  call_environ 0 | grep -qx "PATH=$T/bin:/usr/bin:/bin" || fail "$(call_environ 0 | grep ^PATH=)"
  # a checkout (no record): the environment's PATH, checked
  rm -rf "${STUB_LOG:?}"/*
  run --separate-stderr "$HARNESS" "$FA" --dry-run
  assert_success
  refute_line --partial "# PATH: the image's"
  call_environ 0 | grep -qx "PATH=$PATH" || fail "$(call_environ 0 | grep ^PATH=)"
}

# image_code_env FILE-CONTENT... — the tree as an image: lib/image-code-env as the build writes it
image_code_env() {
  tree
  printf '%s\n' "$@" >"$T/tree/entrypoints/lib/image-code-env"
}

@test "in an image (lib/image-code-env written at build) the children get the image's code locations, never the environment's" {
  mkdir -p "$T/imglib" "$T/cuda"
  image_code_env "LD_LIBRARY_PATH=$T/imglib" PYTHONPATH "CUDA_HOME=$T/cuda" ASCEND_TOOLKIT_HOME ASCEND_HOME_PATH \
    ASCEND_OPP_PATH ASCEND_AICPU_PATH ASCEND_CUSTOM_OPP_PATH ATB_HOME_PATH
  # the environment leaves LD_LIBRARY_PATH and CUDA_HOME unset: the children get the image's anyway
  run --separate-stderr /usr/bin/env -u LD_LIBRARY_PATH -u CUDA_HOME "$HARNESS" "$T/tree/entrypoints/fully-async-grpo.sh" --dry-run
  assert_success
  assert_line --partial "# code locations: the image's (lib/image-code-env), not the environment's: LD_LIBRARY_PATH PYTHONPATH(unset) CUDA_HOME"
  call_environ 0 | grep -qx "LD_LIBRARY_PATH=$T/imglib" || fail "$(call_environ 0 | grep ^LD_LIBRARY_PATH=)"
  call_environ 0 | grep -qx "CUDA_HOME=$T/cuda" || fail "$(call_environ 0 | grep ^CUDA_HOME=)"
  ! call_environ 0 | grep -q "^PYTHONPATH=" || fail "PYTHONPATH reached a child"
  # the image's own value in the environment (what `docker run` gives): the same
  rm -rf "${STUB_LOG:?}"/*
  run --separate-stderr /usr/bin/env LD_LIBRARY_PATH="$T/imglib" CUDA_HOME="$T/cuda" "$HARNESS" "$T/tree/entrypoints/fully-async-grpo.sh" --dry-run
  assert_success
  call_environ 0 | grep -qx "LD_LIBRARY_PATH=$T/imglib" || fail "$(call_environ 0 | grep ^LD_LIBRARY_PATH=)"
}

@test "in an image, a code location the environment adds (a folder of yours that the path rule accepts): exit 2 naming it and the image's value" {
  mkdir -p "$T/imglib" "$T/mine" "$T/cuda" "$T/mycuda" "$T/opp"
  image_code_env "LD_LIBRARY_PATH=$T/imglib" PYTHONPATH "CUDA_HOME=$T/cuda"
  local case name want
  for case in "LD_LIBRARY_PATH=$T/mine:$T/imglib" "LD_LIBRARY_PATH=$T/imglib:$T/mine" "PYTHONPATH=$T/mine" \
    "CUDA_HOME=$T/mycuda" "ASCEND_CUSTOM_OPP_PATH=$T/opp" "ATB_HOME_PATH=$T/mine"; do
    name=${case%%=*}
    run --separate-stderr /usr/bin/env "$case" VLGRPO_PASS_ENV="$name" "$HARNESS" "$T/tree/entrypoints/fully-async-grpo.sh" --dry-run
    ((status == 2)) || fail "$case: exit $status: $stderr"
    case $name in
      LD_LIBRARY_PATH) want="the image's is $T/imglib" ;;
      CUDA_HOME) want="the image's is $T/cuda" ;;
      *) want="the image sets none" ;;
    esac
    [[ $stderr == *"error: $name: names "*"which this image's code locations do not ($want; "*"unset $name (the children get the image's value)"* ]] ||
      fail "$case: $stderr"
  done
  [[ $stderr == *"'$T/mine'"* ]] || fail "the foreign entry is not named: $stderr"
}

@test "in an image, a damaged lib/image-code-env: exit 2 saying to rebuild the image" {
  local bad
  for bad in "LD_PRELOAD=$T/x.so" "not a line" $'PYTHONPATH=\xff'; do
    image_code_env "$bad"
    run --separate-stderr "$HARNESS" "$T/tree/entrypoints/fully-async-grpo.sh" --dry-run
    ((status == 2)) || fail "$bad: exit $status: $stderr"
    [[ $stderr == *"error: image: $T/tree/entrypoints/lib/image-code-env "*"rebuild the image"* ]] || fail "$bad: $stderr"
    rm -rf "$T/tree"
  done
}
