"""Test-suite wide set-up.

Tiers, one folder each (DESIGN.md):

    tests/unit         pure: no sockets, no processes (tests/unit/conftest.py fails a test
                       that opens one), fast
    tests/component    lakegate's parts over real sockets and child processes (servers on
                       127.0.0.1, `lakegate serve` and `lakegate cluster` over a folder lake),
                       no Ceph; marked `component`
    tests/integration  a real Ceph RGW, and lakegate processes started in front of it (`make
                       test` provides the RGW); marked `integration`
    tests/cluster      several real nodes over that RGW; marked `integration` too
    tests/asgi         the boto3 conformance suite (tests/conformance.py) against the ASGI app
                       in-process over DirLake and MemoryLake: no Ceph, no sockets

`pytest -m "not integration"` runs everything that needs no Ceph; `-m "not integration and not
component"` the pure tier alone. Processes, Ceph, clients and load tools come from harness/
(shared with the benchmarks); the session fixture `rgw_target` is the one Ceph fixture of both
Ceph tiers.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from harness.ceph import NO_RGW, rgw_endpoint
from harness.endpoints import TARGETS, Target, lake_target

TESTS_DIR = Path(__file__).resolve().parent
# `import captured` (or doubles) from any tier, whatever pytest's import mode and whether or
# not the tiers are packages.
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))

# the conformance suite the asgi and integration tiers share: its asserts explain themselves too
pytest.register_assert_rewrite("conformance")

_TIER_MARKERS = {"component": pytest.mark.component, "integration": pytest.mark.integration,
                 "cluster": pytest.mark.integration}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--target", action="append", choices=TARGETS, default=[],
                     help="run the integration suites against this target only (repeatable)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test carries its tier's marker (see the module docstring)."""
    for item in items:
        relative = Path(item.path).resolve().relative_to(TESTS_DIR)
        marker = _TIER_MARKERS.get(relative.parts[0]) if len(relative.parts) > 1 else None
        if marker is not None:
            item.add_marker(marker)


def pytest_report_header(config: pytest.Config) -> str:
    endpoint = os.environ.get("S3_ENDPOINT_URL")
    targets = ", ".join(config.getoption("target") or TARGETS)
    return (f"integration targets: {targets}; "
            f"RGW: {endpoint or 'S3_ENDPOINT_URL not set, integration and cluster tiers skipped'}")


@pytest.fixture(scope="session")
def rgw_target() -> Target:
    """The Ceph RGW that S3_ENDPOINT_URL, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY name, as a
    target (the lake itself); the test is skipped without S3_ENDPOINT_URL."""
    try:
        endpoint = rgw_endpoint()
    except KeyError as exc:
        pytest.fail(f"S3_ENDPOINT_URL is set but {exc.args[0]} is not")
    if endpoint is None:
        pytest.skip(NO_RGW)
    return lake_target(endpoint)
