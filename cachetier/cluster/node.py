"""A node's view of the cluster (D3N's L2 across cache nodes): membership, the peer client,
and what the read and write paths ask of the others.

- ``owners`` / ``suspect``: where a block's L2 copy lives (``cachetier.cluster.membership``).
- ``fetch_block``: one block from a peer owner, as it arrives (``cachetier.cluster.client``).
- ``broadcast_invalidate``: a write on this node reaches every live peer before the write is
  acknowledged, so no node serves the old version after the client saw the new one. A peer
  that does not answer in time is logged and counted; it re-validates by TTL.
- ``heartbeat_round``: one round of heartbeats to every seed and known peer; the loop that
  calls it every ``heartbeat_interval`` lives in ``gateway.loops.membership``.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from urllib.parse import urlsplit

from cachetier.lake import ObjectInfo
from cachetier.cluster.membership import Membership
from cachetier.cluster.client import Peers, PeerUnavailable
from cachetier.cluster.ring import Member
from cachetier.telemetry.snapshots import RingReport

log = logging.getLogger("lakegate.cluster")

# counter name -> help text (exported as lakegate_cluster_<name>_total)
CLUSTER_COUNTERS = {
    "peer_fetch_failures": "block fetches from a peer that failed (the block came from elsewhere)",
    "peer_served": "blocks served to peers from this node's L2 (or fetched for them)",
    "peer_served_bytes": "bytes of blocks served to peers",
    "invalidations_sent": "invalidations sent to peers",
    "invalidation_failures": "invalidations a peer did not acknowledge",
    "invalidations_received": "invalidations received from peers",
    "heartbeat_failures": "heartbeats a peer did not answer",
}


class Cluster:
    def __init__(
        self,
        membership: Membership,
        client: Peers,
        *,
        seeds: list[tuple[str | None, str]],
        dns: str | None = None,
    ) -> None:
        self.membership = membership
        self.client = client
        self.me = membership.me
        self.seeds = [url for _, url in seeds if url.rstrip("/") != self.me.url]
        self.dns = dns
        self.heartbeat_interval = membership.config.heartbeat_interval
        self.counters: Counter[str] = Counter()

    # ---- the read path ----------------------------------------------------------------------

    def owners(self, bucket: str, key: str, index: int) -> tuple[Member, ...]:
        return self.membership.owners(bucket, key, index)

    def suspect(self, member: Member) -> None:
        self.counters["peer_fetch_failures"] += 1
        self.membership.suspect(member.id)

    def fetch_block(
        self, member: Member, info: ObjectInfo, index: int, block_size: int, tenant: str
    ) -> AsyncIterator[bytes]:
        """(Blocks and bytes fetched from peers are counted per tenant by the read path.)"""
        return self.client.fetch_block(member, info, index, block_size, tenant)

    # ---- the write path ---------------------------------------------------------------------

    async def broadcast_invalidate(self, bucket: str, keys: list[str] | None) -> None:
        """Tell every live peer to forget ``keys`` of ``bucket`` (None: the bucket's metadata);
        returns when all answered or timed out."""
        peers = self.membership.peers()
        if not peers:
            return
        timeout = max(self.heartbeat_interval, 1.0)
        results = await asyncio.gather(
            *(self.client.invalidate(m, bucket, keys, timeout) for m in peers), return_exceptions=True
        )
        self.counters["invalidations_sent"] += len(peers)
        for member, result in zip(peers, results):
            if isinstance(result, BaseException):
                self.counters["invalidation_failures"] += 1
                log.warning("invalidation in %s not acknowledged by %s: %s", bucket, member.id, result)

    # ---- membership -------------------------------------------------------------------------

    async def heartbeat_round(self, load: Mapping[str, float]) -> None:
        """Heartbeat every seed and every peer heard from; then expire the silent ones."""
        urls = list(dict.fromkeys([*self.seeds, *await self._dns_seeds(), *(m.url for m in self.membership.known())]))
        timeout = max(self.heartbeat_interval, 0.5)
        results = await asyncio.gather(*(self.client.heartbeat(u, load, timeout) for u in urls), return_exceptions=True)
        for url, result in zip(urls, results):
            if isinstance(result, PeerUnavailable):
                self.counters["heartbeat_failures"] += 1
                log.debug("heartbeat to %s failed: %s", url, result)
            elif isinstance(result, BaseException):
                raise result
            else:
                if self.membership.heard_from(result.member, dict(result.load)):
                    self._log_ring()
        if self.membership.tick():
            self._log_ring()

    def heard_from(self, member: Member, load: Mapping[str, float]) -> None:
        """A peer's heartbeat arrived (the peer API calls this)."""
        if self.membership.heard_from(member, dict(load)):
            self._log_ring()

    def _log_ring(self) -> None:
        ring = self.membership.ring
        log.info("ring %s: live %s", ring.version, ", ".join(m.id for m in self.membership.live()))

    async def _dns_seeds(self) -> list[str]:
        """The peers' URLs from the A records of ``dns`` (NAME:PORT), looked up every round."""
        if self.dns is None:
            return []
        name, _, port = self.dns.rpartition(":")
        scheme = urlsplit(self.me.url).scheme or "http"
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(name, int(port), type=socket.SOCK_STREAM)
        except OSError as exc:
            log.warning("peers: DNS lookup of %s failed: %s", name, exc)
            return []
        hosts = sorted({str(info[4][0]) for info in infos})
        return [f"{scheme}://{f'[{h}]' if ':' in h else h}:{port}" for h in hosts]

    def counter_values(self) -> dict[str, int]:
        return {n: self.counters[n] for n in CLUSTER_COUNTERS}

    def snapshot(self) -> dict[str, object]:
        return {**self.membership.snapshot(), "counters": self.counter_values()}

    def ring_report(self) -> RingReport:
        membership = self.membership
        return RingReport(
            live_members=len(membership.live()),
            ring_changes=membership.generation,
            node_id=self.me.id,
            ring_version=membership.ring.version,
            partitions_owned=membership.ring.share().get(self.me.id, 0),
        )

    async def aclose(self) -> None:
        await self.client.aclose()
