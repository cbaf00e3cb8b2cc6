# lakegate developer entry points.
#
#   make run     one gateway node on 127.0.0.1:9000 over a folder lake (var/lake)
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
TEST_BINARIES    := ceph-mon ceph-osd radosgw radosgw-admin ceph monmaptool ceph-authtool curl openssl \
                    prometheus promtool
TEST_APT_PACKAGES := ceph-mon ceph-osd radosgw ceph-common curl openssl \
                     prometheus
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
PIP  := PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore $(VENV)/bin/python -m pip

.PHONY: run test test-deps system-deps typecheck
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
