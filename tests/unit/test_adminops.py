"""The admin operations' pure parts (gateway/adminops.py): job ids and bucket names checked, a
running job whose worker is gone reads as failed, job files written whole and read back."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gateway.adminops import FAILED, RUNNING, BadRequest, JobFiles, _as_seen, checked_bucket, checked_job_id


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
