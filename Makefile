# `make run` and `make test` work on a fresh machine: they create .venv and install what they need.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
export NUMBA_CACHE_DIR ?= $(CURDIR)/.numba_cache

.PHONY: install run test test-fast test-nojit lint bench e2e clean image constraints

# Dependencies at the versions pinned in constraints.txt, so every build installs the same ones.
$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q --constraint constraints.txt -e '.[test]'
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

## The container image, tagged with pyproject.toml's version; BASE_IMAGE=... names the Python 3.11 base
## image as your registry serves it (default: the Dockerfile's). Needs a reachable docker daemon.
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
IMAGE ?= gang-extender:$(VERSION)
image:
	@command -v docker >/dev/null || { echo "make image: no docker command on PATH; install docker" >&2; exit 1; }
	@why=$$(docker info 2>&1 >/dev/null) || { \
	  echo "make image: no docker daemon reachable, so nothing was built: $$(echo "$$why" | tail -n 1)" >&2; \
	  exit 1; }
	docker build $(if $(BASE_IMAGE),--build-arg BASE_IMAGE=$(BASE_IMAGE)) -t $(IMAGE) .

## Re-pin constraints.txt: resolve '.[test]' afresh (the newest releases pyproject.toml allows) in a
## scratch venv and freeze it, keeping the file's header. Run `make test` after.
constraints:
	rm -rf .constraints-venv
	$(PYTHON) -m venv .constraints-venv
	.constraints-venv/bin/pip install -q --upgrade pip
	.constraints-venv/bin/pip install -q '.[test]'
	{ grep '^#' constraints.txt; .constraints-venv/bin/pip freeze --exclude gang-extender; } > constraints.txt.new
	mv constraints.txt.new constraints.txt
	rm -rf .constraints-venv

clean:
	rm -rf $(VENV) .numba_cache .pytest_cache build *.egg-info
