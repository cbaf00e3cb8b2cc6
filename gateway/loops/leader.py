"""What the fairness leader's loops (``allocation``, ``placement``) share: whether this node
leads, the epochs of its rounds, one round's demand reports from every live node (this one
asked locally), and each node's update delivered (this one's locally, through the same
``Follower`` that the peer API routes to, so the leader applies its own update as every node
does).

The leader is the live node with the smallest id in this node's view
(``Membership.leader``): a node that sees itself so runs the rounds, every other node skips
them. When the leader leaves the ring the next smallest id takes over at its next round; until
every node sees the same live set two nodes may both lead for a moment, and each receiver
applies only the updates of the leader it sees.

Several workers per node (``gateway.workers``): every worker of the leader's node is the
same member, so each would lead; the loops are meant to run in one worker of a node only. A
peer's POST reaches one worker of the receiving node, while weights and the ring's table are
node-level: the receiving node must pass what its ``FairnessPeer`` and ``Cluster.apply_table``
are given to its other workers (or keep that state where they all read it), else its workers
disagree. Until then, the placement loop sends its table again at each round in which some
report (from whichever worker answered) shows another ring than the leader's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping

from cachetier.cluster import wire
from cachetier.cluster.follower import Follower
from cachetier.cluster.node import Cluster, Update

log = logging.getLogger("lakegate.fairness")


def leads(cluster: Cluster) -> bool:
    return cluster.membership.leader().id == cluster.me.id


def next_epoch(last: int, now: float) -> int:
    """The epoch of a leader's next round: growing within a run, and across a restart as long as
    the wall clock does (milliseconds), so receivers never take a restarted leader's for stale."""
    return max(last + 1, int(now * 1000))


async def gather_reports(cluster: Cluster, follower: Follower, window_s: float, timeout: float
                         ) -> dict[str, wire.DemandReport]:
    """Every live node's demand report, by node id, this node's first; a peer that does not
    answer within ``timeout`` seconds is left out (and counted, ``reports_missed``)."""
    request = wire.ReportsRequest(window_s)
    own, peers = await asyncio.gather(follower.reports(request, cluster.me.id), cluster.gather_reports(request, timeout))
    return {cluster.me.id: own, **peers}


async def deliver(cluster: Cluster, follower: Follower, updates: Mapping[str, Update], timeout: float) -> None:
    """Each live node's update from ``updates`` (node id -> update); this node's applied here."""
    live = {m.id: m for m in cluster.membership.peers()}
    sends = [cluster.send_update(live[node], update, timeout) for node, update in updates.items() if node in live]
    own = updates.get(cluster.me.id)
    if isinstance(own, wire.WeightsUpdate):
        await follower.weights(own, cluster.me.id)
    elif isinstance(own, wire.PartitionsUpdate):
        await follower.partitions(own, cluster.me.id)
    await asyncio.gather(*sends)


async def every(interval: float, one_round: Callable[[], Awaitable[None]], name: str) -> None:
    """Forever: ``one_round``, then sleep out the rest of ``interval`` (a failed round is logged)."""
    loop = asyncio.get_running_loop()
    while True:
        started = loop.time()
        try:
            await one_round()
        except Exception:  # noqa: BLE001 - the loop must outlive any one round
            log.exception("%s round failed", name)
        await asyncio.sleep(max(0.0, interval - (loop.time() - started)))
