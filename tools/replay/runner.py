"""The mappers: replay a trace's requests with ``curl`` on presigned URLs.

Each of ``mappers`` slots takes the next request in arrival order, waits for its arrival
offset (divided by ``speed``; not at all with ``wait=False``), presigns a GET with the
tenant's keys and runs one ``curl`` process for it, as a Hadoop mapper fetching its split
would. So at most ``mappers`` curl processes fetch at once. The slots are threads of this
process, but they only presign and wait on curl: the fetching (connection, TLS, body) is
in the curl processes, outside Python's GIL, and the latency is curl's own measurement.

Nothing here raises for a failed request: a curl failure, a timeout or a non-2xx answer
becomes an :class:`Outcome` with ``ok`` false.
"""

from __future__ import annotations

import dataclasses
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tools.replay.credentials import Credentials, s3_client
from tools.replay.trace import TraceRecord

# what curl prints after each transfer (-w): status, body bytes, total and first-byte seconds
_CURL_WRITE_OUT = "%{http_code} %{size_download} %{time_total} %{time_starttransfer}"


@dataclass(frozen=True)
class ReplayOptions:
    endpoint: str  # one URL, or several comma-separated (cache nodes): mapper n uses the (n mod k)-th
    region: str = "us-east-1"
    mappers: int = 16
    speed: float = 1.0  # 2.0: arrivals twice as fast as the trace says
    wait: bool = True  # False: ignore arrival offsets, as fast as the mappers go
    timeout: float = 600.0  # seconds one curl transfer may take
    ca_bundle: str | None = None
    url_expiry: int = 3600  # seconds a presigned URL is valid (signed when sent)
    curl: str = "curl"


@dataclass(frozen=True)
class Outcome:
    """One request as replayed; times are seconds since the replay started."""

    index: int
    record: TraceRecord
    started: float
    finished: float
    status: str  # the HTTP status ("206"), or "curl:N" when curl failed (N: its exit code)
    bytes: int
    latency: float  # curl's time_total
    first_byte: float  # curl's time_starttransfer
    detail: str = ""  # curl's error message, if any

    @property
    def ok(self) -> bool:
        return self.status.startswith("2")

    @property
    def mismatch(self) -> bool:
        """A successful answer with another byte count than the trace expects."""
        expected = self.record.expected_bytes
        return self.ok and expected is not None and expected != self.bytes


@dataclass
class Progress:
    """Running counts, for a progress line."""

    total: int
    done: int = 0
    errors: int = 0
    mismatches: int = 0
    bytes: int = 0
    elapsed: float = 0.0


class Replay:
    """Replays ``records`` (in arrival order) against ``options.endpoint``."""

    def __init__(self, records: Sequence[TraceRecord], credentials: Credentials,
                 options: ReplayOptions, clock: Callable[[], float] = time.monotonic) -> None:
        self.options = options
        self.clock = clock
        # stable sort: same-offset requests go out in file order
        self.queue = sorted(enumerate(records), key=lambda item: item[1].offset)
        self.outcomes: list[Outcome] = []
        self.progress = Progress(total=len(records))
        self._lock = threading.Lock()
        self._next = 0
        self._start = 0.0
        # botocore clients are made here, in one thread (making them is not thread-safe;
        # presigning with them from many threads is)
        self.endpoints = [e.strip() for e in options.endpoint.split(",") if e.strip()]
        self._clients = {(t, e): s3_client(e, credentials.keys_for(t), options.region)
                         for t in sorted({r.tenant for r in records}) for e in self.endpoints}

    def run(self, report: Callable[[Progress], None] | None = None, interval: float = 0.5) -> list[Outcome]:
        """Replay every request; ``report(progress)`` every ``interval`` seconds meanwhile.
        Returns the outcomes in trace order."""
        self._start = self.clock()
        mappers = [threading.Thread(target=self._mapper, args=(self.endpoints[n % len(self.endpoints)],),
                                    name=f"mapper-{n}", daemon=True)
                   for n in range(min(self.options.mappers, len(self.queue)))]
        for mapper in mappers:
            mapper.start()
        while alive := [m for m in mappers if m.is_alive()]:
            alive[0].join(interval)
            if report is not None and any(m.is_alive() for m in mappers):
                report(self._snapshot())
        if report is not None:
            report(self._snapshot())
        return sorted(self.outcomes, key=lambda o: o.index)

    def _snapshot(self) -> Progress:
        with self._lock:
            return dataclasses.replace(self.progress, elapsed=self.clock() - self._start)

    def _take(self) -> tuple[int, TraceRecord] | None:
        with self._lock:
            if self._next >= len(self.queue):
                return None
            self._next += 1
            return self.queue[self._next - 1]

    def _mapper(self, endpoint: str) -> None:
        while (item := self._take()) is not None:
            index, record = item
            if self.options.wait:
                delay = self._start + record.offset / self.options.speed - self.clock()
                if delay > 0:
                    time.sleep(delay)
            outcome = self._fetch(index, record, endpoint)
            with self._lock:
                self.outcomes.append(outcome)
                self.progress.done += 1
                self.progress.errors += not outcome.ok
                self.progress.mismatches += outcome.mismatch
                self.progress.bytes += outcome.bytes

    def _fetch(self, index: int, record: TraceRecord, endpoint: str) -> Outcome:
        url = self._clients[(record.tenant, endpoint)].generate_presigned_url(
            "get_object", Params={"Bucket": record.bucket, "Key": record.key},
            ExpiresIn=self.options.url_expiry)
        started = self.clock() - self._start
        done = self._curl(url, record.range_header)
        finished = self.clock() - self._start
        return _outcome(index, record, started, finished, done)

    def _curl(self, url: str, range_header: str | None) -> subprocess.CompletedProcess[str]:
        cmd = [self.options.curl, "--silent", "--show-error", "--globoff", "--output", "/dev/null",
               "--max-time", str(self.options.timeout), "--write-out", _CURL_WRITE_OUT]
        if range_header:
            cmd += ["--header", f"Range: {range_header}"]
        if self.options.ca_bundle:
            cmd += ["--cacert", self.options.ca_bundle]
        try:
            return subprocess.run([*cmd, "--url", url], capture_output=True, text=True,
                                  stdin=subprocess.DEVNULL, check=False, timeout=self.options.timeout + 30)
        except (OSError, subprocess.TimeoutExpired) as exc:  # no curl, or curl hung
            return subprocess.CompletedProcess(cmd, 127, "000 0 0 0", str(exc))


def _outcome(index: int, record: TraceRecord, started: float, finished: float,
             done: subprocess.CompletedProcess[Any]) -> Outcome:
    """Read curl's --write-out line (and exit code) into an Outcome."""
    try:
        code, size, total, first = done.stdout.split()
        numbers = (int(size), float(total), float(first))
    except ValueError:
        code, numbers = "000", (0, finished - started, 0.0)
    status = code if done.returncode == 0 else f"curl:{done.returncode}"
    return Outcome(index, record, started, finished, status, *numbers, detail=done.stderr.strip())
