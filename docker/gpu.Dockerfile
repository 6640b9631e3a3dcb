# vlgrpo NVIDIA image. Build through the Makefile, which computes the tag and passes every pin from
# docker/pins.env:  make image-gpu   (DRY_RUN=1 prints the command)
# Base: vllm/vllm-openai:v0.13.0 = CUDA 12.9.1, Python 3.12, torch 2.9.0, vllm 0.13.0 (host driver R575+).
# The Makefile passes tag@digest from docker/base-digests.lock once `make pin-digests` resolved it.
# The Docker 20.10 built-in frontend has no heredocs: multi-line RUNs fail fast through SHELL below.

ARG BASE_IMAGE=vllm/vllm-openai:v0.13.0
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
ARG LOCK=docker/locks/gpu-x86_64-py312.txt
SHELL ["/bin/bash", "-euo", "pipefail", "-c"]
COPY ${LOCK} /opt/vlgrpo/locks/stack.txt
COPY docker/locks/nodeps.txt /opt/vlgrpo/locks/nodeps.txt
RUN --mount=type=secret,id=ca,target=/run/secrets/ca \
    if [[ -s /run/secrets/ca ]]; then export PIP_CERT=/run/secrets/ca; fi; \
    python3 -m pip install --no-cache-dir --no-deps --require-hashes -r /opt/vlgrpo/locks/stack.txt; \
    python3 -m pip install --no-cache-dir --no-deps --require-hashes -r /opt/vlgrpo/locks/nodeps.txt
# flash-attn 2.8.3 (cu12, torch 2.9, cp312): a GitHub release wheel, pinned by the sha256 that
# `make pin-digests` records in docker/artifacts.lock. Empty FLASH_ATTN_WHEEL = not installed (CI stand-in only).
ARG FLASH_ATTN_WHEEL=https://github.com/Dao-AILab/flash-attention/releases/download/v2.8.3/flash_attn-2.8.3+cu12torch2.9cxx11abiTRUE-cp312-cp312-linux_x86_64.whl
ARG FLASH_ATTN_SHA256=unresolved
SHELL ["/bin/bash", "-euo", "pipefail", "-c"]
RUN --mount=type=secret,id=ca,target=/run/secrets/ca \
    if [[ -s /run/secrets/ca ]]; then export PIP_CERT=/run/secrets/ca; fi; \
    if [[ -z $FLASH_ATTN_WHEEL ]]; then echo "flash-attn: not installed (FLASH_ATTN_WHEEL empty; CI stand-in)"; exit 0; fi; \
    if [[ ! $FLASH_ATTN_SHA256 =~ ^[0-9a-f]{64}$ ]]; then \
      echo "error: FLASH_ATTN_SHA256 is '$FLASH_ATTN_SHA256': run 'make pin-digests' on a machine that reaches GitHub (writes docker/artifacts.lock)" >&2; \
      exit 1; \
    fi; \
    printf 'flash-attn @ %s --hash=sha256:%s\n' "$FLASH_ATTN_WHEEL" "$FLASH_ATTN_SHA256" >/opt/vlgrpo/locks/flash-attn.txt; \
    python3 -m pip install --no-cache-dir --no-deps --require-hashes -r /opt/vlgrpo/locks/flash-attn.txt

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

ARG PLATFORM=gpu
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
ARG FLASH_ATTN_WHEEL
ARG FLASH_ATTN_SHA256
# No VLGRPO_* ENV here: the entrypoints refuse VLGRPO_* variables outside their allowlist. The image's
# platform and pins live in the build manifest and the labels.
RUN VLGRPO_PLATFORM="$PLATFORM" VLGRPO_STAND_IN="$STAND_IN" VLGRPO_BASE_IMAGE="$BASE_IMAGE" VLGRPO_BASE_DIGEST="$BASE_DIGEST" \
    VLGRPO_RESOLVED_AT_BUILD="$RESOLVED_AT_BUILD" \
    VLGRPO_VERL_SOURCE="$VERL_SOURCE" VLGRPO_VERL_FIX_COMMITS="$VERL_FIX_COMMITS" VLGRPO_VERSION="$VLGRPO_VERSION" \
    VLGRPO_REVISION="$VCS_REF" VLGRPO_SOURCE_URL="$SOURCE_URL" \
    VLGRPO_FLASH_ATTN_WHEEL="$FLASH_ATTN_WHEEL" VLGRPO_FLASH_ATTN_SHA256="$FLASH_ATTN_SHA256" \
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
ARG STAND_IN=0
ARG PLATFORM=gpu
ARG BASE_CONSTRAINTS=gpu-base.txt
SHELL ["/bin/bash", "-euo", "pipefail", "-c"]
RUN flags=(); if [[ $STAND_IN == 1 ]]; then flags+=(--stand-in); fi; \
    VLGRPO_PATCHES_STRICT=1 python3 /opt/vlgrpo/image/smoke.py --platform "$PLATFORM" "${flags[@]}" \
      --pins /opt/vlgrpo/pins.env --base-constraints "/opt/vlgrpo/constraints/$BASE_CONSTRAINTS" \
      --lock /opt/vlgrpo/locks/stack.txt --lock /opt/vlgrpo/locks/nodeps.txt \
      --sitecustomize /opt/vlgrpo/sitecustomize.json --out /opt/vlgrpo/smoke-result.json
