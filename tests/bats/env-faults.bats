#!/usr/bin/env bats
# The small faults of the launch environment, each with three or more instances of its kind: every one
# is an exit-2 message naming the variable and the fix, with the other problems of the launch still reported.

setup() {
  load helpers/common
  common_setup
  RN=$REPO_ROOT/entrypoints/ray-node.sh
}

# node [ROLE] — ray-node.sh (the hook harness) in a dry run (no cards, loopback interfaces), as run
node() {
  unset VLGRPO_MODEL_PATH VLGRPO_TRAIN_FILE VLGRPO_VAL_FILE VLGRPO_CHECKPOINT_DIR
  export HCCL_SOCKET_IFNAME=lo GLOO_SOCKET_IFNAME=lo VLGRPO_RAY_CARDS_WAIT=0 VLGRPO_DRY_RUN=1
  run --separate-stderr "$HARNESS" "$RN" "${1:-head}"
}

# assert_config_error VAR TEXT — exit 2, an error line for VAR containing TEXT, exactly once, no internal error
assert_config_error() {
  local var=$1 text=$2 n
  ((status == 2)) || fail "exit $status, expected 2; stderr: $stderr"
  n=$(grep -cF -- "error: $var: " <<<"$stderr" || true)
  ((n == 1)) || fail "expected one error line for $var, got $n: $stderr"
  grep -F -- "error: $var: " <<<"$stderr" | grep -qF -- "$text" || fail "the $var error does not say '$text': $stderr"
  grep -F -- "error: $var: " <<<"$stderr" | grep -q '; fix: ' || fail "no fix named: $stderr"
  [[ $stderr != *"internal error"* && $stderr != *"bad array subscript"* ]] || fail "crash: $stderr"
}

# ---- VLGRPO_ with an empty suffix (an env-file template with a blank name) -----------------------------------

@test "VLGRPO_= is a configuration error naming it in both recipes and ray-node.sh; other problems still reported" {
  local e
  for e in "$FA" "$VO"; do
    run --separate-stderr env VLGRPO_= VLGRPO_LR=abc "$HARNESS" "$e" --dry-run
    assert_config_error VLGRPO_ "no setting name after VLGRPO_"
    [[ $stderr == *"error: VLGRPO_LR: "* ]] || fail "the other problem was not reported: $stderr"
    assert_no_python
    # a value does not matter: VLGRPO_=x too
    run --separate-stderr env VLGRPO_=x "$HARNESS" "$e" --dry-run
    assert_config_error VLGRPO_ "no setting name after VLGRPO_"
  done
  export VLGRPO_=1 VLGRPO_RAY_PORT=99
  node head
  assert_config_error VLGRPO_ "no setting name after VLGRPO_"
  [[ $stderr == *"error: VLGRPO_RAY_PORT: "* ]] || fail "the other problem was not reported: $stderr"
}

# ---- addr settings: dotted-quad IPv4 or a hostname ----------------------------------------------------------

@test "addr settings refuse what the resolver reads as another address (010.0.0.1, 0x0a.0.0.1, 167772161, 10.1, ...)" {
  local v
  for v in 010.0.0.1:6379 0x0a.0.0.1:6379 167772161:6379 10.1:6379 10.0.0.01:6379 1.2.3.0x4:6379 0:6379 \
    1.2.3.4.5:6379 10.0.0.256:6379 a..b:6379 -head:6379 head-.x:6379 0x7f000001:6379; do
    VLGRPO_RAY_ADDRESS=$v entry fa --dry-run
    assert_config_error VLGRPO_RAY_ADDRESS "is not HOST:PORT"
    assert_no_python
  done
  for v in 10.0.0.1:6379 192.168.1.20:6379 head:6379 ray-head-0.ray.default.svc.cluster.local:6379 node01:1 \
    h1:65535 ip-10-0-0-1.ec2.internal:6379; do
    VLGRPO_RAY_ADDRESS=$v entry vo --dry-run
    assert_success
  done
  VLGRPO_RAY_HEAD=010.0.0.1:6379 node worker
  assert_config_error VLGRPO_RAY_HEAD "is not HOST:PORT"
  VLGRPO_RAY_HEAD=167772161:6379 node worker
  assert_config_error VLGRPO_RAY_HEAD "is not HOST:PORT"
}

# ---- the W&B key file -----------------------------------------------------------------------------------------

@test "a WANDB_API_KEY_FILE in /proc, missing or a folder is a configuration error naming it, printed once" {
  # as root every file passes -r; /proc/self/mem is a regular file whose read at offset 0 fails (EIO): a kernel
  # file is never read as a key file
  local f
  for f in /proc/self/mem /proc/1/mem /proc/self/environ; do
    WANDB_API_KEY_FILE=$f entry fa --dry-run
    assert_config_error WANDB_API_KEY_FILE "is a kernel or device file, not a key file"
    assert_no_python
  done
  WANDB_API_KEY_FILE=$T/missing entry vo --dry-run
  assert_config_error WANDB_API_KEY_FILE "does not exist"
  WANDB_API_KEY_FILE=$T entry vo --dry-run
  assert_config_error WANDB_API_KEY_FILE "is not a regular file"
}

@test "a W&B key file of more than one line is refused, never joined into one key" {
  local k=0123456789abcdef0123456789abcdef01234567 c
  for c in "$k"$'\n'"$k" "${k:0:20}"$'\n'"${k:20}" "$k"$'\n\n'"$k" "$k"$'\r\n'"x" $'\n'"$k" "$k"$'\n\n' NUL; do
    if [[ $c == NUL ]]; then printf '%s\0%s' "$k" "$k" >"$T/key"; else printf '%s' "$c" >"$T/key"; fi
    chmod 600 "$T/key"
    WANDB_API_KEY_FILE=$T/key entry fa --dry-run
    assert_config_error WANDB_API_KEY_FILE "more than one line"
    [[ $stderr != *"$k"* && $stderr != *"${k:0:20}"* ]] || fail "the key was shown"
  done
  # one line, with or without its end of line, is the key
  for c in "$k" "$k"$'\n' "$k"$'\r\n'; do
    printf '%s' "$c" >"$T/key"
    chmod 600 "$T/key"
    export VLGRPO_LOGGER=console,wandb
    WANDB_MODE=online WANDB_API_KEY_FILE=$T/key entry fa --dry-run
    assert_success
    grep -qx "WANDB_API_KEY=$k" "$STUB_LOG"/*.python3.env || fail "the key the children got is not the file's line"
    rm -rf "${STUB_LOG:?}"/*
  done
  printf 'not a key\n' >"$T/key"
  WANDB_API_KEY_FILE=$T/key entry fa --dry-run
  assert_config_error WANDB_API_KEY_FILE "does not hold one W&B API key"
}

# ---- the cluster-mode dry run's stdout -------------------------------------------------------------------------

@test "a cluster-mode dry run's stdout is exactly the plan, even when the cluster tool and the preflight print" {
  mkdir -p "$T/rec"
  mv "$T/bin/python3" "$T/rec/python3"
  # every child of the launch prints (the launcher itself, which writes the plan, is started through python3 too)
  cat >"$T/bin/python3" <<EOF
#!/usr/bin/env bash
[[ \$3 == vlgrpo.launch ]] && exec "$T/rec/python3" "\$@"
echo "cluster: 2/2 nodes ready stdout-canary"
echo "progress stderr-line" >&2
exec "$T/rec/python3" "\$@"
EOF
  chmod +x "$T/bin/python3"
  local r
  for r in fa vo; do
    rm -rf "${STUB_LOG:?}"/*
    VLGRPO_RAY_ADDRESS=10.0.0.1:6379 entry "$r" --dry-run
    assert_success
    [[ $output != *canary* ]] || fail "progress on stdout: $output"
    [[ $stderr == *stdout-canary* ]] || fail "the progress was lost, not sent to stderr: $stderr"
    # every stdout line is a plan comment or an argv element, and the argv is the one the preflight and the
    # cluster probe (its rehearsal) were handed
    local f n=0
    for f in "$STUB_LOG"/*.python3.argv-file; do
      assert_equal "$(plan_argv)" "$(cat "$f")"
      n=$((n + 1))
    done
    [[ $n -ge 2 ]] || fail "expected the preflight's and the probe's argv files, got $n"
    [[ $(grep -c '^# ' <<<"$output") -gt 5 ]] || fail "no plan: $output"
    assert_line '# cluster: 10.0.0.1:6379 ready and probed'
  done
}

# ---- "did you mean" ---------------------------------------------------------------------------------------------

# levenshtein A B — an independent reference: Python's own implementation of the edit distance, in the test
nearest_reference() {
  "$REPO_ROOT/.venv/bin/python" - "$@" <<'EOF'
import sys
def lev(a, b):
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]
word, names = sys.argv[1], sys.argv[2:]
best = min(names, key=lambda n: (lev(word, n), names.index(n)))
print(best if lev(word, best) * 3 <= len(word) + 2 else "")
EOF
}

@test "did you mean: the nearest declared setting by edit distance, the same as an independent reference" {
  local w want names
  mapfile -t names < <(setting_names fa)
  for w in LR_WARMUP_STEP MAX_PROMT_LENGTH ROLOUT_N CHECKPOINT_DR PPO_MINI_BATCH TRAINER_NODES GPU_MEMORY \
    ROLLOUT_TP_SIZE XYZ SP ACTOR_OFFLAOD LOGER; do
    want=$(nearest_reference "$w" "${names[@]}")
    run --separate-stderr env "VLGRPO_$w=1" "$HARNESS" "$FA" --dry-run
    assert_failure 2
    if [[ -n $want ]]; then
      [[ $stderr == *"error: VLGRPO_$w: not a setting of fully-async-grpo.sh (unknown VLGRPO_ variable); fix: unset it, or did you mean VLGRPO_$want?"* ]] ||
        fail "$w: expected VLGRPO_$want: $stderr"
    else
      [[ $stderr == *"error: VLGRPO_$w: not a setting"* && $stderr != *"did you mean"* ]] || fail "$w: no suggestion expected: $stderr"
    fi
  done
}

@test "did you mean stays well under a second for any input: 20 unknown 62-character names and 20 near ones" {
  local i long near envs=()
  for ((i = 0; i < 20; i++)); do
    printf -v long 'VLGRPO_%s%02d' "$(printf 'X%.0s' {1..53})" "$i"
    printf -v near 'VLGRPO_PPO_MAX_TOKEN_LEN_PER_DEVIC%c' "$(printf "\\$(printf '%03o' $((70 + i)))")"
    envs+=("$long=1" "$near=1")
  done
  run --separate-stderr env "${envs[@]}" "$HARNESS" "$FA" --dry-run
  assert_failure 2
  [[ $(grep -c 'unknown VLGRPO_ variable' <<<"$stderr") -eq 40 ]] || fail "not every name reported: $stderr"
  [[ $(grep -c 'did you mean VLGRPO_PPO_MAX_TOKEN_LEN_PER_DEVICE?' <<<"$stderr") -eq 20 ]] || fail "$stderr"
  # the suggestion step itself is timed in-process by tests/python/launch (test_nearest_is_fast)
}

# ---- near-misses of a declared setting: case, look-alike characters -----------------------------------------

@test "a name that differs from a declared VLGRPO_ setting only by case is refused naming the setting" {
  local n
  for n in vlgrpo_lr Vlgrpo_LR VLGRPO_lr vlgrpo_Rollout_N VLGRPo_MAX_PROMPT_LENGTH; do
    run --separate-stderr env "$n=5" "$HARNESS" "$FA" --dry-run
    local want=${n^^}
    assert_config_error "$n" "differs from the setting $want only by case"
    grep -F "error: $n: " <<<"$stderr" | grep -qF "rename it $want" || fail "$n: $stderr"
    assert_no_python
  done
  # a sibling entrypoint's setting in the wrong case too
  run --separate-stderr env vlgrpo_ray_port=1 "$HARNESS" "$VO" --dry-run
  assert_config_error vlgrpo_ray_port "VLGRPO_RAY_PORT"
  # and in ray-node.sh
  export vlgrpo_ray_port=6380
  node head
  assert_config_error vlgrpo_ray_port "differs from the setting VLGRPO_RAY_PORT only by case"
}

@test "a name that differs from a declared VLGRPO_ setting by a look-alike character is refused naming the setting" {
  local n want pair
  # Greek Rho, Cyrillic O, Cyrillic Er, fullwidth L, Greek capital Omicron, Cyrillic small a in a lower-case name,
  # Cherokee letters
  for pair in 'VLGRΡO_LR VLGRPO_LR' 'VLGRPО_LR VLGRPO_LR' 'VLGRРO_ROLLOUT_N VLGRPO_ROLLOUT_N' 'VLGRPO_ＬR VLGRPO_LR' \
    'VLGRPΟ_LOGGER VLGRPO_LOGGER' 'vlgrpo_mаx_prompt_length VLGRPO_MAX_PROMPT_LENGTH' 'ᏙᏞᏀᎡᏢΟ_ᏞᎡ VLGRPO_LR'; do
    n=${pair% *} want=${pair#* }
    run --separate-stderr env "$n=5" "$HARNESS" "$FA" --dry-run
    assert_failure 2
    grep -q "error: .*differs from the setting $want by a look-alike character" <<<"$stderr" || fail "$n: $stderr"
    grep -q "fix: rename it $want" <<<"$stderr" || fail "$n: $stderr"
    [[ $stderr != *"internal error"* ]] || fail "$stderr"
    assert_no_python
  done
  # a look-alike name that is no setting is still refused as a VLGRPO_ name
  run --separate-stderr env 'VLGRΡO_NOTHING_LIKE_IT=1' "$HARNESS" "$VO" --dry-run
  assert_failure 2
  grep -q 'error: .*looks like a VLGRPO_ variable' <<<"$stderr" || fail "$stderr"
  # names that only contain other non-ASCII characters are dropped as before, not refused
  run --separate-stderr env 'MODÈLE=1' "$HARNESS" "$VO" --dry-run
  assert_success
  assert_line --regexp '^# dropped from the environment .*MOD'
}

# ---- the patch module's switches are registry settings --------------------------------------------------------

@test "VLGRPO_POS_EMBED_TRITON and VLGRPO_POS_EMBED_CACHE_MB are settings: accepted, typed, passed to the children" {
  local e
  for e in "$FA" "$VO"; do
    rm -rf "${STUB_LOG:?}"/*
    run --separate-stderr env VLGRPO_POS_EMBED_TRITON=0 VLGRPO_POS_EMBED_CACHE_MB=32 "$HARNESS" "$e" --dry-run
    assert_success
    call_environ 1 | grep -qx VLGRPO_POS_EMBED_TRITON=0 || fail "the preflight did not get VLGRPO_POS_EMBED_TRITON"
    call_environ 1 | grep -qx VLGRPO_POS_EMBED_CACHE_MB=32 || fail "the preflight did not get VLGRPO_POS_EMBED_CACHE_MB"
    run --separate-stderr env VLGRPO_POS_EMBED_TRITON=2 VLGRPO_POS_EMBED_CACHE_MB=-1 "$HARNESS" "$e" --dry-run
    assert_config_error VLGRPO_POS_EMBED_TRITON "2"
    assert_config_error VLGRPO_POS_EMBED_CACHE_MB "-1"
    run --separate-stderr env VLGRPO_POS_EMBED_CACHE_MB=abc "$HARNESS" "$e" --dry-run
    assert_config_error VLGRPO_POS_EMBED_CACHE_MB "abc"
  done
  export VLGRPO_POS_EMBED_TRITON=1 VLGRPO_POS_EMBED_CACHE_MB=0
  node head
  ((status == 0)) || fail "ray-node.sh: exit $status: $stderr"
  "$FA" --help | grep -q '`VLGRPO_POS_EMBED_CACHE_MB`' || fail "--help does not list it"
}
