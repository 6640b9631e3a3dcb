#!/usr/bin/env bats
# The attack review of the env branch (threat model of the environment and the checkpoint volume: whoever sets the launch's environment or writes
# into the checkpoint volume): each finding as a test of what the children really get (the recording stubs keep
# each child's environment and working directory).

setup() {
  load helpers/common
  common_setup
  DUP=("$REPO_ROOT/.venv/bin/python" "$REPO_ROOT/tests/bats/helpers/dup-env.py")
}

# assert_refused VAR TEXT — exit 2, an error line for VAR that says TEXT and names a fix, no canary value shown,
# nothing of the launch ran
assert_refused() {
  ((status == 2)) || fail "exit $status, expected 2; stderr: $stderr"
  grep -F -- "error: $1: " <<<"$stderr" | grep -qF -- "$2" || fail "no '$1: ... $2' error: $stderr"
  grep -F -- "error: $1: " <<<"$stderr" | grep -q '; fix: ' || fail "no fix named: $stderr"
  [[ $stderr != *canary* ]] || fail "a value was shown: $stderr"
  [[ $stderr != *"internal error"* && $stderr != *Traceback* ]] || fail "crash: $stderr"
  assert_no_python
}

# assert_never_passed NAME VALUE — NAME=VALUE requested in VLGRPO_PASS_ENV: exit 2, "names NAME, which is never
# passed"
assert_never_passed() {
  pass_env "$1"
  run --separate-stderr env "$1=$2" "$HARNESS" "$FA" --dry-run
  ((status == 2)) || fail "$1 requested: exit $status; $stderr"
  grep -qF "error: VLGRPO_PASS_ENV: names $1, which is never passed" <<<"$stderr" || fail "$1: $stderr"
}

# assert_outfile_refused NAME=PATH — a file a library would create or truncate, requested: exit 2 naming NAME with
# the outfile rule's fix
assert_outfile_refused() {
  pass_env "${1%%=*}"
  run --separate-stderr env "$1" "$HARNESS" "$FA" --dry-run
  ((status == 2)) || fail "$1: exit $status; $stderr"
  grep -F "error: ${1%%=*}: " <<<"$stderr" | grep -qF "; fix: name a file that does not exist yet" || fail "$1: $stderr"
}

# cwd_of N — the working directory of the N-th recorded python3 call (1: the preflight, 2: verl)
cwd_of() {
  local f
  f=$(calls | grep 'python3$' | sed -n "$1p")
  [[ -n $f ]] || fail "no python3 call $1: $(calls)"
  cat "$STUB_LOG/$f.cwd"
}

# py_environ N — the environment of the N-th recorded python3 call (1: the preflight, 2: verl), one NAME=VALUE a line
py_environ() {
  local f
  f=$(calls | grep 'python3$' | sed -n "$1p")
  [[ -n $f ]] || fail "no python3 call $1: $(calls)"
  tr '\0' '\n' <"$STUB_LOG/$f.environ"
}

# ---- finding 1: the children's working directory -------------------------------------------------------------

@test "finding 1: the children run in a fresh private folder (0700, empty, this user's), never in the checkpoint folder" {
  local d1 d2
  mkdir -p "$T/ckpt/omegaconf"
  printf 'open(%q, "w").write("ran")\n' "$CANARY" >"$T/ckpt/omegaconf/__init__.py"
  entry fa
  assert_success
  d1=$(cwd_of 1) d2=$(cwd_of 2)
  assert_equal "$d1" "$d2"
  [[ $d1 != "$T/ckpt" && $d1 != "$T/ckpt/"* ]] || fail "the children run in the checkpoint folder: $d1"
  # verl was exec'd in it, so it stays; it holds only the home and caches the launch built (0700 each)
  assert_equal "$(stat -c '%a %u' "$d1")" "700 $(id -u)"
  assert_equal "$(find "$d1" -mindepth 1 -maxdepth 1 -printf '%f %m\n' | sort | tr '\n' ' ')" ".cache 700 .home 700 "
  [[ -z $(find "$d1" -type f) ]] || fail "files in the working folder: $(find "$d1" -type f)"
  [[ $(realpath "$d1") == "$(realpath "${TMPDIR:-/tmp}")"/vlgrpo-run.* ]] || fail "not under TMPDIR: $d1"
  rm -rf -- "$d1"
  # each launch gets its own; a dry run removes it at exit
  rm -rf "${STUB_LOG:?}"/*
  entry vo --dry-run
  assert_success
  d2=$(cwd_of 1)
  [[ $d2 != "$d1" && $d2 != "$T/ckpt"* ]] || fail "$d2"
  assert_line "# working directory of the children: $d2"
  assert_file_not_exists "$d2"
  assert_file_not_exists "$CANARY"
}

# ---- finding 2: a name twice in the environment --------------------------------------------------------------

@test "finding 2: a variable present twice in the environment is refused naming it, whichever copy is hostile" {
  local pair
  for pair in 'PYTHONWARNINGS=ignore|PYTHONWARNINGS=ignore::this.X' \
    'RAY_JOB_CONFIG_JSON_ENV_VAR={}|RAY_JOB_CONFIG_JSON_ENV_VAR={"runtime_env":{"pip":["canary"]}}' \
    'BASH_ENV=/opt/vlgrpo/image/cann-env.sh|BASH_ENV=/tmp/canary.sh' 'MY_TOOL=canary1|MY_TOOL=canary2'; do
    run --separate-stderr "${DUP[@]}" "${pair%%|*}" "${pair#*|}" -- "$HARNESS" "$FA" --dry-run
    assert_refused "${pair%%=*}" "set more than once in the environment"
  done
  # an inherited name given once more (the launch template adds a line the env file already has)
  export NCCL_DEBUG=WARN
  run --separate-stderr "${DUP[@]}" NCCL_DEBUG=canary -- "$HARNESS" "$VO" --dry-run
  assert_refused NCCL_DEBUG "set more than once"
  # and once is fine
  run --separate-stderr "${DUP[@]}" -- "$HARNESS" "$VO" --dry-run
  assert_success
}

# ---- findings 3 and 4: one rule for bash and Python, for the environment and a Ray job's env_vars ------------

@test "finding 3: a checked value with a control character is refused (bash reads one line, Python splits on commas)" {
  local v
  for v in PYTHONWARNINGS=$'ignore\n,ignore::this.X' PYTHONWARNINGS=$'ignore\r' \
    BASH_ENV=$'/opt/vlgrpo/image/cann-env.sh\n' RAY_JOB_CONFIG_JSON_ENV_VAR=$'{}\n' TMPDIR=$'/tmp\n'; do
    run --separate-stderr env "$v" "$HARNESS" "$FA" --dry-run
    assert_refused "${v%%=*}" "control character"
  done
  # a dotted category after a stripped space is still one (warnings._setoption strips each field)
  PYTHONWARNINGS='ignore:: this.X' entry vo --dry-run
  assert_refused PYTHONWARNINGS "dotted warning category"
}

@test "finding 4: a Ray job's env_vars get each row's type check, as the inherited environment does" {
  local j
  mkdir -p "$T/ckpt/tmp"
  for j in '{"runtime_env": {"env_vars": {"PYTHONWARNINGS": "ignore::this.X"}}}' \
    "{\"runtime_env\": {\"env_vars\": {\"BASH_ENV\": \"$T/ckpt/evil.sh\"}}}" \
    "{\"runtime_env\": {\"env_vars\": {\"TMPDIR\": \"$T/ckpt/tmp\"}}}" \
    '{"runtime_env": {"env_vars": {"PYTHONWARNINGS": "ignore\n,ignore::this.X"}}}' \
    '{"runtime_env": {"env_vars": {"NCCL_DEBUG": 1}}}' \
    '{"runtime_env": {"env_vars": {"RAY_JOB_CONFIG_JSON_ENV_VAR": "{\"runtime_env\": {\"pip\": [\"x\"]}}"}}}'; do
    RAY_JOB_CONFIG_JSON_ENV_VAR=$j entry fa --dry-run
    assert_refused RAY_JOB_CONFIG_JSON_ENV_VAR "runtime_env env_vars sets"
  done
  RAY_JOB_CONFIG_JSON_ENV_VAR='{"runtime_env": {"env_vars": {"PYTHONWARNINGS": "ignore::DeprecationWarning", "BASH_ENV": "/opt/vlgrpo/image/cann-env.sh"}}}' entry fa --dry-run
  assert_success
}

# ---- finding 8 (a dropped name does not come back through the image's CANN file): in process, with the file at a
# path of the test's, in tests/python/launch/test_raynode.py

# ---- finding 7: CPython variables that point the import system at a folder -----------------------------------

@test "finding 7: PYTHONPYCACHEPREFIX and PYTHONPLATLIBDIR are refused; no other PYTHON* name passes, even on request" {
  local v
  for v in PYTHONPYCACHEPREFIX PYTHONPLATLIBDIR; do
    run --separate-stderr env "$v=$T/ckpt/canary" "$HARNESS" "$FA" --dry-run
    assert_refused "$v" "value not shown"
  done
  pass_env PYTHONEXECUTABLE
  PYTHONEXECUTABLE=/canary entry vo --dry-run
  assert_refused VLGRPO_PASS_ENV "names PYTHONEXECUTABLE, which is never passed"
}

@test "finding 7: a requested PYTHONPATH, TRITON_HOME or cache folder in the checkpoint folder is refused" {
  local v
  mkdir -p "$T/ckpt/canary" "$T/own"
  for v in PYTHONPATH TRITON_HOME VERL_FILE_LOGGER_ROOT; do
    pass_env "$v"
    run --separate-stderr env "$v=$T/ckpt/canary" "$HARNESS" "$FA" --dry-run
    assert_refused "$v" "the checkpoint folder"
    run --separate-stderr env "$v=$T/own" "$HARNESS" "$FA" --dry-run
    assert_success
    rm -rf "${STUB_LOG:?}"/*
  done
  # the compile caches are the launch's own: a requested one is refused, an inherited one never used
  for v in TORCHINDUCTOR_CACHE_DIR TRITON_CACHE_DIR TORCH_EXTENSIONS_DIR VLLM_CACHE_ROOT; do
    pass_env "$v"
    run --separate-stderr env "$v=$T/own" "$HARNESS" "$FA" --dry-run
    assert_refused VLGRPO_PASS_ENV "names $v, which this entrypoint sets itself"
    pass_env ""
    run --separate-stderr env "$v=$T/ckpt/canary" "$HARNESS" "$FA" --dry-run
    assert_success
    ! call_environ 0 | grep -qx "$v=$T/ckpt/canary" || fail "$v: the inherited value reached a child"
    call_environ 0 | grep -q "^$v=.*/vlgrpo-run\.[^/]*/\.cache/" || fail "$v: not the built cache"
    rm -rf "${STUB_LOG:?}"/*
  done
  pass_env PYTHONPATH
  for v in "$T/own:" ":$T/own" "$T/own::/usr/lib" "$T/own:$T/ckpt/canary"; do
    PYTHONPATH=$v entry fa --dry-run
    ((status == 2)) && [[ $stderr == *"error: PYTHONPATH: has "* ]] || fail "$v: $status $stderr"
  done
}

# ---- findings 5 and 12: TMPDIR and HOME, checked up front -----------------------------------------------------

@test "finding 12: a TMPDIR that does not exist or cannot be written is exit 2 naming it, before the cluster wait" {
  local d
  mkdir -p "$T/ro" && chmod 555 "$T/ro"
  : >"$T/afile"
  for d in "/nonexistent|is not an existing folder" "$T/afile|is not a folder" "$T/ro|this user cannot write" \
    "relative/tmp|is not an absolute path"; do
    [[ $d == "$T/ro|"* && $(id -u) == 0 ]] && continue # root writes anywhere
    TMPDIR=${d%%|*} VLGRPO_RAY_ADDRESS=10.0.0.1:6379 entry fa --dry-run
    assert_refused TMPDIR "${d#*|}"
  done
}

@test "finding 5: TMPDIR in the checkpoint folder or writable by every user is refused; HOME is never taken" {
  mkdir -p "$T/ckpt/home" "$T/ckpt/tmp" "$T/open" "$T/sticky"
  chmod 777 "$T/open"
  chmod 1777 "$T/sticky"
  TMPDIR=$T/ckpt/tmp entry fa --dry-run
  assert_refused TMPDIR "the checkpoint folder"
  TMPDIR=$T/open entry vo --dry-run
  assert_refused TMPDIR "every user can write"
  # an inherited HOME (another user's, a world-writable one, the checkpoint folder) is replaced by a built one
  ln -s "$T/ckpt/home" "$T/link"
  mkdir -p "$T/open/.config/wandb" && printf '[default]\nbase_url = http://attacker.example\n' >"$T/open/.config/wandb/settings"
  for h in "$T/ckpt/home" "$T/link" "$T/open"; do
    rm -rf "${STUB_LOG:?}"/*
    HOME=$h entry vo --dry-run
    assert_success
    call_environ 0 | grep -q '^HOME=.*/vlgrpo-run\.[^/]*/\.home$' || fail "HOME=$h: not the built home: $(call_environ 0 | grep ^HOME=)"
    call_environ 0 | grep -q '^WANDB_CONFIG_DIR=.*/vlgrpo-run\.[^/]*/\.home/\.config/wandb$' || fail "W&B settings folder"
    assert_line --regexp '^# dropped from the environment .* HOME( |$)'
  done
  # a sticky shared folder like /tmp, a home that does not exist (HOME=/nonexistent for a system user) pass
  TMPDIR=$T/sticky HOME=/nonexistent entry fa --dry-run
  assert_success
}

# ---- finding 9: names under a pattern row (NCCL_*, HCCL_*, ASCEND_*, ...) that load code or name peers --------

@test "finding 9: a plugin, library or peer named under NCCL_*/HCCL_*/ASCEND_* passes only on request; paths are checked" {
  local v
  for v in NCCL_ENV_PLUGIN NCCL_GIN_PLUGIN NCCL_RMA_PLUGIN NCCL_IBVERBS_LIB NCCL_COMM_ID NCCL_RAS_ADDR; do
    run --separate-stderr env "$v=canary" "$HARNESS" "$FA" --dry-run
    assert_refused "$v" "passes only when VLGRPO_PASS_ENV names it"
  done
  # named, it reaches the children with its value
  pass_env NCCL_ENV_PLUGIN
  NCCL_ENV_PLUGIN=myenv entry fa --dry-run
  assert_success
  call_environ 0 | grep -qx NCCL_ENV_PLUGIN=myenv || fail "$(call_environ 0)"
  rm -rf "${STUB_LOG:?}"/*
  pass_env
  # a CANN folder: an absolute folder not every user can write passes; a shared one, a relative one or one in
  # the checkpoint folder is refused
  mkdir -p "$T/opp" "$T/open" "$T/ckpt/canary"
  chmod 777 "$T/open"
  ASCEND_OPP_PATH=$T/opp NCCL_SOCKET_IFNAME=eth0 HCCL_IF_IP=10.0.0.2 entry vo --dry-run
  assert_success
  call_environ 0 | grep -qx "ASCEND_OPP_PATH=$T/opp" || fail "$(call_environ 0)"
  rm -rf "${STUB_LOG:?}"/*
  for v in "$T/open|every user can write" "opp|not an absolute path" "$T/ckpt/canary|the checkpoint folder"; do
    ASCEND_CUSTOM_OPP_DIR=${v%%|*} entry vo --dry-run
    assert_refused ASCEND_CUSTOM_OPP_DIR "${v#*|}"
  done
}

@test "finding 6: an empty or shared entry of PATH or LD_LIBRARY_PATH is refused (the working directory, anyone's folder)" {
  mkdir -p "$T/open" && chmod 777 "$T/open"
  LD_LIBRARY_PATH=/usr/lib: entry fa --dry-run
  assert_refused LD_LIBRARY_PATH "empty entry"
  LD_LIBRARY_PATH=$T/open entry fa --dry-run
  assert_refused LD_LIBRARY_PATH "every user can write"
  run --separate-stderr env "PATH=$PATH:" "$HARNESS" "$FA" --dry-run
  assert_refused PATH "empty entry"
  run --separate-stderr env "PATH=$PATH:$T/open" "$HARNESS" "$FA" --dry-run
  assert_refused PATH "every user can write"
}

@test "finding 9: a requested variable without a registry row gets the path rule when its name says path" {
  mkdir -p "$T/open" "$T/mine" && chmod 777 "$T/open"
  pass_env MYTOOL_HOME
  MYTOOL_HOME=$T/open entry fa --dry-run
  assert_refused MYTOOL_HOME "every user can write"
  MYTOOL_HOME=$T/mine entry fa --dry-run
  assert_success
  call_environ 0 | grep -qx "MYTOOL_HOME=$T/mine" || fail "$(call_environ 0)"
}

@test "review A1-A2: Ray's debugger, compiler search paths and W&B's own proxies are never passed; Ray's other names only as numeric core settings" {
  local v
  mkdir -m 700 "$T/inc"
  # Ray's remote debugger: a TCP port any local user can connect to, running what they type in the worker
  for v in RAY_DEBUG RAY_DEBUG_POST_MORTEM RAY_DEBUGGER_EXTERNAL; do
    pass_env "$v"
    run --separate-stderr env "$v=canary1" "$HARNESS" "$FA" --dry-run
    assert_refused "$v" "debugger"
    pass_env
    run --separate-stderr env "$v=canary1" "$HARNESS" "$FA" --dry-run
    assert_refused "$v" "debugger"
  done
  # Ray's other names: requested, a core setting (lower-case) passes with a number only, any other is refused
  for v in RAY_grpc_keepalive_time_ms RAY_preload_python_modules RAY_LOG_DIR RAY_SESSION_DIR; do
    pass_env "$v"
    run --separate-stderr env "$v=canary" "$HARNESS" "$FA" --dry-run
    assert_refused "$v" "Ray"
  done
  pass_env RAY_raylet_start_wait_time_s
  rm -rf "${STUB_LOG:?}"/*
  run --separate-stderr env RAY_raylet_start_wait_time_s=120 "$HARNESS" "$FA" --dry-run
  assert_success
  py_environ 1 | grep -qx RAY_raylet_start_wait_time_s=120 || fail "a numeric Ray core setting did not pass"
  pass_env
  rm -rf "${STUB_LOG:?}"/*
  run --separate-stderr env RAY_raylet_start_wait_time_s=120 "$HARNESS" "$FA" --dry-run
  if py_environ 1 | grep -q '^RAY_raylet_start_wait_time_s='; then fail "an unrequested Ray setting passed"; fi
  # names gcc or W&B act on: requesting one is refused; inherited, each is dropped
  for v in CPATH C_INCLUDE_PATH CPLUS_INCLUDE_PATH LIBRARY_PATH \
    GCC_EXEC_PREFIX COMPILER_PATH CFLAGS LDFLAGS WANDB_HTTPS_PROXY WANDB_HTTP_PROXY; do
    assert_never_passed "$v" "$T/inc"
    pass_env
    rm -rf "${STUB_LOG:?}"/*
    run --separate-stderr env "$v=$T/inc" "$HARNESS" "$FA" --dry-run
    assert_success
    if py_environ 1 | grep -q "^$v=$T/inc\$"; then fail "$v reached a child"; fi
  done
}

@test "review A3: verl's local Ray instance gets a temporary folder the launch made, never /tmp/ray" {
  local long
  rm -rf "${STUB_LOG:?}"/*
  # requested, it is refused (the launch sets it); inherited, the launch's own replaces it
  pass_env RAY_TMPDIR
  run --separate-stderr env RAY_TMPDIR=/tmp "$HARNESS" "$FA" --dry-run
  ((status == 2)) || fail "exit $status"
  grep -qF "error: VLGRPO_PASS_ENV: names RAY_TMPDIR, which this entrypoint sets itself" <<<"$stderr" || fail "$stderr"
  pass_env
  rm -rf "${STUB_LOG:?}"/*
  # a short TMPDIR (Ray's socket paths must fit in 107 bytes under the built folder)
  RAY_TMPDIR=/tmp TMPDIR=/tmp entry fa --dry-run
  assert_success
  py_environ 1 | grep -q '^RAY_TMPDIR=.*/vlgrpo-run\.[^/]*/\.ray$' || fail "$(py_environ 1 | grep RAY_)"
  assert_line --regexp "^# built by the launch .* RAY_TMPDIR=\.ray( |$)"
  # a TMPDIR so long that Ray's socket paths would not fit under the built folder: Ray uses TMPDIR (this user's)
  long=$T/$(printf 'd%.0s' {1..70})
  mkdir -m 700 "$long"
  rm -rf "${STUB_LOG:?}"/*
  TMPDIR=$long entry fa --dry-run
  assert_success
  if py_environ 1 | grep -q '^RAY_TMPDIR='; then fail "RAY_TMPDIR set under a too-long TMPDIR"; fi
  py_environ 1 | grep -qx "TMPDIR=$long" || fail "TMPDIR: $(py_environ 1 | grep TMPDIR)"
}

@test "VLGRPO_CACHE_DIR keeps the launch's caches across launches; a folder others can write is refused" {
  mkdir -m 700 "$T/cache" "$T/open-cache"
  chmod 777 "$T/open-cache"
  VLGRPO_CACHE_DIR=$T/cache entry fa --dry-run
  assert_success
  call_environ 0 | grep -qx "TRITON_CACHE_DIR=$T/cache/triton" || fail "$(call_environ 0 | grep CACHE)"
  call_environ 0 | grep -qx "XDG_CACHE_HOME=$T/cache" || fail "XDG_CACHE_HOME"
  # the home stays the launch's own, and the caches outlive the dry run's working folder
  call_environ 0 | grep -q '^HOME=.*/vlgrpo-run\.[^/]*/\.home$' || fail "HOME"
  assert_equal "$(stat -c %a "$T/cache/triton" "$T/cache/torchinductor" "$T/cache/huggingface/datasets" | sort -u)" 700
  assert_line --regexp "^# built by the launch .*: HOME=\.home .* TRITON_CACHE_DIR=$T/cache/triton "
  rm -rf "${STUB_LOG:?}"/*
  VLGRPO_CACHE_DIR=$T/open-cache entry fa --dry-run
  assert_refused VLGRPO_CACHE_DIR "every user"
  # compiled kernels are loaded from it: not in the checkpoint folder (a link to it neither)
  mkdir -m 700 "$T/ckpt/c"
  ln -s "$T/ckpt/c" "$T/c-link"
  for c in "$T/ckpt/c" "$T/c-link"; do
    rm -rf "${STUB_LOG:?}"/*
    VLGRPO_CACHE_DIR=$c entry fa --dry-run
    assert_refused VLGRPO_CACHE_DIR "the checkpoint folder"
  done
}

@test "review F2: a requested library, plugin or file variable gets the path rule; a good one reaches the children" {
  local v
  mkdir -p "$T/open" "$T/mine" && chmod 777 "$T/open"
  : >"$T/open/lib.so" && : >"$T/mine/lib.so" && : >"$T/mine/ca.pem"
  for v in HCCL_SO_PATH VLLM_NCCL_SO_PATH NCCL_NET_PLUGIN SSL_CERT_FILE NCCL_TOPO_FILE NETRC; do
    pass_env "$v"
    rm -rf "${STUB_LOG:?}"/*
    run --separate-stderr env "$v=$T/open/lib.so" "$HARNESS" "$FA" --dry-run
    assert_refused "$v" "every user can write"
    rm -rf "${STUB_LOG:?}"/*
    run --separate-stderr env "$v=lib.so" "$HARNESS" "$FA" --dry-run
    [[ $v == NCCL_NET_PLUGIN ]] || assert_refused "$v" "not an absolute path"
  done
  rm -rf "${STUB_LOG:?}"/*
  pass_env SSL_CERT_FILE,NCCL_NET_PLUGIN
  SSL_CERT_FILE=$T/mine/ca.pem NCCL_NET_PLUGIN=aws-ofi entry fa --dry-run
  assert_success
  call_environ 0 | grep -qx "SSL_CERT_FILE=$T/mine/ca.pem" || fail "$(call_environ 0)"
  call_environ 0 | grep -qx "NCCL_NET_PLUGIN=aws-ofi" || fail "$(call_environ 0)"
}

@test "review F4, F7: a user name with a path is refused; OpenSSL, glibc and bash variables are never passed, even on request" {
  local v
  run --separate-stderr env "LOGNAME=../../canary" "$HARNESS" "$FA" --dry-run
  assert_refused LOGNAME "not a user name"
  run --separate-stderr env "USER=a/canary" "$HARNESS" "$FA" --dry-run
  assert_refused USER "not a user name"
  for v in OPENSSL_CONF OPENSSL_MODULES LOCPATH GLIBC_TUNABLES PS4 PROMPT_COMMAND; do
    rm -rf "${STUB_LOG:?}"/*
    pass_env
    run --separate-stderr env "$v=$T/canary" "$HARNESS" "$FA" --dry-run
    assert_success
    ! call_environ 0 | grep -q "^$v=" || fail "$v reached the children"
    pass_env "$v"
    rm -rf "${STUB_LOG:?}"/*
    run --separate-stderr env "$v=$T/canary" "$HARNESS" "$FA" --dry-run
    assert_refused VLGRPO_PASS_ENV "names $v, which is never passed"
  done
}

@test "review R1-R3, R5: W&B's other settings, proxies in any other case and the resolver's switches are never passed" {
  local v
  # R1/R2: wandb reads every WANDB_<x> (any case) as a setting: its service socket, server, proxies, TLS checks;
  # R3: Python's HTTP clients read *_proxy in any case; R5: glibc's resolver search domain and options
  for v in WANDB_SERVICE WANDB_base_url WANDB_INSECURE_DISABLE_SSL WANDB__PROXIES WANDB_https_proxy \
    Https_Proxy All_Proxy grpc_proxy FTP_PROXY No_Proxy LOCALDOMAIN RES_OPTIONS RESOLV_HOST_CONF; do
    assert_never_passed "$v" canary
    [[ $stderr != *canary* ]] || fail "a value was shown: $stderr"
    pass_env
    rm -rf "${STUB_LOG:?}"/*
    run --separate-stderr env "$v=canary" "$HARNESS" "$FA" --dry-run
    assert_success
    if py_environ 1 | grep -q "^$v="; then fail "$v reached a child"; fi
  done
  # the typed doors still open
  pass_env WANDB_BASE_URL,HTTPS_PROXY
  run --separate-stderr env WANDB_BASE_URL=https://wandb.example.com HTTPS_PROXY=http://proxy.example:3128 "$HARNESS" "$FA" --dry-run
  assert_success
}

@test "review R4: a debug or dump file NCCL would create or truncate must be new and no dotfile; NCCL values no shell syntax" {
  local v
  mkdir -m 700 "$T/logs" "$T/home"
  : >"$T/logs/existing.log"
  : >"$T/home/.bashrc"
  for v in "NCCL_DEBUG_FILE=$T/home/.bashrc" "NCCL_DEBUG_FILE=$T/logs/.bash_profile" "NCCL_TOPO_DUMP_FILE=$T/logs/existing.log" \
    "TORCH_NCCL_DEBUG_INFO_TEMP_FILE=$T/logs/.profile" "NCCL_GRAPH_DUMP_FILE=relative.xml"; do
    assert_outfile_refused "$v"
  done
  pass_env NCCL_DEBUG_FILE
  run --separate-stderr env "NCCL_DEBUG_FILE=$T/logs/nccl.%h.%p.log" "$HARNESS" "$FA" --dry-run
  assert_success
  # the payload half: shell syntax in the value of a variable under a pattern row (it lands in NCCL's log verbatim)
  pass_env
  rm -rf "${STUB_LOG:?}"/*
  for v in 'NCCL_IB_HCA=mlx5_0;$(touch /tmp/canary)' 'NCCL_SOCKET_IFNAME=eth0`id`' 'HCCL_IF_IP=10.0.0.1|id' \
    'NCCL_DEBUG_SUBSYS=INIT ENV'; do
    run --separate-stderr env "$v" "$HARNESS" "$FA" --dry-run
    assert_refused "${v%%=*}" "holds spaces or shell syntax"
  done
  run --separate-stderr env 'NCCL_IB_HCA==mlx5_0:1,^mlx5_1' "$HARNESS" "$FA" --dry-run
  assert_success
}

@test "review R6-R7: TZ names no file (another user's FIFO hung every child); log levels the stack asserts on are typed" {
  mkfifo "$T/tzfifo"
  local v
  for v in "TZ=$T/tzfifo" "TZ=:$T/tzfifo" "TZ=../../../$T/tzfifo" 'TZ=UTC;id'; do
    run --separate-stderr timeout 60 env "$v" "$HARNESS" "$FA" --dry-run
    assert_refused TZ "set a zone name"
  done
  for v in VERL_LOGGING_LEVEL=bogus VERL_LOGGING_LEVEL=info VLLM_LOGGING_LEVEL=verbose VLLM_LOGGING_LEVEL=10; do
    run --separate-stderr env "$v" "$HARNESS" "$FA" --dry-run
    assert_refused "${v%%=*}" "is not a log level name"
  done
  run --separate-stderr env TZ=Asia/Shanghai VERL_LOGGING_LEVEL=INFO VLLM_LOGGING_LEVEL=debug "$HARNESS" "$FA" --dry-run
  assert_success
}

@test "review S4-S6: TLS-off switches, the Go and OpenTelemetry and pip and loader switches, more files a library writes, a number JSON cannot hold" {
  local v big
  for v in MLFLOW_TRACKING_INSECURE_TLS HF_HUB_INSECURE GODEBUG OTEL_EXPORTER_OTLP_ENDPOINT PIP_TRUSTED_HOST PIP_INDEX_URL \
    LD_DEBUG LD_DEBUG_OUTPUT LD_BIND_NOW LD_BIND_NOT; do
    assert_never_passed "$v" canary
  done
  mkdir -m 700 "$T/logs" "$T/home"
  : >"$T/logs/existing.dump"
  : >"$T/home/.bashrc"
  for v in "TORCH_FR_DUMP_TEMP_FILE=$T/home/.bashrc" "CUDA_COREDUMP_FILE=$T/logs/existing.dump" \
    "CUDA_COREDUMP_FILE=$T/home/.profile" "TORCH_FR_DUMP_TEMP_FILE=fr_"; do
    assert_outfile_refused "$v"
  done
  pass_env CUDA_COREDUMP_FILE
  run --separate-stderr env "CUDA_COREDUMP_FILE=$T/logs/core.%h.%p" "$HARNESS" "$FA" --dry-run
  assert_success
  # S6: JSON whose number int() will not convert (over 4,300 digits): exit 2 naming the variable, no traceback
  pass_env
  big=$(printf '9%.0s' {1..5000})
  for v in "{\"metadata\":{\"a\":$big}}" "[$big]" "{\"runtime_env\":{\"env_vars\":{\"X\":$big}}}" "$big"; do
    rm -rf "${STUB_LOG:?}"/*
    run --separate-stderr env "RAY_JOB_CONFIG_JSON_ENV_VAR=$v" "$HARNESS" "$FA" --dry-run
    assert_refused RAY_JOB_CONFIG_JSON_ENV_VAR "is JSON this check cannot read"
  done
}
