# The two commands of the README: `make run` and `make test`. Both bootstrap .venv/ first.
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: bootstrap services browser ui ui-check run test test-quick lint bench

bootstrap:
	@bash scripts/bootstrap.sh

services:
	@bash scripts/services.sh

browser:
	@bash scripts/browser.sh

ui: bootstrap
	@bash scripts/ui.sh

ui-check: bootstrap
	@bash scripts/ui.sh --check

run: bootstrap ui
	$(PY) -m backend serve --data-dir .spindle-data

lint: bootstrap
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

test: lint services browser ui-check
	$(PY) -m pytest -q

test-quick: lint services browser ui-check
	SPINDLE_TEST_PROFILE=quick $(PY) -m pytest -q

bench: bootstrap
	$(PY) -m bench.engine --json
	$(PY) -m bench.commit --json
	$(PY) -m bench.api --json
