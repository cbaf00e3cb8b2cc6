"""Fair occupancy over the node's space server (cachetier.blocks.spaceipc): two "workers" (each
its own connection, as two processes have) whose tenants put and hit blocks share one tenant
accounting, their weights and their evictions, and read it back node-wide."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from doubles import as_tenant, bid, content

from cachetier.blocks.files import HEADER_SIZE, BlockFiles
from cachetier.blocks.space import Space
from cachetier.blocks.spaceipc import RemoteSpace, SpaceConnection, SpaceServer
from cachetier.blocks.store import DiskBlockStore
from policies.occupancy import split

S = 4096
UNIT = S + HEADER_SIZE  # a block file
N = 20


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[tuple[DiskBlockStore, DiskBlockStore]]:
    space = Space(BlockFiles(tmp_path / "l1"), (N + 1) * S - 1, "lru")
    space.load()
    with ExitStack() as stack:
        server = SpaceServer(str(tmp_path / "space.sock"), {"l1": space}, persist_interval=3600)
        stack.callback(server.close)
        stores = []
        for _ in range(2):
            connection = SpaceConnection(server.path)
            stack.callback(connection.close)
            store = DiskBlockStore(tmp_path / "l1", space.usage().capacity, space=RemoteSpace(connection, "l1"))
            stack.callback(store.close)
            stores.append(store)
        yield stores[0], stores[1]


def put(store: DiskBlockStore, tenant: str, key: str, index: int) -> None:
    """A put, its commit (sent unanswered) known to the server before this returns: the next
    request of another connection cannot overtake it."""
    with as_tenant(tenant):
        store.put(bid(index, key), content(bid(index, key), S))
    assert store.capacity  # a question on the same connection, answered after the commit


def test_two_workers_share_the_tenant_accounting(workers: tuple[DiskBlockStore, DiskBlockStore]) -> None:
    one, two = workers
    put(one, "alice", "x", 0)
    with as_tenant("bob & co=2:1"):  # any name: it is quoted on the line
        assert two.get(bid(0, "x")) == content(bid(0, "x"), S)
    put(two, "bob & co=2:1", "y", 0)
    expected = {"alice": split(UNIT, 2)[0], "bob & co=2:1": split(UNIT, 2)[1] + UNIT}
    assert one.held_bytes() == two.held_bytes() == expected  # node-wide, asked of either


def test_a_scan_in_one_worker_spares_the_hot_set_of_the_other(workers: tuple[DiskBlockStore, DiskBlockStore]) -> None:
    scanner, reader = workers
    hot = range(6)
    for i in hot:
        put(reader, "hot", "h", i)
    for i in range(3 * N):
        if i % N == 0:
            with as_tenant("hot"):
                assert all(reader.get(bid(h, "h")) is not None for h in hot)
            reader.flush_reads()  # the reader worker's report (every second, in a node)
        put(scanner, "scan", "s", i)
    assert all(bid(h, "h") in reader for h in hot)


def test_weights_set_through_one_worker_hold_for_the_others(workers: tuple[DiskBlockStore, DiskBlockStore]) -> None:
    one, two = workers
    one.set_weights({"a": 3.0, "b": 1.0})
    for i in range(3 * N):
        put(one, "a", "a", i)
        put(two, "b", "b", i)
    held = two.held_bytes()
    assert abs(held["a"] / UNIT - 0.75 * N) <= 1 and abs(held["b"] / UNIT - 0.25 * N) <= 1
    with pytest.raises(ValueError):
        two.set_weights({"a": 0.0})  # refused in the worker: the connection stays up
    assert two.held_bytes() == held
