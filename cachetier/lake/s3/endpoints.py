"""The endpoints of one S3 lake (RGW instances on one Ceph cluster) and the hook that chooses one
per request.

``S3Lake`` keeps one ``Endpoint`` per URL of its config: its own connection pools, the Host it
signs for, and counters of the requests sent to it. Before each request it asks its
``EndpointChooser`` for an order: the first endpoint is used, the rest are where retries go
(connection failures, timeouts, 5xx), in that order. After each attempt it tells the chooser
how that endpoint did. ``RoundRobin`` is the default chooser; the replica-choice policies plug in
through the same two calls.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Protocol

import httpx2


class EndpointChooser(Protocol):
    """Chooses the endpoint of each lake request; told the outcome of every attempt."""

    def order(self, endpoints: Sequence[str]) -> Sequence[str]:
        """``endpoints`` (all of the lake's, in config order) in the order to try them for one
        request: the first is used, the others take the retries of a request that may be
        retried. It may leave endpoints out, but not return none."""
        ...

    def done(self, endpoint: str, ok: bool, latency_s: float) -> None:
        """One attempt on ``endpoint`` ended: ``ok`` unless the endpoint failed it (a connection
        error, a timeout, a 5xx; a 4xx is the lake's answer, ok); ``latency_s`` from the
        request's start to its response's head (or to the failure)."""
        ...


class RoundRobin:
    """Each request starts at the next endpoint; its retries go round from there."""

    def __init__(self) -> None:
        self._next = 0

    def order(self, endpoints: Sequence[str]) -> Sequence[str]:
        start = self._next % len(endpoints)
        self._next = start + 1
        return [*endpoints[start:], *endpoints[:start]]

    def done(self, endpoint: str, ok: bool, latency_s: float) -> None:
        pass  # round robin heeds no outcome


@dataclasses.dataclass
class EndpointCounters:
    """What this process sent to one endpoint: attempts, attempts the endpoint failed, and
    attempts in flight now (a streamed GET counts until its body is read or closed)."""

    requests: int = 0
    errors: int = 0
    outstanding: int = 0

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


class Endpoint:
    """One endpoint of the lake: where a request goes and what it is signed for."""

    def __init__(self, url: str, transport: httpx2.AsyncBaseTransport, heads: httpx2.AsyncBaseTransport) -> None:
        parsed = httpx2.URL(url)
        self.url = url
        self.host = parsed.netloc.decode("ascii")  # the Host header, which the signature covers
        self.origin = f"{parsed.scheme}://{self.host}"
        self.transport = transport
        # HEADs (metadata lookups, which hits wait on when their TTL runs out) on connections of
        # their own: never queued behind block fetches that hold every connection of the pool
        self.heads = heads
        self.counters = EndpointCounters()

    def transport_for(self, method: str) -> httpx2.AsyncBaseTransport:
        return self.heads if method == "HEAD" else self.transport

    async def aclose(self) -> None:
        await self.transport.aclose()
        if self.heads is not self.transport:
            await self.heads.aclose()


class EndpointAttempt:
    """One attempt of a request on an endpoint: counted outstanding from its start until
    ``release()``; the chooser told its outcome once, when it is known."""

    def __init__(self, endpoint: Endpoint, chooser: EndpointChooser, timer: Callable[[], float]) -> None:
        self._endpoint, self._chooser, self._timer = endpoint, chooser, timer
        self._started = timer()
        self._told = self._released = False
        endpoint.counters.requests += 1
        endpoint.counters.outstanding += 1

    def answered(self, ok: bool) -> None:
        """The response's head came: ``ok`` unless its status is the endpoint failing (5xx)."""
        self._tell(ok)

    def failed(self) -> None:
        """The connection failed (before the head, or while reading the body), or timed out."""
        if self._told:  # its head was counted ok or not: the body broke after it
            self._endpoint.counters.errors += 1
        self._tell(False)
        self.release()

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._endpoint.counters.outstanding -= 1

    def _tell(self, ok: bool) -> None:
        if self._told:
            return
        self._told = True
        if not ok:
            self._endpoint.counters.errors += 1
        self._chooser.done(self._endpoint.url, ok, self._timer() - self._started)


class TrackedStream(httpx2.AsyncByteStream):
    """A streamed response body that releases its attempt when it ends, fails or is closed."""

    def __init__(self, stream: httpx2.SyncByteStream | httpx2.AsyncByteStream, attempt: EndpointAttempt) -> None:
        assert isinstance(stream, httpx2.AsyncByteStream)
        self._stream, self._attempt = stream, attempt

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._stream:
                yield chunk
        except httpx2.TransportError:
            self._attempt.failed()
            raise
        finally:
            self._attempt.release()

    async def aclose(self) -> None:
        try:
            await self._stream.aclose()
        finally:
            self._attempt.release()
