"""Membership (D3N): which cache nodes are alive, and the ring over them.

Every node sends a heartbeat to every peer about once a second and answers theirs; hearing
from a node, either way, proves it alive. A node not heard from for ``failure_timeout``
seconds has failed and leaves the ring; when it is heard from again it rejoins. Each change
of the live set plans a new ring (``cachetier.cluster.ring.plan``, over ``policies.placement``),
the same on every node that sees the same members.

This is the state and the failure detector only, with the clock passed in: the loop that
sends heartbeats over HTTP lives in ``cachetier.cluster.client`` (``PeerClient``) and
``gateway.loops.membership``.

The leader of the cluster's control loops (fairness: weight allocation and partition
placement) is the live node with the smallest id, in each node's own view (``leader``): when
it leaves the ring the next smallest takes over, with no election. The placement loop may
replace the ring's table with its own (``apply_table``): the override holds while the members
stay those it was planned on, and a change of the live set drops it (back to the
consistent-hash plan of the new members) until the leader sends a table for them.

A node that shuts down says goodbye (``goodbye``; SIGTERM's drain, ``gateway.drain``): it leaves
every peer's ring at once instead of after the failure timeout, and stays out until it is heard
from again after ``failure_timeout`` seconds, so a late heartbeat of one of its draining workers
(sent before the goodbye, or by another worker of the node) does not bring it back; a node that
restarts is heard from again after that and rejoins.

Seeds are URLs, with or without a node id (``id=url``, or addresses from DNS): a node's id is
learned from its heartbeat, so a Kubernetes headless service's A records are enough. A
request to a peer that fails marks it *suspect* for a short while: lookups skip it (the
caller tries the next owner or the lake) without changing the ring, which only heartbeats
decide. Which owners a lookup returns is ``policies.selection``'s decision, from each peer's
health as this node last saw it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from cachetier.cluster.config import MembershipConfig
from cachetier.cluster.ring import Member, PartitionMap, plan
from cachetier.cluster.wire import AnomalyReport
from policies import selection


@dataclass
class _Peer:
    member: Member
    last_heard: float
    load: dict[str, float] | None = None
    anomalies: tuple[AnomalyReport, ...] = ()  # its last heartbeat's (MicroMon, issue 15)


class Membership:
    def __init__(
        self,
        me: Member,
        config: MembershipConfig = MembershipConfig(),
        *,
        clock: Callable[[], float],
    ) -> None:
        self.me = me
        self.config = config
        self.partitions = config.partitions
        self.replicas = config.replicas
        self.failure_timeout = config.failure_timeout
        self.suspect_for = config.heartbeat_interval  # a failed peer is skipped until its next heartbeat
        self.clock = clock
        self._peers: dict[str, _Peer] = {}
        self._health: dict[str, selection.PeerHealth] = {}  # peers not here are healthy
        self._live: frozenset[str] = frozenset()
        self._left: dict[str, float] = {}  # node id -> when it said goodbye (out of the ring, for a while)
        self.planned: PartitionMap = plan([me], self.partitions, self.replicas)  # the members' own plan
        self.ring: PartitionMap = self.planned  # what lookups use: the plan, or the leader's table on it
        self.generation = 1  # rings planned so far (a counter for metrics)
        self.changes: list[tuple[float, str, str]] = []  # (time, "join"/"leave", node id), recent

    # ---- what the heartbeat loop reports ----------------------------------------------------

    def heard_from(self, member: Member, load: dict[str, float] | None = None,
                   anomalies: tuple[AnomalyReport, ...] | None = None) -> bool:
        """``member`` answered or sent a heartbeat just now (with its ``anomalies``; None: not
        said). True when the ring changed."""
        if member.id == self.me.id:
            return False
        now = self.clock()
        left = self._left.get(member.id)
        if left is not None:
            if now - left < self.failure_timeout:
                return False  # a late heartbeat of a node that said goodbye
            del self._left[member.id]  # heard from again: it restarted
        peer = self._peers.get(member.id)
        if peer is None:
            self._peers[member.id] = _Peer(member, now, load=load, anomalies=anomalies or ())
        else:
            peer.member, peer.last_heard = member, now
            peer.load = load if load is not None else peer.load
            peer.anomalies = anomalies if anomalies is not None else peer.anomalies
        self._health.pop(member.id, None)
        return self._replan()

    def goodbye(self, member: Member) -> bool:
        """``member`` said goodbye (it is shutting down): out of the ring now, and heartbeats of it
        within ``failure_timeout`` are ignored. True when the ring changed."""
        if member.id == self.me.id:
            return False
        now = self.clock()
        self._left[member.id] = now
        if member.id not in self._peers:
            self._peers[member.id] = _Peer(member, now - self.failure_timeout)  # known, not live
        return self._replan()

    def tick(self) -> bool:
        """Expire members not heard from within the failure timeout. True when the ring changed."""
        return self._replan()

    def suspect(self, node_id: str) -> None:
        """A request to ``node_id`` failed: skip it in lookups until it is heard from again
        (at most ``suspect_for`` seconds)."""
        if node_id in self._peers:
            self._health[node_id] = selection.suspected(self.clock(), self.suspect_for)

    # ---- what the read path asks ------------------------------------------------------------

    def owners(self, bucket: str, key: str, index: int) -> tuple[Member, ...]:
        """The block's owners by the current ring, primary first, less suspects."""
        owners = self.ring.owners(bucket, key, index)
        if not self._health or (len(owners) == 1 and owners[0].id == self.me.id):
            return owners  # no suspects: no clock read, no copy
        usable = selection.usable([m.id for m in owners], self._health, self.clock(), me=self.me.id)
        return tuple(m for m in owners if m.id in usable)

    def live(self) -> list[Member]:
        """Live members, this node included, by id."""
        return sorted([self.me, *(self._peers[i].member for i in self._live)], key=lambda m: m.id)

    def peers(self) -> list[Member]:
        """Live members other than this node."""
        return [self._peers[i].member for i in sorted(self._live)]

    def leader(self) -> Member:
        """The node that runs the cluster's control loops: the live one with the smallest id."""
        return min(self.live(), key=lambda m: m.id)

    def anomalies(self, node_id: str) -> tuple[AnomalyReport, ...]:
        """A live peer's anomaly reports, as its last heartbeat said (none for others)."""
        peer = self._peers.get(node_id)
        return peer.anomalies if peer is not None and node_id in self._live else ()

    def known(self) -> list[Member]:
        """Every peer ever heard from, live or not."""
        return [p.member for p in self._peers.values()]

    def snapshot(self) -> dict[str, object]:
        now = self.clock()
        return {
            "node_id": self.me.id,
            "ring_version": self.ring.version,
            "ring_generation": self.generation,
            "live": [m.id for m in self.live()],
            "peers": {
                p.member.id: {
                    "url": p.member.url,
                    "alive": p.member.id in self._live,
                    "heard_ago_s": round(now - p.last_heard, 3),
                    "said_goodbye": p.member.id in self._left,
                    "suspect": self._health.get(p.member.id, selection.HEALTHY).suspect_until > now,
                    "load": p.load,
                    "anomalies": [a.to_list() for a in p.anomalies],
                }
                for p in self._peers.values()
            },
            "partitions_owned": self.ring.share().get(self.me.id, 0),
            "leader": self.leader().id,
            "table_override": self.ring is not self.planned,
        }

    # ---- the placement loop's table ---------------------------------------------------------

    def apply_table(self, base_version: str, table: Iterable[Iterable[str]]) -> PartitionMap | None:
        """Use ``table`` over the members, if it was planned on the plan this node has
        (``base_version``): the ring it replaces, or None when it does not fit (another plan,
        another partition count, an owner that is not a member)."""
        if base_version != self.planned.version:
            return None
        try:
            ring = self.planned.with_table(table)
        except ValueError:
            return None
        before, self.ring = self.ring, (self.planned if ring.table == self.planned.table else ring)
        return before

    # ---- the ring follows the live set ------------------------------------------------------

    def _replan(self) -> bool:
        now = self.clock()
        live = frozenset(i for i, p in self._peers.items()
                         if now - p.last_heard < self.failure_timeout and i not in self._left)
        members = [self.me, *(self._peers[i].member for i in live)]
        if live == self._live and all(self.planned.members.get(m.id) == m for m in members):
            return False
        for node in live - self._live:
            self._note(now, "join", node)
        for node in self._live - live:
            self._note(now, "leave", node)
        self._live = live
        self.planned = self.ring = plan(members, self.partitions, self.replicas)  # any override dropped
        self.generation += 1
        return True

    def _note(self, now: float, change: str, node: str) -> None:
        self.changes.append((now, change, node))
        del self.changes[:-100]


def parse_peers(spec: str) -> tuple[list[tuple[str | None, str]], str | None]:
    """``LAKEGATE_PEERS`` -> (seeds as (id or None, url), DNS name to resolve or None).

    ``node2=http://10.0.0.2:9000,node3=http://10.0.0.3:9000`` (ids known), ``http://h:9000,...``
    (ids learned), or ``dns:NAME:PORT`` (the A records of NAME, e.g. a headless service)."""
    spec = spec.strip()
    if spec.startswith("dns:"):
        name, sep, port = spec[4:].rpartition(":")
        if not sep or not name or not port.isdigit():
            raise ValueError(f"peers dns:NAME:PORT expected, got {spec!r}")
        return [], f"{name}:{port}"
    seeds: list[tuple[str | None, str]] = []
    for item in filter(None, (part.strip() for part in spec.split(","))):
        node_id, sep, url = item.partition("=")
        if not sep:
            node_id, url = "", item
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"a peer must be [id=]http(s)://host:port, got {item!r}")
        seeds.append((node_id or None, url.rstrip("/")))
    return seeds, None
