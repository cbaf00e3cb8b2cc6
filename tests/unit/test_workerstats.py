"""Counters of a node's workers added up (gateway.workerstats): each publishes its own, whoever
answers /metrics or the admin stats adds the others' to its own."""

from __future__ import annotations

from pathlib import Path

from cachetier.telemetry.snapshots import CacheSnapshot, TierStats
from gateway.workerstats import WorkerBoard, node_cache, node_counters


def snapshot(hits: int, tenant_hits: int, buffered: int = 0) -> CacheSnapshot:
    return CacheSnapshot(
        per_tenant={"alice": {"hits": tenant_hits, "lake_gets": 1}},
        tiers={"l1": TierStats(capacity_bytes=100, used_bytes=40, hits=hits, misses=1, evictions=0, corrupt=0)},
        metadata_entries=3,
        background_tasks=0,
        write_buffered_bytes=buffered,
        write_budget_bytes=50,
    )


def test_each_worker_adds_the_others_last_published_counts(tmp_path: Path) -> None:
    one, two, three = (WorkerBoard(tmp_path, pid) for pid in (101, 102, 103))
    two.publish(snapshot(hits=5, tenant_hits=5, buffered=7), {"peer_served": 2})
    three.publish(snapshot(hits=1, tenant_hits=1), {"peer_served": 1})
    (tmp_path / "104.json").write_text("{torn")  # a file half written by hand: skipped
    own = snapshot(hits=10, tenant_hits=10, buffered=1)
    node = node_cache(own, one.others())
    assert node.per_tenant == {"alice": {"hits": 16, "lake_gets": 3}}
    assert node.tiers["l1"] == TierStats(capacity_bytes=100, used_bytes=40, hits=16, misses=3, evictions=0, corrupt=0)
    assert node.write_buffered_bytes == 8 and node.write_budget_bytes == 50  # the budget: the node's already
    assert node_counters({"peer_served": 4, "heartbeat_failures": 0}, one.others(), "cluster") == {
        "peer_served": 7, "heartbeat_failures": 0}
    assert node_cache(own, two.others()).per_tenant["alice"]["hits"] == 11  # itself left out


def test_a_republished_worker_replaces_its_counts(tmp_path: Path) -> None:
    worker, reader = WorkerBoard(tmp_path, 1), WorkerBoard(tmp_path, 2)
    worker.publish(snapshot(hits=1, tenant_hits=1), None)
    worker.publish(snapshot(hits=9, tenant_hits=9), None)
    assert [doc["per_tenant"] for doc in reader.others()] == [{"alice": {"hits": 9, "lake_gets": 1}}]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["1.json"]
