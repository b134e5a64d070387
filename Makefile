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
# A recipe line that pipes (a lane's prefix, below) fails when its command does.
.SHELLFLAGS := -o pipefail -c
# make lanes runs molecule and integration at once: each serves the stand-ins on a port of its
# own (molecule: mirror.py's default), and each line they print starts with the lane's name.
INTEGRATION_MIRROR_PORT ?= 18766
LANE = $(if $(LANES),2>&1 | sed -u 's/^/[$@] /')
# The default scenario's verified container, committed for the cluster scenario's nodes.
STACK_IMAGE := localhost/verl-p40-stack:12

.PHONY: host-check render setup lint unit images standins molecule integration lanes test demo bench apex-proof clean

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

unit: setup  ## pytest for the Python pieces and templates (two workers, a file on each)
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --durations=15 tests/unit

host-check:  ## the host programs the tests call (the list .ci/run installs), before the long steps
	$(PYTHON) tests/fixtures/host_tools.py check

images: setup host-check  ## local Debian 12/11 images for Molecule (debootstrap + podman import)
	$(BIN)/python tests/fixtures/images.py containers-conf $(CONTAINERS_CONF)
	$(BIN)/python tests/fixtures/images.py build 12 11

standins: setup  ## stand-ins for the downloads CI cannot reach (NVIDIA, conda-forge, GitHub)
	$(BIN)/python tests/fixtures/standins.py build --out $(STANDINS)
	$(BIN)/python tests/fixtures/standins_python.py build --out $(PY_STANDINS)

molecule: images standins  ## converge, idempotence, verify in containers (Debian 12: all layers, then two of it as a Ray cluster; 11: system)
	VERL_P40_COMMIT_IMAGE=1 $(MIRROR) $(BIN)/molecule test -s default $(LANE)
	$(MIRROR) $(BIN)/molecule test -s cluster $(LANE)
	podman rmi --force $(STACK_IMAGE) >/dev/null
	$(MIRROR) $(BIN)/molecule test -s bullseye $(LANE)

integration: images standins  ## bad input and faults, against throwaway containers (one per worker; a module's functions, or a class, on one, two at a time)
	VERL_P40_MIRROR_PORT=$(INTEGRATION_MIRROR_PORT) $(MIRROR) $(BIN)/python -m pytest -v -n 2 --dist loadscope --durations=25 tests/integration $(LANE)

# Molecule keeps about one core busy (one host, one task at a time), the fault tests' two
# workers the others: side by side they take CI's two cores (docs/testing.md). Each line shows
# as it is printed (no --output-sync, which would hold a whole scenario's output back).
lanes: setup  ## molecule and integration side by side, each line prefixed with its lane
	$(MAKE) --no-print-directory -j 2 LANES=1 molecule integration

test: lint unit lanes  ## everything CI runs

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
	-podman rmi --force $(STACK_IMAGE) >/dev/null
