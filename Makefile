# Every set-up step a fresh machine needs lives here, so `make run` and `make test` work from a
# clean clone (CI runs `make test` through .ci/run).
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: run test test-fast lint docker bench clean

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) (Python 3.11)"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[train,test]'
	touch $(STAMP)

## run: the main job on its embedded default: 2 nodes x 2 CPU processes, gloo, on this machine
run: $(STAMP)
	$(VENV)/bin/ddpctl run --local

## docker: install and start a Docker engine, and build the local CPU base image (no registry needed)
docker:
	bash scripts/install-docker.sh
	bash scripts/make-base-image.sh

## lint: ruff (lint + format check), mypy (strict) on cli/ and trainer/, import-linter's layer contracts
lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	@# mypy sees cli/ and trainer/ under their installed names (see [tool.mypy] in pyproject.toml)
	mkdir -p $(VENV)/typecheck
	ln -sfn ../../cli $(VENV)/typecheck/ddpctl
	ln -sfn ../../trainer $(VENV)/typecheck/ddpctl_trainer
	$(PY) -m mypy
	$(PY) -c 'import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())'

## test: everything the tests need, the gates, then the whole suite
test: $(STAMP) docker lint
	$(PY) -m pytest -q

## test-fast: the suite without Docker set-up (Docker tests skip unless CI=true)
test-fast: $(STAMP)
	$(PY) -m pytest -q

## bench: the benchmarks under bench/ (each prints ratios against a baseline measured in the same run)
bench: $(STAMP)
	$(PY) bench/bench_render.py
	$(PY) bench/bench_trainer.py
	$(PY) bench/bench_first_step.py

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache
