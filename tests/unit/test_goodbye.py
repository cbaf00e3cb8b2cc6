"""Issue 16's shutdown pieces, pure: a goodbye takes a node out of the ring at once and keeps it
out for a failure timeout (a simulated clock); the wire message round trip; ``Cluster.leave``
over the in-memory peers; ``joined`` after the first heartbeat round; the drain and the
readiness answer (lake check cached), an S3 lake reachable when it answers anything; the
shutdown settings and the supervisor's grace."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from doubles import B, Clock, memory_lake, nodes

from cachetier.cluster import wire
from cachetier.cluster.config import MembershipConfig
from cachetier.cluster.membership import Membership
from cachetier.cluster.ring import Member
from cachetier.errors import AccessDenied, ServiceUnavailable
from cachetier.lake import BucketInfo
from cachetier.lake.memory import MemoryLake
from gateway.drain import Drain, SharedGoodbyes, supervisor_grace
from gateway.health import Readiness, lake_probe
from gateway.settings import Settings, SettingsError

TIMEOUT = 3.0
A, C = Member("a", "http://a:9000"), Member("c", "http://c:9000", 2.0)


def view(clock: Clock) -> Membership:
    return Membership(A, MembershipConfig(64, 1, heartbeat_interval=1.0, failure_timeout=TIMEOUT), clock=clock)


def test_a_goodbye_drops_the_node_now_and_its_late_heartbeats_for_a_failure_timeout() -> None:
    clock = Clock()
    membership = view(clock)
    membership.heard_from(C)
    with_c = membership.ring.version
    assert membership.goodbye(C) is True
    assert membership.peers() == [] and membership.ring.share() == {"a": 64}
    assert membership.changes[-1][1:] == ("leave", "c")
    clock.now += TIMEOUT - 0.01
    assert membership.heard_from(C) is False and membership.peers() == []  # a draining worker's late one
    assert membership.snapshot()["peers"]["c"]["said_goodbye"] is True  # type: ignore[index]
    clock.now += 0.02
    assert membership.heard_from(C) is True  # heard from after the failure timeout: it restarted
    assert membership.peers() == [C] and membership.ring.version == with_c
    assert membership.tick() is False


def test_a_goodbye_of_an_unknown_node_keeps_it_out_too() -> None:
    clock = Clock()
    membership = view(clock)
    assert membership.goodbye(C) is False  # the ring did not change
    assert membership.heard_from(C) is False and membership.peers() == []
    assert membership.goodbye(A) is False and membership.live() == [A]  # never itself


def test_the_goodbye_message_round_trips_and_refuses_a_malformed_body() -> None:
    message = wire.Goodbye(C)
    assert wire.Goodbye.from_json(message.to_json()) == message
    for body in (b"[]", b'{"url": "http://c:9000"}', b"not json"):
        with pytest.raises(wire.WireError):
            wire.Goodbye.from_json(body)


def test_leaving_tells_every_live_peer_which_drop_the_node_and_count_it() -> None:
    cluster = nodes(memory_lake(B), 3)
    leaving, others = cluster[0], cluster[1:]

    leaving.peers.down.add("n2")  # n2 answers nothing: n0's goodbye to it is not acknowledged
    asyncio.run(leaving.cluster.leave(1.0))
    assert [m.id for m in others[0].membership.live()] == ["n1", "n2"]
    assert others[0].cluster.counters["goodbyes_received"] == 1
    assert leaving.cluster.counters["goodbyes_sent"] == 1  # n1's; n2 was down
    assert "n0" in [m.id for m in others[1].membership.live()]  # the one it could not tell


def test_a_cluster_has_joined_once_its_first_heartbeat_round_completed() -> None:
    (node,) = nodes(memory_lake(B), 1)
    assert node.cluster.joined is False
    asyncio.run(node.cluster.heartbeat_round({}))  # no peer answers: alone on its ring, joined
    assert node.cluster.joined is True


def test_the_drain_wakes_its_waiters_once() -> None:
    drain = Drain(clock=lambda: 7.0)

    async def main() -> None:
        waiter = asyncio.create_task(drain.wait())
        await asyncio.sleep(0)
        assert not waiter.done()
        drain.start()
        drain.start()
        await asyncio.wait_for(waiter, 5)
        await drain.wait()  # started: at once

    assert drain.draining is False
    asyncio.run(main())
    assert drain.draining is True and drain.since == 7.0


def test_readiness_names_each_failed_condition_and_caches_the_lake_check() -> None:
    clock = Clock()
    checks: list[float] = []
    answer: list[str | None] = [None]

    async def lake() -> str | None:
        checks.append(clock.now)
        return answer[0]

    (node,) = nodes(memory_lake(B), 1)
    drain = Drain()
    ready = Readiness(lake, node.cluster, drain, clock=clock, cache_for=2.0)

    async def main() -> None:
        ok, doc = await ready.check()
        assert not ok and doc["status"] == "not ready"
        assert set(doc["failed"]) == {"ring"}  # type: ignore[arg-type]
        await node.cluster.heartbeat_round({})
        ok, doc = await ready.check()
        assert ok and doc["status"] == "ready" and doc["ring"]["live"] == ["n0"]  # type: ignore[index]
        answer[0] = "the lake is unreachable"
        assert (await ready.check())[0] is True  # still the cached answer
        clock.now += 2.0
        ok, doc = await ready.check()
        assert not ok and doc["failed"] == {"lake": "the lake is unreachable"}
        drain.start()
        ok, doc = await ready.check()
        assert not ok and doc["status"] == "draining"
        assert set(doc["failed"]) == {"lake", "draining"}  # type: ignore[arg-type]

    asyncio.run(main())
    assert checks == [1000.0, 1002.0]


def test_the_shutdown_settings_and_the_supervisors_grace() -> None:
    server = Settings.load(_env_file=None).server
    assert (server.shutdown_timeout, server.shutdown_flush_timeout) == (30.0, 60.0)
    server = Settings.load(_env_file=None, shutdown_timeout="5", shutdown_flush_timeout="0").server
    assert (server.shutdown_timeout, server.shutdown_flush_timeout) == (5.0, 0.0)
    with pytest.raises(SettingsError, match="LAKEGATE_SHUTDOWN_TIMEOUT"):
        Settings.load(_env_file=None, shutdown_timeout="-1")
    assert supervisor_grace(30.0, 60.0) > 30.0 + 60.0


class AnsweringLake(MemoryLake):
    """A lake whose ListBuckets raises ``error`` (None: answers), or never answers."""

    def __init__(self, error: Exception | None = None, hang: bool = False) -> None:
        super().__init__()
        self.error, self.hang = error, hang

    async def list_buckets(self) -> list[BucketInfo]:
        if self.hang:
            await asyncio.Event().wait()
        if self.error is not None:
            raise self.error
        return await super().list_buckets()


@pytest.mark.parametrize(("lake", "reachable"), [
    (AnsweringLake(), True),
    (AnsweringLake(AccessDenied()), True),  # an S3 answer, a refusal too, is a lake that is there
    (AnsweringLake(ServiceUnavailable("The lake is unreachable (ConnectError).")), False),
    (AnsweringLake(ConnectionRefusedError()), False),
    (AnsweringLake(hang=True), False),
], ids=["answers", "403", "unreachable", "refused", "no-answer"])
def test_an_s3_lake_is_reachable_when_it_answers_anything(lake: AnsweringLake, reachable: bool) -> None:
    why = asyncio.run(lake_probe(lake, timeout=0.05)())
    assert (why is None) is reachable


def test_a_goodbye_one_worker_received_reaches_the_nodes_other_workers(tmp_path: Path) -> None:
    """n0 and n1 stand for two workers of one node, n2 for the peer that leaves: its goodbye
    reached n0 only; n1 applies it from n0's file; a goodbye older than the failure timeout is not
    applied."""
    first, second, leaving = nodes(memory_lake(B), 3)
    clock = Clock()
    shared = [SharedGoodbyes(tmp_path / "goodbyes", worker.cluster, name=str(i), clock=clock)
              for i, worker in enumerate((first, second))]
    first.cluster.said_goodbye(leaving.member)
    assert "n2" not in [m.id for m in first.membership.live()]
    assert "n2" in [m.id for m in second.membership.live()]
    shared[1].apply_others()
    assert "n2" not in [m.id for m in second.membership.live()]
    assert second.cluster.counters["goodbyes_received"] == 0  # heard by the node once, by n0
    _, started_later, _ = nodes(memory_lake(B), 3)  # a worker that still has n2 in its ring
    clock.now += started_later.membership.failure_timeout
    SharedGoodbyes(tmp_path / "goodbyes", started_later.cluster, name="later", clock=clock).apply_others()
    assert "n2" in [m.id for m in started_later.membership.live()]  # too old a goodbye: not applied
