# Control node: make setup; tests: make test (what CI runs through .ci/run).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
MOLECULE := $(BIN)/molecule
CACHE := $(CURDIR)/.cache
STANDINS := $(CACHE)/standins
PY_STANDINS := $(CACHE)/standins-python
# A target serves the stand-ins while it runs, unless a mirror already serves them (make lanes
# starts one for every lane: the mirror's URL is part of what a host records of its layers, so the
# fault tests' hosts, started from the default scenario's stack root, must see the URL it was built with).
MIRROR = $(if $(VERL_P40_MIRROR_URL),,$(BIN)/python tests/fixtures/mirror.py --dir $(STANDINS) --dir $(PY_STANDINS) --)
# The host's PATH, without the venv's bin: where make setup looks for a Python to build the venv with.
HOST_PATH := $(PATH)
export PATH := $(BIN):$(PATH)
export CONTAINERS_CONF := $(CACHE)/containers.conf
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
# A recipe line that pipes (a lane's prefix, below) fails when its command does.
.SHELLFLAGS := -o pipefail -c
# Under make lanes each line a target prints starts with the time and the target's name (a CI log
# then shows what each lane spent: docs/testing.md). mawk's strftime; fflush: each line out as it is
# stamped. mawk (Debian's awk, tests/standins/host_tools.py) reads a pipe in blocks, which stamps a quiet
# lane's lines in bursts, late: -W interactive makes it read a line at a time (gawk does so already).
LANE_AWK := awk $(if $(findstring mawk,$(shell awk -W version 2>&1 | head -n 1)),-W interactive)
LANE = $(if $(LANES),2>&1 | $(LANE_AWK) '{ print strftime("%H:%M:%S") " [$@] " $$0; fflush() }')
# The stack root: the directory the default scenario converges every layer into, the root of the
# cluster scenario's nodes and of the fault tests' built hosts, each on an overlay of its own
# (molecule/common/tasks/stack_root.yml). About 10 GB; make lanes removes it when its users are done.
STACK_ROOT ?= /var/tmp/verl-p40-stack-root
export VERL_P40_STACK_ROOT := $(STACK_ROOT)
# Its removal: only a directory the default scenario made (its create.yml marks it).
REMOVE_STACK_ROOT = if [ -e $(STACK_ROOT)/.verl-p40-stack-root ]; then rm -rf --one-file-system $(STACK_ROOT); fi
# The fault tests: on a new container from the Debian 12 image (nothing built), and on one from
# STACK_ROOT (every layer built); a module or class at a time on each worker: two modules on new
# hosts, six groups on built ones (the classes of test_python_faults.py, test_built_faults.py).
FAULTS_NEW := tests/integration/test_faults.py tests/integration/test_url_faults.py
FAULTS_BUILT := tests/integration/test_python_faults.py tests/integration/test_built_faults.py
# -u: each test's line reaches the lane's log (and its time) as it ends, not when the lane ends.
FAULTS = $(BIN)/python -u -m pytest -v --dist loadscope --durations=15

.PHONY: host-check render setup lint unit images standins stack-root verify-default cluster bullseye trixie molecule faults-new faults-built integration lanes test demo bench apex-proof driver-proof setup-proof clean

setup: $(VENV)/.installed  ## the control node's virtual environment

# The control venv's Python: ansible-core 2.19 needs 3.11 and requirements.txt is locked for 3.11 to
# 3.13, but Ubuntu 20.04/22.04 and Debian 11 ship 3.8/3.10/3.9. tools/setup_python.py (standard
# library, runs on the system's python3 from 3.8 on) prints the first of PYTHON, python3.11,
# python3.12, python3.13 that has its venv module; PYTHON given on the command line is the only one
# tried. Else, SETUP_UV=auto (yes: even where the host has one; no: never) gets CPython
# SETUP_PYTHON_VERSION with uv: the uv of requirements.txt, its wheel checked against the lock's
# hashes, `uv python install` (from GitHub; UV_PYTHON_INSTALL_MIRROR). Else it stops with the steps.
SETUP_UV ?= auto
SETUP_PYTHON_VERSION ?= 3.12
SETUP_PYTHON = env PATH="$(HOST_PATH)" python3 tools/setup_python.py --python '$(PYTHON)' $(if $(filter command line,$(origin PYTHON)),--only) --uv '$(SETUP_UV)' --uv-python '$(SETUP_PYTHON_VERSION)' --cache '$(CACHE)/setup'

# The venv is its lock and nothing else: made anew (--clear), requirements.txt installed with
# --require-hashes, then the collections requirements.yml names, unpacked from the hash-locked
# `ansible` bundle wheel (tools/install_collections.py).
$(VENV)/.installed: requirements.txt requirements-collections.txt requirements.yml tools/install_collections.py tools/setup_python.py
	@python=$$($(SETUP_PYTHON)) && echo "$$python -m venv --clear $(VENV)" && "$$python" -m venv --clear $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check --require-hashes -r requirements.txt
	$(BIN)/python tools/install_collections.py
	touch $@

# Each lock is what its input resolves to today (tools/lock_requirements.py; needs the index).
.PHONY: locks
locks: setup  ## the requirement locks against a fresh resolve of their inputs
	$(BIN)/python tools/lock_requirements.py --check

lint: setup locks  ## lock check + yamllint + ansible-lint (production profile) + ruff (Python lint and format, ruff.toml)
	$(BIN)/yamllint --strict .
	$(BIN)/ansible-lint --offline --profile production
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Under make lanes the unit suite runs beside the lanes at the lowest CPU priority: it takes what the
# lanes leave idle (their waits on the disk, a job's poll, the one worker left at the end) and finishes
# after them, instead of a step of its own before them. nice alone is not enough where the kernel
# groups tasks by session (autogroup, on by default): the lanes' work runs in the containers' sessions,
# and a session's group gets its share whatever its tasks' nice, so the suite gets a session of its own
# (setsid) whose group is niced too. It runs in the environment it has alone: without the lanes'
# mirror and make's flags (tests/unit/test_makefile.py runs make itself).
UNIT_BESIDE = env -u VERL_P40_MIRROR_URL -u VERL_P40_MIRROR_PORT -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u LANES \
	setsid --wait sh -c 'echo 19 >/proc/self/autogroup 2>/dev/null; exec nice -n 19 "$$@"' unit
unit: setup  ## pytest for the Python pieces and templates (two workers, a file on each)
	$(if $(LANES),$(UNIT_BESIDE)) $(BIN)/python -m pytest -q -n 2 --dist loadfile --durations=15 tests/unit $(LANE)

host-check:  ## the host programs the tests call (the list .ci/run installs), before the long steps
	$(PYTHON) tests/standins/host_tools.py check

images: setup host-check  ## local Debian 12/11/13 images for Molecule (debootstrap + podman import)
	$(BIN)/python tests/standins/images.py containers-conf $(CONTAINERS_CONF)
	$(BIN)/python tests/standins/images.py build 12 11 13

standins: setup  ## stand-ins for the downloads CI cannot reach (NVIDIA, conda-forge, GitHub)
	$(BIN)/python tests/standins/standins.py build --out $(STANDINS)
	$(BIN)/python tests/standins/standin_driver.py build --out $(STANDINS)
	$(BIN)/python tests/standins/standins_python.py build --out $(PY_STANDINS)

# The default scenario is two targets, so that the stack root's users start as soon as it is
# converged: stack-root runs `molecule test -s default`'s steps up to its side_effect (destroy,
# then converge: create, prepare, converge; idempotence; side_effect, after which nothing writes
# in the root), and verify-default the rest (verify: tests/infra; destroy) beside the cluster
# scenario and the fault tests on built hosts. A verify that fails leaves the container for a look
# (make clean removes it).
DEFAULT_TO_ROOT := $(MOLECULE) destroy -s default && $(MOLECULE) converge -s default \
	&& $(MOLECULE) idempotence -s default && $(MOLECULE) side-effect -s default

stack-root: images standins  ## the default scenario (Debian 12, every layer) converged and idempotent in STACK_ROOT
	$(MIRROR) bash -c '$(DEFAULT_TO_ROOT)' $(LANE)

verify-default: stack-root  ## then tests/infra verifies every layer in the default scenario's container, and removes it
	$(MIRROR) bash -c '$(MOLECULE) verify -s default && $(MOLECULE) destroy -s default' $(LANE)

cluster: stack-root  ## two hosts of STACK_ROOT as a Ray cluster
	$(MIRROR) $(MOLECULE) test -s cluster $(LANE)

# Under make lanes the scenarios on new hosts wait (order-only prerequisites), so that they do not
# slow the default scenario's converge, which the built-host lanes wait for: Debian 13, the whole
# stack, for that converge, and runs beside the built-host lanes; Debian 11, the system layers, for
# the fault tests on new hosts. After one another they made the run's tail (docs/testing.md).
trixie: images standins $(if $(LANES),| stack-root)  ## the whole stack on Debian 13 (gcc-11 from bookworm, pinned)
	$(MIRROR) $(MOLECULE) test -s trixie $(LANE)

bullseye: images standins $(if $(LANES),| faults-new)  ## the system layers on Debian 11
	$(MIRROR) $(MOLECULE) test -s bullseye $(LANE)

molecule: verify-default cluster bullseye trixie  ## every Molecule scenario: default (verified), cluster, bullseye, trixie

faults-new: images standins  ## bad input and faults on new containers (nothing built yet)
	$(MIRROR) $(FAULTS) -n 2 $(FAULTS_NEW) $(LANE)

faults-built: stack-root  ## faults on containers of STACK_ROOT (every layer built)
	$(MIRROR) $(FAULTS) -n 3 $(FAULTS_BUILT) $(LANE)

integration: faults-new faults-built  ## every fault test

# The default scenario's converge comes first, beside the fault tests on new containers (then
# Debian 11) and the unit suite (at the lowest priority, above); once its stack root is converged,
# Debian 13, its verify, the cluster scenario and the fault tests on built hosts run side by side.
# One mirror serves them all; a target that fails stops none of the others (--keep-going), so one
# run shows every failure, except that Debian 11 waits for the fault tests on new hosts to pass,
# and Debian 13, like the built-host lanes, for the default scenario's converge. Each line shows as it is printed (no --output-sync, which would hold a whole
# scenario's output back). The stack root goes when every user of it is done; after a failure it
# stays, for a look at the host the failing test started from (make clean removes it).
# (The removal is a line of its own: make -n runs every line that names $(MAKE).)
lanes: setup  ## molecule, integration and unit side by side, each line prefixed with its target
	$(MIRROR) $(MAKE) --no-print-directory --keep-going -j 5 LANES=1 molecule integration unit
	$(REMOVE_STACK_ROOT)

test: lint lanes  ## everything CI runs (the unit suite inside make lanes)

demo: images standins  ## the whole stack in a throwaway container, with the stand-ins
	$(MIRROR) $(BIN)/molecule converge -s default
	@echo "Log in: podman exec -it verl-p40-debian12 bash -l    Remove: $(BIN)/molecule destroy -s default"

bench: images standins  ## converge timings (cold, no-op, one-layer rebuild)
	$(MIRROR) $(BIN)/python tools/bench.py

# Mutation testing (cosmic-ray) of library/, module_utils/, the plugins and roles/*/files/*.py, each
# module against its own unit test files; hours for all, not in make test (docs/testing.md).
# MODULES: the modules to run (paths, space-separated), default all; the result merges into OUT.
MODULES ?=
MUTATION_OUT ?= docs/mutation/$(shell date +%F).json
.PHONY: mutate
mutate: setup  ## mutation testing of the modules that decide things (MODULES=library/verl_patch.py ...); slow
	$(BIN)/python tools/mutate.py $(if $(MODULES),--module $(MODULES)) --out $(MUTATION_OUT)

APEX_JOBS ?= 2
apex-proof: images standins  ## the real Apex build (CUDA extensions, sm_61) through the apex role; 30-60 min, not in make test
	$(BIN)/python tests/apex_proof/run.py --jobs $(APEX_JOBS)

# Debian's own NVIDIA driver packages (R535 on 12, R550 on 13) through the driver layer's distro path:
# a real DKMS build of NVIDIA's module per release, for a Debian kernel, in a container (docs/driver.md).
driver-proof: images standins  ## the driver layer's distro path on Debian 12 and 13, a real DKMS build; minutes, not in make test
	$(MIRROR) $(BIN)/python tests/driver_proof/run.py

# make setup and preflight end to end on Debian 11's Python 3.9: a CPython built here from Debian's
# source stands in for the download uv makes (docs/control-node.md).
setup-proof: images setup  ## make setup and preflight on Debian 11's Python 3.9, end to end; minutes, not in make test
	$(BIN)/python tests/setup_proof/run.py

PROFILE ?= pascal
OUT ?= out/$(PROFILE)
render: setup  ## the launcher a host with PROFILE would get, into OUT (no host needed)
	$(BIN)/python tools/render.py --profile $(PROFILE) --out $(OUT)

clean:  ## remove the scenario containers (caches stay)
	-$(BIN)/molecule destroy -s default
	-$(BIN)/molecule destroy -s cluster
	-$(BIN)/molecule destroy -s bullseye
	-$(BIN)/molecule destroy -s trixie
	-$(REMOVE_STACK_ROOT)
