"""Miss-ratio curves from sampled reuse distances (issue 13, item 1): SHARDS, fixed-size variant.

Waldspurger et al., "Efficient MRC Construction with SHARDS" (FAST'15). A reference to a block
is sampled when the block's hash is below a threshold ``T`` (hashes in ``[0, MODULUS)``, rate
``T / MODULUS``), so either every reference to a block is seen or none is. On the sampled
references only, the estimator computes each reference's reuse distance IN BYTES: the sum of
the sizes of the distinct blocks referenced since the previous reference to the same block
(Mattson's LRU stack distance weighted by size), scaled by ``1 / rate``.

Convention: a reference of distance ``d`` to a block of ``size`` bytes hits an LRU cache of
``c`` bytes when ``d + size <= c`` (the block and everything used since must fit). A first
reference is a cold miss (infinite distance). The tests' exact Mattson reference uses the same.

Data structures (all ``array`` buffers, no per-entry Python objects, allocated once):

- positions: every sampled reference takes the next logical position; a Fenwick tree over the
  positions holds each tracked block's size at its latest position, so the distance is
  ``tracked bytes - prefix(last position)`` in O(log n). When the positions run out (twice the
  entry bound) they are renumbered in place in O(n), so the tree never grows.
- the tracked blocks: an open-addressing table (linear probing, load <= 1/2, backward-shift
  deletion) of ``hash << 24 | position`` in an int64. A block is known by its hash alone, so the
  hash is 36 bits (9 hex digits of the id): with 24 bits, the 1% sampled space holds only 168k
  values, 10^4 sampled blocks collide ~300 times, and every collision is a false hit (measured:
  a pure scan, all cold, read 0.02 below the exact curve). At 36 bits: 0.07 collisions.
- the histogram: 128 buckets per octave of ``d / rate + size`` (0.54% wide, interpolated
  linearly in log2 within a bucket) up to 2^48 bytes, a count and a byte weight per bucket
  (98 KB); cold misses apart.

Fixed size: when the tracked blocks exceed the bound derived from ``memory_bytes``, the 1/64
with the largest hashes are evicted and ``T`` is lowered to the smallest evicted hash, and every
histogram weight is scaled by ``new_rate / old_rate`` (so the weights stay comparable with what
the lower rate will add), as SHARDS does. Eviction finds those hashes with one scan of the
table (a min-heap of 1/64 of the bound), so it keeps no heap per entry.

SHARDS_adj: the denominator of a miss ratio is the sampled weight, unless the caller reports all
references with ``observe`` (sampled or not: two counters per worker); then it is the EXPECTED
sampled weight ``observed * rate``, which is SHARDS_adj's correction (the shortfall or excess of
sampled references is put at distance 0, i.e. counted as hits). It matters on skewed traces: a
hot block that happens to be sampled (or not) moves the plain estimate by its share of the
references, nearly all hits. Measured on the tests' Zipf trace: see below.

Memory accounting: ``memory()`` sums the buffers (``sys.getsizeof``) plus a fixed allowance for
the object; the entry bound is the largest one whose table (8 bytes x 2..4 slots per entry),
positions and tree (2 x 16 bytes per entry), the full-range histogram and the eviction scan's
temporary heap fit in ``memory_bytes``: 16384 blocks for 1 MiB (889 KB allocated at once, so
the footprint does not move with the workload). Held under tracemalloc in the tests (peak
included; no buffer is ever copied or grown).

Measured (tests/unit/test_policy_reuse.py: 1e6 references per trace, 2e6 for mixed; rate 1%,
1 MiB; 101 cache sizes from 0 to 1.1x the distinct bytes; MAE against the exact Mattson curve,
reference / byte curve, and the plain SHARDS reference MAE without ``observe``):

    zipf      0.0046 / 0.0045   (plain 0.052)      loop      0.0025 / 0.0050   (plain 0.000)
    scan      0.0070 / 0.0091   (plain 0.000)      mixed     0.0077 / 0.0085   (plain 0.071)
    shifting  0.0026 / 0.0034   (plain 0.021)

The error that remains is sampling's: a miss ratio dominated by n sampled blocks is off by about
1/sqrt(n) of its share (mixed with 1e6 references, 5000 sampled scan blocks: 0.0102). The memory
bound held under tracemalloc: 886 KB held, 897 KB peak for 1 MiB with 60k sampled blocks (16384
tracked, the rate lowered to 0.27%). Cost (CPython 3.11, shared 2-core machine): ~85 ns per
reference at 1% including the caller's pre-filter; ~5-9 us per sampled record.
"""

from __future__ import annotations

import heapq
import math
import sys
from array import array
from collections.abc import Sequence
from itertools import accumulate, islice

HASH_HEX_DIGITS = 9
MODULUS = 1 << (4 * HASH_HEX_DIGITS)  # 36 bits: see the module docstring on collisions
BUCKETS_PER_OCTAVE = 128
MAX_OCTAVES = 48  # histogram range: 2^48 bytes (256 TiB) of scaled distance
HISTOGRAM_BUCKETS = BUCKETS_PER_OCTAVE * MAX_OCTAVES
EVICTION_FRACTION = 64  # evict limit // 64 blocks at a time
OBJECT_ALLOWANCE = 4096  # the instance, its attribute dict, the arrays' headers

_POSITION_BITS = 24  # a table entry is hash << 24 | position, in an int64
_POSITION_MASK = (1 << _POSITION_BITS) - 1
_MAX_ENTRIES = (1 << (_POSITION_BITS - 1)) - 1
_GOLDEN = 0x9E3779B1  # multiplicative hashing into the table


def block_hash(hex_id: str) -> int:
    """The sampling hash of a block id (40 hex digits of blake2b, uniform): its first 36 bits."""
    return int(hex_id[:HASH_HEX_DIGITS], 16)


def threshold_for(rate: float) -> int:
    """The threshold ``T`` that samples ``rate`` of the hashes (at least 1)."""
    if not 0.0 < rate <= 1.0:
        raise ValueError(f"sampling rate must be in (0, 1], not {rate!r}")
    return max(1, round(rate * MODULUS))


def _histogram_bytes() -> int:
    return 2 * sys.getsizeof(array("d", [0.0]) * HISTOGRAM_BUCKETS)


def _table_bits(limit: int) -> int:
    return max(4, (2 * limit - 1).bit_length())


def _entries_bytes(limit: int) -> int:
    """The buffers for ``limit`` tracked blocks: table, sizes and tree, and the eviction scan."""
    table = 8 << _table_bits(limit)
    positions = 2 * 8 * (2 * limit + 1)
    eviction_heap = 48 * (limit // EVICTION_FRACTION + 1)
    return table + positions + eviction_heap


def entries_within(memory_bytes: int) -> int:
    """The most blocks an estimator of ``memory_bytes`` can track (0: too small to work)."""
    budget = memory_bytes - OBJECT_ALLOWANCE - _histogram_bytes()
    low, high = 0, max(0, budget // 32)
    while low < high:  # largest limit whose buffers fit
        middle = (low + high + 1) // 2
        if _entries_bytes(middle) <= budget:
            low = middle
        else:
            high = middle - 1
    return min(low, _MAX_ENTRIES)


class Shards:
    """A fixed-size SHARDS estimator of one reference stream's LRU miss-ratio curve in bytes."""

    def __init__(self, rate: float = 0.01, memory_bytes: int = 1 << 20) -> None:
        self.threshold = threshold_for(rate)
        self.limit = entries_within(memory_bytes)
        if self.limit < 64:
            raise ValueError(f"memory_bytes {memory_bytes} is too small for a SHARDS estimator")
        bits = _table_bits(self.limit)
        self._mask = (1 << bits) - 1
        self._shift = 32 - bits
        self._table = array("q", [0]) * (1 << bits)
        self._capacity = 2 * self.limit  # positions 1..capacity
        self._sizes = array("q", [0]) * (self._capacity + 1)  # size at a live position, else 0
        self._tree = array("q", [0]) * (self._capacity + 1)  # Fenwick tree over _sizes
        self._clock = 0  # last position used
        self._tracked = 0
        self._tracked_bytes = 0
        self._counts = array("d", [0.0]) * HISTOGRAM_BUCKETS
        self._bytes = array("d", [0.0]) * HISTOGRAM_BUCKETS
        self._cold_count = 0.0
        self._cold_bytes = 0.0
        self._weight = 0.0  # sampled references, cold included
        self._weight_bytes = 0.0
        self._observed: tuple[float, float] | None = None  # all references and bytes (SHARDS_adj)

    @property
    def rate(self) -> float:
        return self.threshold / MODULUS

    # -- recording --------------------------------------------------------------------------

    def record(self, h: int, size: int) -> None:
        """One reference to the block of hash ``h`` and ``size`` bytes; ignored when
        ``h >= threshold``. A size below 1 counts as 1 (a live position is one with a size)."""
        if h >= self.threshold:
            return
        if size < 1:
            size = 1
        if self._clock == self._capacity:
            self._compact()
        slot = self._slot(h)
        position = self._clock = self._clock + 1
        self._weight += 1.0
        self._weight_bytes += size
        if slot >= 0:
            entry = self._table[slot]
            last = entry & _POSITION_MASK
            distance = self._tracked_bytes - self._prefix(last)
            self._remove(last)
            self._table[slot] = entry - last + position
            self._count(distance * MODULUS / self.threshold + size, size)
            self._place(position, size)
        else:
            self._table[~slot] = h << _POSITION_BITS | position
            self._tracked += 1
            self._cold_count += 1.0
            self._cold_bytes += size
            self._place(position, size)
            if self._tracked > self.limit:
                self._evict()

    def observe(self, references: float, referenced_bytes: float) -> None:
        """All references of the stream (sampled or not) since the last call, for SHARDS_adj."""
        count, volume = self._observed or (0.0, 0.0)
        self._observed = (count + references, volume + referenced_bytes)

    def decay(self, factor: float) -> None:
        """Multiply every histogram weight by ``factor`` in (0, 1]: old behaviour fades."""
        if not 0.0 < factor <= 1.0:
            raise ValueError(f"decay factor must be in (0, 1], not {factor!r}")
        self._scale(factor)
        if self._observed is not None:
            self._observed = (self._observed[0] * factor, self._observed[1] * factor)

    # -- queries ----------------------------------------------------------------------------

    def miss_ratio(self, cache_bytes: int) -> float:
        """The fraction of references an LRU cache of ``cache_bytes`` misses (1.0 with none)."""
        expected = self._observed[0] * self.rate if self._observed else self._weight
        return _ratio(self._weight - self._hits(self._counts, cache_bytes), expected)

    def byte_miss_ratio(self, cache_bytes: int) -> float:
        """Missed bytes over referenced bytes for an LRU cache of ``cache_bytes``."""
        expected = self._observed[1] * self.rate if self._observed else self._weight_bytes
        return _ratio(self._weight_bytes - self._hits(self._bytes, cache_bytes), expected)

    def curve(self, sizes: Sequence[int]) -> list[tuple[int, float]]:
        """``miss_ratio`` at each size, from one pass over the histogram (a prefix sum): a
        hundred sizes cost about one, not a hundred passes (measured: 26 ms -> under 2 ms)."""
        expected = self._observed[0] * self.rate if self._observed else self._weight
        return [(size, _ratio(self._weight - hits, expected)) for size, hits in zip(sizes, _hits_at(self._counts, sizes))]

    def byte_curve(self, sizes: Sequence[int]) -> list[tuple[int, float]]:
        expected = self._observed[1] * self.rate if self._observed else self._weight_bytes
        return [(size, _ratio(self._weight_bytes - hits, expected))
                for size, hits in zip(sizes, _hits_at(self._bytes, sizes))]

    @property
    def references(self) -> float:
        """Estimated references in the (decayed) histogram."""
        return self._weight / self.rate

    @property
    def referenced_bytes(self) -> float:
        return self._weight_bytes / self.rate

    @property
    def footprint(self) -> int:
        """Estimated distinct bytes of the tracked blocks (the working set seen)."""
        return round(self._tracked_bytes / self.rate)

    @property
    def tracked(self) -> int:
        return self._tracked

    def memory(self) -> int:
        """Bytes this estimator holds: its buffers plus a fixed allowance for the object."""
        buffers = (self._table, self._sizes, self._tree, self._counts, self._bytes)
        return OBJECT_ALLOWANCE + sum(sys.getsizeof(b) for b in buffers)

    # -- the histogram ------------------------------------------------------------------------

    def _count(self, stack_bytes: float, size: int) -> None:
        index = min(int(math.log2(stack_bytes) * BUCKETS_PER_OCTAVE), HISTOGRAM_BUCKETS - 1)
        self._counts[index] += 1.0
        self._bytes[index] += size

    def _hits(self, weights: array[float], cache_bytes: int) -> float:
        """The weight of the reuses whose ``d + size <= cache_bytes``, interpolated in a bucket."""
        if cache_bytes < 1:
            return 0.0
        where = math.log2(cache_bytes) * BUCKETS_PER_OCTAVE
        index = int(where)
        if index >= len(weights):
            return math.fsum(weights)
        return math.fsum(islice(weights, index)) + weights[index] * (where - index)

    def _scale(self, factor: float) -> None:
        for weights in (self._counts, self._bytes):
            for i in range(len(weights)):
                weights[i] *= factor
        self._cold_count *= factor
        self._cold_bytes *= factor
        self._weight *= factor
        self._weight_bytes *= factor

    # -- the tracked blocks -------------------------------------------------------------------

    def _slot(self, h: int) -> int:
        """The table index holding ``h``, or ``~index`` of the empty slot where it would go."""
        table, mask = self._table, self._mask
        i = ((h * _GOLDEN) & 0xFFFFFFFF) >> self._shift
        while True:
            entry = table[i]
            if entry == 0:
                return ~i
            if entry >> _POSITION_BITS == h:
                return i
            i = (i + 1) & mask

    def _delete(self, i: int) -> None:
        """Empty table slot ``i``, shifting later entries of its probe run back (no tombstones)."""
        table, mask, shift = self._table, self._mask, self._shift
        j = i
        while True:
            j = (j + 1) & mask
            entry = table[j]
            if entry == 0:
                break
            home = (((entry >> _POSITION_BITS) * _GOLDEN) & 0xFFFFFFFF) >> shift
            if (i < home <= j) if i <= j else (i < home or home <= j):
                continue  # its home lies between the hole and it: it stays reachable
            table[i] = entry
            i = j
        table[i] = 0

    def _evict(self) -> None:
        """Drop the 1/64 of blocks with the largest hashes and lower the threshold to them."""
        table, count = self._table, self.limit // EVICTION_FRACTION + 1
        doomed: list[int] = []  # a min-heap of the largest hashes seen
        for entry in table:
            if entry:
                h = entry >> _POSITION_BITS
                if len(doomed) < count:
                    heapq.heappush(doomed, h)
                elif h > doomed[0]:
                    heapq.heapreplace(doomed, h)
        new_threshold = doomed[0]
        for h in doomed:
            slot = self._slot(h)
            self._remove(table[slot] & _POSITION_MASK)
            self._delete(slot)
        self._tracked -= len(doomed)
        self._scale(new_threshold / self.threshold)
        self.threshold = new_threshold

    # -- positions and the Fenwick tree -------------------------------------------------------

    def _place(self, position: int, size: int) -> None:
        self._sizes[position] = size
        self._tracked_bytes += size
        tree, n = self._tree, self._capacity
        while position <= n:
            tree[position] += size
            position += position & -position

    def _remove(self, position: int) -> None:
        size = self._sizes[position]
        self._sizes[position] = 0
        self._tracked_bytes -= size
        tree, n = self._tree, self._capacity
        while position <= n:
            tree[position] -= size
            position += position & -position

    def _prefix(self, position: int) -> int:
        tree, total = self._tree, 0
        while position:
            total += tree[position]
            position &= position - 1
        return total

    def _compact(self) -> None:
        """Renumber the live positions 1..tracked in order, in place, and rebuild the tree."""
        sizes, tree, table = self._sizes, self._tree, self._table
        live = 0
        for position in range(1, self._clock + 1):
            size = sizes[position]
            if size:
                live += 1
                sizes[live] = size
                tree[position] = live  # the tree is rebuilt below: borrow it for the new numbers
        for position in range(live + 1, self._clock + 1):
            sizes[position] = 0
        for i in range(len(table)):
            entry = table[i]
            if entry:
                table[i] = entry - (entry & _POSITION_MASK) + tree[entry & _POSITION_MASK]
        n = self._capacity
        tree[0] = 0
        for position in range(1, n + 1):
            tree[position] = sizes[position]
        for position in range(1, n + 1):
            parent = position + (position & -position)
            if parent <= n:
                tree[parent] += tree[position]
        self._clock = live


def _hits_at(weights: array[float], sizes: Sequence[int]) -> list[float]:
    """``Shards._hits`` at every size, over one prefix sum of the histogram."""
    prefix = array("d", accumulate(weights, initial=0.0))  # 8 bytes a bucket: within the memory bound
    hits = []
    for cache_bytes in sizes:
        if cache_bytes < 1:
            hits.append(0.0)
            continue
        where = math.log2(cache_bytes) * BUCKETS_PER_OCTAVE
        index = int(where)
        hits.append(prefix[-1] if index >= len(weights) else prefix[index] + weights[index] * (where - index))
    return hits


def _ratio(misses: float, total: float) -> float:
    if total <= 0.0:
        return 1.0
    return min(1.0, max(0.0, misses / total))
