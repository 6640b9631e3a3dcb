# vlgrpo Ascend NPU image: Atlas A2 (910B) and A3. Build through the Makefile, which computes the tag
# and passes every pin from docker/pins.env:  make image-npu NPU=a2|a3   (DRY_RUN=1 prints the command)
# Base: quay.io/ascend/vllm-ascend:v0.13.0 (A2) / :v0.13.0-a3 (A3) = CANN 8.5.0, Python 3.11, torch 2.8.0,
# torch-npu 2.8.0.post2, vllm + vllm-ascend 0.13.0. The Makefile passes tag@digest from
# docker/base-digests.lock once `make pin-digests` resolved it.
# The Docker 20.10 built-in frontend has no heredocs: multi-line RUNs fail fast through SHELL below.

ARG BASE_IMAGE=quay.io/ascend/vllm-ascend:v0.13.0
# git: verl tag commit + upstream fixes cherry-picked by id (real images); pypi: the hash-pinned PyPI
# wheel of verl 0.8.0 WITHOUT the fixes (CI only, which cannot reach GitHub).
ARG VERL_SOURCE=git

# ---- base: the pinned vendor image ------------------------------------------------------------------------
# SHELL is repeated in every stage, after its ARGs (stages inherit it; hadolint checks per stage and
# forgets it at an ARG)
FROM ${BASE_IMAGE} AS base
SHELL ["/bin/bash", "-euo", "pipefail", "-c"]
ENV PIP_NO_INPUT=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# ---- deps: the hash-pinned lock on top of the base (changes when `make lock` runs) ------------------------
FROM base AS deps
ARG LOCK=docker/locks/npu-aarch64-py311.txt
SHELL ["/bin/bash", "-euo", "pipefail", "-c"]
COPY ${LOCK} /opt/vlgrpo/locks/stack.txt
COPY docker/locks/nodeps.txt /opt/vlgrpo/locks/nodeps.txt
RUN --mount=type=secret,id=ca,target=/run/secrets/ca \
    if [[ -s /run/secrets/ca ]]; then export PIP_CERT=/run/secrets/ca; fi; \
    python3 -m pip install --no-cache-dir --no-deps --require-hashes -r /opt/vlgrpo/locks/stack.txt; \
    python3 -m pip install --no-cache-dir --no-deps --require-hashes -r /opt/vlgrpo/locks/nodeps.txt

# ---- verl: tag v0.8.0 by commit id + upstream commits applied by id ---------------------------------------
FROM base AS verl-git
ARG VERL_REPO=https://github.com/verl-project/verl.git
ARG VERL_COMMIT=7aed6b230776f963fa09509c10d9c3a767d1102c
ARG VERL_FIX_COMMITS=c5a9ed569e7e3e705c134383086094ad38ff308d
SHELL ["/bin/bash", "-euo", "pipefail", "-c"]
WORKDIR /build/verl
RUN --mount=type=secret,id=ca,target=/run/secrets/ca \
    if [[ -s /run/secrets/ca ]]; then export GIT_SSL_CAINFO=/run/secrets/ca; fi; \
    git init -q . && git fetch -q --depth 1 "$VERL_REPO" "$VERL_COMMIT"; \
    git -c advice.detachedHead=false checkout -q FETCH_HEAD; \
    test "$(git rev-parse HEAD)" = "$VERL_COMMIT"; \
    for c in $VERL_FIX_COMMITS; do \
      git fetch -q --depth 2 "$VERL_REPO" "$c"; \
      git -c user.name=vlgrpo-build -c user.email=build@vlgrpo.invalid cherry-pick -x "$c"; \
    done; \
    git log --format='%H %s' -n "$(( $(wc -w <<<"$VERL_FIX_COMMITS") + 1 ))" | tee /build/verl-applied.txt; \
    python3 -m pip wheel --no-cache-dir --no-deps --no-build-isolation -w /dist . ; \
    rm -rf /build/verl/.git

FROM base AS verl-pypi
SHELL ["/bin/bash", "-euo", "pipefail", "-c"]
COPY docker/locks/verl-pypi.txt /build/verl-pypi.txt
RUN --mount=type=secret,id=ca,target=/run/secrets/ca \
    if [[ -s /run/secrets/ca ]]; then export PIP_CERT=/run/secrets/ca; fi; \
    python3 -m pip download --no-cache-dir --no-deps --require-hashes -r /build/verl-pypi.txt -d /dist; \
    echo "verl from PyPI (verl==0.8.0 wheel): upstream fix commits NOT applied" >/build/verl-applied.txt

# hadolint ignore=DL3006
FROM verl-${VERL_SOURCE} AS verl

# ---- runtime: verl, the vlgrpo package + sitecustomize, the entrypoints (changes most often) ----------------
FROM deps AS runtime
SHELL ["/bin/bash", "-euo", "pipefail", "-c"]
COPY --from=verl /dist/ /tmp/verl-dist/
COPY --from=verl /build/verl-applied.txt /opt/vlgrpo/verl-applied.txt
RUN python3 -m pip install --no-cache-dir --no-deps /tmp/verl-dist/verl-*.whl && rm -rf /tmp/verl-dist
COPY python/ /tmp/vlgrpo-python/
RUN python3 -m pip install --no-cache-dir --no-deps --no-build-isolation /tmp/vlgrpo-python \
    && rm -rf /tmp/vlgrpo-python
COPY docker/image/ /opt/vlgrpo/image/
RUN /opt/vlgrpo/image/place-sitecustomize.sh /opt/vlgrpo/sitecustomize.json
# CANN's environment for every bash the container runs (the entrypoints), through BASH_ENV: the vendor
# base only adds it to ~/.bashrc, which non-interactive shells never read (docker/image/cann-env.sh).
ARG CANN_SET_ENV="/usr/local/Ascend/ascend-toolkit/set_env.sh /usr/local/Ascend/nnal/atb/set_env.sh"
RUN printf '%s\n' ${CANN_SET_ENV} >/opt/vlgrpo/cann-set-env.list
ENV BASH_ENV=/opt/vlgrpo/image/cann-env.sh
COPY entrypoints/ /opt/vlgrpo/entrypoints/
# the launch environment registry the entrypoints validate from (also installed with the vlgrpo package)
COPY python/src/vlgrpo/environment.tsv /opt/vlgrpo/entrypoints/lib/environment.tsv
COPY python/src/vlgrpo/recipes/ /opt/vlgrpo/entrypoints/lib/recipes/
# the interpreter the entrypoints start, by absolute path (lib/shim.sh runs no program found on PATH), and the
# image's PATH and code locations (LD_LIBRARY_PATH, PYTHONPATH, CUDA_HOME, CANN's folders), which the launch gives
# its children in place of the environment's (exec form: no BASH_ENV)
RUN ["/bin/sh", "-c", "python3 -c 'import sys; print(sys.executable)' >/opt/vlgrpo/entrypoints/lib/interpreter && printf '%s\\n' \"$PATH\" >/opt/vlgrpo/entrypoints/lib/image-path && python3 -I -m vlgrpo.launch image-record /opt/vlgrpo/entrypoints/lib/image-code-env"]
COPY docker/pins.env /opt/vlgrpo/pins.env
COPY docker/constraints/ /opt/vlgrpo/constraints/

ARG PLATFORM=npu-a2
ARG STAND_IN=0
ARG BASE_IMAGE
ARG BASE_DIGEST=unresolved
# what `make image-*` read from the network because the locks left it unresolved ("base", "flash-attn")
ARG RESOLVED_AT_BUILD=""
ARG VERL_SOURCE
ARG VERL_FIX_COMMITS=c5a9ed569e7e3e705c134383086094ad38ff308d
ARG VLGRPO_VERSION=0.1.0
ARG VCS_REF=unknown
ARG SOURCE_URL=unknown
# No VLGRPO_* ENV here: the entrypoints refuse VLGRPO_* variables outside their allowlist. The image's
# platform and pins live in the build manifest and the labels.
RUN VLGRPO_PLATFORM="$PLATFORM" VLGRPO_STAND_IN="$STAND_IN" VLGRPO_BASE_IMAGE="$BASE_IMAGE" VLGRPO_BASE_DIGEST="$BASE_DIGEST" \
    VLGRPO_RESOLVED_AT_BUILD="$RESOLVED_AT_BUILD" \
    VLGRPO_VERL_SOURCE="$VERL_SOURCE" VLGRPO_VERL_FIX_COMMITS="$VERL_FIX_COMMITS" VLGRPO_VERSION="$VLGRPO_VERSION" \
    VLGRPO_REVISION="$VCS_REF" VLGRPO_SOURCE_URL="$SOURCE_URL" \
    python3 /opt/vlgrpo/image/build_manifest.py /opt/vlgrpo/build-manifest.json --pins /opt/vlgrpo/pins.env \
      --lock /opt/vlgrpo/locks/stack.txt --lock /opt/vlgrpo/locks/nodeps.txt \
      --sitecustomize /opt/vlgrpo/sitecustomize.json
LABEL org.opencontainers.image.title="vlgrpo-${PLATFORM}" \
      org.opencontainers.image.source="${SOURCE_URL}" \
      org.opencontainers.image.revision="${VCS_REF}" \
      org.opencontainers.image.version="${VLGRPO_VERSION}" \
      org.opencontainers.image.base.name="${BASE_IMAGE}" \
      org.opencontainers.image.base.digest="${BASE_DIGEST}" \
      io.vlgrpo.resolved-at-build="${RESOLVED_AT_BUILD}" \
      io.vlgrpo.platform="${PLATFORM}" \
      io.vlgrpo.verl-source="${VERL_SOURCE}" \
      io.vlgrpo.build-manifest="/opt/vlgrpo/build-manifest.json"
WORKDIR /opt/vlgrpo
ENTRYPOINT []
CMD ["python3", "-m", "vlgrpo", "doctor"]

# ---- smoke: the last stage, so no image is tagged without passing it ----------------------------------------
FROM runtime AS smoke
SHELL ["/bin/bash", "-euo", "pipefail", "-c"]
# CANN's environment, sourced inside the RUN that needs it (empty on the CI stand-in, which has no CANN)
ARG CANN_SET_ENV="/usr/local/Ascend/ascend-toolkit/set_env.sh /usr/local/Ascend/nnal/atb/set_env.sh"
ARG STAND_IN=0
ARG PLATFORM=npu-a2
ARG BASE_CONSTRAINTS=npu-base.txt
SHELL ["/bin/bash", "-euo", "pipefail", "-c"]
# No driver is mounted at build time: CANN's devlib stubs (libascend_hal.so ...) let torch_npu import, as
# vllm-ascend's own Dockerfile does for its build; the runtime uses the mounted driver instead.
RUN for f in $CANN_SET_ENV; do set +u; source "$f"; set -u; done; \
    for d in /usr/local/Ascend/ascend-toolkit/latest/*-linux/devlib; do \
      if [[ -d $d ]]; then export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"; fi; \
    done; \
    flags=(); if [[ $STAND_IN == 1 ]]; then flags+=(--stand-in); fi; \
    VLGRPO_PATCHES_STRICT=1 python3 /opt/vlgrpo/image/smoke.py --platform "$PLATFORM" "${flags[@]}" \
      --pins /opt/vlgrpo/pins.env --base-constraints "/opt/vlgrpo/constraints/$BASE_CONSTRAINTS" \
      --lock /opt/vlgrpo/locks/stack.txt --lock /opt/vlgrpo/locks/nodeps.txt \
      --sitecustomize /opt/vlgrpo/sitecustomize.json --out /opt/vlgrpo/smoke-result.json
