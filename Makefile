# Two commands a newcomer needs: `make demo` and `make test`. Everything else is installed here.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The install is redone when what it builds changes: the dependencies, or the compiled code.
HASH := $(shell cat pyproject.toml hatch_build.py lagd/evaluate/_trend.c lagd/ingest/_commits.c lagd/state/_apply.c lagd/http/burrow_json.py lagd/state/apply.py lagd/state/apply.pxd | sha1sum | cut -c1-12)
# What the demo needs (lagd, its dependencies, the embedded services) and, for tests, the developer tools too.
RUN_STAMP := $(VENV)/.installed-run-$(HASH)
DEV_STAMP := $(VENV)/.installed-dev-$(HASH)

.PHONY: demo test lint typecheck pytest pytest-python bench system-deps kafka venv clean

venv: $(DEV_STAMP)

$(VENV)/bin/python:
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) (3.11+): apt-get install python3 python3-venv"; exit 1; }
	@echo "== creating $(VENV) and upgrading pip"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip

$(RUN_STAMP): pyproject.toml | $(VENV)/bin/python
	@echo "== installing lagd and what the demo needs into $(VENV) (no developer tools; about half a minute the first time)"
	$(PY) -m pip install --progress-bar on -e '.[demo]'
	rm -f $(VENV)/.installed-run-*
	touch $@

$(DEV_STAMP): pyproject.toml | $(VENV)/bin/python
	@echo "== installing lagd with the Spark jobs and the developer tools into $(VENV)"
	$(PY) -m pip install --quiet -e '.[dev]'
	rm -f $(VENV)/.installed-*
	touch $@ $(RUN_STAMP)

# The Debian packages no wheel provides (README lists them), installed when missing.
system-deps:
	@bash scripts/system-deps.sh

# Apache Kafka's jars (broker, tools, clients) from Maven Central into ~/.cache/lagd/kafka, once per version.
kafka: venv system-deps
	$(PY) -m lagd.embedded.kafka fetch

lint: venv
	$(VENV)/bin/ruff check lagd tests bench hatch_build.py
	$(VENV)/bin/ruff format --check lagd tests bench hatch_build.py

typecheck: venv
	$(VENV)/bin/mypy

pytest: venv system-deps kafka
	$(VENV)/bin/pytest $(PYTEST_ARGS)

# The tests that are not slow once more with the compiled code turned off, so the Python that
# stands in for it where no compiler is found is tested too. The tests of the compiled code
# itself (tests/test_*_c.py: it is built where it can be, and answers as the Python) are left out.
pytest-python: venv system-deps kafka
	LAGD_NO_EXTENSIONS=1 $(VENV)/bin/pytest -m "not slow" --ignore-glob='tests/test_*_c.py' $(PYTEST_ARGS)

test: lint typecheck pytest pytest-python

demo: $(RUN_STAMP)
	$(VENV)/bin/lagd demo

bench: venv system-deps kafka
	$(PY) -m bench

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
