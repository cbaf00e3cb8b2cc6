"""Test-suite wide set-up.

Tiers: tests/unit (pure, fast, no network), tests/asgi (the boto3 conformance suite against the
ASGI app in-process: no Ceph, no sockets) and tests/integration (a real Ceph RGW, and lakegate
processes started in front of it; `make test` provides the RGW).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent
# `import helpers` from any tier, whatever pytest's import mode and whether or not the
# tiers are packages.
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))

# the conformance suite the asgi and integration tiers share: its asserts explain themselves too
pytest.register_assert_rewrite("conformance")

from helpers import TARGETS


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--target", action="append", choices=TARGETS, default=[],
                     help="run the integration suites against this target only (repeatable)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Everything under tests/integration carries the `integration` marker, so
    `pytest -m "not integration"` runs the fast tiers alone."""
    integration_dir = TESTS_DIR / "integration"
    for item in items:
        if integration_dir in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.integration)


def pytest_report_header(config: pytest.Config) -> str:
    endpoint = os.environ.get("S3_ENDPOINT_URL")
    targets = ", ".join(config.getoption("target") or TARGETS)
    return (f"integration targets: {targets}; "
            f"RGW: {endpoint or 'S3_ENDPOINT_URL not set, integration tier skipped'}")
