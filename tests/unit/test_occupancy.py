"""Tenant-fair cache occupancy (issue 12, item 4): the pure victim choice (policies.occupancy),
then both block stores (the disk store over its own Space, and the twin) sharing one list of
tests: a scan cannot flush another tenant's hot set, an idle tenant's room is used by the others,
shared blocks are split, weights set the occupancy, ``fair=False`` is the plain order. The space
manager served to worker processes is tests/component/test_space_ipc.py's."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import pytest
from doubles import as_tenant, bid, content

from cachetier.blocks.files import HEADER_SIZE, BlockFiles
from cachetier.blocks.space import MAX_HOLDERS, Space
from cachetier.blocks.store import BlockStore, DiskBlockStore, MemoryBlockStore
from policies.occupancy import checked_weights, fair_shares, split, victim_tenant

S = 4096  # block size here: small, so that scans of 3x the capacity stay quick on disk
N = 20  # blocks a store holds


def room(n: int) -> int:
    """A capacity holding exactly n blocks of S bytes in either store (headers in the slack)."""
    return (n + 1) * S - 1


def put(store: BlockStore, tenant: str, key: str, index: int) -> None:
    with as_tenant(tenant):
        store.put(bid(index, key), content(bid(index, key), S))


def read(store: BlockStore, tenant: str, key: str, indices: range) -> None:
    with as_tenant(tenant):
        for i in indices:
            store.get(bid(i, key))


def resident(store: BlockStore, key: str, indices: range) -> int:
    return sum(bid(i, key) in store for i in indices)


def blocks_held(store: BlockStore) -> dict[str, float]:
    """Tenant -> blocks' worth of bytes held (the disk store counts headers too)."""
    unit = S + HEADER_SIZE if isinstance(store, DiskBlockStore) else S
    return {tenant: size / unit for tenant, size in store.held_bytes().items()}


# ---------------------------------------------------------------- the pure choice


def test_split_sums_to_the_size() -> None:
    assert split(10, 3) == [4, 3, 3] and split(9, 3) == [3, 3, 3] and split(0, 2) == [0, 0]
    assert split(5, 0) == []


def test_shares_go_to_the_tenants_present_by_weight() -> None:
    assert fair_shares(100, {"a": 3}, ["a", "b"]) == {"a": 75.0, "b": 25.0}
    assert fair_shares(100, {"a": 3, "absent": 100}, ["a"]) == {"a": 100.0}  # work conserving


def test_the_victim_is_the_tenant_most_over_its_share() -> None:
    assert victim_tenant({"a": 60, "b": 40}, {}, 100) == "a"
    assert victim_tenant({"a": 50, "b": 50}, {}, 100) is None  # nobody over: the plain order
    assert victim_tenant({"a": 100}, {}, 100, putting="b") == "a"  # a newcomer takes its share
    assert victim_tenant({"a": 72, "b": 24}, {"a": 3}, 100) is None  # a's share is 75, b's 25
    assert victim_tenant({"a": 70, "b": 30}, {"a": 3}, 100) == "b"
    assert victim_tenant({"a": 60, "b": 30, "c": 10}, {}, 90, putting="c") == "a"  # 2.0 beats b's 1.0
    assert victim_tenant({"b": 60, "a": 60}, {}, 100) == "a"  # ties by name


def test_weights_must_be_positive_numbers() -> None:
    assert checked_weights({"a": 2, "b": 0.5}) == {"a": 2, "b": 0.5}
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError):
            checked_weights({"a": bad})


# ---------------------------------------------------------------- both stores


MakeStore = Callable[..., BlockStore]


@pytest.fixture(params=["disk", "memory"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeStore]:
    stores: list[BlockStore] = []

    def make(capacity: int = room(N), eviction: str = "lru", fair: bool = True) -> BlockStore:
        store: BlockStore
        if request.param == "disk":
            store = DiskBlockStore(tmp_path / f"s{len(stores)}", capacity, eviction, flush_interval=3600, fair=fair)
        else:
            store = MemoryBlockStore(capacity, eviction, fair=fair)
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.close()


def scan_beside_a_hot_set(store: BlockStore) -> list[int]:
    """Tenant hot puts 30% of the capacity and reads it once every N scan puts; tenant scan puts
    3x the capacity. Returns the hot blocks resident after each scan put."""
    hot, after = range(6), []
    for i in hot:
        put(store, "hot", "h", i)
    for i in range(3 * N):
        if i % N == 0:
            read(store, "hot", "h", hot)
        put(store, "scan", "s", i)
        after.append(resident(store, "h", hot))
    return after


@pytest.mark.parametrize("eviction", ["lru", "lfu"])
def test_a_scan_evicts_its_own_blocks_not_another_tenants_hot_set(make_store: MakeStore, eviction: str) -> None:
    store = make_store(eviction=eviction)
    after = scan_beside_a_hot_set(store)
    assert min(after) >= 0.9 * 6  # all along the scan, not only at its end
    assert len(store) == N and resident(store, "s", range(3 * N - 14, 3 * N)) == 14  # the scan's latest
    assert sum(store.held_bytes().values()) == store.used_bytes() + (
        HEADER_SIZE * len(store) if isinstance(store, DiskBlockStore) else 0
    )


def test_without_fairness_the_scan_flushes_the_hot_set(make_store: MakeStore) -> None:
    # the ablation (LAKEGATE_FAIRNESS=off): the plain LRU order, as before fair occupancy
    store = make_store(fair=False)
    assert scan_beside_a_hot_set(store)[-1] == 0


def test_an_idle_tenants_room_is_used_until_it_returns(make_store: MakeStore) -> None:
    store = make_store()
    for i in range(N):  # alone: the whole tier, not half of it
        put(store, "b", "b", i)
    assert resident(store, "b", range(N)) == N and store.evictions == 0
    for i in range(3 * N):  # a returns and scans: it takes its half back from b, then no more
        put(store, "a", "a", i)
    held = blocks_held(store)  # halves of 20.5 blocks' room, in whole blocks
    assert held.keys() == {"a", "b"} and abs(held["a"] - N / 2) <= 1 and abs(held["b"] - N / 2) <= 1
    assert resident(store, "b", range(N)) == resident(store, "b", range(N - round(held["b"]), N))  # its oldest went


def test_weights_3_to_1_give_75_25_under_two_scans(make_store: MakeStore) -> None:
    store = make_store()
    store.set_weights({"a": 3.0, "b": 1.0})
    for i in range(3 * N):
        put(store, "a", "a", i)
        put(store, "b", "b", i)
    held = blocks_held(store)
    assert abs(held["a"] - 0.75 * N) <= 1 and abs(held["b"] - 0.25 * N) <= 1


def test_a_shared_block_counts_a_part_for_each_tenant(make_store: MakeStore) -> None:
    store = make_store()
    unit = S + HEADER_SIZE if isinstance(store, DiskBlockStore) else S
    put(store, "a", "x", 0)
    read(store, "b", "x", range(1))
    assert store.held_bytes() == dict(zip("ab", split(unit, 2)))
    read(store, "c", "x", range(1))
    read(store, "a", "x", range(1))  # a holder already: no change
    assert store.held_bytes() == dict(zip("abc", split(unit, 3)))
    put(store, "d", "x", 0)  # the same bytes put again: d holds it first, the others still hold it
    assert store.held_bytes() == dict(zip("dabc", split(unit, 4)))
    for n in range(MAX_HOLDERS + 2):  # a later reader past the cap is carried free
        read(store, f"r{n}", "x", range(1))
    assert len(store.held_bytes()) == MAX_HOLDERS and sum(store.held_bytes().values()) == unit


def test_a_tenant_over_share_loses_its_own_blocks_before_those_it_shares_and_reads(make_store: MakeStore) -> None:
    # b and a share b's 8 blocks, which b reads on: b counts 4, a 4 plus its own scan; a, the one
    # over share, loses its scan's blocks (the shared ones are used more recently)
    store = make_store(capacity=room(10))
    for i in range(8):
        put(store, "b", "b", i)
        read(store, "a", "b", range(i, i + 1))
    for i in range(30):
        put(store, "a", "a", i)
        read(store, "b", "b", range(8))
    assert resident(store, "b", range(8)) == 8 and resident(store, "a", range(28, 30)) == 2
    assert blocks_held(store) == {"a": 6, "b": 4}


def test_without_fairness_the_tenants_change_no_victim(make_store: MakeStore) -> None:
    # fair=False: the same puts and reads evict the same blocks whoever makes them
    def evicted(store: BlockStore, tenant_of: Callable[[int], str]) -> list[int]:
        for i in range(N):
            put(store, tenant_of(i), "k", i)
        read(store, "x", "k", range(0, N, 3))
        for i in range(N, 2 * N):
            put(store, tenant_of(i), "k", i)
        return [i for i in range(2 * N) if bid(i, "k") not in store]

    alone = evicted(make_store(fair=False), lambda i: "-")
    assert evicted(make_store(fair=False), lambda i: "ab"[i % 2]) == alone
    assert evicted(make_store(fair=False), lambda i: "a" if i < N else "b") == alone


def test_held_follows_deletes_and_a_smaller_capacity(make_store: MakeStore) -> None:
    store = make_store()
    for i in range(4):
        put(store, "a", "a", i)
        put(store, "b", "b", i)
    store.delete(bid(0, "a"))
    assert blocks_held(store) == {"a": 3, "b": 4}
    store.set_capacity(room(4))  # b, over its half, loses first
    assert blocks_held(store) == {"a": 2, "b": 2}
    for i in range(1, 4):
        store.delete(bid(i, "a"))
    assert blocks_held(store) == {"b": 2}


# ---------------------------------------------------------------- the disk store alone


def test_blocks_found_at_start_are_unclaimed_until_hit(tmp_path: Path) -> None:
    # holders are not on disk: a restart charges every block to "-", the first hit takes it over
    with closing(DiskBlockStore(tmp_path, room(N))) as store:
        for i in range(4):
            put(store, "a", "a", i)
    with closing(DiskBlockStore(tmp_path, room(N), flush_interval=3600)) as store:
        assert store.held_bytes() == {"-": 4 * (S + HEADER_SIZE)}
        read(store, "b", "a", range(2))
        assert store.held_bytes() == {"-": 2 * (S + HEADER_SIZE), "b": 2 * (S + HEADER_SIZE)}


def test_a_check_keeps_the_tenants(tmp_path: Path) -> None:
    with closing(DiskBlockStore(tmp_path, room(N))) as store:
        put(store, "a", "a", 0)
        assert store.check() == [] and store.held_bytes() == {"a": S + HEADER_SIZE}


@pytest.mark.parametrize("eviction", ["lru", "lfu"])
def test_a_replacement_refused_or_aborted_keeps_its_holders(tmp_path: Path, eviction: str) -> None:
    space = Space(BlockFiles(tmp_path), 4 * S, eviction)  # the old file and the new both fit
    space.load()
    assert space.reserve("k1", S, tenant="a").answer == "ok"
    space.commit("k1")
    space.used({"k1": 2}, "c")
    assert space.reserve("k2", 2 * S, owner="writer", tenant="b").answer == "ok"  # being written
    assert space.reserve("k1", 2 * S, tenant="d").answer == "full"  # no room beside k2 and the old k1
    assert space.held() == dict(zip("ac", split(S, 2)))
    assert space.reserve("k1", S, tenant="d").answer == "ok"
    assert space.held() == {}  # being replaced: no one's until the commit
    space.abort("k1")
    assert space.held() == dict(zip("ac", split(S, 2)))
    space.commit("k2", owner="writer")
    assert space.held() == {**dict(zip("ac", split(S, 2))), "b": 2 * S}
