"""Write-back crash test over the real RGW (issue 14): trials of kill -9 of a node's whole process
group at a random moment of a write-back burst, then a restart on the same cache directory,
which replays the journal; once the node reports nothing pending, RGW itself is read.

Each trial: two client threads (disjoint keys, one request at a time each) overwrite a few keys
with PutObjects of random sizes (0..2 MiB, random bytes) and now and then a multipart upload
(a 5 MiB part and a small one) or a DeleteObject of the same keys; each request's outcome is recorded (200 and
its ETag, or an error / no answer). The node is killed once a seeded number of requests were
answered plus a seeded delay, and restarted (1 or 2 workers, the trial's pick). The chain
reuses the restarted node as the next trial's node, so a restart also changes the number of
workers over the same journal.

What RGW must hold, per key: the bytes (MD5) of the key's last acknowledged write, or of a
write after it that got no answer (never torn, never an older acknowledged version: the order
per key holds); nothing but those; a multipart object acknowledged last has the ETag the
client got. And before the kill, the node answers every write with a 200.

Single-node only (no cluster): the copies on other nodes (N, K > 1) are tests/cluster's.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import psutil
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from harness.endpoints import ALICE, Target, admin_get_json, empty_and_delete_bucket, unique_bucket_name
from harness.gateway import Gateway

MiB = 1 << 20
TRIALS = 20
SEED = 14
PORTS = range(24000, 24100)  # this test's gateways
KEYS_PER_THREAD = 2  # few keys: overwrites (and their flushes) cross often
THREADS = 2
MAX_PUT = 2 * MiB
FIRST_PART = 5 * MiB
FLUSH_DEADLINE = 90.0  # seconds a restarted node may take to flush its journal
REPLICATION = "/_lakegate/admin/replication"
DELETED = ""  # the "MD5" of a DeleteObject: the key absent


@dataclass
class Write:
    """One write of a key: its bytes' MD5 (DELETED for a delete), and what the client got: the
    ETag ("" for a delete), None for an error or no answer."""

    key: str
    md5: str
    multipart: bool
    etag: str | None = None
    error: str = ""


@dataclass
class Burst:
    """The writes of a trial, in the order each thread sent them (per key, the send order)."""

    writes: list[Write] = field(default_factory=list)
    answered: int = 0
    lock: threading.Condition = field(default_factory=threading.Condition)
    stop: threading.Event = field(default_factory=threading.Event)
    killed: threading.Event = field(default_factory=threading.Event)  # set just before the kill
    failures: list[str] = field(default_factory=list)  # errors a live node gave (there must be none)

    def failed(self, exc: Exception, write: Write | None = None) -> None:
        if write is not None:
            write.error = repr(exc)
        if not self.killed.is_set():
            with self.lock:
                self.failures.append(f"{write.key if write else 'a multipart part'}: {exc!r}")

    def record(self, write: Write) -> None:
        with self.lock:
            self.writes.append(write)

    def answer(self) -> None:
        with self.lock:
            self.answered += 1
            self.lock.notify_all()

    def wait_answered(self, count: int, timeout: float) -> None:
        with self.lock:
            assert self.lock.wait_for(lambda: self.answered >= count or self.stop.is_set(), timeout), (
                f"only {self.answered} of {count} writes answered in {timeout:.0f} s")


def client(gateway: Gateway) -> Any:
    """boto3 to the gateway, no retries (a retry would hide which request the kill cut)."""
    tenant = gateway.tenants[0]
    return boto3.client("s3", endpoint_url=gateway.url, region_name="us-east-1",
                        aws_access_key_id=tenant.access_key, aws_secret_access_key=tenant.secret_key,
                        config=Config(signature_version="s3v4", s3={"addressing_style": "path"},
                                      retries={"total_max_attempts": 1}, connect_timeout=5, read_timeout=60))


def writer(s3: Any, bucket: str, keys: list[str], rng: random.Random, burst: Burst) -> None:
    """Writes to ``keys`` until told to stop or a request fails (the kill)."""
    while not burst.stop.is_set():
        key = rng.choice(keys)
        if rng.random() < 0.15:
            small = rng.randbytes(rng.randint(1, 64 << 10))
            parts = [rng.randbytes(FIRST_PART), small]
            write = Write(key, hashlib.md5(b"".join(parts)).hexdigest(), multipart=True)  # noqa: S324
            try:
                upload = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
                done = [{"PartNumber": n, "ETag": s3.upload_part(Bucket=bucket, Key=key, UploadId=upload,
                                                                PartNumber=n, Body=body)["ETag"]}
                        for n, body in enumerate(parts, 1)]
            except Exception as exc:  # noqa: BLE001 - the kill: no Complete was sent, nothing of it may appear
                burst.failed(exc)
                return
            burst.record(write)
            try:
                write.etag = s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload,
                                                          MultipartUpload={"Parts": done})["ETag"]
            except Exception as exc:  # noqa: BLE001 - the kill (else a failure of a live node)
                burst.failed(exc, write)
                return
        elif rng.random() < 0.1:
            write = Write(key, DELETED, multipart=False)
            burst.record(write)
            try:
                s3.delete_object(Bucket=bucket, Key=key)
                write.etag = ""
            except Exception as exc:  # noqa: BLE001 - the kill (else a failure of a live node)
                burst.failed(exc, write)
                return
        else:
            body = rng.randbytes(rng.randint(0, MAX_PUT))
            write = Write(key, hashlib.md5(body).hexdigest(), multipart=False)  # noqa: S324
            burst.record(write)
            try:
                write.etag = s3.put_object(Bucket=bucket, Key=key, Body=body)["ETag"]
            except Exception as exc:  # noqa: BLE001 - the kill (else a failure of a live node)
                burst.failed(exc, write)
                return
        burst.answer()


def node_processes(gateway: Gateway) -> list[psutil.Process]:
    """The node's supervisor and workers (listed before the kill, so that it is not delayed)."""
    try:
        return [psutil.Process(gateway.pid), *psutil.Process(gateway.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def kill_node(gateway: Gateway, procs: list[psutil.Process]) -> None:
    """SIGKILL the node's whole process group (supervisor and workers), and wait for all of it."""
    assert gateway.proc is not None
    os.killpg(gateway.pid, signal.SIGKILL)  # `lakegate serve` runs in a session of its own
    gateway.proc.wait(timeout=30)
    _, alive = psutil.wait_procs(procs, timeout=30)
    assert not alive, f"still alive after SIGKILL: {alive}"


def replication(gateway: Gateway) -> dict[str, Any]:
    result: dict[str, Any] = admin_get_json(gateway.url + REPLICATION)
    return result


def wait_flushed(gateway: Gateway) -> dict[str, Any]:
    deadline = time.monotonic() + FLUSH_DEADLINE
    while True:
        report = replication(gateway)
        if report["pending_objects"] == 0:
            return report
        assert time.monotonic() < deadline, (
            f"{report['pending_objects']} writes still pending after {FLUSH_DEADLINE:.0f} s: {report}\n"
            f"{gateway.output_tail()}")
        time.sleep(0.1)


def lake_md5(rgw: Any, bucket: str, key: str) -> tuple[str, str] | None:
    """(MD5 of the bytes, ETag) RGW holds for the key, None when it has none."""
    try:
        got = rgw.get_object(Bucket=bucket, Key=key)
    except ClientError as exc:
        if exc.response["Error"]["Code"] == "NoSuchKey":
            return None
        raise
    return hashlib.md5(got["Body"].read()).hexdigest(), got["ETag"]  # noqa: S324


def check_trial(rgw: Any, bucket: str, keys: list[str], burst: Burst, trial: int) -> list[str]:
    """What RGW holds against what the clients got; one line per violation."""
    problems = []
    for key in keys:
        writes = [w for w in burst.writes if w.key == key]
        acked = [i for i, w in enumerate(writes) if w.etag is not None]
        last = acked[-1] if acked else -1
        allowed = writes[last:] if acked else writes  # the last acknowledged one, or one after it
        got = lake_md5(rgw, bucket, key)
        if got is None:
            if acked and not any(w.md5 == DELETED for w in allowed):
                problems.append(f"trial {trial}: {key} missing; its last acknowledged write was "
                                f"#{last} of {len(writes)} (md5 {writes[last].md5})")
            continue
        md5, etag = got
        if not any(w.md5 == md5 for w in allowed):
            older = [i for i, w in enumerate(writes) if w.md5 == md5]
            what = f"an older write #{older[-1]}" if older else "bytes of no write (torn)"
            problems.append(f"trial {trial}: {key} holds {what} (md5 {md5}); allowed: writes #{max(last, 0)}.."
                            f"{len(writes) - 1}, last acknowledged #{last}")
            continue
        if acked and md5 == writes[last].md5 and writes[last].multipart and writes[last].etag != etag:
            problems.append(f"trial {trial}: {key} multipart ETag {etag} in the lake, the client got "
                            f"{writes[last].etag}")
    return problems


@pytest.fixture
def crash_bucket(rgw_s3: Any) -> Iterator[str]:
    name = unique_bucket_name("wb-crash")
    rgw_s3.create_bucket(Bucket=name)
    yield name
    empty_and_delete_bucket(rgw_s3, name)


def replayed(gateway: Gateway) -> int:
    """The pending writes the node's last start found in its journal (its log says)."""
    run = gateway.log_path.read_text(errors="replace").rsplit("\n$ ", 1)[-1]
    found = re.findall(r"write-back journal: (\d+) pending writes to flush", run)
    return int(found[-1]) if found else 0


def node(rgw_target: Target, workdir: Path, workers: int, port: int) -> Gateway:
    return Gateway(rgw_target.endpoint, tenants=(ALICE,), workdir=workdir, cache_dir=workdir / "cache", port=port,
                   keep_dir=True, start_timeout=60.0,
                   env={"LAKEGATE_ACCESS_LOG": "false", "LAKEGATE_WRITE_MODE": "write-back",
                        "LAKEGATE_WORKERS": str(workers), "LAKEGATE_CACHE_CAPACITY": "2GiB",
                        "LAKEGATE_WRITE_DIRTY_SOFT": "512MiB", "LAKEGATE_WRITE_DIRTY_DELTA": "256MiB"})


def test_acknowledged_writes_survive_kill_9(rgw_target: Target, rgw_s3: Any, crash_bucket: str,
                                            tmp_path: Path) -> None:
    rng = random.Random(SEED)
    workdir = tmp_path / "node"
    ports = iter(PORTS)
    gateway = node(rgw_target, workdir, rng.choice((1, 2)), next(ports))
    gateway.start()
    problems: list[str] = []
    summary = []
    replays: list[int] = []
    started = time.monotonic()
    try:
        for trial in range(TRIALS):
            burst = Burst()
            keys = [[f"t{trial}/w{t}/k{i}" for i in range(KEYS_PER_THREAD)] for t in range(THREADS)]
            clients = [client(gateway) for _ in range(THREADS)]
            threads = [threading.Thread(target=writer, args=(clients[t], crash_bucket, keys[t],
                                                             random.Random(rng.random()), burst), daemon=True)
                       for t in range(THREADS)]
            # the seeded moment of the kill: ``kill_after`` answers, then ``delay`` (0 in about half
            # the trials: the write just acknowledged is then most likely still in the journal)
            kill_after, delay = rng.randint(1, 10), max(0.0, rng.uniform(-0.3, 0.3))
            workers, procs = gateway.workers, node_processes(gateway)
            for thread in threads:
                thread.start()
            burst.wait_answered(kill_after, timeout=60)
            if delay:
                burst.stop.wait(delay)
            burst.killed.set()
            kill_node(gateway, procs)
            burst.stop.set()
            for thread in threads:
                thread.join(timeout=60)
                assert not thread.is_alive()
            for s3 in clients:
                s3.close()
            gateway = node(rgw_target, workdir, rng.choice((1, 2)), next(ports))
            gateway.start()
            wait_flushed(gateway)
            replays.append(replayed(gateway))
            found = check_trial(rgw_s3, crash_bucket, [k for ks in keys for k in ks], burst, trial)
            found += [f"trial {trial}: the live node failed a write: {failure}" for failure in burst.failures]
            problems += found
            acked = sum(1 for w in burst.writes if w.etag is not None)
            multipart = sum(1 for w in burst.writes if w.etag is not None and w.multipart)
            summary.append(f"trial {trial}: {workers} worker(s), {len(burst.writes)} writes, {acked} acknowledged "
                           f"({multipart} multipart), "
                           f"killed after {kill_after} answers + {delay:.2f} s; restarted with {gateway.workers}, "
                           f"{replays[-1]} pending writes replayed"
                           + (f"; PROBLEMS: {found}" if found else ""))
            print(summary[-1])
    finally:
        gateway.stop()
    print(f"{TRIALS} trials in {time.monotonic() - started:.0f} s; node log: {gateway.log_path}")
    assert not problems, "\n".join(problems + ["", *summary, f"node log: {gateway.log_path}"])
    assert sum(replays) > 0, "no trial's kill left a write to replay: the kills miss the bursts"
