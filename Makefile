# lakegate developer entry points.
#
#   make run     one gateway node on 127.0.0.1:9000 over a folder lake (var/lake)
#   make image   the container image (Dockerfile) from wheels built here, IMAGE=localhost/lakegate:dev
#   make base-image  a Debian base (mmdebstrap) for BASE_IMAGE on machines without a registry
#   make test    installs what the tests need (Debian packages, .venv), type-checks (mypy
#                --strict), starts a throwaway Ceph RGW, runs pytest on every tier, stops Ceph
#
# Overridable, e.g. `make run LISTEN=0.0.0.0:9000 LAKE=http://127.0.0.1:7480` or
# `make test PYTEST_ARGS='tests/integration --target gw-dir -x'`.

PYTHON      ?= python3
VENV        ?= .venv
LISTEN      ?= 127.0.0.1:9000
LAKE        ?= dir:var/lake
TENANTS     ?= deploy/tenants.example.toml
CACHE_DIR   ?= var/cache
SERVE_ARGS  ?=
PYTEST_ARGS ?= tests

# the test Ceph: its own folder and ports, so a developer's Ceph on the defaults keeps running
TEST_CEPH_DIR      ?= /tmp/lakegate-test-ceph
TEST_CEPH_RGW_PORT ?= 7490
TEST_CEPH_MON_PORT ?= 40790
# memstore keeps objects in RAM up to this size (a full OSD blocks writes: keep headroom)
TEST_CEPH_OSD_GB   ?= 8
TEST_CEPH_MS_PORTS ?= 46900 46999
# two RGW instances (7490, 7491) on the one Ceph: a lake of several endpoints (replica choice)
TEST_CEPH_RGWS     ?= 2

# what `make test` needs from Debian: the binaries, and the packages that bring them
# (podman, runc, mmdebstrap: tests/containers build the image and run it; prometheus, promtool:
# the dashboards' and rules' tests and the compose stack)
TEST_BINARIES    := ceph-mon ceph-osd radosgw radosgw-admin ceph monmaptool ceph-authtool curl openssl \
                    podman runc mmdebstrap prometheus promtool
TEST_APT_PACKAGES := ceph-mon ceph-osd radosgw ceph-common curl openssl podman runc mmdebstrap prometheus
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
PIP  := PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore $(VENV)/bin/python -m pip

# the container image: `make image` (podman where present, else docker; any OCI builder works
# from the Dockerfile once build/wheels holds the wheels)
IMAGE            ?= localhost/lakegate:dev
BASE_IMAGE       ?= python:3.11-slim
LOCAL_BASE_IMAGE ?= localhost/lakegate-base:bookworm
CONTAINER_ENGINE ?= $(shell command -v podman >/dev/null 2>&1 && echo podman || echo docker)
# podman on a host with hybrid cgroups (this project's CI machines) needs runc and cgroupfs, and
# ulimits at or below the host's hard limits; elsewhere leave them empty (make image PODMAN_ARGS=)
PODMAN_ARGS      ?= $(if $(wildcard /usr/sbin/runc),--runtime /usr/sbin/runc --cgroup-manager=cgroupfs)
BUILD_ULIMITS    ?= --ulimit nofile=1024:1024 --ulimit nproc=4096:4096
ENGINE           := $(CONTAINER_ENGINE) $(if $(filter podman,$(notdir $(CONTAINER_ENGINE))),$(PODMAN_ARGS))
# HEALTHCHECK is kept only in the docker image format (podman builds OCI by default)
ENGINE_BUILD_ARGS := $(if $(filter podman,$(notdir $(CONTAINER_ENGINE))),--format docker $(BUILD_ULIMITS))

.PHONY: run test test-deps system-deps typecheck image wheels base-image
.NOTPARALLEL:  # Debian packages before the venv, the venv before pip

run: $(VENV)/.installed
	@echo "make: the examples below use the aws cli and boto3 in $(VENV): run 'source $(VENV)/bin/activate' in your shell"
	@exec $(VENV)/bin/lakegate serve --listen $(LISTEN) --lake $(LAKE) --tenants $(TENANTS) \
	  --cache-dir $(CACHE_DIR) $(SERVE_ARGS)

test: test-deps typecheck
	@CEPH_DIR=$(TEST_CEPH_DIR) CEPH_RGW_PORT=$(TEST_CEPH_RGW_PORT) \
	  CEPH_MON_PORT=$(TEST_CEPH_MON_PORT) CEPH_OSD_SIZE_GB=$(TEST_CEPH_OSD_GB) CEPH_MS_PORT_MIN=$(word 1,$(TEST_CEPH_MS_PORTS)) \
	  CEPH_RGW_INSTANCES=$(TEST_CEPH_RGWS) \
	  CEPH_MS_PORT_MAX=$(word 2,$(TEST_CEPH_MS_PORTS)) \
	  bash deploy/ceph/with-ceph.sh $(VENV)/bin/pytest $(PYTEST_ARGS)

test-deps: system-deps $(VENV)/.installed-test

# mypy --strict over gateway/, cachetier/, policies/, tools/ (the settings are in pyproject.toml)
typecheck: $(VENV)/.installed-test
	@printf 'make: mypy --strict: '; $(VENV)/bin/mypy

# Debian packages, installed only when something is missing (a fresh Debian 12 has none)
system-deps:
	@missing=""; \
	for b in $(TEST_BINARIES); do command -v $$b >/dev/null 2>&1 || missing="$$missing $$b"; done; \
	$(PYTHON) -c 'import ensurepip, venv' >/dev/null 2>&1 || missing="$$missing python3-venv"; \
	if [ -n "$$missing" ]; then \
	  echo "make: installing Debian packages (missing:$$missing)"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  $(SUDO) apt-get update -qq >/dev/null && \
	  $(SUDO) apt-get install -y -qq --no-install-recommends \
	    $(TEST_APT_PACKAGES) python3 python3-venv >/dev/null || exit 1; \
	fi

$(VENV)/bin/python:
	@$(PYTHON) -c 'import ensurepip, venv' >/dev/null 2>&1 || { \
	  echo "make: installing Debian's python3-venv"; \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get update -qq >/dev/null && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends python3-venv >/dev/null; }
	$(PYTHON) -m venv $(VENV)

# reinstalled whenever pyproject.toml changes
# pip's own and the build backend's chatter goes to $(VENV)/pip.log, shown only on failure
$(VENV)/.installed: pyproject.toml | $(VENV)/bin/python
	@echo "make: pip install -e '.[client]' (into $(VENV); the aws cli and boto3 come with it)"
	@$(PIP) install -q -e '.[client]' >$(VENV)/pip.log 2>&1 || { cat $(VENV)/pip.log; exit 1; }
	@touch $@

$(VENV)/.installed-test: pyproject.toml | system-deps $(VENV)/bin/python
	@echo "make: pip install -e '.[test]' (into $(VENV))"
	@$(PIP) install -q -e '.[test]' >$(VENV)/pip.log 2>&1 || { cat $(VENV)/pip.log; exit 1; }
	@touch $@

# lakegate and its runtime dependencies as wheels (not the test extras), installed by the
# Dockerfile with --no-index: the image build needs no network
wheels: | $(VENV)/bin/python
	@rm -rf build/wheels && mkdir -p build/wheels
	@echo "make: pip wheel -w build/wheels . (lakegate and its runtime dependencies)"
	@$(PIP) wheel -q -w build/wheels . >build/pip-wheel.log 2>&1 || { cat build/pip-wheel.log; exit 1; }
	@rm -rf build/lib build/bdist.* lakegate.egg-info

image: wheels
	$(ENGINE) build $(ENGINE_BUILD_ARGS) --network none --build-arg BASE_IMAGE=$(BASE_IMAGE) -t $(IMAGE) .
	@$(ENGINE) image inspect --format 'make: $(IMAGE): {{.Size}} bytes' $(IMAGE)

# a base image from Debian's packages (Python 3.11, as python:3.11-slim), then e.g.
# `make image BASE_IMAGE=localhost/lakegate-base:bookworm`; kept when it exists already
base-image:
	@if $(ENGINE) image inspect $(LOCAL_BASE_IMAGE) >/dev/null 2>&1; then echo "make: $(LOCAL_BASE_IMAGE) exists"; else \
	  set -e; tar=$$(mktemp -u /tmp/lakegate-base.XXXXXX.tar); \
	  echo "make: mmdebstrap bookworm (python3, python3-venv) -> $(LOCAL_BASE_IMAGE)"; \
	  $(SUDO) mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,ca-certificates \
	    --customize-hook='rm -rf "$$1"/var/cache/apt/* "$$1"/var/lib/apt/lists/* "$$1"/usr/share/doc/* "$$1"/usr/share/man/*' \
	    bookworm $$tar; \
	  $(ENGINE) import $$tar $(LOCAL_BASE_IMAGE) >/dev/null; rm -f $$tar; fi
