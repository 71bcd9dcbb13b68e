# Two commands a newcomer needs: `make demo` and `make test`. Everything else is installed here.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)

.PHONY: demo test lint typecheck pytest bench system-deps venv clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) (3.11+): apt-get install python3 python3-venv"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	rm -f $(VENV)/.installed-*
	touch $@

# Spark needs a Java runtime and the PostgreSQL JDBC driver: Debian packages, installed when missing.
system-deps:
	@bash scripts/system-deps.sh

lint: venv
	$(VENV)/bin/ruff check lagd tests bench
	$(VENV)/bin/ruff format --check lagd tests bench

typecheck: venv
	$(VENV)/bin/mypy

pytest: venv system-deps
	$(VENV)/bin/pytest $(PYTEST_ARGS)

test: lint typecheck pytest

demo: venv
	$(VENV)/bin/lagd demo

bench: venv system-deps
	$(PY) -m bench

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
