"""Async S3 clients for load: they sign with botocore's SigV4 signer and ``UNSIGNED-PAYLOAD``
and read bodies in 1 MiB chunks, discarded unless asked for. :class:`RawS3Client` (plain
sockets, the default) and :class:`HttpxS3Client`; :func:`run_async` runs them on uvloop when
installed, :func:`gather_limited` bounds how many requests run at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Self, TypeVar
from urllib.parse import quote, urlsplit

import httpx2
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials

from harness.endpoints import S3Endpoint
from harness.units import KiB, MiB

T = TypeVar("T")


# -- signing S3 clients --------------------------------------------------------------------------
#
# Two clients with one interface (get / put / request and set-up helpers), both signing with
# botocore's S3SigV4Auth and UNSIGNED-PAYLOAD:
#
#   RawS3Client    HTTP/1.1 on plain non-blocking sockets: one recv_into a preallocated 1 MiB
#                  buffer per read, nothing copied in Python, keep-alive pool. The default: it
#                  keeps the client's CPU (which shares the machine's cores with the lake and the
#                  gateway) small. It speaks exactly what RGW and lakegate answer: Content-Length
#                  or chunked bodies, keep-alive.
#   HttpxS3Client  httpx2.AsyncClient (what lakegate itself uses to reach the lake); for
#                  comparison. On a 2-core machine it costs ~1.2 CPU-s per GiB received
#                  (h11 buffer copies), about 5x RawS3Client, and measurably slows a local RGW.

_UNSIGNED_PAYLOAD = Config(s3={"payload_signing_enabled": False})
BODY_CHUNK = 1 * MiB  # bytes per socket read
Response = tuple[int, dict[str, str], bytes]  # status, headers (lower-case names), body


class S3ClientBase:
    """Path-style S3 on ``endpoint``. Subclasses implement :meth:`request`, :meth:`get`,
    :meth:`put` and :meth:`aclose`."""

    def __init__(self, endpoint: S3Endpoint, max_connections: int = 64, timeout: float = 120.0) -> None:
        self.endpoint = endpoint
        self.origin = endpoint.url.rstrip("/")
        parts = urlsplit(self.origin)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"benchmark clients speak plain http://host:port, not {endpoint.url!r}")
        self.host = parts.hostname
        self.port = parts.port or 80
        self.netloc = parts.netloc
        self.max_connections = max_connections
        self.timeout = timeout
        self._signer = S3SigV4Auth(Credentials(endpoint.access_key, endpoint.secret_key), "s3", endpoint.region)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        raise NotImplementedError

    def url(self, bucket: str | None = None, key: str | None = None, query: str = "") -> str:
        path = "/" if bucket is None else "/" + quote(bucket, safe="")
        if key is not None:
            path += "/" + quote(key, safe="/~")
        return self.origin + path + (("?" + query) if query else "")

    def sign(self, method: str, url: str, headers: dict[str, str] | None = None) -> dict[str, str]:
        """``headers`` plus Host, X-Amz-Date, X-Amz-Content-SHA256 (UNSIGNED-PAYLOAD), Authorization."""
        request = AWSRequest(method=method, url=url, headers={"host": self.netloc, **(headers or {})})
        request.context["client_config"] = _UNSIGNED_PAYLOAD
        self._signer.add_auth(request)
        return dict(request.headers.items())

    async def request(self, method: str, url: str, content: bytes | None = None,
                      headers: dict[str, str] | None = None) -> Response:
        """A small signed request, body read whole."""
        raise NotImplementedError

    async def get(self, bucket: str, key: str, *, sha256: bool = False,
                  keep_body: bool = False) -> tuple[int, int, str | None, bytes | None]:
        """(status, body bytes received, sha256 hex if asked, the body if asked); otherwise
        the body is read in large chunks and discarded."""
        raise NotImplementedError

    async def put(self, bucket: str, key: str, body: bytes) -> tuple[int, str]:
        """(status, ETag without quotes)."""
        raise NotImplementedError

    # -- set-up and clean-up (errors raise) --

    async def create_bucket(self, bucket: str) -> None:
        status, _, body = await self.request("PUT", self.url(bucket))
        if status != 200 and b"BucketAlreadyOwnedByYou" not in body:
            raise RuntimeError(f"CreateBucket {bucket}: HTTP {status} {body[:300]!r}")

    async def put_checked(self, bucket: str, key: str, body: bytes) -> None:
        status, etag = await self.put(bucket, key, body)
        if status != 200 or etag != hashlib.md5(body).hexdigest():
            raise RuntimeError(f"PUT {bucket}/{key}: HTTP {status}, ETag {etag!r}")

    async def list_keys(self, bucket: str) -> list[str]:
        import xml.etree.ElementTree as ET

        keys: list[str] = []
        token = ""
        while True:
            query = "list-type=2&max-keys=1000" + (f"&continuation-token={quote(token, safe='')}" if token else "")
            status, _, body = await self.request("GET", self.url(bucket, query=query))
            if status != 200:
                raise RuntimeError(f"ListObjectsV2 {bucket}: HTTP {status} {body[:300]!r}")
            root = ET.fromstring(body)
            ns = root.tag.partition("}")[0] + "}" if root.tag.startswith("{") else ""
            keys += [e.text or "" for e in root.iter(f"{ns}Key")]
            truncated = (root.findtext(f"{ns}IsTruncated") or "false").lower() == "true"
            token = root.findtext(f"{ns}NextContinuationToken") or ""
            if not truncated or not token:
                return keys

    async def delete_bucket_with_objects(self, bucket: str, concurrency: int = 16) -> None:
        keys = await self.list_keys(bucket)

        async def delete(key: str) -> None:
            await self.request("DELETE", self.url(bucket, key))

        await gather_limited((delete(k) for k in keys), concurrency)
        status, _, body = await self.request("DELETE", self.url(bucket))
        if status not in (204, 404):
            raise RuntimeError(f"DeleteBucket {bucket}: HTTP {status} {body[:300]!r}")


class HttpxS3Client(S3ClientBase):
    """The S3 client on one pooled ``httpx2.AsyncClient``; socket reads raised to 1 MiB
    (httpcore reads 64 KiB by default) - a class attribute, so it applies to every httpx
    client of the benchmark process (never to the gateway's)."""

    def __init__(self, endpoint: S3Endpoint, max_connections: int = 64, timeout: float = 120.0) -> None:
        super().__init__(endpoint, max_connections, timeout)
        from httpcore2._async import http11

        http11.AsyncHTTP11Connection.READ_NUM_BYTES = BODY_CHUNK
        limits = httpx2.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        self.http = httpx2.AsyncClient(
            timeout=httpx2.Timeout(timeout, connect=10.0), limits=limits, trust_env=False,
            headers={"accept-encoding": "identity", "user-agent": "lakegate-bench"},
        )

    async def aclose(self) -> None:
        await self.http.aclose()

    async def request(self, method: str, url: str, content: bytes | None = None,
                      headers: dict[str, str] | None = None) -> Response:
        headers = dict(headers or {})
        if content is not None or method in ("PUT", "POST"):
            headers["content-length"] = str(len(content or b""))
        response = await self.http.request(method, url, content=content, headers=self.sign(method, url, headers))
        return response.status_code, {k.lower(): v for k, v in response.headers.items()}, response.content

    async def get(self, bucket: str, key: str, *, sha256: bool = False,
                  keep_body: bool = False) -> tuple[int, int, str | None, bytes | None]:
        url = self.url(bucket, key)
        digest = hashlib.sha256() if sha256 else None
        kept: list[bytes] | None = [] if keep_body else None
        received = 0
        async with self.http.stream("GET", url, headers=self.sign("GET", url)) as response:
            async for chunk in response.aiter_raw():
                received += len(chunk)
                if digest is not None:
                    digest.update(chunk)
                if kept is not None:
                    kept.append(chunk)
        body = b"".join(kept) if kept is not None else None
        return response.status_code, received, digest.hexdigest() if digest else None, body

    async def put(self, bucket: str, key: str, body: bytes) -> tuple[int, str]:
        url = self.url(bucket, key)
        headers = self.sign("PUT", url, {"content-length": str(len(body))})
        response = await self.http.put(url, content=body, headers=headers)
        return response.status_code, response.headers.get("etag", "").strip('"')


class _RawConnection:
    """One keep-alive HTTP/1.1 connection on a non-blocking socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.loop = asyncio.get_running_loop()
        self.pending = bytearray()  # received, not yet consumed
        self.scratch = memoryview(bytearray(BODY_CHUNK))
        self.reusable = True

    @classmethod
    async def open(cls, host: str, port: int) -> _RawConnection:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            await asyncio.get_running_loop().sock_connect(sock, (host, port))
        except BaseException:
            sock.close()
            raise
        return cls(sock)

    def close(self) -> None:
        self.reusable = False
        self.sock.close()

    async def _recv(self, limit: int) -> memoryview:
        n = await self.loop.sock_recv_into(self.sock, self.scratch[: min(limit, BODY_CHUNK)])
        if n == 0:
            raise ConnectionError("the server closed the connection mid-response")
        return self.scratch[:n]

    async def _read_until(self, separator: bytes, limit: int = 64 * KiB) -> bytes:
        while (at := self.pending.find(separator)) < 0:
            if len(self.pending) > limit:
                raise ConnectionError("response header section too large")
            self.pending += await self._recv(BODY_CHUNK)
        end = at + len(separator)
        out = bytes(self.pending[:end])
        del self.pending[:end]
        return out

    async def _read_exactly(self, n: int, sink: Callable[[memoryview], None] | None) -> None:
        if self.pending:
            take = min(n, len(self.pending))
            if sink is not None:
                sink(memoryview(bytes(self.pending[:take])))
            del self.pending[:take]
            n -= take
        while n > 0:
            view = await self._recv(n)
            if sink is not None:
                sink(view)
            n -= len(view)

    async def exchange(self, method: str, target: str, headers: dict[str, str], body: bytes | None,
                       sink: Callable[[memoryview], None] | None) -> tuple[int, dict[str, str], int]:
        """Send one request, read its response; the body goes to ``sink`` in pieces (views of
        a reused buffer: consume them before returning). (status, headers, body bytes)."""
        head = f"{method} {target} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        if body is not None and len(body) <= 64 * KiB:
            await self.loop.sock_sendall(self.sock, head.encode("latin-1") + body)
        else:
            await self.loop.sock_sendall(self.sock, head.encode("latin-1"))
            if body:
                await self.loop.sock_sendall(self.sock, body)
        lines = (await self._read_until(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        version, _, rest = lines[0].partition(" ")
        status = int(rest.split(" ", 1)[0])
        response_headers: dict[str, str] = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                name = name.strip().lower()
                value = value.strip()
                response_headers[name] = f"{response_headers[name]}, {value}" if name in response_headers else value
        if response_headers.get("connection", "").lower() == "close" or version == "HTTP/1.0":
            self.reusable = False
        received = 0
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            return status, response_headers, 0
        if "chunked" in response_headers.get("transfer-encoding", "").lower():
            while True:
                size = int((await self._read_until(b"\r\n")).split(b";", 1)[0].strip(), 16)
                if size == 0:
                    while await self._read_until(b"\r\n") != b"\r\n":  # trailers
                        pass
                    break
                await self._read_exactly(size, sink)
                received += size
                await self._read_until(b"\r\n")
        elif "content-length" in response_headers:
            received = int(response_headers["content-length"])
            await self._read_exactly(received, sink)
        else:  # read to close
            self.reusable = False
            while True:
                try:
                    view = await self._recv(BODY_CHUNK)
                except ConnectionError:
                    break
                received += len(view)
                if sink is not None:
                    sink(view)
        return status, response_headers, received


@dataclass(frozen=True)
class TimedGet:
    """A GET timed by :meth:`RawS3Client.timed_get` (seconds)."""

    status: int
    received: int
    ttfb: float  # request sent -> first body byte received (nan without a body)
    total: float  # request sent -> last body byte received
    sha256: str | None


class RawS3Client(S3ClientBase):
    """The S3 client on plain sockets (see the section comment); connections are pooled
    (at most ``max_connections`` idle ones kept)."""

    def __init__(self, endpoint: S3Endpoint, max_connections: int = 64, timeout: float = 120.0) -> None:
        super().__init__(endpoint, max_connections, timeout)
        self._idle: list[_RawConnection] = []

    async def aclose(self) -> None:
        while self._idle:
            self._idle.pop().close()

    async def _exchange(self, method: str, url: str, headers: dict[str, str], body: bytes | None,
                        sink: Callable[[memoryview], None] | None) -> tuple[int, dict[str, str], int]:
        parts = urlsplit(url)
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        signed = self.sign(method, url, headers)
        signed.setdefault("User-Agent", "lakegate-bench")
        async with self._pooled() as conn, asyncio.timeout(self.timeout):
            return await conn.exchange(method, target, signed, body, sink)

    @contextlib.asynccontextmanager
    async def _pooled(self) -> AsyncIterator[_RawConnection]:
        """A keep-alive connection from the pool (or a new one), put back when it can be reused;
        closed after any failure."""
        conn = self._idle.pop() if self._idle else await _RawConnection.open(self.host, self.port)
        try:
            yield conn
        except BaseException:
            conn.close()
            raise
        if conn.reusable and len(self._idle) < self.max_connections:
            self._idle.append(conn)
        else:
            conn.close()

    async def request(self, method: str, url: str, content: bytes | None = None,
                      headers: dict[str, str] | None = None) -> Response:
        headers = dict(headers or {})
        if content is not None or method in ("PUT", "POST"):
            headers["content-length"] = str(len(content or b""))
        pieces: list[bytes] = []
        status, response_headers, _ = await self._exchange(method, url, headers, content, lambda v: pieces.append(bytes(v)))
        return status, response_headers, b"".join(pieces)

    async def get(self, bucket: str, key: str, *, sha256: bool = False,
                  keep_body: bool = False) -> tuple[int, int, str | None, bytes | None]:
        digest = hashlib.sha256() if sha256 else None
        kept: list[bytes] | None = [] if keep_body else None
        sink: Callable[[memoryview], None] | None = None
        if digest is not None and kept is not None:
            def sink(view: memoryview) -> None:
                digest.update(view)
                kept.append(bytes(view))
        elif digest is not None:
            sink = digest.update
        elif kept is not None:
            def sink(view: memoryview) -> None:
                kept.append(bytes(view))
        status, _, received = await self._exchange("GET", self.url(bucket, key), {}, None, sink)
        return status, received, digest.hexdigest() if digest else None, b"".join(kept) if kept is not None else None

    async def get_with_prefix(self, bucket: str, key: str, keep: int = 1024) -> tuple[int, int, bytes]:
        """GET and discard the body but its first ``keep`` bytes: (status, body bytes, prefix),
        e.g. to tell an S3 error's code (503 SlowDown) from a data body without keeping it."""
        prefix = bytearray()

        def sink(view: memoryview) -> None:
            if len(prefix) < keep:
                prefix.extend(view[: keep - len(prefix)])

        status, _, received = await self._exchange("GET", self.url(bucket, key), {}, None, sink)
        return status, received, bytes(prefix)

    async def timed_get(self, bucket: str, key: str, *, sha256: bool = False,
                        headers: dict[str, str] | None = None) -> TimedGet:
        """One GET timed from just before its request bytes are sent to the first body byte
        received (TTFB) and to the last. Signing and connecting happen before the clock starts
        (a pooled keep-alive connection when there is one); the body is hashed or discarded."""
        url = self.url(bucket, key)
        parts = urlsplit(url)
        signed = self.sign("GET", url, dict(headers or {}))
        signed.setdefault("User-Agent", "lakegate-bench")
        digest = hashlib.sha256() if sha256 else None
        first: list[float] = []

        def sink(view: memoryview) -> None:
            if not first:
                first.append(time.perf_counter())
            if digest is not None:
                digest.update(view)

        async with self._pooled() as conn, asyncio.timeout(self.timeout):  # connected before the clock starts
            started = time.perf_counter()
            status, _, received = await conn.exchange("GET", parts.path, signed, None, sink)
            ended = time.perf_counter()
        ttfb = (first[0] - started) if first else float("nan")
        return TimedGet(status, received, ttfb, ended - started, digest.hexdigest() if digest else None)

    async def put(self, bucket: str, key: str, body: bytes) -> tuple[int, str]:
        pieces: list[bytes] = []
        status, headers, _ = await self._exchange(
            "PUT", self.url(bucket, key), {"content-length": str(len(body))}, body, lambda v: pieces.append(bytes(v))
        )
        return status, headers.get("etag", "").strip('"')


CLIENTS: dict[str, type[S3ClientBase]] = {"raw": RawS3Client, "httpx": HttpxS3Client}


def make_client(kind: str, endpoint: S3Endpoint, max_connections: int = 64) -> S3ClientBase:
    return CLIENTS[kind](endpoint, max_connections=max_connections)


async def gather_limited(coros: Iterable[Awaitable[T]], limit: int) -> list[T]:
    """Await ``coros`` with at most ``limit`` running at once; results in order."""
    semaphore = asyncio.Semaphore(limit)

    async def one(coro: Awaitable[T]) -> T:
        async with semaphore:
            return await coro

    return await asyncio.gather(*(one(c) for c in coros))


def run_async(main: Awaitable[T]) -> T:
    """Run a coroutine on uvloop when installed (less client overhead), else asyncio."""
    try:
        import uvloop

        factory: Callable[[], asyncio.AbstractEventLoop] | None = uvloop.new_event_loop
    except ImportError:
        factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)  # type: ignore[arg-type]
