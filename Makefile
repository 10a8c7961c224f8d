# Every set-up step a fresh machine needs lives here, so `make run` and `make test` work from a
# clean clone in any folder (CI runs `make test` through .ci/run).
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

# The one torch for the venv and the Docker base image (TORCH_VERSION, TORCHVISION_VERSION).
include scripts/torch-version.env
# Which build pip installs. The default, auto: on a machine without a GPU (no nvidia-smi), PyTorch's
# CPU index (the CPU build, ~1 GB) when it answers within 3 s, else PyPI's default (CUDA on Linux,
# ~5 GB), said in one line (scripts/torch-index.py). Or name an index, or none for PyPI alone:
#   make run TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu      make run TORCH_INDEX_URL=
# or other requirements (a wheel file, another version) with TORCH_SPEC='...'.
TORCH_CPU_INDEX := https://download.pytorch.org/whl/cpu
TORCH_INDEX_URL ?= auto
TORCH_SPEC      ?= torch==$(TORCH_VERSION) torchvision==$(TORCHVISION_VERSION)
# pytest-xdist workers for `make test`: the real-cluster package on one while the other runs the
# rest (measured in docs/testing.md); TEST_WORKERS=0 runs everything in one process
TEST_WORKERS ?= 2
PARALLEL := $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder)
# uv installs the venv from its cache by hard links: a fresh clone's venv in ~30 s where pip took
# ~90 s. It compiles the bytecode of what it installs, as pip did: where PYTHONDONTWRITEBYTECODE
# is set, a module without it is compiled again at every import.
UV_VERSION := 0.13.10
UV_PIP     := $(VENV)/bin/uv pip install -q --python $(PY) --compile-bytecode
# mypy's incremental cache, outside the clone so a fresh clone starts warm (~2 s instead of ~26 s);
# mypy checks each entry against the file it stands for, so a cache never changes the verdict.
MYPY_CACHE_DIR ?= $(HOME)/.cache/ddpctl/mypy
# A marker per torch choice: changing TORCH_SPEC or TORCH_INDEX_URL reinstalls torch, and then ddpctl.
TORCH_STAMP := $(VENV)/.torch-$(shell printf '%s|%s' '$(TORCH_SPEC)' '$(TORCH_INDEX_URL)' | cksum | cut -d' ' -f1)

.PHONY: disk run test test-fast coverage lint docker kubectl chart-contract bench clean cluster cluster-build cluster-load cluster-down

$(TORCH_STAMP): scripts/torch-version.env
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) (Python 3.11)"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip 'uv==$(UV_VERSION)'
	index='$(TORCH_INDEX_URL)'; \
	if [ "$$index" = auto ]; then index=$$($(PY) scripts/torch-index.py $(TORCH_CPU_INDEX)); fi; \
	$(UV_PIP) $${index:+--extra-index-url "$$index" --index-strategy unsafe-best-match} $(TORCH_SPEC)
	rm -f $(VENV)/.torch-*
	touch $@

$(STAMP): pyproject.toml $(TORCH_STAMP)
	$(UV_PIP) -e '.[train,test]'
	touch $(STAMP)

## run: the main job on its embedded default: 2 nodes x 2 CPU processes, gloo, on this machine
run: $(STAMP)
	$(VENV)/bin/ddpctl run --local

## docker: install and start a Docker engine, and build the local CPU base image (no registry needed)
docker:
	bash scripts/install-docker.sh
	bash scripts/make-base-image.sh

## kubectl: `kubectl kustomize` checks `render --output-dir`; installed from Debian (kubernetes-client)
## when missing and root, else its test skips here (and fails under CI=true)
kubectl:
	@command -v kubectl >/dev/null 2>&1 && exit 0; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing kubectl (apt: kubernetes-client)"; \
	  apt-get update -qq >/dev/null && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends kubernetes-client >/dev/null; \
	else echo "kubectl is missing and this is not root with apt-get: install it to run its test"; fi

## lint: ruff (lint + format check), mypy (strict) on cli/ddpctl/, trainer/ddpctl_trainer/ and testcluster/, import-linter's layer contracts
lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy --cache-dir "$(MYPY_CACHE_DIR)"
	$(PY) -c 'import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())'

## cluster-build: go build the test cluster's binaries (testcluster/go, and the real node's in
## testcluster/node/go) into a cache outside the clone, and install the node's Debian packages;
## without Go the cluster tests skip (and fail under CI=true)
cluster-build:
	@if command -v go >/dev/null 2>&1 || [ "$$CI" = true ]; then bash testcluster/scripts/build.sh >/dev/null && \
	  bash testcluster/node/build.sh >/dev/null && bash testcluster/node/install-deps.sh; \
	else echo "note: no Go here: the cluster tests (tests/e2e/cluster) will skip; install Go 1.26+ to run them"; fi

## cluster: start the test cluster (a real control plane, kwok GPU nodes, the engines' controllers);
## its commands are `python -m testcluster up|down|status|nodes N|load REF...`, from this folder
cluster: $(STAMP) cluster-build
	$(PY) -m testcluster up

## cluster-load: copy an image of the local Docker engine to the real node (no registry here),
## e.g. make cluster-load IMAGE=$$(ddpctl build --base-image ddpctl-base:cpu --quiet)
cluster-load: $(STAMP)
	@test -n "$(IMAGE)" || { echo "usage: make cluster-load IMAGE=REF"; exit 2; }
	$(PY) -m testcluster load '$(IMAGE)'

## cluster-down: stop it and remove its state (with the system's python3 when the venv is gone)
cluster-down:
	$(if $(wildcard $(PY)),$(PY),python3) -m testcluster down

## disk: a one-line stop when the disk cannot hold what the suite writes (DISK_MIN_GIB, default 12)
disk:
	@bash scripts/check-disk.sh

## test: everything the tests need, the gates, then the whole suite on TEST_WORKERS processes
## (tests/conftest.py: a module, or the real-cluster package, runs whole on one of them); the
## repo's modules are compiled first, as the suite starts thousands of processes that import them
test: disk $(STAMP) docker kubectl cluster-build lint
	$(PY) -m compileall -q -j 0 cli trainer testcluster tests >/dev/null
	$(PY) -m pytest -q --durations=25 $(PARALLEL)

## test-fast: no Docker set-up, no multi-process or container tests (`-m "not slow and not docker"`)
test-fast: $(STAMP) kubectl
	$(PY) -m pytest -q -m "not slow and not docker" $(PARALLEL)

## coverage: line coverage of cli/ and trainer/ by the fast tier (tests/unit, tests/contract), in
## one process (the figure docs/testing.md records)
coverage: $(STAMP) kubectl
	$(PY) -m coverage run --source=cli,trainer -m pytest -q -p no:xdist tests/unit tests/contract
	$(PY) -m coverage report --format=total

## chart-contract: regenerate charts/ddp-job's values.yaml, values.schema.json and templates/_generated.tpl
## from the JobSpec's fields and the engines
chart-contract: $(STAMP)
	$(PY) tools/chart_contract.py --write

## docs: regenerate docs/spec-reference.md and the trainer's flag tables in docs/trainer.md from the code,
## and docs/lint-rules.md from ddpctl lint's rules
.PHONY: docs
docs: $(STAMP)
	$(PY) tools/docs_reference.py --write
	$(PY) tools/lint_docs.py --write

## bench: the benchmarks under bench/ (each prints ratios against a baseline measured in the same run)
bench: $(STAMP)
	$(PY) bench/bench_render.py
	$(PY) bench/bench_trainer.py
	$(PY) bench/bench_first_step.py
	$(PY) bench/bench_preemption.py
	$(PY) bench/bench_submit.py
	$(PY) bench/bench_real_node.py
	$(PY) bench/bench_checkpoint_store.py
	$(PY) bench/bench_workspace.py
	$(PY) bench/bench_lint.py
	$(PY) bench/bench_workspace_edit.py
	$(PY) bench/bench_preflight.py
	$(PY) bench/bench_preflight_cost.py
	$(PY) bench/bench_stragglers.py

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache
