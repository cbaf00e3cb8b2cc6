"""The boto3 conformance suite (tests/conformance.py) against the ASGI app in-process, over
DirLake and over MemoryLake (conftest.py): the S3 front end checked with no Ceph and no socket.
"""

from __future__ import annotations

from conformance import ConformanceSuite


class TestConformance(ConformanceSuite):
    """Every test of the suite, once per in-process target."""
