PY ?= python3
VENV ?= .venv
ACT = . $(VENV)/bin/activate

.PHONY: venv install run test test-fast bench room lint

$(VENV)/bin/activate:
	$(PY) -m venv $(VENV)

venv: $(VENV)/bin/activate

install: venv
	$(ACT) && pip install -q -e ".[test,ray]"

run: venv
	$(ACT) && pip install -e . && python -m dashboard.serve

test: venv
	$(ACT) && pip install -e ".[test]" && python -m pytest

test-fast: install
	$(ACT) && python -m pytest -m "not browser"

bench: install
	$(ACT) && python -m bench.run

room: install
	$(ACT) && python -m bench.room

# ruff (lint, import order, the banned imports that carry the layering, format) over the tree, and mypy over
# core, dashboard, cli, store, connectors and executors with every function body checked; settings in
# pyproject.toml and each package's ruff.toml. LINT_PY is the interpreter that has them (default: python on
# PATH, e.g. the activated .venv after `make install`).
LINT_PY ?= python
lint:
	$(LINT_PY) -m ruff check .
	$(LINT_PY) -m ruff format --check .
	$(LINT_PY) -m mypy
