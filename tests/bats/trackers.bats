#!/usr/bin/env bats
# The experiment trackers' settings through the entrypoints (python/src/vlgrpo/trackers.py has the rules): a
# selected logger without its setting is refused naming it, a setting of a logger not selected is a warning, and
# the values reach verl's environment (and ray start's, through ray-node.sh) as the variables verl 0.8.0's
# loggers read (verl/utils/tracking.py: TENSORBOARD_DIR, MLFLOW_TRACKING_URI, SWANLAB_API_KEY, ...).

setup() {
  load helpers/common
  common_setup
  mkdir -m 0700 "$T/tb" "$T/mlruns"
}

@test "a selected tracker without its setting is refused naming the setting and the fix, before any launch step" {
  VLGRPO_LOGGER=console,tensorboard entry fa
  assert_failure 2
  [[ $stderr == *"error: VLGRPO_TENSORBOARD_DIR: unset, but VLGRPO_LOGGER has tensorboard"*"fix: set VLGRPO_TENSORBOARD_DIR"*"or drop tensorboard from VLGRPO_LOGGER"* ]] || fail "$stderr"
  assert_no_python
  VLGRPO_LOGGER=mlflow entry vo --dry-run
  assert_failure 2
  [[ $stderr == *"error: VLGRPO_MLFLOW_TRACKING_URI: unset, but VLGRPO_LOGGER has mlflow"* ]] || fail "$stderr"
  # an inherited TENSORBOARD_DIR is not the setting: still refused, and it never reaches a child
  TENSORBOARD_DIR=$T/tb VLGRPO_LOGGER=tensorboard entry fa
  assert_failure 2
  [[ $stderr == *"VLGRPO_TENSORBOARD_DIR: unset"* ]] || fail "$stderr"
}

@test "tracker values: the path rule for folders, no credentials in the MLflow URI, the SwanLab key file" {
  chmod 0777 "$T/tb"
  VLGRPO_LOGGER=tensorboard VLGRPO_TENSORBOARD_DIR=$T/tb entry fa
  assert_failure 2
  [[ $stderr == *"error: VLGRPO_TENSORBOARD_DIR: $T/tb can be written by every user (mode 0777)"* ]] || fail "$stderr"
  VLGRPO_LOGGER=mlflow VLGRPO_MLFLOW_TRACKING_URI=https://user:pw@mlflow.example entry fa
  assert_failure 2
  [[ $stderr == *"error: VLGRPO_MLFLOW_TRACKING_URI: holds credentials"*"fix: "*"MLFLOW_TRACKING_USERNAME"* ]] || fail "$stderr"
  [[ $stderr != *"pw@"* ]] || fail "the URL's password was printed: $stderr"
  printf 'two\nlines-secret-ish-text\n' >"$T/swan.key"
  VLGRPO_LOGGER=swanlab VLGRPO_SWANLAB_API_KEY_FILE=$T/swan.key entry fa
  assert_failure 2
  [[ $stderr == *"error: VLGRPO_SWANLAB_API_KEY_FILE: the file holds more than one line (contents not shown)"* ]] || fail "$stderr"
  [[ $stderr != *"secret-ish"* ]]
  # swanlab in cloud mode with no key: refused for a launch, a warning in a dry run (as for wandb)
  VLGRPO_LOGGER=swanlab entry fa
  assert_failure 2
  [[ $stderr == *"error: VLGRPO_SWANLAB_API_KEY_FILE: VLGRPO_LOGGER has swanlab in cloud mode"* ]] || fail "$stderr"
  VLGRPO_LOGGER=swanlab entry fa --dry-run
  assert_success
  assert_line --partial '# warning: VLGRPO_LOGGER has swanlab in cloud mode, but VLGRPO_SWANLAB_API_KEY_FILE is unset'
  VLGRPO_LOGGER=swanlab VLGRPO_SWANLAB_MODE=offline entry fa --dry-run
  assert_success
  refute_line --partial 'warning: VLGRPO_LOGGER has swanlab'
}

@test "the tracker settings reach verl's environment; a setting of a logger not selected is a warning and not passed" {
  local key=swan0123456789abcdef0123456789
  printf '%s\n' "$key" >"$T/swan.key"
  VLGRPO_LOGGER=console,tensorboard,mlflow,swanlab VLGRPO_TENSORBOARD_DIR=$T/tb \
    VLGRPO_MLFLOW_TRACKING_URI="file://$T/mlruns" VLGRPO_SWANLAB_API_KEY_FILE=$T/swan.key VLGRPO_SWANLAB_MODE=local \
    TENSORBOARD_DIR=/elsewhere entry fa
  assert_success
  run call_environ 2
  assert_line "TENSORBOARD_DIR=$T/tb"
  assert_line "MLFLOW_TRACKING_URI=file://$T/mlruns"
  assert_line "SWANLAB_API_KEY=$key"
  assert_line "SWANLAB_MODE=local"
  refute_line --partial "VLGRPO_TENSORBOARD_DIR"
  # the key is never in argv or on the terminal; the plan shows it is set, not its value
  VLGRPO_LOGGER=swanlab VLGRPO_SWANLAB_API_KEY_FILE=$T/swan.key entry fa --dry-run
  assert_success
  assert_line --partial "SWANLAB_API_KEY=(not shown)"
  [[ $output != *"$key"* && $stderr != *"$key"* ]]
  ! grep -rq "$key" "$STUB_LOG"/*.python3
  # mlflow not selected: a warning, and MLFLOW_TRACKING_URI does not reach verl
  VLGRPO_LOGGER=console VLGRPO_MLFLOW_TRACKING_URI=http://mlflow:5000 entry fa --dry-run
  assert_success
  assert_line '# warning: VLGRPO_MLFLOW_TRACKING_URI is set but VLGRPO_LOGGER has no mlflow: it is not used'
  [[ $output != *"MLFLOW_TRACKING_URI="* ]] || fail "$output"
}

# node ROLE — ray-node.sh (the hook harness) with the /dev hook at $T/dev (the recording npu-smi counts 16 NPUs), dry run
node() {
  run --separate-stderr env VLGRPO_DRY_RUN=1 HCCL_SOCKET_IFNAME=lo GLOO_SOCKET_IFNAME=lo VLGRPO_RAY_CARDS_WAIT=0 \
    "$HARNESS" "$REPO_ROOT/entrypoints/ray-node.sh" "$1"
}

@test "ray-node.sh carries the W&B key file and the tracker settings into ray start's environment" {
  local key=0123456789abcdef0123456789abcdef01234567
  printf '%s\n' "$key" >"$T/wandb.key"
  chmod 600 "$T/wandb.key"
  export VLGRPO_RAY_HEAD=10.0.0.1:6379 WANDB_API_KEY_FILE=$T/wandb.key VLGRPO_TENSORBOARD_DIR=$T/tb
  export VLGRPO_MLFLOW_TRACKING_URI=http://mlflow:5000
  node worker
  assert_success
  assert_line --partial "TENSORBOARD_DIR=$T/tb MLFLOW_TRACKING_URI=http://mlflow:5000"
  assert_line --regexp '^ray-node: child environment .* WANDB_API_KEY( |$)'
  [[ $output != *"$key"* && $stderr != *"$key"* ]]
  # without them, ray start's environment has none of these names
  unset WANDB_API_KEY_FILE VLGRPO_TENSORBOARD_DIR VLGRPO_MLFLOW_TRACKING_URI
  node worker
  assert_success
  refute_line --regexp 'WANDB_API_KEY|TENSORBOARD_DIR|MLFLOW_TRACKING_URI'
  # a bad value is refused on the node too, naming the setting
  VLGRPO_MLFLOW_TRACKING_URI=ftp://mlflow node worker
  assert_failure 2
  [[ $stderr == *"error: VLGRPO_MLFLOW_TRACKING_URI: "*"is not an http(s)://"* ]] || fail "$stderr"
}

@test "WANDB_API_KEY_FILE: the key-file path rule and the W&B key form, refused unseen naming it and the fix" {
  local key=0123456789abcdef0123456789abcdef01234567
  export VLGRPO_LOGGER=console,wandb WANDB_MODE=online
  printf '%s\n' "$key" >"$T/wandb.key"
  chmod 0644 "$T/wandb.key"
  entry fa --dry-run
  assert_success
  assert_line --partial '# warning: VLGRPO_LOGGER has wandb but neither WANDB_API_KEY nor WANDB_API_KEY_FILE is set'
  rm -rf "${STUB_LOG:?}"/*
  WANDB_API_KEY_FILE=$T/wandb.key entry fa --dry-run
  assert_failure 2
  [[ $stderr == *"error: WANDB_API_KEY_FILE: $T/wandb.key can be read or written by others (mode 0644)"*"chmod 0600 $T/wandb.key"* ]] || fail "$stderr"
  # a Hugging Face token in the key file would go to the W&B server: refused, never shown
  printf 'hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567\n' >"$T/hf.key"
  chmod 0600 "$T/hf.key"
  WANDB_API_KEY_FILE=$T/hf.key entry fa --dry-run
  assert_failure 2
  [[ $stderr == *"error: WANDB_API_KEY_FILE: the file does not hold one W&B API key (contents not shown): it holds what looks like a Hugging Face token"*"fix: point WANDB_API_KEY_FILE at a file of yours"* ]] || fail "$stderr"
  [[ $stderr$output != *AbCdEfGh* ]] || fail "the token was shown"
  # a link to a key of another user: the file it names is judged
  chmod 0600 "$T/wandb.key"
  chown 65534 "$T/wandb.key"
  ln -s "$T/wandb.key" "$T/link.key"
  WANDB_API_KEY_FILE=$T/link.key entry fa --dry-run
  assert_failure 2
  [[ $stderr == *"error: WANDB_API_KEY_FILE: $T/link.key: $T/wandb.key is owned by uid 65534"* ]] || fail "$stderr"
  [[ $stderr$output != *"$key"* ]] || fail "the key was shown"
  assert_no_python
}

@test "WANDB_BASE_URL and WANDB_ENTITY are typed and shown in the plan; a bad one exits 2 naming it" {
  local key=0123456789abcdef0123456789abcdef01234567
  printf '%s\n' "$key" >"$T/wandb.key"
  chmod 0600 "$T/wandb.key"
  export VLGRPO_LOGGER=console,wandb WANDB_API_KEY_FILE=$T/wandb.key
  VLGRPO_PASS_ENV=$STUB_PASS,WANDB_BASE_URL WANDB_BASE_URL=https://wandb.example.com WANDB_ENTITY=my-team entry fa --dry-run
  assert_success
  assert_line '# W&B: server https://wandb.example.com, entity my-team, mode offline'
  [[ $output != *"$key"* ]] || fail "the key was shown"
  entry fa --dry-run
  assert_success
  assert_line "# W&B: server https://api.wandb.ai (the client's default), entity (the key's default entity), mode offline"
  # set but not named in VLGRPO_PASS_ENV: dropped, and the plan says so
  WANDB_BASE_URL=https://wandb.example.com entry fa --dry-run
  assert_success
  assert_line --partial "WANDB_BASE_URL is set but dropped: name it in VLGRPO_PASS_ENV"
  rm -rf "${STUB_LOG:?}"/*
  VLGRPO_PASS_ENV=$STUB_PASS,WANDB_BASE_URL WANDB_BASE_URL=https://me:pw@wandb.example.com entry fa --dry-run
  assert_failure 2
  [[ $stderr == *"error: WANDB_BASE_URL: holds credentials"*"fix: set it to your W&B server's URL"* ]] || fail "$stderr"
  [[ $stderr != *"pw@"* ]] || fail "the password was printed: $stderr"
  VLGRPO_PASS_ENV=$STUB_PASS,WANDB_BASE_URL WANDB_BASE_URL=file:///tmp/wandb entry fa --dry-run
  assert_failure 2
  [[ $stderr == *"error: WANDB_BASE_URL: is not an http:// or https:// URL"* ]] || fail "$stderr"
  WANDB_ENTITY='my team' entry fa
  assert_failure 2
  [[ $stderr == *"error: WANDB_ENTITY: is not a plain name"*"fix: set it to your W&B user or team name"* ]] || fail "$stderr"
  assert_no_python
  # ray-node.sh shows them too
  VLGRPO_RAY_HEAD=10.0.0.1:6379 WANDB_ENTITY=my-team node worker
  assert_success
  assert_line 'ray-node: W&B: server https://api.wandb.ai (the client'"'"'s default), entity my-team, mode offline'
}

@test "review F6: the plan shows the proxy and the trust anchors the W&B key would go through; a bad proxy exits 2" {
  local key=0123456789abcdef0123456789abcdef01234567
  printf '%s\n' "$key" >"$T/wandb.key"
  chmod 0600 "$T/wandb.key"
  : >"$T/corp-ca.pem"
  export VLGRPO_LOGGER=console,wandb WANDB_API_KEY_FILE=$T/wandb.key
  VLGRPO_PASS_ENV=$STUB_PASS,WANDB_BASE_URL,HTTPS_PROXY,REQUESTS_CA_BUNDLE WANDB_BASE_URL=https://wandb.example.com \
    HTTPS_PROXY=http://me:pw@proxy.corp:3128 REQUESTS_CA_BUNDLE=$T/corp-ca.pem entry fa --dry-run
  assert_success
  assert_line "# W&B: server https://wandb.example.com, entity (the key's default entity), mode offline, through proxy http://proxy.corp:3128 (HTTPS_PROXY; credentials not shown), TLS trust anchors from REQUESTS_CA_BUNDLE=$T/corp-ca.pem (not the system's)"
  [[ $output != *"pw@"* && $stderr != *"pw@"* ]] || fail "the proxy password was printed"
  # lower case wins, as in urllib; an http server goes through the http proxy
  VLGRPO_PASS_ENV=$STUB_PASS,WANDB_BASE_URL,HTTP_PROXY,http_proxy WANDB_BASE_URL=http://wandb.lan:8080 \
    HTTP_PROXY=http://upper:3128 http_proxy=socks5h://lower:1080 entry fa --dry-run
  assert_success
  assert_line --partial "through proxy socks5h://lower:1080 (http_proxy)"
  rm -rf "${STUB_LOG:?}"/*
  local bad
  for bad in 'http://proxy.corp:3128/x' 'ftp://proxy:21' 'http://proxy:99999'; do
    VLGRPO_PASS_ENV=$STUB_PASS,HTTPS_PROXY HTTPS_PROXY=$bad entry fa --dry-run
    assert_failure 2
    [[ $stderr == *"error: HTTPS_PROXY: is not a proxy URL"*"fix: "* ]] || fail "$bad: $stderr"
  done
  assert_no_python
}
