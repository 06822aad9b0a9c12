# Two entry points: `make demo` runs the demo, `make test` runs every check. Both create or
# update the virtual environment by themselves.
PYTHON ?= $(shell command -v python3.11 || command -v python3.12 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit bench clean venv services

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/shipshape demo

lint: $(STAMP)
	$(PY) -m ruff check src tests bench
	$(PY) -m ruff format --check src tests bench
	$(VENV)/bin/lint-imports

typecheck: $(STAMP)
	$(PY) -m mypy

# The real peers some tests talk to (installed and started when missing, reused when running).
services:
	scripts/ensure-test-services.sh

# pytest exits 5 when it collected nothing: that is a broken suite, not a pass.
test: $(STAMP) lint typecheck services
	$(PY) -m pytest -p no:cacheprovider -q -n 2 --dist loadgroup; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing"; exit 1; fi; exit $$rc

bench: $(STAMP)
	for b in bench/*.py; do $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache build dist src/*.egg-info
