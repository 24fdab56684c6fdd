# Engram: two commands on a fresh machine with Python 3.11, pip and make.
#   make run   - the whole stack on embedded PostgreSQL + NATS, seeded, with a demo JWT
#   make test  - lint, types and every test (starts its own servers on free ports)
PYTHON ?= python3.11
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed

.PHONY: run test install lint typecheck unit bench clean browser

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
	$(BIN)/mypy shared/engram functions tests/fakes

test: $(STAMP) lint typecheck browser
	$(BIN)/pytest -q

# The dashboard test drives Debian's chromium (no browser download at run time). When it is
# missing and we are root (CI), install it from the Debian registry and say how long it took.
browser:
	@if ! command -v chromium >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    start=$$(date +%s); \
	    log=$${TMPDIR:-/tmp}/engram-chromium-install.log; \
	    { apt-get update -q && \
	      DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium; } >"$$log" 2>&1 \
	      || { cat "$$log"; echo "installing chromium failed"; exit 1; }; \
	    echo "chromium installed in $$(( $$(date +%s) - start )) s"; \
	  else \
	    echo "chromium is missing and we are not root: the dashboard browser test will be skipped"; \
	  fi; \
	fi

clean:
	rm -rf $(VENV) .engram .pytest_cache .mypy_cache .ruff_cache
