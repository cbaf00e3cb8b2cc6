"""The node's lifetime (``gateway.wiring``): whoever opens a part closes it, in reverse order, at
shutdown and when start-up fails half way; a lake passed in stays open; the app serves its admin
endpoints from the running node's typed queries."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest

from cachetier.blocks.store import BlockStoreError, MemoryBlockStore
from cachetier.cluster.node import Cluster
from cachetier.lake.dirlake import DirLake
from gateway import wiring
from gateway.app import LakegateApp
from gateway.settings import ClusterSettings, Settings
from gateway.tenants import TenantDirectory
from harness.endpoints import ADMIN_ACCESS_KEY, ADMIN_SECRET_KEY, admin_signed

ROOT = Path(__file__).resolve().parents[2]
TENANTS = ROOT / "deploy" / "tenants.example.toml"
SECRET = "a-cluster-secret-of-some-length"
NOWHERE = "http://127.0.0.1:21250"  # a peer nobody listens for (this helper's port range)


def _settings(tmp_path: Path, **overrides: Any) -> Settings:
    base: dict[str, Any] = {"lake": f"dir:{tmp_path / 'lake'}", "cache_dir": tmp_path / "cache", "tenants_file": TENANTS}
    return Settings.load(**(base | overrides))


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What closed, in order: the lake, the cluster, each store, the heartbeat task."""
    closed: list[str] = []

    class Lake(DirLake):
        async def aclose(self) -> None:
            closed.append("lake")
            await super().aclose()

    class Store(MemoryBlockStore):
        def __init__(self, directory: Path, capacity: int, eviction: str, space: object = None, scrub_rate: int = 0,
                     fair: bool = True) -> None:
            if (directory / "fail").exists():
                raise BlockStoreError(f"cannot open {directory}")
            super().__init__(capacity, eviction, fair=fair)
            self.name = directory.name

        def close(self) -> None:
            closed.append(self.name)

    real_build: Callable[[ClusterSettings, Callable[[], float]], Cluster] = wiring.build_cluster

    def build_cluster(settings: ClusterSettings, clock: Callable[[], float]) -> Cluster:
        cluster = real_build(settings, clock)
        close = cluster.aclose

        async def aclose() -> None:
            closed.append("cluster")
            await close()

        cluster.aclose = aclose  # type: ignore[method-assign]
        return cluster

    async def heartbeat_loop(cluster: Cluster, load: object, telemetry: object = None) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            closed.append("heartbeats")

    monkeypatch.setattr(wiring, "DirLake", Lake)
    monkeypatch.setattr(wiring, "DiskBlockStore", Store)
    monkeypatch.setattr(wiring, "build_cluster", build_cluster)
    monkeypatch.setattr(wiring, "heartbeat_loop", heartbeat_loop)
    return closed


def _run(settings: Settings, **options: Any) -> None:
    async def main() -> None:
        async with wiring.running_node(settings, TenantDirectory.load(TENANTS), **options):
            await asyncio.sleep(0)  # the heartbeat task starts

    asyncio.run(main())


def test_shutdown_closes_everything_in_reverse_order(tmp_path: Path, events: list[str]) -> None:
    _run(_settings(tmp_path, peers=NOWHERE, cluster_secret=SECRET))
    assert events == ["heartbeats", "l2", "l1", "cluster", "lake"]


def test_a_part_failing_mid_start_up_closes_what_was_opened_before_it(tmp_path: Path, events: list[str]) -> None:
    (tmp_path / "cache" / "l2" / "fail").mkdir(parents=True)
    with pytest.raises(BlockStoreError, match="cannot open"):
        _run(_settings(tmp_path, peers=NOWHERE, cluster_secret=SECRET))
    assert events == ["l1", "cluster", "lake"]


def test_a_lake_passed_in_is_the_callers_to_close(tmp_path: Path, events: list[str]) -> None:
    lake = wiring.DirLake(tmp_path / "own")
    _run(_settings(tmp_path), lake=lake)
    assert events == ["l1"]
    _run(_settings(tmp_path, cache=False))
    assert events == ["l1", "lake"]


def test_the_app_serves_admin_answers_from_the_running_node(tmp_path: Path, events: list[str]) -> None:
    admin = {"admin_access_key": ADMIN_ACCESS_KEY, "admin_secret_key": ADMIN_SECRET_KEY}
    app = LakegateApp(_settings(tmp_path, peers=NOWHERE, cluster_secret=SECRET, node_id="n1", **admin))

    async def main() -> dict[str, Any]:
        transport = httpx2.ASGITransport(app)  # type: ignore[arg-type]
        async with app.running(), httpx2.AsyncClient(transport=transport, base_url="http://localhost") as client:

            async def get(path: str) -> httpx2.Response:  # signed with the admin key
                return await client.get(path, headers=dict(admin_signed(f"http://localhost{path}").headers.items()))

            stats = (await get("/_lakegate/admin/stats")).json()
            where = (await get("/_lakegate/admin/locate?bucket=b&key=k")).json()
            cluster = (await get("/_lakegate/admin/cluster")).json()
            metrics = (await client.get("/metrics")).text
        return {"stats": stats, "where": where, "cluster": cluster, "metrics": metrics}

    answers = asyncio.run(main())
    stats = answers["stats"]
    assert (stats["lake"], stats["tenants"]) == ("dir", ["demo", "etl"])
    assert list(stats["cache"]) == ["per_tenant", "l1", "l2", "metadata_entries", "background_tasks", "write_buffer", "cluster"]
    assert list(stats["cache"]["l1"]) == ["capacity_bytes", "used_bytes", "hits", "misses", "evictions", "corrupt"]
    assert answers["where"] == {"owners": ["n1"], "etag": None, "held": {}}
    assert answers["cluster"]["node_id"] == "n1"
    assert (answers["cluster"]["worker_pid"], answers["cluster"]["workers"]) == (os.getpid(), 1)  # this one, of one
    assert "lakegate_l2_capacity_bytes" in answers["metrics"] and "lakegate_cluster_members_live 1.0" in answers["metrics"]
    with pytest.raises(RuntimeError, match="lifespan"):
        app.node  # noqa: B018 - the node is gone with the lifespan
