"""Counting the requests lakegate sends to the lake, from RGW's own access log.

RGW's beast frontend logs one line per request (debug_rgw >= 1) in
``$(dirname $CEPH_CONF)/log/ceph-client.rgw.gw.log``; in Ceph 16.2:

    ... beast: 0x7f..: 127.0.0.1 - lakegate [30/Nov/2026:06:01:45.628 +0000]
        "GET /bucket/key HTTP/1.1" 206 4194304 - - bytes=0-4194303 latency=0.008000000s

after the status come the body bytes sent and received (4194304 for a 4 MiB block GET: no
headers counted), the Referer and the User-Agent (quoted, or ``-`` when the request had none)
and the Range header (unquoted, or ``-``). The name after
the address is the RGW user, the same for lakegate and for the tests' own RGW client: the user
agent tells them apart: boto3 always sends its own, lakegate's lake client sends
``lakegate``.

Ceph's log thread writes asynchronously: ``RgwLog.count`` polls until the expected number of
lines has appeared, then waits a little longer, so that ``assert count == expected`` is exact
(a request too many shows up too) without sleeping for the common case.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

LAKEGATE_AGENT = "lakegate"
WAIT_TIMEOUT_S = 10.0
SETTLE_S = 0.5

_LINE = re.compile(
    r' beast: 0x[0-9a-f]+: (?P<address>\S+) - (?P<user>\S+) \[(?P<time>[^\]]+)\] '
    r'"(?P<method>[A-Z]+) (?P<target>\S+) (?P<version>[^"]+)" (?P<status>\d+) (?P<bytes>\d+) '
    r'(?P<referer>-|"[^"]*") (?P<agent>-|"[^"]*") (?P<range>\S+) latency='
)


@dataclass(frozen=True)
class Request:
    """One logged request. ``path`` is decoded (``/bucket/key``), ``query`` raw."""

    method: str
    path: str
    query: str
    status: int
    bytes: int
    user_agent: str | None
    range: str | None

    @classmethod
    def parse(cls, line: str) -> Request | None:
        m = _LINE.search(line)
        if m is None:
            return None
        target, _, query = m["target"].partition("?")
        return cls(
            method=m["method"],
            path=unquote(target),
            query=query,
            status=int(m["status"]),
            bytes=int(m["bytes"]),
            user_agent=None if m["agent"] == "-" else m["agent"][1:-1],
            range=None if m["range"] == "-" else m["range"],
        )

    def is_object(self, bucket: str, key: str | None) -> bool:
        """A request on ``key`` in ``bucket`` (any key when ``key`` is None), no subresource."""
        if self.query:
            return False
        if key is None:
            return self.path.startswith(f"/{bucket}/")
        return self.path == f"/{bucket}/{key}"


class RgwLog:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    @classmethod
    def from_environment(cls) -> RgwLog:
        """The log of the RGW that ``CEPH_CONF`` (from deploy/ceph's s3.env) belongs to."""
        conf = os.environ.get("CEPH_CONF")
        if not conf:
            raise RuntimeError("CEPH_CONF is not set: source the s3.env deploy/ceph/start-ceph.sh writes")
        path = Path(conf).parent / "log" / "ceph-client.rgw.gw.log"
        if not path.is_file():
            raise RuntimeError(f"no RGW log at {path}")
        return cls(path)

    def mark(self) -> int:
        """The current end of the log: pass it to ``requests``/``count`` as ``since``."""
        return self.path.stat().st_size

    def requests(self, since: int) -> list[Request]:
        """Every request logged after offset ``since`` (complete lines only)."""
        with open(self.path, "rb") as log:
            log.seek(since)
            text = log.read()
        text = text[: text.rfind(b"\n") + 1]  # a line still being written is counted next time
        found = (Request.parse(line) for line in text.decode("utf-8", "replace").splitlines())
        return [r for r in found if r is not None]

    def lake_requests(
        self,
        since: int,
        method: str,
        bucket: str,
        key: str | None = None,
        where: Callable[[Request], bool] | None = None,
    ) -> list[Request]:
        """lakegate's requests (by user agent) for ``method`` on ``bucket``/``key``."""
        return [
            r
            for r in self.requests(since)
            if r.method == method
            and r.user_agent == LAKEGATE_AGENT
            and r.is_object(bucket, key)
            and (where is None or where(r))
        ]

    def wait_for(
        self,
        since: int,
        method: str,
        bucket: str,
        key: str | None = None,
        *,
        expected: int,
        where: Callable[[Request], bool] | None = None,
        timeout: float = WAIT_TIMEOUT_S,
        settle: float = SETTLE_S,
    ) -> list[Request]:
        """Wait until at least ``expected`` matching requests are logged (or ``timeout``), then
        ``settle`` more seconds for late ones; the requests logged by then."""
        deadline = time.monotonic() + timeout
        while len(self.lake_requests(since, method, bucket, key, where)) < expected:
            if time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        time.sleep(settle)
        return self.lake_requests(since, method, bucket, key, where)

    def count(
        self,
        since: int,
        method: str,
        bucket: str,
        key: str | None = None,
        *,
        expected: int,
        where: Callable[[Request], bool] | None = None,
        timeout: float = WAIT_TIMEOUT_S,
        settle: float = SETTLE_S,
    ) -> int:
        """How many matching requests were logged after ``since`` (see ``wait_for``)."""
        return len(self.wait_for(since, method, bucket, key, expected=expected, where=where,
                                 timeout=timeout, settle=settle))
