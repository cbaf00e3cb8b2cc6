"""The boto3 conformance suite (tests/conformance.py) against the ASGI app in-process, over
DirLake and over MemoryLake, and over DirLake with every write in write-back (conftest.py): the
S3 front end checked with no Ceph and no socket.

One deliberate difference of write-back (wb-dir): an object's Last-Modified is the time its
write was acknowledged until the flush, then the lake's own (the lake stamps what it stores), so
a flush landing in a later second than the acknowledgement changes it. The tests in
``SAME_LAST_MODIFIED`` compare Last-Modified across reads; on wb-dir each of their PutObjects
waits for the flush, so they check the lake's copy and stay deterministic. Every other test
reads the objects while they are pending (the flusher runs meanwhile, as it does in service).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from conformance import ConformanceSuite
from conftest import InProcessTarget
from harness.endpoints import Target

SAME_LAST_MODIFIED = frozenset({"test_put_get_head_round_trip", "test_if_modified_since", "test_if_unmodified_since"})
# a conditional write meets a write-back version still on its way to the lake with 409: these
# tests' PutObjects wait for the flush too, so that their conditions meet the lake's object
FLUSHED_BEFORE_CONDITIONS = frozenset({"test_conditional_delete_keeps_an_object_that_changed"})
FLUSH_DEADLINE_S = 60.0


def wait_until_flushed(target: InProcessTarget) -> None:
    """Until the node's journal holds no pending write (the lake has every one)."""
    assert target.bridge is not None
    writeback = target.bridge.app.node.writeback  # type: ignore[attr-defined]
    deadline = time.monotonic() + FLUSH_DEADLINE_S
    while writeback.journal.pending_objects():
        assert time.monotonic() < deadline, "the write-back flusher did not empty the journal"
        time.sleep(0.01)


class TestConformance(ConformanceSuite):
    """Every test of the suite, once per in-process target."""

    @pytest.fixture(autouse=True)
    def _flushed_puts_where_last_modified_is_compared(
            self, request: pytest.FixtureRequest, target: Target, s3: Any) -> Iterator[None]:
        if target.name != "wb-dir" or request.node.originalname not in SAME_LAST_MODIFIED | FLUSHED_BEFORE_CONDITIONS:
            yield
            return
        assert isinstance(target, InProcessTarget)

        def flushed(**_: Any) -> None:
            wait_until_flushed(target)

        s3.meta.events.register("after-call.s3.PutObject", flushed, unique_id="wb-flushed")
        try:
            yield
        finally:
            s3.meta.events.unregister("after-call.s3.PutObject", unique_id="wb-flushed")
