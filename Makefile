# sparkfleet.vllm: the README's two commands are `make demo` and `make test`.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
N ?= 4
COLLECTION_LINK := collections/ansible_collections/sparkfleet/vllm
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export ANSIBLE_FORCE_COLOR ?= 0
export PY_COLORS ?= 0
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: help deps host demo test test-16 lint unit integration sim-up sim-down sim-images test-day2 bench bench-verdicts bench-weights bench-noop bench-overhead patch-verdicts \
	gpu-wheels gpu-stage gpu-check sanity

help:
	@echo "make demo      simulated 4-node cluster + deploy_mimo.yml, prints the endpoint's answers"
	@echo "make test      ruff + ansible-lint + ansible-test sanity + unit tests + molecule (on the simulated cluster)"
	@echo "make test-day2 the day-2 chaos suite: lost nodes, 2 replicas behind the balancer, rolling redeploys (CI runs it)"
	@echo "make test-16   16 simulated nodes: MiMo 2 x TP8, a no-op re-run, a rolling redeploy, Kimi TP16 (not in make test)"
	@echo "make lint | sanity | unit | sim-up N=4 | sim-down | bench | bench-weights | bench-verdicts | bench-noop | bench-overhead"
	@echo "make patch-verdicts VLLM_SRC=DIR   each patch's verdict for a vLLM source tree, as JSON (writes nothing)"
	@echo "make gpu-wheels (networked) | gpu-stage | gpu-check OUT=DIR (GPU host, offline): real vLLM tier"

$(BIN)/.installed: requirements.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip==24.3.1
	$(BIN)/pip install --quiet -c constraints.txt -r requirements.txt -r requirements-dev.txt
	touch $@

$(COLLECTION_LINK):
	mkdir -p $(dir $(COLLECTION_LINK))
	ln -sfn ../../.. $(COLLECTION_LINK)

deps: $(BIN)/.installed $(COLLECTION_LINK)

host:
	tests/sim/ensure-host.sh

sim-images: deps host
	$(BIN)/python tests/sim/simctl.py images

sim-up: deps host
	$(BIN)/python tests/sim/simctl.py up --nodes $(N)

sim-down: deps
	$(BIN)/python tests/sim/simctl.py down

demo: sim-up
	cd site && ANSIBLE_CONFIG=$(CURDIR)/site/ansible.cfg $(CURDIR)/$(BIN)/ansible-playbook deploy_mimo.yml -i local
	@echo "The simulated cluster keeps running; remove it with: make sim-down"

lint: deps
	$(BIN)/ruff check .
	$(BIN)/ansible-lint --offline

unit: deps
	$(BIN)/pytest -q tests/unit

sanity: deps
	$(BIN)/python tests/tools/sanity.py

test: deps host lint sanity
	$(BIN)/pytest -q -p no:cacheprovider --durations=20 -m "not day2" tests

# The day-2 chaos suite (lost nodes, two replicas behind the balancer, rolling redeploys, rollback): about
# 29 minutes on its own simulated cluster, so never while another one runs. CI (.ci/run) runs it after make test.
test-day2: deps host
	$(BIN)/pytest -q -p no:cacheprovider --durations=0 -m day2 tests/integration

# The 16-node suite: its own simulated cluster, so never while another one runs (make test's, make demo's).
test-16: deps host
	SPARKFLEET_TEST_16=1 $(BIN)/pytest -q -s -p no:cacheprovider --durations=0 tests/integration/test_sixteen.py

bench: deps host
	$(BIN)/python benchmarks/image_distribution.py

bench-weights: deps host
	$(BIN)/python benchmarks/weights_distribution.py

bench-verdicts: deps host
	$(BIN)/python benchmarks/time_to_verdict.py

bench-noop: deps host
	$(BIN)/python benchmarks/noop_rerun.py

bench-overhead: deps host
	$(BIN)/python benchmarks/overhead.py --runs $${RUNS:-3}

# DIR: a vllm package directory, or one that contains vllm/ (an unpacked sdist or wheel, a site-packages).
patch-verdicts: deps
	@test -n "$(VLLM_SRC)" || { echo "usage: make patch-verdicts VLLM_SRC=/path/to/tree" >&2; exit 2; }
	@PYTHONPATH=$(CURDIR)/collections $(BIN)/python tests/tools/patch_verdicts.py "$(VLLM_SRC)"

# The GPU tier (README: "Real vLLM on a GPU"), kept out of `make test` and CI.
# gpu-wheels runs on a networked machine; gpu-stage and gpu-check on the GPU host, which needs no network.
GPU_PYTHON ?= python3
OUT ?= .gpu/out
RUNS ?= unpatched,patched,random,fp8
gpu-wheels:
	$(GPU_PYTHON) tests/gpu/wheels.py download
	$(GPU_PYTHON) tests/gpu/wheels.py pack

gpu-stage:
	$(GPU_PYTHON) tests/gpu/wheels.py stage

gpu-check:
	$(GPU_PYTHON) tests/gpu/wheels.py stage
	$(GPU_PYTHON) tests/gpu/check.py --out $(OUT) --runs $(RUNS)
