# The two commands of the README: `make run` and `make test`. Both bootstrap .venv/ first.
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: lock bootstrap services browser ui ui-check run test test-full test-quick lint bench bench-flink bench-nexmark

bootstrap:
	@bash scripts/bootstrap.sh

services:
	@bash scripts/services.sh

lock:
	@bash scripts/lock.sh $(ARGS)

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

# Most of the suite's wall time is spent waiting on other processes (Spark JVMs, the
# platform's servers, killed and restarted children), so two pytest workers halve it even on
# two cores. Whole files go to one worker: each module keeps its one Spark session.
TEST_WORKERS ?= 2
PYTEST := $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=30

test: lint services browser ui-check
	$(PYTEST)

test-full: lint services browser ui-check
	$(PYTEST) --full

test-quick: lint services browser ui-check
	SPINDLE_TEST_PROFILE=quick $(PYTEST)

bench: bootstrap
	$(PY) -m bench.engine --json
	$(PY) -m bench.commit --json
	$(PY) -m bench.api --json

# The Flink side of `python -m bench.nexmark` runs in an environment of its own (~850 MB that
# the tests do not need), with the machine's Python and Java 17.
FLINK_VENV := .venv-flink
bench-flink: $(FLINK_VENV)/bin/pyflink-shell.sh

$(FLINK_VENV)/bin/pyflink-shell.sh: bench/flink/requirements.txt
	python3 -m venv $(FLINK_VENV)
	$(FLINK_VENV)/bin/pip install -q -r bench/flink/requirements.txt
	touch $@

bench-nexmark: bootstrap bench-flink
	$(PY) -m bench.nexmark --json
