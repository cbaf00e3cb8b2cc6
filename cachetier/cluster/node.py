"""A node's view of the cluster (D3N's L2 across cache nodes): membership, the peer client,
and what the read and write paths ask of the others.

- ``owners`` / ``suspect``: where a block's L2 copy lives (``cachetier.cluster.membership``).
- ``fetch_block``: one block from a peer owner, as it arrives (``cachetier.cluster.client``).
- ``broadcast_invalidate``: a write on this node reaches every live peer before the write is
  acknowledged, so no node serves the old version after the client saw the new one. A peer
  that does not answer in time is logged and counted; it re-validates by TTL.
- ``admit`` / ``apply_table``: the receiving side of the fairness leader's updates (weights,
  partition tables): applied only from the leader this node sees, newer than the last one.
- ``gather_reports`` / ``send_update``: the leader's side, to every live peer.
- ``heartbeat_round``: one round of heartbeats to every seed and known peer; the loop that
  calls it every ``heartbeat_interval`` lives in ``gateway.loops.membership``. ``joined``: the
  first round has completed, so the node knows the live set (the readiness probe's "ring").
- ``leave`` / ``said_goodbye``: a node shutting down tells every live peer to drop it from the
  ring at once (``wire.Goodbye``), and a peer's goodbye is applied here.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping
from urllib.parse import urlsplit

from cachetier.lake import ObjectInfo
from cachetier.cluster import wire
from cachetier.cluster.membership import Membership
from cachetier.cluster.client import Answered, Peers, PeerUnavailable
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
    "goodbyes_sent": "goodbyes this node sent to live peers as it shut down (acknowledged)",
    "goodbyes_received": "goodbyes of peers shutting down, each dropping the peer from the ring at once",
    "updates_ignored": "weight or partition updates ignored: not from the leader this node sees, or not newer",
    "partition_tables_applied": "partition tables of the leader applied to this node's ring",
    "partition_tables_refused": "partition tables not planned on this node's ring (another live set)",
    "partitions_moved": "partitions whose owners a leader's table changed (the new owner fills them from the lake)",
    "reports_missed": "demand reports a peer did not give this node as the leader",
    "updates_unacknowledged": "weight or partition updates a peer did not acknowledge",
}
Update = wire.WeightsUpdate | wire.PartitionsUpdate


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
        self._applied: dict[type[Update], tuple[str, int]] = {}  # the last update's (leader, epoch), by kind
        self.rounds = 0  # heartbeat rounds completed
        self.goodbye_heard: Callable[[Member], None] | None = None  # told of each goodbye received (workers)

    # ---- the read path ----------------------------------------------------------------------

    def owners(self, bucket: str, key: str, index: int) -> tuple[Member, ...]:
        return self.membership.owners(bucket, key, index)

    def suspect(self, member: Member) -> None:
        self.counters["peer_fetch_failures"] += 1
        self.membership.suspect(member.id)

    def fetch_block(
        self, member: Member, info: ObjectInfo, index: int, block_size: int, tenant: str,
        answered: Answered | None = None,
    ) -> AsyncIterator[bytes]:
        """(Blocks and bytes fetched from peers are counted per tenant by the read path.)"""
        return self.client.fetch_block(member, info, index, block_size, tenant, answered)

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

    # ---- the fairness leader's updates ------------------------------------------------------

    def admit(self, update: Update, sender: str) -> bool:
        """Whether to apply ``update``: sent by the leader it names, the one this node sees, and
        newer than the last of its kind from that leader. Else it is counted and ignored (its
        sender still gets its acknowledgement: it is not the sender's to retry)."""
        leader = self.membership.leader().id
        last = self._applied.get(type(update))
        newer = last is None or last[0] != update.leader or update.epoch > last[1]
        if not (sender == update.leader == leader and newer):
            self.counters["updates_ignored"] += 1
            log.info("%s from %s (leader %s, epoch %d) ignored: this node's leader is %s%s", type(update).__name__,
                     sender, update.leader, update.epoch, leader, "" if newer else ", and it is not newer")
            return False
        self._applied[type(update)] = (update.leader, update.epoch)
        return True

    def apply_table(self, update: wire.PartitionsUpdate) -> bool:
        """Use the leader's partition table (once admitted), if it was planned on this node's ring;
        the partitions it moves are counted, their blocks fetched again by their new owners."""
        before = self.membership.apply_table(update.base_version, update.table)
        if before is None:
            self.counters["partition_tables_refused"] += 1
            log.info("partition table of %s planned on ring %s, not on this node's %s", update.leader,
                     update.base_version, self.membership.planned.version)
            return False
        self.counters["partition_tables_applied"] += 1
        moved = sum(old != new for old, new in zip(before.table, self.membership.ring.table))
        if moved:
            self.counters["partitions_moved"] += moved
            self._log_ring()
        return True

    async def gather_reports(self, request: wire.ReportsRequest, timeout: float) -> dict[str, wire.DemandReport]:
        """Every live peer's demand report, by node id; a peer that gives none in ``timeout``
        seconds (or another node's) is counted and left out."""
        peers = self.membership.peers()
        results = await asyncio.gather(*(self.client.report(m, request, timeout) for m in peers), return_exceptions=True)
        reports = {}
        for member, result in zip(peers, results):
            if isinstance(result, wire.DemandReport) and result.node == member.id:
                reports[member.id] = result
            elif isinstance(result, (PeerUnavailable, wire.DemandReport)):
                self.counters["reports_missed"] += 1
                log.info("no demand report from %s: %s", member.id, result)
            else:
                raise result
        return reports

    async def send_update(self, member: Member, update: Update, timeout: float) -> bool:
        """``update`` to peer ``member``; False (counted) when it did not acknowledge."""
        try:
            await self.client.update(member, update, timeout)
        except PeerUnavailable as exc:
            self.counters["updates_unacknowledged"] += 1
            log.info("%s not acknowledged by %s: %s", type(update).__name__, member.id, exc)
            return False
        return True

    # ---- membership -------------------------------------------------------------------------

    async def heartbeat_round(self, load: Mapping[str, float], anomalies: tuple[wire.AnomalyReport, ...] = ()) -> None:
        """Heartbeat every seed and every peer heard from, with this node's ``anomalies``; then
        expire the silent ones."""
        urls = list(dict.fromkeys([*self.seeds, *await self._dns_seeds(), *(m.url for m in self.membership.known())]))
        timeout = max(self.heartbeat_interval, 0.5)
        results = await asyncio.gather(*(self.client.heartbeat(u, load, timeout, anomalies) for u in urls),
                                       return_exceptions=True)
        for url, result in zip(urls, results):
            if isinstance(result, PeerUnavailable):
                self.counters["heartbeat_failures"] += 1
                log.debug("heartbeat to %s failed: %s", url, result)
            elif isinstance(result, BaseException):
                raise result
            else:
                if self.membership.heard_from(result.member, dict(result.load), result.anomalies):
                    self._log_ring()
        if self.membership.tick():
            self._log_ring()
        self.rounds += 1

    @property
    def joined(self) -> bool:
        """Whether this node knows the live set: its first heartbeat round has completed (a node
        whose peers are all down has joined too, alone on its ring)."""
        return self.rounds > 0

    async def leave(self, timeout: float) -> None:
        """Say goodbye to every live peer (this node is shutting down), so each drops it from its
        ring now; returns when all answered or ``timeout`` passed. A peer that does not answer
        drops this node by its failure timeout instead."""
        peers = self.membership.peers()
        results = await asyncio.gather(*(self.client.goodbye(m, timeout) for m in peers), return_exceptions=True)
        for member, result in zip(peers, results):
            if isinstance(result, PeerUnavailable):
                log.info("goodbye not acknowledged by %s: %s", member.id, result)
            elif isinstance(result, BaseException):
                raise result
            else:
                self.counters["goodbyes_sent"] += 1
        log.info("left the ring: goodbye to %s", ", ".join(m.id for m in peers) or "no live peer")

    def said_goodbye(self, member: Member) -> None:
        """A peer's goodbye arrived (the peer API calls this): it leaves the ring now, and
        ``goodbye_heard`` tells this node's other workers."""
        self.counters["goodbyes_received"] += 1
        log.info("%s said goodbye", member.id)
        self.apply_goodbye(member)
        if self.goodbye_heard is not None:
            self.goodbye_heard(member)

    def apply_goodbye(self, member: Member) -> None:
        """``member`` leaves this process's ring (its goodbye reached this worker or another of the node)."""
        if self.membership.goodbye(member):
            self._log_ring()

    def heard_from(self, member: Member, load: Mapping[str, float],
                   anomalies: tuple[wire.AnomalyReport, ...] | None = None) -> None:
        """A peer's heartbeat arrived (the peer API calls this)."""
        if self.membership.heard_from(member, dict(load), anomalies):
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
