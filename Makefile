# Control node: make setup; tests: make test (what CI runs through .ci/run).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
CACHE := $(CURDIR)/.cache
STANDINS := $(CACHE)/standins
PY_STANDINS := $(CACHE)/standins-python
MIRROR := $(BIN)/python tests/fixtures/mirror.py --dir $(STANDINS) --dir $(PY_STANDINS) --
export PATH := $(BIN):$(PATH)
export CONTAINERS_CONF := $(CACHE)/containers.conf
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg

.PHONY: host-check render setup lint unit images standins molecule cluster integration test demo bench apex-proof clean

setup: $(VENV)/.installed  ## the control node's virtual environment

$(VENV)/.installed: requirements.txt requirements-test.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements.txt -r requirements-test.txt
	touch $@

lint: setup  ## yamllint + ansible-lint (production profile) + ruff (Python lint and format, ruff.toml)
	$(BIN)/yamllint --strict .
	$(BIN)/ansible-lint --offline --profile production
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

unit: setup  ## pytest for the Python pieces and templates
	$(BIN)/python -m pytest -q --durations=15 tests/unit

host-check:  ## the host programs the tests call (the list .ci/run installs), before the long steps
	$(PYTHON) tests/fixtures/host_tools.py check

images: setup host-check  ## local Debian 12/11 images for Molecule (debootstrap + podman import)
	$(BIN)/python tests/fixtures/images.py containers-conf $(CONTAINERS_CONF)
	$(BIN)/python tests/fixtures/images.py build 12 11

standins: setup  ## stand-ins for the downloads CI cannot reach (NVIDIA, conda-forge, GitHub)
	$(BIN)/python tests/fixtures/standins.py build --out $(STANDINS)
	$(BIN)/python tests/fixtures/standins_python.py build --out $(PY_STANDINS)

molecule: images standins  ## converge, idempotence, verify in containers (Debian 12: all layers; 11: system)
	$(MIRROR) $(BIN)/molecule test -s default
	$(MIRROR) $(BIN)/molecule test -s bullseye

cluster: images standins  ## a Ray cluster of two containers (docs/cluster.md): the default scenario again, then cluster; not in make test
	VERL_P40_COMMIT_IMAGE=1 $(MIRROR) $(BIN)/molecule test -s default
	$(MIRROR) $(BIN)/molecule test -s cluster
	-podman rmi --force localhost/verl-p40-stack:12 >/dev/null

integration: images standins  ## bad input and faults, against throwaway containers (one per worker; a module's functions, or a class, on one, two at a time)
	$(MIRROR) $(BIN)/python -m pytest -q -n 2 --dist loadscope --durations=25 tests/integration

test: lint unit molecule integration  ## everything CI runs

demo: images standins  ## the whole stack in a throwaway container, with the stand-ins
	$(MIRROR) $(BIN)/molecule converge -s default
	@echo "Log in: podman exec -it verl-p40-debian12 bash -l    Remove: $(BIN)/molecule destroy -s default"

bench: images standins  ## converge timings (cold, no-op, one-layer rebuild)
	$(MIRROR) $(BIN)/python tools/bench.py

APEX_JOBS ?= 2
apex-proof: images standins  ## the real Apex build (CUDA extensions, sm_61) through the apex role; 30-60 min, not in make test
	$(BIN)/python tests/apex_proof/run.py --jobs $(APEX_JOBS)

PROFILE ?= pascal
OUT ?= out/$(PROFILE)
render: setup  ## the launcher a host with PROFILE would get, into OUT (no host needed)
	$(BIN)/python tools/render.py --profile $(PROFILE) --out $(OUT)

clean:  ## remove the scenario containers (caches stay)
	-$(BIN)/molecule destroy -s default
	-$(BIN)/molecule destroy -s cluster
	-$(BIN)/molecule destroy -s bullseye
