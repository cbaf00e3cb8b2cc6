"""The boto3 conformance suite (tests/conformance.py) against this tier's targets (conftest.py):
Ceph RGW itself, and `lakegate serve` in front of RGW or of its folder lake, over HTTP and HTTPS.
"""

from __future__ import annotations

from conformance import ConformanceSuite


class TestConformance(ConformanceSuite):
    """Every test of the suite, once per target."""
