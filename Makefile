# Two-command quick start: `make demo`, `make test`. Each creates .venv and installs what it needs.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP_RUN := $(VENV)/.installed-run
STAMP_DEV := $(VENV)/.installed-dev

.PHONY: demo test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(STAMP_RUN): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e .
	touch $@

$(STAMP_DEV): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP_RUN) $@

demo: $(STAMP_RUN)
	$(BIN)/python examples/demo.py

test: $(STAMP_DEV)
	$(BIN)/python -m pytest -n 2 --dist loadgroup

lint: $(STAMP_DEV)
	$(BIN)/ruff check src tests bench examples

bench: $(STAMP_DEV)
	$(BIN)/python bench/golden.py

clean:
	rm -rf $(VENV) build *.egg-info
