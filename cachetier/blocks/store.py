"""Block stores: where one cache tier keeps its blocks (D3N: 4 MiB blocks as files on the node's
SSD). ``DiskBlockStore`` keeps them as files named by block id (``cachetier.blocks.files``),
shared by every worker process of the node, with one space manager per tier owning capacity
and eviction (``cachetier.blocks.space``); ``MemoryBlockStore`` is its in-memory twin for
tests, checked to conform and to behave the same (tests/unit/test_blockstore.py).

Contract, for every implementation:

- ``get`` returns exactly the bytes ``put`` stored, or None: a missing, evicted, vanished or
  corrupt block is a miss, never an exception and never wrong bytes. Each block is stored
  with a checksum and verified on every read; one that fails is deleted and counted.
- Capacity is in bytes, may change at run time, and eviction (``"lru"`` or ``"lfu"``) keeps
  the store within it, one block at a time; the block just put is never its own victim. A
  block larger than the whole capacity is not stored.
- Occupancy is tenant-fair (``fair=True``, the default; the rule is ``cachetier.blocks.space``'s
  docstring): a block is held by the tenant of the request that put it
  (``cachetier.context.current``) and by each that hit it, a block held by k tenants counting
  size/k for each (``held_bytes``); when room is needed the tenant most over its weighted share
  (``set_weights``) loses its least used block first. ``fair=False``: the plain order alone.
- Methods are synchronous and thread-safe; asyncio callers use ``asyncio.to_thread``, except
  where an implementation says a method never waits: ``DiskBlockStore.get`` asks no one and
  takes no lock a writer holds (a file read and a checksum: fine inline for small blocks), and
  its ``in`` is one stat.
- I/O trouble raises OSError (the space manager unreachable included), never another error:
  callers catch OSError alone.
- Statistics count this instance's calls: ``hits``, ``misses`` (every get that returned None or
  raised, corrupt ones included), ``puts``, ``evictions`` (those its puts and capacity changes
  caused), ``corrupt``. A ``get(..., counted=False)`` is a look that is no read of this tier (a
  re-check, a fallback after another tier): it counts neither a hit nor a miss, so ``hits +
  misses`` is the reads that asked it.
"""
from __future__ import annotations

import itertools
import logging
import os
import shutil
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from cachetier.blocks.files import BlockFiles, CorruptBlock, Identity, file_size
from cachetier.blocks.ids import BlockId
from cachetier.blocks.space import MAX_HOLDERS, OK, DirectoryTaken, LocalSpace, Space, SpaceLike
from cachetier.context import current
from cachetier.lake import FileRegion
from policies import occupancy

log = logging.getLogger("lakegate.blockstore")

# Blocks of this size and more, read or written here, are marked verified for open_region; at
# most this many marks (least recently marked forgotten first: a hit then reads its block once).
_VERIFIED_MIN = 64 * 1024
_VERIFIED_MARKS = 65536

# Eviction policies by name: policy as data (cachetier.blocks.space keeps their orders).
EVICTION_POLICIES = {"lru": "least recently used", "lfu": "least frequently used"}
DEFAULT_EVICTION = "lru"


class BlockStoreError(OSError):
    """A block store failed to open or to reach its space manager."""


@runtime_checkable
class BlockStore(Protocol):
    """See the module docstring for the contract every implementation keeps."""

    hits: int
    misses: int
    puts: int
    evictions: int
    corrupt: int

    def get(self, block_id: BlockId, *, counted: bool = True) -> bytes | None: ...

    def put(self, block_id: BlockId, data: bytes) -> None: ...

    def delete(self, block_id: BlockId) -> bool: ...  # True when a block was removed

    def __contains__(self, block_id: object) -> bool: ...

    @property
    def capacity(self) -> int: ...

    def set_capacity(self, capacity_bytes: int) -> None: ...  # a smaller one evicts at once

    def used_bytes(self) -> int: ...  # bytes of block data, without headers

    def held_bytes(self) -> dict[str, int]: ...  # tenant -> bytes it holds (shared blocks split)

    def set_weights(self, weights: Mapping[str, float]) -> None: ...  # tenant -> weight (else 1.0)

    def check(self) -> list[str]: ...  # verify, repair, and return one line per problem

    def close(self) -> None: ...


@runtime_checkable
class RegionStore(Protocol):
    """A store whose blocks are files, which it can hand out unread (``DiskBlockStore``)."""

    def open_region(self, block_id: BlockId, *, counted: bool = True) -> FileRegion | None: ...


class _Statistics:
    """The counters both stores keep; increments are locked, as callers run in threads."""

    def __init__(self) -> None:
        self.hits = self.misses = self.puts = self.evictions = self.corrupt = 0
        self._stats_lock = threading.Lock()

    def _count(self, name: str, counted: bool = True) -> None:
        if not counted:
            return
        with self._stats_lock:
            setattr(self, name, getattr(self, name) + 1)


class DiskBlockStore(_Statistics):
    """Blocks as files in ``directory`` (``cachetier.blocks.files``), capacity and eviction kept
    by a space manager: by default one of its own (this process owns the directory), or
    ``space``, a client of the node's manager that several worker processes share.

    ``scrub_rate`` (bytes a second, where the store owns its space) re-verifies its blocks in the
    background (``Space.scrub``): the check of the hits that ``open_region`` hands out unread.

    ``capacity_bytes`` bounds the block files (bytes plus a 16-byte header each). Blocks
    survive restarts: reopening the directory finds them (statistics start at zero), in the
    order of their last use as of the last stamp (every ``flush_interval`` seconds).

    A hit is an open, a read and a checksum, asking no one; the read is recorded in memory and
    reported to the manager every ``flush_interval`` seconds and before each of this store's
    puts, so the eviction order sees this process's reads at once, other workers' within that
    interval. A put reserves room first (the manager evicts), writes a new file and renames it
    onto the block's name, then commits; see ``cachetier.blocks.files`` for what a crash leaves.

    ``fair`` (tenant-fair eviction) is the own manager's; a shared one has its own setting.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        capacity_bytes: int,
        eviction: str = DEFAULT_EVICTION,
        *,
        space: SpaceLike | None = None,
        flush_interval: float = 1.0,
        scrub_rate: int = 0,
        fair: bool = True,
    ) -> None:
        super().__init__()
        _policy_name(eviction)
        _checked_capacity(capacity_bytes)
        self.files = BlockFiles(directory)
        self._owner = space is None
        if space is None:
            own = Space(self.files, capacity_bytes, eviction, fair=fair)
            try:
                self._count_evictions(own.load())
            except DirectoryTaken as exc:
                raise BlockStoreError(str(exc)) from None
            space = LocalSpace(own)
        self.space: SpaceLike = space
        self._reads: dict[str, dict[str, int]] = {}  # tenant -> key -> reads since the last report
        self._reads_lock = threading.Lock()
        # block files this store checked (or wrote), by their identity, for open_region
        self._verified: OrderedDict[str, Identity] = OrderedDict()
        self._scrub_budget = int(scrub_rate * flush_interval)  # per flush, where this store owns its space
        self._closing = threading.Event()
        self._flusher = threading.Thread(
            target=_flush_periodically,
            args=(weakref.ref(self), self._closing, flush_interval),
            name=f"blockstore-flush {self.files.directory}",
            daemon=True,
        )
        self._flusher.start()

    def get(self, block_id: BlockId, *, counted: bool = True) -> bytes | None:
        key = block_id.hex
        try:
            data = self.files.read(key)
        except CorruptBlock as exc:
            self._drop_corrupt(key, str(exc))
            data = None
        except OSError:  # EIO, a directory gone to pieces: the caller's to handle, a miss here
            self._count("misses", counted)
            with suppress(OSError):  # unreadable: removed, so that a fill stores it anew
                if self.files.remove(key):
                    self.space.forget(key)
            raise
        if data is None:
            self._count("misses", counted)
            return None
        if len(data) >= _VERIFIED_MIN:
            self._mark_verified(key)  # a stat: cheap beside a read of this size
        self._hit(key, counted)
        return data

    def open_region(self, block_id: BlockId, *, counted: bool = True) -> FileRegion | None:
        """The block as a region of its open file, to send unread: only a file this store has
        verified since it last changed (its checksum read by a ``get``, or its bytes written by a
        ``put``, of a file with the same inode, mtime and size; the scrub re-checks all of them
        on its schedule), its header and length checked again now. None otherwise, counted as
        nothing: the caller then reads it with ``get``, which checks it and marks it verified."""
        key = block_id.hex
        mark = self._verified.get(key)
        if mark is None:
            return None
        try:
            found = self.files.open_region(key)
        except CorruptBlock as exc:
            self._drop_corrupt(key, str(exc))
            return None
        except OSError:
            return None  # the get that follows meets the same error, and counts it
        if found is None:
            return None
        region, identity = found
        if identity != mark:  # replaced or written into since it was checked
            region.close()
            return None
        self._hit(key, counted)
        return region

    def _mark_verified(self, key: str) -> None:
        identity = self.files.identity(key)
        with self._reads_lock:
            if identity is None:
                self._verified.pop(key, None)
                return
            self._verified[key] = identity
            self._verified.move_to_end(key)
            if len(self._verified) > _VERIFIED_MARKS:
                self._verified.popitem(last=False)

    def _hit(self, key: str, counted: bool) -> None:
        """Count a hit, and record it, with its tenant, for the eviction order and the tenants'
        occupancy (reported in the next batch)."""
        tenant = current.get().tenant
        with self._reads_lock:
            reads = self._reads.setdefault(tenant, {})
            reads[key] = reads.get(key, 0) + 1
        self._count("hits", counted)

    def put(self, block_id: BlockId, data: bytes) -> None:
        # Crash safety (cachetier.blocks.files, cachetier.blocks.space): room is reserved first,
        # the bytes go to a new file in tmp/, the file is renamed onto the block's name, and the
        # reservation is committed. Killed before the rename: a tmp/ file and a reservation,
        # which the manager settles (the file removed, the bytes uncounted) when this process's
        # connection closes, or at the next start. Killed after it: a whole block, which the
        # manager counts from the disk. No block ever reads back wrong.
        key = block_id.hex
        self.flush_reads()  # the manager's order sees this process's reads before it evicts
        grant = self.space.reserve(key, file_size(len(data)), current.get().tenant)
        self._count_evictions(grant.evicted)
        if grant.answer != OK:
            return  # too large, or another worker is writing the same block
        try:
            tmp = self.files.write(key, data)
            try:
                self.files.publish(tmp, key)
            except BaseException:
                self.files.discard(tmp)
                raise
        except BaseException:
            self.space.abort(key)
            raise
        self.space.commit(key)
        if len(data) >= _VERIFIED_MIN:
            self._mark_verified(key)  # written from these bytes: as checked as a read
        self._count("puts")

    def delete(self, block_id: BlockId) -> bool:
        key = block_id.hex
        self._forget_mark(key)
        removed = self.files.remove(key)
        self.space.forget(key)
        return removed

    def __contains__(self, block_id: object) -> bool:
        return isinstance(block_id, BlockId) and self.files.exists(block_id.hex)

    def __len__(self) -> int:
        return self.space.usage().blocks

    @property
    def capacity(self) -> int:
        return self.space.usage().capacity

    def set_capacity(self, capacity_bytes: int) -> None:
        _checked_capacity(capacity_bytes)
        self.flush_reads()
        self._count_evictions(self.space.set_capacity(capacity_bytes))

    def used_bytes(self) -> int:
        usage = self.space.usage()
        return usage.stored - usage.headers  # blocks stored, not those being written

    def held_bytes(self) -> dict[str, int]:
        """Tenant -> bytes of block files it holds in this tier (node-wide where workers share
        it), a block shared by k tenants counting size/k for each."""
        self.flush_reads()  # this process's hits claim their blocks first
        return self.space.held()

    def set_weights(self, weights: Mapping[str, float]) -> None:
        self.space.set_weights(weights)

    def check(self) -> list[str]:
        """Verify every block file (removing those that fail and files that are no block's),
        and, when this store owns its directory, rebuild the accounting from the disk and evict
        down to capacity. Reads every block: for tests, start-up after a crash and admin tools,
        not for a request path."""
        problems = []
        for path in self.files.stray_files():
            problems.append(f"unknown file: {path}, removed")
            with suppress(OSError):
                if os.path.isdir(path):
                    shutil.rmtree(path)
                else:
                    os.unlink(path)
        for path in self.files.remove_tmp_of(None):
            problems.append(f"unfinished put: {path}, removed")
        for key, _, _ in list(self.files.scan()):
            try:
                self.files.read(key)
            except CorruptBlock as exc:
                problems.append(f"corrupt block {key}: {exc}, deleted")
                self._drop_corrupt(key, str(exc))
        if self._owner:
            assert isinstance(self.space, LocalSpace)
            self.flush_reads()
            self._count_evictions(self.space.space.load())
        return problems

    def flush_reads(self) -> None:
        """Report the reads recorded since the last report to the space manager."""
        with self._reads_lock:
            pending, self._reads = self._reads, {}
        while pending:
            tenant, reads = next(iter(pending.items()))
            try:
                self.space.used(reads, tenant)
            except OSError:
                with self._reads_lock:  # kept for the next report
                    for tenant, reads in pending.items():
                        kept = self._reads.setdefault(tenant, {})
                        for key, times in reads.items():
                            kept[key] = kept.get(key, 0) + times
                raise
            del pending[tenant]

    def flush(self) -> None:
        """Report the reads, and (owning the directory) stamp the blocks' last use on disk."""
        self.flush_reads()
        self.space.persist()

    def _background(self) -> None:
        """Every ``flush_interval``: the flush, and where this store owns its space, a scrub's share."""
        self.flush()
        if self._owner and self._scrub_budget:
            self.space.scrub(self._scrub_budget)

    def close(self) -> None:
        self._closing.set()
        if self._flusher is not threading.current_thread():
            self._flusher.join()
        try:
            self.flush()
        finally:
            if self._owner:
                self.space.close()

    def _count_evictions(self, evicted: int) -> None:
        if evicted:
            with self._stats_lock:
                self.evictions += evicted

    def _forget_mark(self, key: str) -> None:
        with self._reads_lock:
            self._verified.pop(key, None)

    def _drop_corrupt(self, key: str, why: str) -> None:
        self._forget_mark(key)
        log.warning("block %s in %s is corrupt (%s): deleted", key, self.files.directory, why)
        self.files.remove(key)
        self.space.forget(key)
        self._count("corrupt")

    def _flush_in_background(self) -> None:
        try:
            self._background()
        except Exception as exc:  # noqa: BLE001 - logged; what is not reported waits for the next
            log.warning("could not report block reads of %s: %s", self.files.directory, exc)


def _flush_periodically(
    store_ref: weakref.ref[DiskBlockStore], closing: threading.Event, interval: float
) -> None:
    # Holds the store weakly: a store dropped without close() ends this thread too.
    while not closing.wait(interval):
        store = store_ref()
        if store is None:
            return
        store._flush_in_background()
        del store


@dataclass
class _Entry:
    data: bytes
    used: int  # last put or get, for LRU
    reads: int = 0  # gets since the last put, for LFU
    holders: tuple[str, ...] = ()  # the tenants holding it: the putter, then those that hit it


# The twin's victim order for each policy name, matching cachetier.blocks.space's.
_MEMORY_ORDER: dict[str, Callable[[_Entry], tuple[int, ...]]] = {
    "lru": lambda entry: (entry.used,),
    "lfu": lambda entry: (entry.reads, entry.used),
}


class MemoryBlockStore(_Statistics):
    """The in-memory twin of ``DiskBlockStore``: same contract, eviction order and fair occupancy
    (by a scan of every block per eviction: a twin for tests); capacity bounds block bytes alone
    (it has no index to pay for), and nothing can corrupt it."""

    def __init__(self, capacity_bytes: int, eviction: str = DEFAULT_EVICTION, *, fair: bool = True) -> None:
        super().__init__()
        _policy_name(eviction)
        self._order = _MEMORY_ORDER[eviction]
        self.fair = fair
        self._capacity = _checked_capacity(capacity_bytes)
        self._entries: dict[BlockId, _Entry] = {}
        self._weights: dict[str, float] = {}
        self._clock = itertools.count()
        self._lock = threading.RLock()

    def get(self, block_id: BlockId, *, counted: bool = True) -> bytes | None:
        tenant = current.get().tenant
        with self._lock:
            entry = self._entries.get(block_id)
            if entry is None:
                self._count("misses", counted)
                return None
            entry.used = next(self._clock)
            entry.reads += 1
            if tenant not in entry.holders and len(entry.holders) < MAX_HOLDERS:
                entry.holders = (*entry.holders, tenant)
            self._count("hits", counted)
            return entry.data

    def put(self, block_id: BlockId, data: bytes) -> None:
        if len(data) > self._capacity:
            return
        tenant = current.get().tenant
        with self._lock:
            old = self._entries.get(block_id)
            holders = (tenant, *(h for h in (old.holders if old else ()) if h != tenant))[:MAX_HOLDERS]
            self._entries[block_id] = _Entry(bytes(data), used=next(self._clock), holders=holders)
            self._count("puts")
            self._evict_to_capacity(keep=block_id, putting=tenant)

    def delete(self, block_id: BlockId) -> bool:
        with self._lock:
            return self._entries.pop(block_id, None) is not None

    def __contains__(self, block_id: object) -> bool:
        with self._lock:
            return block_id in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def capacity(self) -> int:
        return self._capacity

    def set_capacity(self, capacity_bytes: int) -> None:
        with self._lock:
            self._capacity = _checked_capacity(capacity_bytes)
            self._evict_to_capacity()

    def used_bytes(self) -> int:
        with self._lock:
            return sum(len(entry.data) for entry in self._entries.values())

    def held_bytes(self) -> dict[str, int]:
        with self._lock:
            return _held(self._entries.values())

    def set_weights(self, weights: Mapping[str, float]) -> None:
        checked = occupancy.checked_weights(weights)
        with self._lock:
            self._weights = checked

    def check(self) -> list[str]:
        return []

    def close(self) -> None:
        pass

    def _evict_to_capacity(self, keep: BlockId | None = None, putting: str | None = None) -> None:
        while self.used_bytes() > self._capacity:
            candidates = {i: e for i, e in self._entries.items() if i != keep}
            if not candidates:
                return
            if self.fair:  # as the disk's manager decides, before the block put is counted
                tenant = occupancy.victim_tenant(_held(candidates.values()), self._weights, self._capacity, putting)
                theirs = {i: e for i, e in candidates.items() if tenant in e.holders}
                candidates = theirs or candidates
            del self._entries[min((self._order(e), i) for i, e in candidates.items())[1]]
            self._count("evictions")


def _held(entries: Iterable[_Entry]) -> dict[str, int]:
    held: dict[str, int] = {}
    for entry in entries:
        for tenant, part in zip(entry.holders, occupancy.split(len(entry.data), len(entry.holders))):
            held[tenant] = held.get(tenant, 0) + part
    return {tenant: size for tenant, size in held.items() if size}


def _policy_name(eviction: str) -> str:
    try:
        return EVICTION_POLICIES[eviction]
    except KeyError:
        known = ", ".join(sorted(EVICTION_POLICIES))
        raise ValueError(f"unknown eviction policy {eviction!r} (known: {known})") from None


def _checked_capacity(capacity_bytes: int) -> int:
    if capacity_bytes < 0:
        raise ValueError(f"capacity must be >= 0 bytes, not {capacity_bytes}")
    return capacity_bytes
