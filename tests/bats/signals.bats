#!/usr/bin/env bats
# Signals during the checks: SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 or SIGPIPE sent to the
# entrypoint's pid alone -- what `docker stop` (SIGTERM to PID 1) and `docker kill -s` do -- while the preflight
# or `vlgrpo cluster wait` runs must end the launch with 128+signal within 2 s, leave no process of that child
# behind (its own children included), and exec nothing.
#
# The entrypoint is started with job control on (set -m), so that, like PID 1 of a container, it does not begin
# with SIGINT ignored (bash ignores SIGINT in a job started with & from a non-interactive shell). The slow step
# is a stand-in python3 that starts a grandchild (`sleep`, which ignores SIGINT as every such background job
# does) and waits; every other python3 call goes to the recording stub.

setup() {
  load helpers/common
  common_setup
  mkdir -p "$T/rec"
  mv "$T/bin/python3" "$T/rec/python3"
  SIG=$T/sig
  mkdir -p "$SIG"
}

teardown() {
  local f
  for f in "$SIG"/*.pid; do [[ -s $f ]] && kill -KILL "$(cat "$f")" 2>/dev/null; done
  return 0
}

# slow_step preflight|wait|devices — python3 hangs in that step (`vlgrpo preflight`, `vlgrpo cluster wait`, or the
# device counter `vlgrpo devices`, as it does while npu-smi hangs)
slow_step() {
  cat >"$T/bin/python3" <<EOF
#!/usr/bin/env bash
args=("\$@") i=0
while [[ \${args[i]-} == -P || \${args[i]-} == -s ]]; do i=\$((i + 1)); done
step="\${args[i]-} \${args[i + 1]-} \${args[i + 2]-} \${args[i + 3]-}"
if [[ \$step == "-m vlgrpo preflight "* && $1 == preflight || \$step == "-m vlgrpo cluster wait" && $1 == wait ||
  \$step == "-m vlgrpo devices "* && $1 == devices ]]; then
  sleep 60 &
  echo \$! >"$SIG/grandchild.pid"
  echo \$\$ >"$SIG/child.pid"
  wait
  exit 0
fi
exec "$T/rec/python3" "\$@"
EOF
  chmod +x "$T/bin/python3"
}

# alive PID — the process exists and is not a zombie
alive() {
  local s
  s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  s=${s##*) }
  [[ -n $s && ${s%% *} != Z ]]
}

# signal_during STEP SIGNAL RECIPE — start RECIPE, send SIGNAL to its pid alone once STEP's child runs; sets
# status, $elapsed (milliseconds from the signal to the exit) and $T/out, $T/err.
signal_during() {
  local step=$1 sig=$2 recipe=$3 pid i t0
  slow_step "$step"
  set -m
  # started as PID 1 of a container starts, with every disposition at its default, whatever this test run
  # inherited (nohup ignores SIGHUP; a job started with & from a script ignores SIGINT; bash cannot trap a
  # signal that was ignored when it started)
  env --default-signal "$HARNESS" "$(recipe_path "$recipe")" >"$T/out" 2>"$T/err" &
  pid=$!
  set +m
  for ((i = 0; i < 300; i++)); do [[ -s $SIG/child.pid && -s $SIG/grandchild.pid ]] && break; sleep 0.1; done
  [[ -s $SIG/child.pid ]] || fail "the $step child never started: $(cat "$T/err")"
  t0=${EPOCHREALTIME/./}
  kill -s "$sig" "$pid"
  for ((i = 0; i < 100; i++)); do alive "$pid" || break; sleep 0.05; done
  elapsed=$(((${EPOCHREALTIME/./} - t0) / 1000))
  if alive "$pid"; then
    kill -KILL "$pid"
    fail "the entrypoint was still running 5 s after SIG$sig during the $step"
  fi
  status=0
  wait "$pid" || status=$?
}

# assert_stopped SIGNAL NUMBER — exit 128+NUMBER within 2 s, the child and its child gone, nothing else ran
assert_stopped() {
  local sig=$1 num=$2
  ((status == 128 + num)) || fail "SIG$sig: exit $status, expected $((128 + num)); stderr: $(cat "$T/err")"
  echo "# SIG$sig: exit $status ${elapsed} ms after the signal" >&3
  ((elapsed < 2000)) || fail "SIG$sig: the launch ended ${elapsed} ms after the signal (limit 2000 ms)"
  sleep 0.2 # the reaping of the killed processes
  ! alive "$(cat "$SIG/child.pid")" || fail "SIG$sig: the child $(cat "$SIG/child.pid") is still running"
  ! alive "$(cat "$SIG/grandchild.pid")" || fail "SIG$sig: the child's own child is still running"
  [[ $(calls) != *python3* ]] || fail "SIG$sig: python3 ran after the signal: $(calls)"
  grep -q "stopped by SIG$sig" "$T/err" || fail "SIG$sig: no message on stderr: $(cat "$T/err")"
  [[ ! -s $T/out ]] || fail "SIG$sig: stdout is not empty: $(cat "$T/out")"
}

@test "SIGINT to the entrypoint during the preflight: exit 130 within 2 s, no child left, nothing exec'd" {
  signal_during preflight INT fa
  assert_stopped INT 2
}

@test "SIGTERM to the entrypoint during the preflight: exit 143 within 2 s, no child left, nothing exec'd" {
  signal_during preflight TERM vo
  assert_stopped TERM 15
}

@test "SIGHUP to the entrypoint during the preflight: exit 129 within 2 s, no child left, nothing exec'd" {
  signal_during preflight HUP fa
  assert_stopped HUP 1
}

@test "SIGINT to the entrypoint during vlgrpo cluster wait: exit 130 within 2 s, no child left, nothing exec'd" {
  export VLGRPO_RAY_ADDRESS=10.0.0.1:6379
  signal_during wait INT vo
  assert_stopped INT 2
}

@test "SIGTERM to the entrypoint during vlgrpo cluster wait: exit 143 within 2 s, no child left, nothing exec'd" {
  export VLGRPO_RAY_ADDRESS=10.0.0.1:6379
  signal_during wait TERM fa
  assert_stopped TERM 15
}

@test "SIGHUP to the entrypoint during vlgrpo cluster wait: exit 129 within 2 s, no child left, nothing exec'd" {
  export VLGRPO_RAY_ADDRESS=10.0.0.1:6379
  signal_during wait HUP vo
  assert_stopped HUP 1
}

@test "SIGTERM to the entrypoint while the device counter hangs (npu-smi): exit 143 within 2 s, no child left" {
  signal_during devices TERM fa
  assert_stopped TERM 15
}

@test "SIGINT to the entrypoint while the device counter hangs: exit 130 within 2 s, no child left" {
  signal_during devices INT vo
  assert_stopped INT 2
}

@test "SIGHUP to the entrypoint while the device counter hangs: exit 129 within 2 s, no child left" {
  signal_during devices HUP fa
  assert_stopped HUP 1
}

@test "after the checks the signals are verl's: the launch execs with SIGINT, SIGTERM and SIGHUP at their defaults" {
  # the exec'd program (the recording stub) reports the dispositions it started with
  cat >"$T/bin/python3" <<EOF
#!/usr/bin/env bash
grep -E '^Sig(Ign|Cgt):' /proc/\$\$/status >"$SIG/status.last"
exec "$T/rec/python3" "\$@"
EOF
  chmod +x "$T/bin/python3"
  set -m
  env --default-signal "$HARNESS" "$FA" >"$T/out" 2>"$T/err" &
  local pid=$! ign
  set +m
  wait "$pid" || fail "launch failed: $(cat "$T/err")"
  # the last python3 call is the launch of verl
  [[ $(calls | tail -n 1) == *python3 && $(call_argv "$(($(calls | wc -l) - 1))") == *verl* ]] || fail "no launch: $(calls)"
  ign=$(sed -n 's/^SigIgn:[[:space:]]*//p' "$SIG/status.last")
  # bits 1 (HUP), 2 (INT), 15 (TERM) of the ignored mask are clear
  (((16#$ign & ((1 << 0) | (1 << 1) | (1 << 14))) == 0)) || fail "verl starts with SigIgn $ign"
}


# The other signals that end a process (or that bash ignores: SIGQUIT): before, SIGQUIT was ignored and the launch
# went on to exec verl; SIGUSR1, SIGUSR2 and SIGPIPE ended bash alone and left the preflight (its own process group)
# running.
@test "SIGQUIT to the entrypoint during the preflight: exit 131 within 2 s, no child left, nothing exec'd" {
  signal_during preflight QUIT fa
  assert_stopped QUIT 3
}

@test "SIGUSR1 to the entrypoint during the preflight: exit 138 within 2 s, no child left, nothing exec'd" {
  signal_during preflight USR1 vo
  assert_stopped USR1 10
}

@test "SIGPIPE to the entrypoint during the preflight: exit 141 within 2 s, no child left, nothing exec'd" {
  signal_during preflight PIPE fa
  assert_stopped PIPE 13
}

@test "SIGUSR2 to the entrypoint during the preflight: exit 140 within 2 s, no child left, nothing exec'd" {
  signal_during preflight USR2 vo
  assert_stopped USR2 12
}

@test "SIGQUIT and SIGUSR1 during vlgrpo cluster wait, SIGPIPE and SIGUSR2 while the device counter hangs" {
  export VLGRPO_RAY_ADDRESS=10.0.0.1:6379
  signal_during wait QUIT fa
  assert_stopped QUIT 3
  rm -f "$SIG"/*.pid "$T/out" "$T/err"
  signal_during wait USR1 vo
  assert_stopped USR1 10
  unset VLGRPO_RAY_ADDRESS
  rm -f "$SIG"/*.pid "$T/out" "$T/err"
  signal_during devices PIPE vo
  assert_stopped PIPE 13
  rm -f "$SIG"/*.pid "$T/out" "$T/err"
  signal_during devices USR2 fa
  assert_stopped USR2 12
}

@test "after the checks verl starts with SIGQUIT, SIGUSR1, SIGUSR2 and SIGPIPE at their defaults too" {
  # read by a child of the stub (/proc/self): bash ignores SIGQUIT for itself while it runs a script, and gives its
  # children what it inherited, which is what the exec'd program got
  cat >"$T/bin/python3" <<EOF
#!/usr/bin/env bash
grep -E '^Sig(Ign|Cgt):' /proc/self/status >"$SIG/status.last"
exec "$T/rec/python3" "\$@"
EOF
  chmod +x "$T/bin/python3"
  set -m
  env --default-signal "$HARNESS" "$VO" >"$T/out" 2>"$T/err" &
  local pid=$! ign
  set +m
  wait "$pid" || fail "launch failed: $(cat "$T/err")"
  [[ $(call_argv "$(($(calls | wc -l) - 1))") == *verl* ]] || fail "no launch: $(calls)"
  ign=$(sed -n 's/^SigIgn:[[:space:]]*//p' "$SIG/status.last")
  # bits of QUIT (3), USR1 (10), USR2 (12), PIPE (13) in the ignored mask are clear
  (((16#$ign & ((1 << 2) | (1 << 9) | (1 << 11) | (1 << 12))) == 0)) || fail "verl starts with SigIgn $ign"
}
