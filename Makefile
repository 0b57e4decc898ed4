# Two entry points (see README): `make demo` and `make test`. Both build the virtual environment
# from the pinned constraints first, so they work on a fresh machine with Python 3.11 and make.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
BIN := $(VENV)/bin
EXTRAS ?= dev,airflow
PYTEST_ARGS ?=

.PHONY: venv demo test lint constraints clean

$(VENV)/.installed-$(EXTRAS): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade "pip==26.3"
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e ".[$(EXTRAS)]"
	touch $@

venv: $(VENV)/.installed-$(EXTRAS)

demo: venv
	$(BIN)/usage-billing demo

lint: venv
	$(BIN)/ruff check .

test: venv lint
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# Re-resolve the pins in a throwaway environment (needs the package registry).
constraints:
	rm -rf /tmp/ub-constraints && $(PYTHON) -m venv /tmp/ub-constraints
	/tmp/ub-constraints/bin/pip install --quiet -e ".[dev,airflow]"
	/tmp/ub-constraints/bin/pip freeze --exclude-editable > constraints.txt.new
	{ head -n 2 constraints.txt; cat constraints.txt.new; } > constraints.txt && rm constraints.txt.new

clean:
	rm -rf $(VENV) data
