"""Conditional writes raced through a real node of two workers (``lakegate serve --workers 2``),
over the real RGW and over the folder lake: writers on fresh connections (spread over both
workers by the kernel) create one key with If-None-Match: * (exactly one wins, the others get
412), then increment a counter object by compare and swap with If-Match, retrying on 412, as a
table format's commit protocol does: no increment is lost.

Ceph RGW 16.2 answers a conditional write that loses a race inside RADOS 500 (ECANCELED, "resorting
to 500" in its log) rather than 412 or AWS's 409 ConditionalRequestConflict; the write did not
happen. lakegate passes a lake's 500 on as 503 ServiceUnavailable, which SDKs retry (boto3 by
default; the writers here have retries off, so they retry it themselves)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from harness.endpoints import ALICE, Target, increment_by_swap, unique_bucket_name
from harness.gateway import Gateway

WRITERS = 6
INCREMENTS = 4  # each writer's
ATTEMPTS = 500  # a writer's bound for one increment: some writer wins each round, so never reached
ENV = {"LAKEGATE_ACCESS_LOG": "false", "LAKEGATE_WORKERS": "2"}


@pytest.fixture(params=["rgw", "dir"])
def node(request: pytest.FixtureRequest, tmp_path: Path, rgw_target: Target) -> Iterator[Target]:
    lake = rgw_target.endpoint if request.param == "rgw" else f"dir:{tmp_path / 'lake'}"
    with Gateway(lake, tenants=(ALICE,), env=ENV, workdir=tmp_path / "gw") as gateway:
        assert len(gateway.listening_workers()) == 2
        yield gateway.target("gw", request.param)


def fresh_client(target: Target) -> Any:
    """A client of its own (its own connections), SDK retries off: every 412 is seen here."""
    return target.client(retries=False)


def lost(error: ClientError, target: Target) -> bool:
    """The write lost the race (its condition failed) and was not made."""
    status = int(error.response["ResponseMetadata"]["HTTPStatusCode"])
    return status == 412 or (target.lake == "rgw" and status == 503)


def test_racing_creates_have_one_winner_and_compare_and_swap_loses_no_increment(
        node: Target) -> None:
    bucket = unique_bucket_name(f"races-{node.lake}")
    admin = fresh_client(node)
    admin.create_bucket(Bucket=bucket)
    try:
        def create(n: int) -> int:
            client = fresh_client(node)
            try:
                client.put_object(Bucket=bucket, Key="claim", Body=f"writer {n}".encode(), IfNoneMatch="*")
                return n
            except ClientError as error:
                assert lost(error, node), error.response
                return -1
            finally:
                client.close()

        with ThreadPoolExecutor(WRITERS) as pool:
            winners = [n for n in pool.map(create, range(WRITERS)) if n >= 0]
        assert len(winners) == 1
        assert admin.get_object(Bucket=bucket, Key="claim")["Body"].read() == f"writer {winners[0]}".encode()

        admin.put_object(Bucket=bucket, Key="counter", Body=b"0")

        def increment(_: int) -> int:
            client = fresh_client(node)
            try:
                return increment_by_swap(client, bucket, "counter", INCREMENTS, ATTEMPTS, lambda e: lost(e, node))
            finally:
                client.close()

        with ThreadPoolExecutor(WRITERS) as pool:
            conflicts = sum(pool.map(increment, range(WRITERS)))
        final = int(admin.get_object(Bucket=bucket, Key="counter")["Body"].read())
        print(f"{node.lake}: {WRITERS * INCREMENTS} increments, {conflicts} retried after a 412 (or RGW's 500)")
        assert final == WRITERS * INCREMENTS
    finally:
        for entry in admin.list_objects_v2(Bucket=bucket).get("Contents", []):
            admin.delete_object(Bucket=bucket, Key=entry["Key"])
        admin.delete_bucket(Bucket=bucket)
        admin.close()
