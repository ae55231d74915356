# The two commands: `make demo` runs the loop, `make test` runs the tests.
# Both build what they need first (cached in ~/.cache/ratchet, keyed by the pins).
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
ENV := . .ratchet/env &&
PYTEST_ARGS ?=
DEMO_ARGS ?=

.PHONY: demo test lint setup schemas clean help

help:
	@echo "make demo   build everything, start the stack and run the learning loop"
	@echo "make test   build everything and run the test suite against the real stack"
	@echo "make lint   ruff over the code"

setup:
	@ops/setup.sh

demo: setup
	@$(ENV) ratchet demo $(DEMO_ARGS)

test: setup
	@$(ENV) python -m pytest $(PYTEST_ARGS)

lint: setup
	@$(ENV) ruff check . && ruff format --check .

schemas: setup
	@$(ENV) python -m ingest.export_schemas

clean:
	rm -rf .ratchet .pytest_cache .ruff_cache
