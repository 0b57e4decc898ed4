# Two entry points (see README): `make demo` and `make test`. Both build the virtual environment
# from the pinned constraints first, so they work on a fresh machine with Python 3.11 and make.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
BIN := $(VENV)/bin
EXTRAS ?= dev,airflow,aws
PYTEST_ARGS ?=
# Two workers, a test file each at a time (its module fixtures are built once).
PYTEST_WORKERS ?= 2

.PHONY: venv demo test test-fast lint constraints clean system-deps

$(VENV)/.installed-$(EXTRAS): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade "pip==26.3"
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e ".[$(EXTRAS)]"
	touch $@

venv: $(VENV)/.installed-$(EXTRAS)

# Debian packages outside pip: Pango and a font for the customer PDFs (WeasyPrint); Chromium and
# poppler-utils for the tests that look at pages. Needs root (apt-get); does nothing when all are there.
SYSTEM_PACKAGES := libpango-1.0-0 libpangoft2-1.0-0 libharfbuzz-subset0 fonts-dejavu-core chromium poppler-utils
system-deps:
	@missing=$$(for p in $(SYSTEM_PACKAGES); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing $$missing"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -q $$missing >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q $$missing >/dev/null; }; \
	fi

# As root, the Debian packages too (a no-op when they are there); elsewhere see `make system-deps`.
AS_ROOT_SYSTEM_DEPS = if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then $(MAKE) --no-print-directory system-deps; fi

demo: venv
	@$(AS_ROOT_SYSTEM_DEPS)
	$(BIN)/usage-billing demo

lint: venv
	$(BIN)/ruff check .
	$(BIN)/mypy

test: venv lint
	@$(AS_ROOT_SYSTEM_DEPS)
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

# The inner loop: every test not marked slow (each well under 5 s; the end-to-end runs are marked slow).
test-fast: venv lint
	@$(AS_ROOT_SYSTEM_DEPS)
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "not slow" $(PYTEST_ARGS)

# Re-resolve the pins in a throwaway environment (needs the package registry).
constraints:
	rm -rf /tmp/ub-constraints && $(PYTHON) -m venv /tmp/ub-constraints
	/tmp/ub-constraints/bin/pip install --quiet -e ".[dev,airflow]"
	/tmp/ub-constraints/bin/pip freeze --exclude-editable > constraints.txt.new
	{ head -n 2 constraints.txt; cat constraints.txt.new; } > constraints.txt && rm constraints.txt.new

clean:
	rm -rf $(VENV) data
