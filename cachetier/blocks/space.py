"""A tier's space manager: the one owner of its capacity and eviction order, however many worker
processes read and write its files (nginx's cache manager, for lakegate's blocks).

Reads never ask it: a hit is a file read (``cachetier.blocks.files``). What it is told:

- ``reserve(key, size, owner)`` before a block is written: room is made first (victims' files
  unlinked, least recently or frequently used first, never a block being written), then the
  bytes are counted as used. So concurrent puts from every worker keep the tier within its
  capacity: a writer never writes first and evicts after. A block larger than the capacity, or
  one that cannot fit beside the blocks being written, is refused (``FULL``); one already being
  written by another writer is ``BUSY`` (that writer publishes the same bytes: ids name content).
- ``commit`` after the rename, ``abort`` after a failed write. A writer that dies between the
  two (``release(owner)``, when its connection closes) is settled from the disk: a renamed file
  is kept and counted at its real size, a missing one is uncounted; its tmp/ files are removed.
- ``used(keys)``: reads, reported by each worker in batches (every second, and before its own
  puts). Recency (LRU) or frequency (LFU) is that stale at most, across workers.
- ``forget`` (a block deleted or found corrupt), ``set_capacity`` (evicts at once), ``usage``.
- ``set_weights`` (tenant -> weight, for fair occupancy), ``held`` (tenant -> bytes held).

Fair occupancy (``fair=True``, the default; ``policies.occupancy`` decides):

- Every committed block knows the tenants that hold it: the one that put it, then each tenant
  that hit it (reads come with their tenant), at most ``MAX_HOLDERS``, first come (a later
  reader is carried free). A read reported before the block's commit reached the manager (two
  workers' connections race) claims nothing: that tenant's next reported hit does.
- A block held by k tenants counts size/k for each of them (``policies.occupancy.split``, in
  whole bytes): so the tenants' held bytes sum to the bytes stored, and shares of the capacity
  compare with them directly (counting the whole block for each would overbook the tier); a
  block many tenants read costs each of them little.
- When room is needed for a put, the tenant most over its weighted share of the capacity (among
  the tenants holding bytes and the one putting) loses its least recently (LRU) or least
  frequently (LFU) used block: one order per tenant, the tier's order restricted to the blocks
  it holds (a use moves the block in each holder's order). When nobody is over share, the
  tier's plain order decides. ``fair=False`` keeps the accounting and always evicts in the
  plain order (the ablation without fair occupancy).
- Holders are not written to disk (no header change, no xattr a filesystem may lack, no
  syscall more a put): blocks found at start are unclaimed, charged to tenant ``"-"``, until a
  tenant hits them and takes them over.
- Cost, measured (2 shared cores, 4 MiB blocks, 8 tenants, a put with an eviction and a hit
  report): 35-70 us a put, 1000 to 250k blocks, beside 6-18 us without tenants; a block's write
  takes milliseconds. Memory: 180 (LRU) to 280 (LFU) bytes a block beyond the 130-230 before,
  and 140 (LRU) to 500 (LFU) per further holder.

It keeps its state in memory, rebuilt at open from the directory (``load``: each file's size,
ordered by atime) and kept across restarts by stamping each used block's atime (``persist``,
every second or so; the mtime stays when its bytes were written, which zero-copy hits rely on):
LRU order survives a restart at that grain, LFU counts restart at zero (ties broken by last use).

``Space`` is the manager itself (thread-safe); ``cachetier.blocks.spaceipc`` serves it to
worker processes over a Unix socket, and gives them a client with the same methods.
"""

from __future__ import annotations

import fcntl
import heapq
import itertools
import logging
import os
import shutil
import threading
from collections import OrderedDict
from contextlib import suppress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from cachetier.blocks.files import BlockFiles, CorruptBlock, file_size
from policies import occupancy

log = logging.getLogger("lakegate.space")

OK, BUSY, FULL = "ok", "busy", "full"

NO_TENANT = "-"  # a request without a tenant; also charged with the unclaimed blocks found at start
MAX_HOLDERS = 8  # tenants remembered per block
_UNCLAIMED = (NO_TENANT,)  # who is charged with a block that no tenant holds yet


@dataclass(frozen=True)
class Grant:
    answer: str  # OK: write it; BUSY: another writer is; FULL: no room
    evicted: int = 0  # blocks evicted to make room


@dataclass(frozen=True)
class _Pending:
    size: int  # reserved
    owner: object
    replaced: int  # bytes of the block's file it replaces (0: none), counted until the rename
    tenant: str = NO_TENANT  # the putting tenant
    holders: tuple[str, ...] = ()  # those of the block it replaces


@dataclass(frozen=True)
class Usage:
    used: int  # bytes of block files, counted and reserved
    capacity: int
    blocks: int  # committed blocks
    headers: int  # bytes of those that are headers, not block data
    stored: int  # bytes of the committed blocks' files (``used`` without blocks being written)


class SpaceLike(Protocol):
    """What a block store needs of its tier's manager: a ``Space`` in this process, or a client
    of one in the node's supervisor."""

    def reserve(self, key: str, size: int, tenant: str = NO_TENANT) -> Grant: ...

    def commit(self, key: str) -> None: ...

    def abort(self, key: str) -> None: ...

    def forget(self, key: str) -> None: ...

    def used(self, reads: dict[str, int], tenant: str = NO_TENANT) -> None: ...

    def set_capacity(self, capacity: int) -> int: ...  # returns blocks evicted

    def usage(self) -> Usage: ...

    def held(self) -> dict[str, int]: ...  # tenant -> bytes of block files it holds (shared: split)

    def set_weights(self, weights: Mapping[str, float]) -> None: ...

    def persist(self) -> None: ...  # stamp recent uses on disk (where the manager lives)

    def scrub(self, budget: int) -> int: ...  # verify up to budget bytes (where the manager lives)

    def close(self) -> None: ...


class _Lru:
    def __init__(self) -> None:
        self._order: OrderedDict[str, None] = OrderedDict()

    def add(self, key: str, reads: int = 0) -> None:
        self._order[key] = None
        self._order.move_to_end(key)

    def use(self, key: str, times: int) -> None:
        self._order.move_to_end(key)

    def remove(self, key: str) -> None:
        self._order.pop(key, None)

    def reads(self, key: str) -> int:
        return 0

    def __len__(self) -> int:
        return len(self._order)

    def victims(self) -> Iterable[str]:
        return iter(self._order)


class _Lfu:
    """Reads since the block came in; ties (and the order of newcomers) by last use. A heap with
    stale entries skipped, compacted when it grows past twice the blocks."""

    def __init__(self) -> None:
        self._counts: dict[str, tuple[int, int]] = {}  # key -> (reads, tick of last use)
        self._heap: list[tuple[int, int, str]] = []
        self._tick = itertools.count()

    def add(self, key: str, reads: int = 0) -> None:
        self._set(key, reads)

    def use(self, key: str, times: int) -> None:
        reads, _ = self._counts[key]
        self._set(key, reads + times)

    def _set(self, key: str, reads: int) -> None:
        entry = (reads, next(self._tick))
        self._counts[key] = entry
        heapq.heappush(self._heap, (*entry, key))
        if len(self._heap) > 2 * len(self._counts) + 64:
            self._heap = [(r, t, k) for k, (r, t) in self._counts.items()]
            heapq.heapify(self._heap)

    def remove(self, key: str) -> None:
        self._counts.pop(key, None)

    def reads(self, key: str) -> int:
        return self._counts[key][0]

    def __len__(self) -> int:
        return len(self._counts)

    def victims(self) -> Iterable[str]:
        while self._heap:
            reads, tick, key = self._heap[0]
            if self._counts.get(key) != (reads, tick):
                heapq.heappop(self._heap)
                continue
            yield key
            return


_ORDERS: dict[str, type[_Lru] | type[_Lfu]] = {"lru": _Lru, "lfu": _Lfu}


class Space:
    """One tier's accounting and eviction (see the module docstring). ``owner`` names a writer
    (a worker connection); in-process writers use the default. ``fair``: tenant-fair eviction
    (False: the plain LRU/LFU order; the tenants' bytes are counted either way)."""

    def __init__(self, files: BlockFiles, capacity: int, eviction: str, *, fair: bool = True) -> None:
        self.files = files
        self.eviction = eviction
        self.fair = fair
        self._capacity = capacity
        self._new_order = _ORDERS[eviction]
        self._order: _Lru | _Lfu = self._new_order()
        self._sizes: dict[str, int] = {}  # committed blocks
        self._holders: dict[str, tuple[str, ...]] = {}  # committed blocks' tenants (): unclaimed
        self._held: dict[str, int] = {}  # tenant -> bytes of committed blocks, shared ones split
        self._tenant_orders: dict[str, _Lru | _Lfu] = {}  # tenant -> the order of its blocks
        self._weights: dict[str, float] = {}
        self._names: dict[str, str] = {}  # tenant names interned: one string however many blocks
        self._pending: dict[str, _Pending] = {}
        self._used = 0
        self._touched: set[str] = set()  # used since the last persist
        self._scrub_queue: list[str] = []  # blocks this scrub pass has still to verify
        self.scrub_corrupt = 0  # corrupt blocks the scrub found
        self._owner_fd: int | None = None  # the directory's lock, held from load to close
        self._lock = threading.RLock()

    # ---- start-up ---------------------------------------------------------------------------

    def load(self) -> int:
        """Take the directory (one manager per directory: ``DirectoryTaken`` if another process
        has it), then rebuild from it: removes the tmp/ files of writers no longer running,
        counts every block file (oldest use, by atime, first) and evicts down to capacity.
        Blocks known before (a reload by ``check``) keep their tenants; others are unclaimed.
        Returns the blocks evicted."""
        with self._lock:
            if self._owner_fd is None:
                self._owner_fd = _take(self.files.directory)
            _remove_old_layout(self.files)
            for path in self.files.remove_tmp_of(None):
                log.info("removed %s, left by a writer that stopped mid-put", path)
            found = sorted(self.files.scan(), key=lambda entry: entry[2])
            known = self._holders
            self._order = self._new_order()
            self._sizes, self._holders, self._held, self._tenant_orders = {}, {}, {}, {}
            self._used = sum(p.size + p.replaced for p in self._pending.values())
            for key, size, _ in found:
                if key in self._pending:
                    continue
                self._admit(key, size, known.get(key, ()))
                self._used += size
            return self._make_room(0)

    # ---- writers ----------------------------------------------------------------------------

    def reserve(self, key: str, size: int, owner: object = None, tenant: str = NO_TENANT) -> Grant:
        with self._lock:
            if key in self._pending:
                return Grant(BUSY)
            if size > self._capacity:
                return Grant(FULL)
            # A block being replaced keeps its bytes counted until the rename replaces its
            # file, and is no victim meanwhile: its old file and the new one both fit.
            old = self._sizes.get(key)
            holders = self._holders.get(key, ())
            if old is not None:
                self._drop(key)
            tenant = self._name(tenant)
            evicted = self._make_room(size, tenant)
            if self._used + size > self._capacity:
                if old is not None:
                    self._admit(key, old, holders)
                return Grant(FULL, evicted)
            self._pending[key] = _Pending(size, owner, old or 0, tenant, holders)
            self._used += size
            return Grant(OK, evicted)

    def commit(self, key: str, owner: object = None, size: int | None = None) -> None:
        with self._lock:
            pending = self._pending.get(key)
            if pending is None or pending.owner != owner:
                return
            del self._pending[key]
            actual = pending.size if size is None else size
            self._used += actual - pending.size - pending.replaced
            self._admit(key, actual, _joined(pending.holders, pending.tenant))

    def abort(self, key: str, owner: object = None) -> None:
        with self._lock:
            pending = self._pending.get(key)
            if pending is None or pending.owner != owner:
                return
            del self._pending[key]
            self._used -= pending.size
            if pending.replaced:  # the old file was not replaced: still there, still counted
                self._admit(key, pending.replaced, pending.holders)

    def release(self, owner: object, pid: int | None) -> None:
        """A writer is gone (its process died or closed): settle its reservations from the disk."""
        with self._lock:
            for key, pending in list(self._pending.items()):
                if pending.owner != owner:
                    continue
                size = _size_on_disk(self.files, key)
                if size is None:
                    self.abort(key, owner)
                else:
                    self.commit(key, owner, size)
            if pid is not None:
                for path in self.files.remove_tmp_of(pid):
                    log.info("removed %s, left by a writer that stopped mid-put", path)

    def forget(self, key: str) -> None:
        with self._lock:
            if key in self._sizes:
                self._used -= self._drop(key)
                self._touched.discard(key)

    # ---- readers ----------------------------------------------------------------------------

    def used(self, reads: dict[str, int], tenant: str = NO_TENANT) -> None:
        """``tenant``'s reads (key -> times): each read block is its, as well, and is used."""
        with self._lock:
            tenant = self._name(tenant)
            for key, times in reads.items():
                if key in self._sizes:
                    self._claim(key, tenant)
                    self._order.use(key, times)
                    for holder in self._charged(key):
                        self._tenant_orders[holder].use(key, times)
                    self._touched.add(key)

    def scrub(self, budget: int) -> int:
        """Verify up to ``budget`` bytes of block files against their checksums, continuing
        where the last call stopped (a pass over every block, then the next pass), and remove
        the corrupt ones: the check for hits sent unread (zero-copy). Returns the corrupt
        blocks found."""
        corrupt = checked = 0
        refilled = False
        while checked < budget:
            if not self._scrub_queue:
                if refilled:  # at most one new pass a call (a store of empty blocks checks no bytes)
                    break
                with self._lock:
                    self._scrub_queue = list(self._sizes)
                refilled = True
                if not self._scrub_queue:
                    break
            key = self._scrub_queue.pop()
            try:
                data = self.files.read(key, use=False)
            except CorruptBlock as exc:
                with self._lock:  # still this file: a put of the key (being written) would have taken it out
                    if key not in self._sizes:
                        continue
                    self.files.remove(key)
                    self.forget(key)
                log.warning("scrub: block %s in %s is corrupt (%s): deleted", key, self.files.directory, exc)
                corrupt += 1
                continue
            except OSError as exc:
                log.warning("scrub: block %s in %s could not be read: %s", key, self.files.directory, exc)
                continue
            checked += file_size(len(data)) if data is not None else file_size(0)
        self.scrub_corrupt += corrupt
        return corrupt

    def persist(self) -> None:
        """Stamp the blocks used since the last call with now (their atime), for a restart."""
        with self._lock:
            touched, self._touched = self._touched, set()
        for key in touched:
            self.files.touch(key)

    # ---- capacity ---------------------------------------------------------------------------

    def set_capacity(self, capacity: int) -> int:
        with self._lock:
            self._capacity = capacity
            return self._make_room(0)

    def set_weights(self, weights: Mapping[str, float]) -> None:
        """Tenant -> weight for fair occupancy (tenants not named weigh 1.0); evicts nothing now,
        the next puts that need room do."""
        checked = occupancy.checked_weights(weights)
        with self._lock:
            self._weights = checked

    def usage(self) -> Usage:
        with self._lock:
            stored = sum(self._sizes.values())
            return Usage(self._used, self._capacity, len(self._sizes), len(self._sizes) * file_size(0), stored)

    def held(self) -> dict[str, int]:
        """Tenant -> bytes of the committed block files it holds, a block shared by k tenants
        counting size/k for each (they sum to ``usage().stored``)."""
        with self._lock:
            return {tenant: size for tenant, size in self._held.items() if size}

    def close(self) -> None:
        self.persist()
        fd, self._owner_fd = self._owner_fd, None
        if fd is not None:
            os.close(fd)  # and its lock with it

    def _make_room(self, size: int, putting: str | None = None) -> int:
        evicted = 0
        while self._used + size > self._capacity:
            victim = self._victim(putting)
            if victim is None:
                break
            self._used -= self._drop(victim)
            self._touched.discard(victim)
            try:
                self.files.remove(victim)
            except OSError as exc:  # its bytes stay on disk, uncounted, until a check or restart
                log.warning("could not remove evicted block %s: %s", victim, exc)
            evicted += 1
        return evicted

    def _victim(self, putting: str | None) -> str | None:
        """The next block to evict: the least used of the tenant most over its share, if any
        (``policies.occupancy``), else the least used of all. O(tenants) + one order's pick."""
        if self.fair:
            tenant = occupancy.victim_tenant(self._held, self._weights, self._capacity, putting)
            order = self._tenant_orders.get(tenant) if tenant is not None else None
            if order is not None:
                victim = next(iter(order.victims()), None)
                if victim is not None:
                    return victim
        return next(iter(self._order.victims()), None)

    # ---- tenants' blocks --------------------------------------------------------------------

    def _admit(self, key: str, size: int, holders: tuple[str, ...]) -> None:
        """Count a committed block (a newcomer to the orders: no reads yet)."""
        self._sizes[key] = size
        self._holders[key] = holders
        self._order.add(key)
        self._charge(key, 1)

    def _drop(self, key: str) -> int:
        """Uncount a committed block; returns its size."""
        self._charge(key, -1)
        self._order.remove(key)
        self._holders.pop(key, None)
        return self._sizes.pop(key)

    def _claim(self, key: str, tenant: str) -> None:
        """``tenant`` read the block: it holds it too (an unclaimed block becomes its alone)."""
        holders = self._holders[key]
        if tenant in holders or len(holders) >= MAX_HOLDERS:
            return
        self._charge(key, -1)
        self._holders[key] = (*holders, tenant)
        self._charge(key, 1)

    def _charged(self, key: str) -> tuple[str, ...]:
        return self._holders[key] or _UNCLAIMED

    def _charge(self, key: str, sign: int) -> None:
        """Add (1) or take (-1) the block's split bytes to or from its holders, and the block to or
        from their orders."""
        holders = self._holders[key] or _UNCLAIMED
        parts = occupancy.split(self._sizes[key], len(holders)) if len(holders) > 1 else (self._sizes[key],)
        held, orders = self._held, self._tenant_orders
        if sign > 0:
            reads = self._order.reads(key)
            for tenant, part in zip(holders, parts):
                held[tenant] = held.get(tenant, 0) + part
                order = orders.get(tenant)
                if order is None:
                    order = orders[tenant] = self._new_order()
                order.add(key, reads)
            return
        for tenant, part in zip(holders, parts):
            held[tenant] -= part
            order = orders[tenant]
            order.remove(key)
            if not len(order):
                del orders[tenant], held[tenant]

    def _name(self, tenant: str) -> str:
        return self._names.setdefault(tenant, tenant)


def _joined(holders: tuple[str, ...], tenant: str) -> tuple[str, ...]:
    """The holders of a block put by ``tenant`` over one held by ``holders`` (same bytes: ids
    name content), the putter first, at most ``MAX_HOLDERS``."""
    return (tenant, *(h for h in holders if h != tenant))[:MAX_HOLDERS]


class DirectoryTaken(OSError):
    """Another process manages this tier's directory (a second node on the same cache dir)."""


def _take(directory: str) -> int:
    """An exclusive lock on the directory's ``manager.lock``, held while the fd is open (the
    kernel drops it when the process ends, however it ends)."""
    fd = os.open(os.path.join(directory, "manager.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise DirectoryTaken(f"{directory} is managed by another process (another node on this cache dir?)") from None
    return fd


def _remove_old_layout(files: BlockFiles) -> None:
    """A directory filled by lakegate's earlier store (diskcache: cache.db and files under
    two-level hex folders) holds nothing this one reads: its files are removed, once."""
    old_db = os.path.join(files.directory, "cache.db")
    if not os.path.exists(old_db):
        return
    log.info("removing %s's blocks in the old (diskcache) layout", files.directory)
    for entry in os.scandir(files.directory):
        if entry.name in ("blocks", "tmp", "manager.lock"):
            continue
        with suppress(OSError):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)


def _size_on_disk(files: BlockFiles, key: str) -> int | None:
    try:
        return os.stat(files.path(key)).st_size
    except FileNotFoundError:
        return None


class LocalSpace:
    """A ``Space`` used by the one process that owns it (``SpaceLike``)."""

    def __init__(self, space: Space) -> None:
        self.space = space

    def reserve(self, key: str, size: int, tenant: str = NO_TENANT) -> Grant:
        return self.space.reserve(key, size, tenant=tenant)

    def commit(self, key: str) -> None:
        self.space.commit(key)

    def abort(self, key: str) -> None:
        self.space.abort(key)

    def forget(self, key: str) -> None:
        self.space.forget(key)

    def used(self, reads: dict[str, int], tenant: str = NO_TENANT) -> None:
        self.space.used(reads, tenant)

    def persist(self) -> None:
        self.space.persist()

    def scrub(self, budget: int) -> int:
        return self.space.scrub(budget)

    def set_capacity(self, capacity: int) -> int:
        return self.space.set_capacity(capacity)

    def usage(self) -> Usage:
        return self.space.usage()

    def held(self) -> dict[str, int]:
        return self.space.held()

    def set_weights(self, weights: Mapping[str, float]) -> None:
        self.space.set_weights(weights)

    def close(self) -> None:
        self.space.close()
