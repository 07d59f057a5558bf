PY ?= python3

.PHONY: install run test test-fast bench lint

install:
	$(PY) -m pip install -q -e ".[test]"

run: install
	$(PY) -m streamlit run dashboard/app.py --server.port 8501

test: install
	$(PY) -m pytest

test-fast:
	$(PY) -m pytest -m "not browser"

bench:
	$(PY) -m bench.run
