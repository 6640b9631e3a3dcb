# vlgrpo — make help lists the targets.
SHELL := /bin/bash
.SHELLFLAGS := -Eeu -o pipefail -c
.DEFAULT_GOAL := help
.DELETE_ON_ERROR:

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# the interpreter the entrypoints start (entrypoints/lib/shim.sh reads it; the images write their own)
INTERPRETER := entrypoints/lib/interpreter

.PHONY: help
help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# --- environment -------------------------------------------------------------------------------
.PHONY: venv
venv: $(STAMP) $(INTERPRETER) ## create .venv with the pinned test requirements (CPU torch 2.13.0, transformers 4.57.6, verl 0.8.0)
$(STAMP): requirements/dev.txt requirements/dev-nodeps.txt python/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --no-input --quiet -r requirements/dev.txt
	$(PY) -m pip install --no-input --quiet --no-deps -r requirements/dev-nodeps.txt
	$(PY) -m pip install --no-input --quiet --no-deps --no-build-isolation -e python
	touch $@

$(INTERPRETER): $(STAMP)
	printf '%s\n' "$(abspath $(VENV))/bin/python3" >$@

# verl 0.7.1 (has the NPU train-routing bug) in its own --target dir, imported only by the patch tests.
VERL071 := .cache/verl-0.7.1
$(VERL071)/.installed: $(STAMP)
	$(PY) -m pip install --no-input --quiet --no-deps --target $(VERL071) verl==0.7.1
	touch $@

.PHONY: verl-0.7.1
verl-0.7.1: $(VERL071)/.installed ## verl 0.7.1 --no-deps into .cache/verl-0.7.1 (NPU-bug patch tests)

# verl 0.9.1 (has the partial-rollout budget fix, verl PR #7207) in its own --target dir, for the detector tests.
VERL091 := .cache/verl-0.9.1
$(VERL091)/.installed: $(STAMP)
	$(PY) -m pip install --no-input --quiet --no-deps --target $(VERL091) verl==0.9.1
	touch $@

.PHONY: verl-0.9.1
verl-0.9.1: $(VERL091)/.installed ## verl 0.9.1 --no-deps into .cache/verl-0.9.1 (patch detector tests)

# VeOmni 0.1.9a5 (the pinned one; binds its own copy of the faulty MoE block forward) for the patch tests.
VEOMNI := .cache/veomni-0.1.9a5
$(VEOMNI)/.installed: $(STAMP)
	$(PY) -m pip install --no-input --quiet --no-deps --target $(VEOMNI) veomni==0.1.9a5
	touch $@

.PHONY: veomni-0.1.9a5
veomni-0.1.9a5: $(VEOMNI)/.installed ## VeOmni 0.1.9a5 --no-deps into .cache/veomni-0.1.9a5 (patch tests)

# vLLM 0.13.0 (the images') Python sources and the small packages its chat parser and config code import, in their own
# folder, for the tests of vLLM's own multimodal-limit code (tests/python/preflight/test_vllm_mm_limit.py) and engine
# config rules (test_vllm_engine.py) on the CPU; its compiled extensions are left in the wheel, which is removed after.
VLLM013 := .cache/vllm-0.13.0
$(VLLM013)/.installed: $(STAMP)
	rm -rf $(VLLM013) && mkdir -p $(VLLM013)
	$(PY) -m pip download --no-input --quiet --no-deps --dest $(VLLM013)/wheel vllm==0.13.0
	$(PY) -c "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); z.extractall(sys.argv[2], [n for n in z.namelist() if n.endswith('.py') or '.dist-info/' in n])" $(VLLM013)/wheel/vllm-0.13.0-*.whl $(VLLM013)/src
	rm -rf $(VLLM013)/wheel
	$(PY) -m pip install --no-input --quiet --no-deps --target $(VLLM013)/deps openai==2.8.1 cachetools==8.0.2 pybase64==1.5.1 distro==1.9.0 jiter==0.19.0 einops==0.8.2 cbor2==6.3.0 gguf==0.19.0 pyzmq==27.3.0
	touch $@

.PHONY: vllm-0.13.0
vllm-0.13.0: $(VLLM013)/.installed ## vLLM 0.13.0's Python sources into .cache/vllm-0.13.0 (its multimodal-limit and config tests)

.PHONY: docs-patches
docs-patches: venv ## regenerate docs/patches.md's patch table, README.md's summary and the start-up index from the registry
	$(PY) -m vlgrpo patches table --file docs/patches.md
	$(PY) -m vlgrpo patches table --summary --file README.md
	$(PY) -m vlgrpo patches index --write

.PHONY: hooks
hooks: ## use the repository's git hooks (scripts/hooks: commit-msg checks the commit convention of CONTRIBUTING.md)
	git config core.hooksPath scripts/hooks

.PHONY: tools
tools: ## install the system test tools (bats-core + helpers, shellcheck, slurm-wlm + munge) from Debian
	scripts/install-test-tools.sh

# --- tests -------------------------------------------------------------------------------------
.PHONY: test
test: venv tools lint test-python test-bats test-slurm test-docker ## run every suite (what CI runs)

# Two runs: every test not marked `ray` under pytest-xdist (PYTEST_JOBS workers, 2 by default: most tests wait on one
# fresh interpreter at a time, so a second worker uses the second core), then the real-Ray tests in one process on
# their own (their clusters start on loopback with deadlines; nothing else competes for the cores while they run).
# PYTEST_JOBS=0: the first run in one process too. Times in bench/RESULTS.md, "Test tiers".
PYTEST_JOBS ?= 2
XDIST = $(if $(filter 0,$(PYTEST_JOBS)),,-n $(PYTEST_JOBS) --dist loadgroup)
# make check: whole files per worker (tests/python/conftest.py says why)
XDIST_FILES = $(if $(filter 0,$(PYTEST_JOBS)),,-n $(PYTEST_JOBS) --dist loadfile)

.PHONY: test-python
test-python: venv verl-0.7.1 verl-0.9.1 veomni-0.1.9a5 vllm-0.13.0 ## pytest suites of the vlgrpo package (CPU, strict patch mode): the rest under xdist, then the real-Ray tests
	VLGRPO_PATCHES_STRICT=1 $(PY) -m pytest $(XDIST) --durations=15 -m "not ray" tests/python
	VLGRPO_PATCHES_STRICT=1 $(PY) -m pytest --durations=10 -m ray tests/python

.PHONY: check
check: venv tools verl-0.7.1 verl-0.9.1 veomni-0.1.9a5 vllm-0.13.0 ## the fast tier (about 3 min): make lint, the package's tests not marked slow or ray, the fast bats files
	scripts/lint.sh
	VLGRPO_PATCHES_STRICT=1 $(PY) -m pytest -q $(XDIST_FILES) -m "not slow and not ray" tests/python
	tests/bats/run.sh --fast

.PHONY: test-slurm
test-slurm: venv tools ## the Slurm example under a private two-node Slurm 22.05 on loopback (real Ray), and its srun lines
	$(PY) -m pytest -q -p no:cacheprovider --durations=10 tests/slurm

.PHONY: test-bats
test-bats: tools ## bats suites of the entrypoints
	tests/bats/run.sh

.PHONY: demo
demo: venv ## the npu-async-grpo launch planned end to end on the shipped Qwen3-VL-30B-A3B metadata + Geometry3K sample (dry run, 2+2 Atlas A3 nodes; nothing starts)
	scripts/demo.sh --python $(PY)

.PHONY: test-gpu
test-gpu: ## GPU suite + pos-embed/start-up benches on a CUDA machine (not in CI; skips without CUDA); logs in $OUT or out/gpu
	tests/gpu/run.sh

.PHONY: lint
lint: venv tools ## shellcheck, hadolint, ruff, mypy, compose config, pins, generated docs, commit convention
	scripts/lint.sh

# --- images (docker/; every version from docker/pins.env, tags computed by docker/images.py) --------
NPU        ?= a2
IMAGE_REPO ?= vlgrpo
REGISTRY   ?=
CA_BUNDLE  ?= /etc/ssl/certs/ca-certificates.crt
SOURCE_URL ?= unknown
DRY_RUN    ?=
IMAGES     := python3 docker/images.py
REVISION    = $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
# the locks the build reads (another pair: a mirror's, or CI's loopback registry) and extra `docker build` options
# (last, so a repeated --platform or --build-arg wins); images.py build sets DOCKER_BUILDKIT=1 (RUN --mount, secrets)
BASE_DIGESTS ?= docker/base-digests.lock
ARTIFACTS    ?= docker/artifacts.lock
BUILD_FLAGS  ?=
BUILD_OPTS  = --repo $(IMAGE_REPO) --revision $(REVISION) --source $(SOURCE_URL) --ca $(CA_BUNDLE) \
              --base-lock $(BASE_DIGESTS) --artifacts-lock $(ARTIFACTS)

.PHONY: image-gpu
image-gpu: ## build the NVIDIA image; what the locks leave unresolved is read at build time (DRY_RUN=1: print the command)
	$(IMAGES) build gpu $(BUILD_OPTS) $(if $(DRY_RUN),--dry-run) -- $(BUILD_FLAGS)

.PHONY: image-npu
image-npu: ## build the Ascend image, NPU=a2 (Atlas A2/910B, default) or NPU=a3 (DRY_RUN=1: print the command)
	@case "$(NPU)" in a2|a3) ;; *) echo "image-npu: NPU=$(NPU) is not a2 (Atlas A2, 910B) or a3 (Atlas A3); e.g. make image-npu NPU=a3" >&2; exit 2;; esac
	$(IMAGES) build npu-$(NPU) $(BUILD_OPTS) $(if $(DRY_RUN),--dry-run) -- $(BUILD_FLAGS)

.PHONY: push
push: ## push built images to REGISTRY (e.g. REGISTRY=ghcr.io/acme; PLATFORMS="gpu npu-a2 npu-a3"); refuses unresolved base digests
	@test -n "$(REGISTRY)" || { echo "push: set REGISTRY=<registry>/<namespace>, e.g. make push REGISTRY=ghcr.io/acme" >&2; exit 2; }
	@for p in $(or $(PLATFORMS),gpu npu-a2 npu-a3); do \
	  base=$$($(IMAGES) base $$p); case "$$base" in *@sha256:*) ;; *) echo "push: $$p was built FROM $$base without a digest: run make pin-digests, rebuild, then push" >&2; exit 2;; esac; \
	  tag=$$($(IMAGES) tag $$p); \
	  $(if $(DRY_RUN),echo )docker tag $(IMAGE_REPO):$$tag $(REGISTRY)/vlgrpo:$$tag && $(if $(DRY_RUN),echo )docker push $(REGISTRY)/vlgrpo:$$tag || exit 1; \
	done

.PHONY: pin-digests
pin-digests: ## resolve the base tags to digests (docker/base-digests.lock) and hash flash-attn (docker/artifacts.lock); needs registry + GitHub access
	python3 docker/pin_digests.py

.PHONY: lock
lock: venv ## regenerate the hash-pinned locks docker/locks/* with uv (per platform and Python; needs PyPI)
	UV=$(VENV)/bin/uv docker/lock.sh

.PHONY: docs
docs: docs-settings docs-patches ## regenerate README's generated blocks, docs/settings.md, docs/patches.md, compose.yaml's image names, docker/vlgrpo.env.example
	$(IMAGES) sync

.PHONY: docs-settings
docs-settings: ## regenerate docs/settings.md, README's settings summary and docker/vlgrpo.env.example from the registry (scripts/gen-docs)
	scripts/gen-docs

.PHONY: test-docker
test-docker: venv ## build the Dockerfiles' stages FROM a cached CI stand-in base on a private dockerd and run them (compose dry run, doctor, stop)
	$(PY) -m pytest -q -p no:cacheprovider tests/docker
	PY=$(PY) tests/docker/run.sh
