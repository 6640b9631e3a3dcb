# vlgrpo — make help lists the targets.
SHELL := /bin/bash
.SHELLFLAGS := -Eeu -o pipefail -c
.DEFAULT_GOAL := help
.DELETE_ON_ERROR:

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: help
help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# --- environment -------------------------------------------------------------------------------
.PHONY: venv
venv: $(STAMP) ## create .venv with the pinned test requirements (CPU torch 2.13.0, transformers 4.57.6, verl 0.8.0)
$(STAMP): requirements/dev.txt requirements/dev-nodeps.txt python/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --no-input --quiet -r requirements/dev.txt
	$(PY) -m pip install --no-input --quiet --no-deps -r requirements/dev-nodeps.txt
	$(PY) -m pip install --no-input --quiet --no-deps --no-build-isolation -e python
	touch $@

# verl 0.7.1 (has the NPU train-routing bug) in its own --target dir, imported only by the patch tests.
VERL071 := .cache/verl-0.7.1
$(VERL071)/.installed: $(STAMP)
	$(PY) -m pip install --no-input --quiet --no-deps --target $(VERL071) verl==0.7.1
	touch $@

.PHONY: verl-0.7.1
verl-0.7.1: $(VERL071)/.installed ## verl 0.7.1 --no-deps into .cache/verl-0.7.1 (NPU-bug patch tests)

.PHONY: tools
tools: ## install the system test tools (bats-core + helpers, shellcheck) from Debian
	scripts/install-test-tools.sh

# --- tests -------------------------------------------------------------------------------------
.PHONY: test
test: venv tools lint test-python test-bats ## run every suite (what CI runs)

.PHONY: test-python
test-python: venv verl-0.7.1 ## pytest suites of the vlgrpo package (CPU, strict patch mode)
	VLGRPO_PATCHES_STRICT=1 $(PY) -m pytest tests/python

.PHONY: test-bats
test-bats: tools ## bats suites of the entrypoints
	tests/bats/run.sh

.PHONY: lint
lint: venv tools ## shellcheck, hadolint, compose config
	scripts/lint.sh
