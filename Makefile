# Two commands on a fresh machine:
#   make run   - create .venv if missing, install the project, launch the app on a built-in sample
#   make test  - same set-up plus test dependencies and Chromium, then the whole test suite
#   make test-fast - the set-up of make test but Chromium, then all but the slow and browser tests
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8050
SAMPLE ?= bert_tiny
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: run test test-fast install install-test browser bench graphs frontiers classifier lint clean docs

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt torch==2.13.0

$(VENV)/.installed: $(BIN)/python pyproject.toml constraints.txt
	$(BIN)/pip install -q -c constraints.txt -e .
	$(BIN)/python -m app.bundle
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(BIN)/pip install -q -c constraints.txt -e '.[test,bench]'
	touch $@

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test

browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi; \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium chromium-driver >/dev/null; }

run: install
	$(BIN)/magis app --sample $(SAMPLE) --host $(HOST) --port $(PORT)

test: install-test browser
	$(BIN)/python -m pytest -q

test-fast: install-test
	$(BIN)/python -m pytest -q -m "not slow and not browser"

bench: install
	$(BIN)/python bench/workloads.py --all-devices

graphs: install
	$(BIN)/python -m sample_graphs.generate

# the samples' precomputed memory/latency frontiers (MAGIS and every peer), opened by the app's plan bar
frontiers: install-test
	$(BIN)/python -m sample_graphs.frontiers

# GET's validity classifier for the forward samples' layer fusion (the Fusion tab's gnn / grad explainers),
# trained once here and shipped (core/search/fusion/weights/, with its held-out accuracy in manifest.json)
FUSION_GRAPHS ?= mobilenet_v2 efficientnet_b3 resnet152
classifier: install
	$(BIN)/python -m core.search.fusion.gnn $(foreach n,$(FUSION_GRAPHS),sample_graphs/graphs/$(n).forward.json.gz) --scheme lbdf brr

# the docs' results tables and figures, rendered from bench/results/*.json (tests/test_docs.py checks them)
docs: install
	$(BIN)/python bench/docs.py

lint: install-test
	$(BIN)/ruff check .
