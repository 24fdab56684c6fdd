# Engram: two commands on a fresh machine with Python 3.11, pip and make.
#   make run   - the whole stack on embedded PostgreSQL + NATS, seeded, with a demo JWT
#   make test  - lint, types and every test (starts its own servers on free ports)
PYTHON ?= python3.11
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed

.PHONY: run test install lint typecheck unit bench clean

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) (set PYTHON=...)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/engram dev

lint: $(STAMP)
	$(BIN)/ruff check shared functions tests bench
	$(BIN)/ruff format --check shared functions tests bench

typecheck: $(STAMP)
	$(BIN)/mypy shared/engram

test: $(STAMP) lint typecheck
	$(BIN)/pytest -q

clean:
	rm -rf $(VENV) .engram .pytest_cache .mypy_cache .ruff_cache
