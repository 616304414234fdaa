# The two commands of the README. Each bootstraps .venv with pip when it is missing or
# older than pyproject.toml, so both work on a fresh machine with nothing installed by hand.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck pytest bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m launcher.demo

test: $(STAMP) lint typecheck pytest

lint: $(STAMP)
	$(BIN)/ruff check gateway launcher tests loadtests

typecheck: $(STAMP)
	$(BIN)/mypy --strict gateway launcher

pytest: $(STAMP)
	$(BIN)/pytest -q

bench: $(STAMP)
	$(BIN)/python loadtests/bench_tokens.py
	$(BIN)/python loadtests/bench_auth.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
