"""The receiving side of the peer API: what this node does with each decoded wire message, as
the owner of its L2 blocks and a member of the cluster. ``gateway.peerapi`` routes HTTP requests
here; the in-memory twin (``cachetier.cluster.memory``) calls it directly.

- ``heartbeat``: the sender joins (or stays in) this node's view; the answer names this node.
- ``invalidate``: forget the keys' metadata and blocks, so no stale version is served.
- ``block``: one block from this node's L2 (or L1), else fetched once from the lake and kept in
  L2 (``ReadPath.serve_block``); never from another peer, so a block is one hop from its owner.

Everything the owner acts on, the message and the sender's id and the block's tenant with it,
was covered by the sender's HMAC and its nonce seen once (``cachetier.cluster.wire``), checked by
the peer API before it calls here.

Errors are typed, and the peer API gives each its status: ``WrongBlockSize`` (409),
``PreconditionFailed`` / ``NoSuchKey`` (412: the object is not the version asked for) and any
other ``S3Error`` (503: the lake failed).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from cachetier.cluster import wire
from cachetier.cluster.node import Cluster
from cachetier.context import RequestContext, current
from cachetier.lake import ObjectInfo

log = logging.getLogger("lakegate.peer")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)  # a block request carries no Last-Modified; none is needed


class WrongBlockSize(Exception):
    """A block request for another block size than this node's (the cluster is misconfigured)."""


class BucketMetadata(Protocol):
    def invalidate_bucket(self, bucket: str) -> None: ...


class LocalReads(Protocol):
    """What the owner needs of this node's read path (``cachetier.read.path.ReadPath``)."""

    @property
    def block_size(self) -> int: ...

    @property
    def meta(self) -> BucketMetadata: ...

    def invalidate(self, bucket: str, key: str) -> None: ...

    def serve_block(
        self, info: ObjectInfo, index: int, cached: Callable[[bool], None] | None = None
    ) -> AsyncIterator[bytes]: ...


@dataclass(frozen=True)
class ServedBlock:
    """A block being served: its answer's metadata, then its bytes (the first already in, so
    a failure before them was an error answer rather than a cut body)."""

    answer: wire.BlockAnswer
    pieces: AsyncGenerator[bytes, None]


class Owner:
    """This node as its peers see it. ``load`` is what heartbeat answers carry."""

    def __init__(self, cluster: Cluster, reads: LocalReads, load: Callable[[], Mapping[str, float]],
                 anomalies: Callable[[], tuple[wire.AnomalyReport, ...]] = tuple) -> None:
        self.cluster = cluster
        self.reads = reads
        self.load = load
        self.anomalies = anomalies  # this node's current reports, for heartbeat answers

    async def heartbeat(self, message: wire.Heartbeat, sender: str) -> wire.HeartbeatAnswer:
        self.cluster.heard_from(message.member, message.load, message.anomalies)
        return wire.HeartbeatAnswer(self.cluster.me, dict(self.load()), self.cluster.membership.ring.version,
                                    self.anomalies())

    async def invalidate(self, message: wire.Invalidate, sender: str) -> wire.Acknowledged:
        if message.keys is None:
            self.reads.meta.invalidate_bucket(message.bucket)
        else:
            for key in message.keys:
                self.reads.invalidate(message.bucket, key)
        self.cluster.counters["invalidations_received"] += 1
        log.debug("peer %s invalidated %s %s", sender, message.bucket,
                  "(bucket)" if message.keys is None else len(message.keys))
        return wire.Acknowledged()

    async def block(self, message: wire.BlockRequest, sender: str) -> ServedBlock:
        """The block asked for, once its first bytes are in (or the typed error that stopped them)."""
        if message.block_size != self.reads.block_size:
            raise WrongBlockSize(f"block size {message.block_size} differs from this node's {self.reads.block_size}")
        current.set(RequestContext(tenant=message.tenant))
        info = ObjectInfo(message.bucket, message.key, message.size, message.etag, _EPOCH)
        source: list[bool] = []
        pieces = self.reads.serve_block(info, message.index, source.append)
        first = await anext(pieces)
        return ServedBlock(wire.BlockAnswer(message.length, source[0] if source else None), self._counted(first, pieces))

    async def _counted(self, first: bytes, pieces: AsyncIterator[bytes]) -> AsyncGenerator[bytes, None]:
        """``first`` and the rest of ``pieces``, counted as served once all were taken."""
        sent = 0
        try:
            yield first
            sent = len(first)
            async for piece in pieces:
                yield piece
                sent += len(piece)
        finally:
            await pieces.aclose()  # type: ignore[attr-defined]
        self.cluster.counters["peer_served"] += 1
        self.cluster.counters["peer_served_bytes"] += sent
