# shellcheck shell=bash
# Mechanics of tests/docker/run.sh: a private Docker engine, the cached CI stand-in base.
# Sourced; every function fails fast. Needs REPO, WORK, CACHE set by the caller.

# Debian installs the system tools used here (dockerd, debootstrap) in /usr/sbin, which the PATH of a
# non-login shell (env -i, cron, CI runners: /usr/local/bin:/usr/bin:/bin) lacks: append the sbin folders, so
# they are found where Debian puts them while a tool earlier on the caller's PATH still wins.
for _sbin in /usr/local/sbin /usr/sbin /sbin; do [[ :$PATH: == *:$_sbin:* ]] || PATH=$PATH:$_sbin; done
unset _sbin

log() { printf '[test-docker %s] %s\n' "$(date -u +%H:%M:%S)" "$*"; }
die() { printf '[test-docker] error: %s\n' "$*" >&2; exit 1; }

# Debian's engine (dockerd 20.10 + containerd + runc) and its CLI with built-in BuildKit. The CLI in
# /usr/local/bin (if any) has no buildx, so BuildKit features (RUN --mount) need /usr/bin/docker.
ensure_engine_packages() {
  local need=()
  [[ -x /usr/sbin/dockerd && -x /usr/bin/docker ]] || need+=(docker.io)
  command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
  [[ -x /usr/bin/docker-registry ]] || need+=(docker-registry)
  ((${#need[@]})) || return 0
  [[ $(id -u) -eq 0 ]] || die "missing ${need[*]}; run as root or: sudo apt-get install -y ${need[*]}"
  log "apt-get install ${need[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
}

# Start dockerd on a private socket; its images and build cache persist in $CACHE/docker (the stand-in
# base and unchanged layers are then reused by the next run). Stopped by PID in stop_engine.
start_engine() {
  mkdir -p "$CACHE/docker" "$WORK/exec"
  DOCKERD_PID=
  /usr/sbin/dockerd --data-root "$CACHE/docker" --exec-root "$WORK/exec" --pidfile "$WORK/dockerd.pid" \
    -H "unix://$WORK/docker.sock" --bridge=none --iptables=false --ip-masq=false \
    --default-ulimit nofile=20000:20000 --default-ulimit nproc=32768:32768 >"$WORK/dockerd.log" 2>&1 &
  DOCKERD_PID=$!
  export DOCKER_HOST="unix://$WORK/docker.sock"
  local i
  for ((i = 0; i < 60; i++)); do
    if docker version >/dev/null 2>&1; then log "dockerd $(docker version -f '{{.Server.Version}}') up (pid $DOCKERD_PID)"; return 0; fi
    kill -0 "$DOCKERD_PID" 2>/dev/null || { tail -20 "$WORK/dockerd.log" >&2; die "dockerd exited"; }
    sleep 0.5
  done
  tail -20 "$WORK/dockerd.log" >&2
  die "dockerd did not answer within 30 s"
}

stop_engine() {
  [[ -n ${DOCKERD_PID:-} ]] || return 0
  if kill -0 "$DOCKERD_PID" 2>/dev/null; then
    kill -TERM "$DOCKERD_PID" 2>/dev/null || true
    local i
    for ((i = 0; i < 60; i++)); do kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 0.5; done
    if kill -0 "$DOCKERD_PID" 2>/dev/null; then kill -KILL "$DOCKERD_PID" 2>/dev/null || true; fi
  fi
  # the engine's network namespace mount (exec-root/netns) outlives it
  local m
  for m in "$WORK"/exec/netns/*; do
    if [[ -e $m ]] && mountpoint -q "$m"; then umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; fi
  done
  DOCKERD_PID=
}

docker() { /usr/bin/docker "$@"; }

build() { # build LOGNAME ARGS... : BuildKit build, plain progress to $WORK/LOGNAME.log
  local name=$1; shift
  local rc=0
  DOCKER_BUILDKIT=1 docker build --progress=plain --network host \
    --secret id=ca,src="${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}" "$@" >"$WORK/$name.log" 2>&1 || rc=$?
  if ((rc)); then tail -60 "$WORK/$name.log" >&2; return "$rc"; fi
}

# The stand-in base: key = hash of its recipe and inputs. Present in the engine's store -> reused.
standin_base() {
  local pins=$REPO/docker/pins.env suite torch_wheel key rkey
  suite=$(sed -n 's/^CI_DEBIAN_SUITE=//p' "$pins")
  torch_wheel=$(sed -n 's/^CI_TORCH_WHEEL=//p' "$pins")
  rkey=$(printf '%s\n' "debootstrap --variant=minbase --include=ca-certificates $suite" \
    "$(cat /etc/apt/sources.list.d/debian.sources 2>/dev/null)" | sha256sum | cut -c1-12)
  key=$( { echo "$rkey"; cat "$REPO/docker/ci-base/Dockerfile" "$REPO/docker/locks/ci-torch.txt" \
    "$REPO/docker/locks/ci-torch-deps.txt" "$REPO/docker/locks/ci-x86_64-py311.txt"; } | sha256sum | cut -c1-12)
  STANDIN_IMAGE=localhost/vlgrpo-ci-base:$key
  if docker image inspect "$STANDIN_IMAGE" >/dev/null 2>&1; then
    log "stand-in base $STANDIN_IMAGE: cached"
    return 0
  fi
  local rootfs_image=localhost/vlgrpo-ci-rootfs:$suite-$rkey
  if ! docker image inspect "$rootfs_image" >/dev/null 2>&1; then
    log "debootstrap --variant=minbase $suite (cold cache)"
    local rootfs=$WORK/rootfs
    debootstrap --variant=minbase --include=ca-certificates "$suite" "$rootfs" http://deb.debian.org/debian \
      >"$WORK/debootstrap.log" 2>&1 || { tail -20 "$WORK/debootstrap.log" >&2; die "debootstrap failed"; }
    if [[ -f /etc/apt/sources.list.d/debian.sources ]]; then
      cp /etc/apt/sources.list.d/debian.sources "$rootfs/etc/apt/sources.list.d/"
    fi
    tar -C "$rootfs" -c . | docker import - "$rootfs_image" >/dev/null
    rm -rf "$rootfs"
  fi
  local ctx=$WORK/standin-ctx wheel_src=${TORCH_WHEEL_DIR:-/opt/wheels}/$torch_wheel
  [[ -f $wheel_src ]] || die "the CPU torch wheel $wheel_src is missing (the stand-in base installs it; docker/pins.env CI_TORCH_WHEEL)"
  mkdir -p "$ctx/wheels"
  cp "$REPO/docker/locks/ci-torch.txt" "$REPO/docker/locks/ci-torch-deps.txt" "$REPO/docker/locks/ci-x86_64-py311.txt" "$ctx/"
  ln "$wheel_src" "$ctx/wheels/" 2>/dev/null || cp "$wheel_src" "$ctx/wheels/"
  log "building stand-in base $STANDIN_IMAGE (cold cache)"
  build standin-base -f "$REPO/docker/ci-base/Dockerfile" --build-arg ROOTFS_IMAGE="$rootfs_image" \
    -t "$STANDIN_IMAGE" "$ctx"
  rm -rf "$ctx"
  # older stand-ins (other recipe hashes) are dropped so the cache does not grow without bound
  docker image ls --format '{{.Repository}}:{{.Tag}}' localhost/vlgrpo-ci-base | grep -vxF "$STANDIN_IMAGE" \
    | xargs -r /usr/bin/docker image rm >/dev/null 2>&1 || true
}

# A git server for the verl-git stage: repository = verl 0.8.0's PyPI sdist (hash-checked download) as
# one commit (FIXTURE_BASE) and a child commit adding verl/_vlgrpo_ci_cherry_pick.py (FIXTURE_FIX) on a
# side branch; main stays at FIXTURE_BASE. Served read-only by git daemon on 127.0.0.1:GIT_PORT.
# shellcheck disable=SC2034  # FIXTURE_BASE, FIXTURE_FIX, GIT_PORT are read by run.sh
verl_git_fixture() {
  local gitrepo=$WORK/git/verl sdist_dir=$WORK/verl-sdist
  mkdir -p "$gitrepo" "$sdist_dir"
  "$PY" -m pip download -q --no-deps --no-binary :all: --require-hashes \
    -r "$REPO/docker/locks/verl-pypi.txt" -d "$sdist_dir" >/dev/null 2>&1 || { log "verl sdist download failed"; return 1; }
  tar -xzf "$sdist_dir"/verl-*.tar.gz --strip-components=1 -C "$gitrepo"
  # fixed dates: the same sdist gives the same commit ids every run, so BuildKit can reuse the stage
  local g=(env GIT_AUTHOR_DATE=2026-06-01T00:00:00Z GIT_COMMITTER_DATE=2026-06-01T00:00:00Z
    git -C "$gitrepo" -c user.name=vlgrpo-ci -c user.email=ci@vlgrpo.invalid -c init.defaultBranch=main)
  "${g[@]}" init -q
  "${g[@]}" add -A
  "${g[@]}" commit -q -m "verl 0.8.0 (PyPI sdist): CI stand-in for the v0.8.0 tag commit"
  FIXTURE_BASE=$("${g[@]}" rev-parse HEAD)
  "${g[@]}" checkout -q -b ci-fix
  printf 'CHERRY_PICKED = True\n' >"$gitrepo/verl/_vlgrpo_ci_cherry_pick.py"
  "${g[@]}" add verl/_vlgrpo_ci_cherry_pick.py
  "${g[@]}" commit -q -m "CI stand-in for an upstream fix"
  FIXTURE_FIX=$("${g[@]}" rev-parse HEAD)
  "${g[@]}" checkout -q main
  "${g[@]}" config uploadpack.allowAnySHA1InWant true
  # a fixed port when free (the URL is a build arg: a stable one lets BuildKit reuse the stage), else any
  GIT_PORT=$(python3 -c '
import socket
s = socket.socket()
try:
    s.bind(("127.0.0.1", 29418))
except OSError:
    s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])')
  git daemon --reuseaddr --listen=127.0.0.1 --port="$GIT_PORT" --base-path="$WORK/git" --export-all \
    "$WORK/git" >"$WORK/git-daemon.log" 2>&1 &
  GIT_DAEMON_PID=$!
  local i
  for ((i = 0; i < 40; i++)); do
    git ls-remote "git://127.0.0.1:$GIT_PORT/verl" >/dev/null 2>&1 && return 0
    sleep 0.25
  done
  log "git daemon did not answer"; return 1
}

# A Docker registry (Debian's docker-registry, distribution 2.8) on 127.0.0.1, no auth: the registry path of the
# images (push, digest, FROM by digest) without leaving the machine. Its storage is kept in $CACHE/registry like the
# engine's store (a push of an unchanged base then sends no layer). Sets REG_PORT.
start_registry() {
  REG_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  mkdir -p "$CACHE/registry"
  printf '%s\n' 'version: 0.1' 'log: {level: warn}' "storage: {filesystem: {rootdirectory: $CACHE/registry}}" \
    "http: {addr: \"127.0.0.1:$REG_PORT\"}" >"$WORK/registry.yml"
  /usr/bin/docker-registry serve "$WORK/registry.yml" >"$WORK/registry.log" 2>&1 &
  REG_PID=$!
  local i
  for ((i = 0; i < 40; i++)); do
    python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
      "http://127.0.0.1:$REG_PORT/v2/" >/dev/null 2>&1 && return 0
    kill -0 "$REG_PID" 2>/dev/null || break
    sleep 0.25
  done
  tail -20 "$WORK/registry.log" >&2
  log "docker-registry did not answer on 127.0.0.1:$REG_PORT"; return 1
}

stop_registry() {
  if [[ -n ${REG_PID:-} ]]; then kill "$REG_PID" 2>/dev/null || true; wait "$REG_PID" 2>/dev/null || true; fi
  REG_PID=
}

# The CI stand-in of flash-attn's release wheel (tests/docker/ci_wheel.py) served over HTTP on loopback, for
# `make image-gpu` to hash at build time. Port 38127 when free (the URL is a build arg of the deps stage: a fixed
# one keeps the engine's build cache warm between runs), else any. Sets WHEEL_URL.
start_wheel_server() {
  local wheel
  wheel=$(python3 "$REPO/tests/docker/ci_wheel.py" "$WORK/wheels") || return 1
  WHEEL_PORT=$(python3 -c '
import socket
for port in (38127, 0):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        continue
    print(s.getsockname()[1])
    break')
  python3 -m http.server --bind 127.0.0.1 --directory "$WORK/wheels" "$WHEEL_PORT" >"$WORK/wheel-server.log" 2>&1 &
  WHEEL_PID=$!
  WHEEL_URL=http://127.0.0.1:$WHEEL_PORT/${wheel##*/}
  local i
  for ((i = 0; i < 40; i++)); do
    curl -fsS -o /dev/null "$WHEEL_URL" 2>/dev/null && return 0
    kill -0 "$WHEEL_PID" 2>/dev/null || break
    sleep 0.25
  done
  log "wheel server did not answer on $WHEEL_URL"; return 1
}

stop_wheel_server() {
  if [[ -n ${WHEEL_PID:-} ]]; then kill "$WHEEL_PID" 2>/dev/null || true; wait "$WHEEL_PID" 2>/dev/null || true; fi
  WHEEL_PID=
}

stop_git_daemon() {
  if [[ -n ${GIT_DAEMON_PID:-} ]]; then kill "$GIT_DAEMON_PID" 2>/dev/null || true; wait "$GIT_DAEMON_PID" 2>/dev/null || true; fi
  GIT_DAEMON_PID=
}
