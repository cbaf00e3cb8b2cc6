"""The receiving side of the fairness leader's messages (issue 12: weight allocation and
partition placement), as ``owner`` is for blocks: ``gateway.peerapi`` routes POST reports,
weights and partitions here, the in-memory twin (``cachetier.cluster.memory``) calls it
directly, and the leader's own loops (``gateway.loops.allocation``, ``gateway.loops.placement``)
deliver to their node through it too, so every node, the leader included, applies an update the
same way.

- ``reports``: this node's ``DemandReport``, from its ``FairnessPeer``.
- ``weights``: applied (``FairnessPeer.apply_weights``) only when ``Cluster.admit`` takes it:
  sent by the leader this node sees, newer than the last from that leader.
- ``partitions``: admitted the same way, then applied to the ring (``Cluster.apply_table``: only
  if it was planned on this node's ring), then ``FairnessPeer.apply_partitions`` hears of it.

An update ignored is acknowledged all the same (the leader's next round sends a fresh one); it
is counted (``updates_ignored``, ``partition_tables_refused``).
"""

from __future__ import annotations

from typing import Protocol

from cachetier.cluster import wire
from cachetier.cluster.node import Cluster


class FairnessPeer(Protocol):
    """What this node's fairness state (fair queuing, its telemetry) gives the cluster's loops."""

    async def report(self, request: wire.ReportsRequest) -> wire.DemandReport:
        """This node's demand over the last ``request.window_s`` seconds."""
        ...

    async def apply_weights(self, update: wire.WeightsUpdate, sender: str) -> None:
        """Use the leader's local weights, lake share and limits (already admitted)."""
        ...

    async def apply_partitions(self, update: wire.PartitionsUpdate, sender: str) -> None:
        """The ring now uses the leader's table (already applied; for the node's own accounts)."""
        ...


class Follower:
    """This node as the fairness leader sees it (the leader itself included)."""

    def __init__(self, cluster: Cluster, peer: FairnessPeer) -> None:
        self.cluster = cluster
        self.peer = peer

    async def reports(self, message: wire.ReportsRequest, sender: str) -> wire.DemandReport:
        return await self.peer.report(message)

    async def weights(self, message: wire.WeightsUpdate, sender: str) -> wire.Acknowledged:
        if self.cluster.admit(message, sender):
            await self.peer.apply_weights(message, sender)
        return wire.Acknowledged()

    async def partitions(self, message: wire.PartitionsUpdate, sender: str) -> wire.Acknowledged:
        if self.cluster.admit(message, sender) and self.cluster.apply_table(message):
            await self.peer.apply_partitions(message, sender)
        return wire.Acknowledged()
