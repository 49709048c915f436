# pigeond: `make run` and `make test` work on a fresh clone; both create the virtualenv.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test lint unit venv clean bench

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

## start the daemon on the embedded defaults (Ctrl-C stops it)
run: $(STAMP)
	$(BIN)/pigeond

## lint, type-check, then every test
test: $(STAMP) lint
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check pigeond tests bench
	$(BIN)/ruff format --check pigeond tests bench
	$(BIN)/mypy

## only the fast unit tests
unit: $(STAMP)
	$(BIN)/python -m pytest -m "not slow"

bench: $(STAMP)
	$(BIN)/python bench/ready_targets.py

clean:
	rm -rf $(VENV) build dist *.egg-info .mypy_cache .ruff_cache .pytest_cache
