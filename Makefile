# The two commands that matter on a fresh machine:  make demo  and  make test.
# Both create the virtualenv when it is missing (or when pyproject.toml changed).
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed

.PHONY: demo test test-fast lint typecheck check bench clean-venv screenshots docs docs-serve
.PHONY: lock audit

# The virtualenv holds exactly what requirements-dev.lock pins, each file checked against its
# hash (pip refuses anything else); the project itself goes in editable with --no-deps, so
# pyproject.toml's ranges never pull a version the lock does not name.
$(STAMP): pyproject.toml requirements-dev.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --require-hashes -r requirements-dev.lock
	$(BIN)/pip install --quiet --no-deps -e .
	touch $(STAMP)

# The lock files, from pyproject.toml (docs/decisions/0084-hashed-lock-files.md):
# requirements-dev.lock (runtime + test + docs extras: make, CI) and requirements.lock
# (runtime only: the Dockerfile), for CPython 3.11 on Linux x86_64, with every file's hash.
# The runtime lock is constrained by the dev lock, so both pin the same versions.  Pins
# already in a lock are kept; to move them: make lock LOCK_FLAGS=--upgrade (everything) or
# LOCK_FLAGS='--upgrade-package jinja2'.  tests/unit/test_dependency_locks.py fails while a
# lock is out of date with pyproject.toml.
LOCK_FLAGS ?=
UV_COMPILE = $(BIN)/uv pip compile --quiet --generate-hashes --python-version 3.11 \
	--python-platform x86_64-manylinux_2_28 --custom-compile-command 'make lock' $(LOCK_FLAGS)
lock: $(STAMP)
	$(UV_COMPILE) pyproject.toml --extra test --extra docs -o requirements-dev.lock
	$(UV_COMPILE) pyproject.toml -c requirements-dev.lock -o requirements.lock

# pip-audit over the dev lock (a superset of the runtime lock).  Fails on a known
# vulnerability; when the vulnerability service cannot be reached or answers for no package,
# prints a notice saying the audit was skipped and exits 0 (tests/support/audit.py).
audit: $(STAMP)
	$(BIN)/python -m tests.support.audit requirements-dev.lock

demo: $(STAMP)
	$(BIN)/payorch demo

# The whole suite: unit, replay, integration (real PostgreSQL + RabbitMQ) and chaos.
# tests/conftest.py starts a stopped PostgreSQL or RabbitMQ, and installs them when absent.
# In TEST_WORKERS pytest-xdist workers: most tests wait on the processes they start, so two
# at once use the two cores.  --dist loadfile keeps a file's tests (and its module fixtures:
# an API server, a simulator) on one worker; --no-loadscope-reorder hands files out in
# collection order (the long chaos files first, the many quick unit tests last) instead of
# by test count.  Serially: make test TEST_WORKERS=0.
# The browser tests run in their own pytest process: Playwright's sync API leaves its asyncio
# loop set in the main thread, and later tests that start a loop would fail.
TEST_WORKERS ?= 2
test: $(STAMP)
	$(BIN)/python -m pytest tests --ignore=tests/browser \
	  -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder
	$(BIN)/python -m pytest tests/browser

# Everything that needs no server: unit + replay tests.
test-fast: $(STAMP)
	$(BIN)/python -m pytest tests/unit tests/replay

# lint-imports: the layers and the other architecture contracts ([tool.importlinter] in
# pyproject.toml).
lint: $(STAMP)
	$(BIN)/ruff check orchestrator workers devtools tests bench
	$(BIN)/ruff format --check orchestrator workers devtools tests bench
	$(BIN)/lint-imports --no-logo

typecheck: $(STAMP)
	$(BIN)/mypy

check: lint typecheck test

bench: $(STAMP)
	$(BIN)/payorch bench

# The ops console's pages in Debian's Chromium (installed when missing), written to
# docs/screenshots/ for the docs' operations page.  The same test runs in `make test` (to
# test-artifacts/).
screenshots: $(STAMP)
	PAYORCH_SCREENSHOTS_DIR=$(CURDIR)/docs/screenshots $(BIN)/python -m pytest -q \
	  tests/browser/test_console_pages.py tests/browser/test_console_charts_browser.py \
	  -k "every_console_page or last_hour_and_day"

# The documentation site (mkdocs.yml, docs/): the generated pages (configuration from the
# settings class, the OpenAPI document from the app) are rewritten first, then the site is
# built with --strict, so a broken link, a missing anchor or a page left out of the nav fails.
export NO_MKDOCS_2_WARNING = 1
docs: $(STAMP)
	$(BIN)/python -m devtools.reference_docs
	$(BIN)/mkdocs build --strict

docs-serve: $(STAMP)
	$(BIN)/python -m devtools.reference_docs
	$(BIN)/mkdocs serve --dev-addr 127.0.0.1:8008  # 8000 is the API's default port

clean-venv:
	rm -rf $(VENV)

# Provider adapter cassettes (tests/replay, cassettes/README.md).  CI only replays them.
.PHONY: cassettes cassettes-stripe cassettes-adyen

# Re-record every cassette against the in-process provider simulator (offline, seconds).
cassettes: $(STAMP)
	PAYORCH_CASSETTES=simulator $(BIN)/python -m pytest tests/replay -q

# Re-record only the Adyen adapter's cassettes against the in-process Adyen simulator.
cassettes-adyen: $(STAMP)
	PAYORCH_CASSETTES=simulator $(BIN)/python -m pytest tests/replay/test_adyen_adapter_replay.py -q

# Re-record against Stripe's test mode: make cassettes-stripe STRIPE_TEST_KEY=sk_test_...
# Scenarios that need an injected fault (409 key in use, 429, 500) keep their simulator
# recording.  Replay afterwards (make test-fast) to check the tests tolerate real Stripe.
cassettes-stripe: $(STAMP)
	@case "$(STRIPE_TEST_KEY)" in sk_test_*) ;; \
	  *) echo "usage: make cassettes-stripe STRIPE_TEST_KEY=sk_test_..." >&2; exit 2;; esac
	PAYORCH_CASSETTES=stripe STRIPE_TEST_KEY="$(STRIPE_TEST_KEY)" $(BIN)/python -m pytest tests/replay -q
