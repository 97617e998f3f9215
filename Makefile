# `make run` and `make test` work on a fresh machine: they create .venv and install what they need.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
export NUMBA_CACHE_DIR ?= $(CURDIR)/.numba_cache

.PHONY: install run test test-fast test-nojit lint bench e2e clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

install: $(VENV)/.installed

## The main job: every seed workload on the built-in cluster, through the real HTTP service.
run: install
	$(PY) -m extender simulate

## Everything CI runs: lint, unit and scenario tests (with the numba JIT on, then off), the
## end-to-end tier against a real kube-apiserver and kube-scheduler (built once per machine), faults
## included, and the soak's quick form (2 minutes of gang churn; fails on growth, creep or leftovers).
test: install lint
	$(PY) -m pytest -m "not e2e" -p no:cacheprovider
	NUMBA_DISABLE_JIT=1 $(PY) -m pytest -m "not e2e" -p no:cacheprovider
	$(PY) -m pytest -m e2e tests/e2e tests/state -p no:cacheprovider
	$(PY) -m bench soak --quick

test-fast: install
	$(PY) -m pytest -m "not e2e" -x -p no:cacheprovider

e2e: install
	$(PY) -m pytest -m e2e tests/e2e tests/state -p no:cacheprovider

lint: install
	$(VENV)/bin/ruff check extender tests bench
	$(VENV)/bin/ruff format --check extender tests bench
	$(VENV)/bin/lint-imports

bench: install
	$(PY) -m bench placement --quick
	$(PY) -m bench http --quick
	$(PY) -m bench versus --quick

clean:
	rm -rf $(VENV) .numba_cache .pytest_cache build *.egg-info
