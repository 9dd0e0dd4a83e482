# The two commands that matter on a fresh machine:  make demo  and  make test.
# Both create the virtualenv when it is missing (or when pyproject.toml changed).
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed

.PHONY: demo test test-fast lint typecheck check bench clean-venv

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/payorch demo

# The whole suite: unit, replay, integration (real PostgreSQL + RabbitMQ) and chaos.
# tests/conftest.py starts a stopped PostgreSQL or RabbitMQ, and installs them when absent.
test: $(STAMP)
	$(BIN)/python -m pytest tests

# Everything that needs no server: unit + replay tests.
test-fast: $(STAMP)
	$(BIN)/python -m pytest tests/unit tests/replay

lint: $(STAMP)
	$(BIN)/ruff check orchestrator workers tests bench
	$(BIN)/ruff format --check orchestrator workers tests bench

typecheck: $(STAMP)
	$(BIN)/mypy

check: lint typecheck test

bench: $(STAMP)
	$(BIN)/payorch bench

clean-venv:
	rm -rf $(VENV)
