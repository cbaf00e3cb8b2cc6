"""The admin operations' pure parts (gateway/adminops.py): job ids and bucket names checked, a
running job whose worker is gone reads as failed, job files written whole and read back."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from pathlib import Path
from typing import cast

import pytest

from cachetier.cachedlake import CachedLake
from gateway.adminops import (
    FAILED, RUNNING, AdminOps, BadRequest, JobFiles, WarmJob, _as_seen, checked_bucket, checked_job_id,
)
from gateway.tenants import TenantDirectory


def test_job_ids_are_16_hex_digits() -> None:
    assert checked_job_id("0123456789abcdef") == "0123456789abcdef"
    for bad in ("", "../../etc/passwd", "0123456789ABCDEF", "0123456789abcdef0"):
        with pytest.raises(BadRequest):
            checked_job_id(bad)


def test_bucket_names() -> None:
    assert checked_bucket("data") == "data"
    assert checked_bucket(None, required=False) == ""
    for bad in (None, "", "a/b", "x" * 256):
        with pytest.raises(BadRequest):
            checked_bucket(bad)


def _job(**fields: object) -> dict[str, object]:
    return {"id": "0123456789abcdef", "state": RUNNING, "pid": os.getpid(), "updated": 1000.0, "errors": [], **fields}


def test_a_running_job_of_a_live_worker_stays_running() -> None:
    assert _as_seen(_job(), now=1001.0)["state"] == RUNNING


def test_a_job_whose_worker_is_gone_is_failed() -> None:
    for gone in (_job(pid=None), _job(updated=900.0)):
        seen = _as_seen(gone, now=1001.0)
        assert seen["state"] == FAILED and seen["errors"] == ["the worker running the job is gone"]
    assert _as_seen(_job(state="done", pid=None), now=5000.0)["state"] == "done"  # only running ones


def test_job_files(tmp_path: Path) -> None:
    files = JobFiles(tmp_path / "warm")
    assert files.ids() == [] and files.read("0123456789abcdef") is None
    files.write(_job(state="done"))
    assert files.ids() == ["0123456789abcdef"]
    assert files.read("0123456789abcdef") == _job(state="done")
    assert not files.cancel_asked("0123456789abcdef")
    files.ask_cancel("0123456789abcdef")
    assert files.cancel_asked("0123456789abcdef")
    assert [p.name for p in (tmp_path / "warm").iterdir() if p.suffix == ".tmp"] == []


def test_old_finished_jobs_are_pruned(tmp_path: Path) -> None:
    files = JobFiles(tmp_path)
    for n in range(4):
        files.write(_job(id=f"{n:016x}", state="done", updated=float(n)))
    files.write(_job(id="f" * 16, updated=time.time()))  # running (this process): not pruned
    files.ask_cancel("0" * 16)
    files.prune(keep=2)
    assert files.ids() == [f"{2:016x}", f"{3:016x}", "f" * 16]
    assert not files.cancel_asked("0" * 16)


def test_a_background_warm_waits_while_tenants_lake_reads_wait(tmp_path: Path) -> None:
    waits = iter([True, True, False])
    asked: list[bool] = []

    def lake_waiting() -> bool:
        asked.append(True)
        return next(waits)

    ops = AdminOps(cast(CachedLake, None), tmp_path, TenantDirectory([]), lake_waiting=lake_waiting)
    asyncio.run(ops._background_turn(WarmJob("b", "", None)))
    assert len(asked) == 3
    asyncio.run(ops._background_turn(WarmJob("b", "", "alice")))  # a tenant's warm: in its own turn
    assert len(asked) == 3


def test_a_cancel_asked_through_another_worker_stops_the_job(tmp_path: Path) -> None:
    async def run() -> bool:
        ops = AdminOps(cast(CachedLake, None), tmp_path, TenantDirectory([]))
        job = WarmJob("b", "", None)
        work = asyncio.create_task(asyncio.sleep(3600))
        ops._jobs[job.id] = (job, work)
        ops.files.ask_cancel(job.id)  # as a DELETE through another worker leaves it
        await ops._beat(job)
        with contextlib.suppress(asyncio.CancelledError):
            await work
        return work.cancelled()

    assert asyncio.run(run())
