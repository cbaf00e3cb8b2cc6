"""Reuse sampling and miss costs, node-level whatever the number of worker processes: what the
sizing loop (``gateway.loops.sizing``, D3N's adaptive L1/L2 split) and operators' miss-ratio
curves are made of.

Two streams of block references, each the reads one tier can keep:

- ``l1``: this node's clients' block reads of blocks other nodes own (all of them on a node
  alone): the blocks L1 keeps (``policies.tiering``);
- ``l2``: reads of blocks this node owns, by its own clients and by peers (the owner's side of
  the peer API): this node's share of the cluster's L2 stream.

Each worker runs a ``SizingProbe``: a block read is sampled when its id's hash falls under the
threshold of the configured rate (SHARDS' spatial sampling: every reference to a sampled block
is seen, by whichever worker serves it), and the sampled ones, with the read's size, tenant and
whether this node's tiers had the block, go to the node's ``ReuseHub`` as one datagram each on
a Unix socket in the cache directory (``sizing.sock``, mode 0600). Each carries too how many
reads (and bytes) of its stream and tenant this worker served since its last sample of them,
sampled or not: SHARDS_adj's denominator (``Shards.observe``) and the streams' exact rates. Sending costs the read path
one ``sendto`` for one read in a hundred, never waits (a full queue drops the sample, counted)
and keeps the order in which the workers served the reads: the node's interleaved stream, which
is what the shared tiers see. Fills are timed by the read path and sent the same way: what an
L1 miss cost (a fetch from the owner's L2; the lake when no owner could serve it) and what an
L2 miss cost (a lake fetch), in seconds and bytes.

The hub is one per node: in the supervisor with several workers (``gateway.workers``), in the
node's one process otherwise (where the probe queues each sample for the hub's thread: no socket, and the event loop
never waits for the lock an epoch holds while it reads the curves). It keeps a ``policies.reuse.Shards`` estimator per stream and
per tenant in each stream (at most ``MAX_TENANTS``, each with a quarter of the stream's memory
bound), the miss costs as decayed sums, and the window of references since the last epoch
(bytes referenced, sampled hits: the observed hit ratio). It is thread-safe; the sizing loop
takes a ``HubSnapshot`` each epoch and decays it (``decay``).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import socket
import threading
from contextlib import suppress
from urllib.parse import quote, unquote

from policies import reuse

log = logging.getLogger("lakegate.sizing")

STREAMS = ("l1", "l2")
NO_TENANT = "-"
_MAX_COUNTED = 1024  # (stream, tenant) pairs a probe counts apart
SIZING_SOCKET = "sizing.sock"  # the hub's, in the cache directory (``cachetier.blocks.spaceipc.socket_path``)
MAX_TENANTS = 16  # per stream: the tenants with a curve of their own (the first seen)
_MAX_DATAGRAM = 512
_QUEUE = 1 << 16  # samples queued in-process at most (past it the oldest go)
_COST_PRIOR_BYTES = 1.0  # a cost is known once this many bytes of misses were timed


class SizingProbe:
    """A worker's sampler: block reads and fill timings, sent to the node's hub at ``path``, or,
    in the node's one process, handed to ``hub`` directly."""

    def __init__(self, path: str | None, rate: float, hub: ReuseHub | None = None) -> None:
        self.path = path
        self.hub = hub
        self.threshold = reuse.threshold_for(rate)
        self.sent = self.dropped = 0
        self._unsent: dict[tuple[str, str], list[int]] = {}  # (stream, tenant) -> [reads, bytes] since its last sample
        self._sock: socket.socket | None = None
        if path is not None and hub is None:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._sock.setblocking(False)

    def reference(self, stream: str, hex_id: str, size: int, tenant: str, hit: bool) -> None:
        """A client's (or, for ``l2``, a peer's) read of one block: sampled or not, here."""
        counts = self._unsent.get((stream, tenant))
        if counts is None:
            if len(self._unsent) >= _MAX_COUNTED:  # tenants named by peers: bounded, the rest as "-"
                tenant = NO_TENANT
            counts = self._unsent.setdefault((stream, tenant), [0, 0])
        counts[0] += 1
        counts[1] += size
        h = reuse.block_hash(hex_id)
        if h < self.threshold:
            self._send(f"r {stream} {h} {size} {1 if hit else 0} {quote(tenant, safe='')} {counts[0]} {counts[1]}")
            counts[0] = counts[1] = 0

    def miss(self, tier: str, seconds: float, size: int) -> None:
        """A fill of ``size`` bytes that a miss of ``tier`` cost ``seconds``."""
        if size > 0 and seconds >= 0:
            self._send(f"c {tier} {seconds!r} {size}")

    def _send(self, line: str) -> None:
        if self.hub is not None:
            self.hub.enqueue(line.encode())  # never waits: the hub's thread takes it
            self.sent += 1
            return
        if self._sock is None or self.path is None:
            return
        try:
            self._sock.sendto(line.encode(), self.path)
            self.sent += 1
        except OSError:  # the hub's queue is full, or it is not (or no longer) there
            self.dropped += 1

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


@dataclasses.dataclass
class _Cost:
    seconds: float = 0.0  # decayed sums of the timed misses
    size: float = 0.0
    count: float = 0.0

    def add(self, seconds: float, size: int) -> None:
        self.seconds += seconds
        self.size += size
        self.count += 1

    def decay(self, factor: float) -> None:
        self.seconds *= factor
        self.size *= factor
        self.count *= factor


@dataclasses.dataclass
class _Window:
    references: int = 0  # sampled, since the last snapshot
    hits: int = 0
    all_references: int = 0  # sampled or not, as the probes counted them
    size: float = 0.0  # bytes of all of them


@dataclasses.dataclass(frozen=True)
class StreamSnapshot:
    """One stream as an epoch sees it."""

    estimator: reuse.Shards  # the hub's own (read it under ``ReuseHub.lock``, or after ``snapshot``)
    tenants: dict[str, reuse.Shards]
    sampled_references: int  # in the window
    sampled_hits: int
    references: int  # in the window, sampled or not
    referenced_bytes: float  # bytes of those
    cost_per_byte: float | None  # seconds a missed byte costs; None: no miss timed yet
    cost_per_miss: float | None  # seconds one miss costs
    misses_timed: float  # decayed count of timed misses

    @property
    def observed_hit_ratio(self) -> float | None:
        return self.sampled_hits / self.sampled_references if self.sampled_references else None


@dataclasses.dataclass(frozen=True)
class HubSnapshot:
    streams: dict[str, StreamSnapshot]
    received: int  # datagrams since start
    malformed: int


class ReuseHub:
    """The node's estimators and miss costs, fed by its workers' probes over a datagram socket
    at ``path`` (``serve``), or directly (``handle``, tests)."""

    def __init__(self, rate: float, memory: int, path: str | None = None) -> None:
        self.rate = rate
        self.memory = memory
        self.path = path
        self.lock = threading.Lock()
        self._streams = {name: reuse.Shards(rate, memory) for name in STREAMS}
        self._tenants: dict[str, dict[str, reuse.Shards]] = {name: {} for name in STREAMS}
        self._costs = {name: _Cost() for name in STREAMS}
        self._windows = {name: _Window() for name in STREAMS}
        self.received = self.malformed = 0
        # samples of probes in this process: appended without a lock (the event loop never waits
        # for an epoch holding ``lock``), taken by ``drain`` (the drain thread, each snapshot)
        self._queue: collections.deque[bytes] = collections.deque(maxlen=_QUEUE)
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._drainer: threading.Thread | None = None
        self._closing = threading.Event()

    # ---- samples from this process ----------------------------------------------------------

    def enqueue(self, data: bytes) -> None:
        self._queue.append(data)

    def drain(self) -> None:
        """Handle the samples this process's probes queued."""
        while self._queue:
            try:
                data = self._queue.popleft()
            except IndexError:
                return
            self.handle(data)

    def start_draining(self, interval: float = 0.05) -> None:
        """A thread that drains the queue every ``interval`` seconds until ``close``."""
        def run() -> None:
            while not self._closing.wait(interval):
                self.drain()

        self._drainer = threading.Thread(target=run, name="sizing-drain", daemon=True)
        self._drainer.start()

    # ---- the socket -------------------------------------------------------------------------

    def serve(self) -> None:
        """Listen at ``path`` (mode 0600) in a thread of its own."""
        assert self.path is not None
        with suppress(FileNotFoundError):
            os.unlink(self.path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        old = os.umask(0o177)
        try:
            sock.bind(self.path)
        finally:
            os.umask(old)
        with suppress(OSError):  # a larger queue: bursts of samples from every worker
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        sock.settimeout(0.5)
        self._sock = sock
        self._thread = threading.Thread(target=self._receive, name="sizing-hub", daemon=True)
        self._thread.start()

    def _receive(self) -> None:
        sock = self._sock
        assert sock is not None
        while not self._closing.is_set():
            try:
                data = sock.recv(_MAX_DATAGRAM)
            except TimeoutError:
                continue
            except OSError:
                return
            self.handle(data)

    def handle(self, data: bytes) -> None:
        """One probe's datagram; a malformed one is counted and dropped (the socket is the
        node's own user's, but a bad line must not stop the hub)."""
        try:
            words = data.decode().split()
            kind, stream = words[0], words[1]
            if stream not in STREAMS:
                raise ValueError(stream)
            if kind == "r":
                h, size, hit, reads, volume = int(words[2]), int(words[3]), words[4] == "1", int(words[6]), int(words[7])
                if not 0 <= h < reuse.MODULUS or size < 0 or reads < 1 or volume < 0:
                    raise ValueError(words)
                self.reference(stream, h, size, unquote(words[5]), hit, reads, volume)
            elif kind == "c":
                seconds, size = float(words[2]), int(words[3])
                if not 0 <= seconds < 1e6 or size <= 0:
                    raise ValueError(words)
                with self.lock:
                    self._costs[stream].add(seconds, size)
            else:
                raise ValueError(kind)
            self.received += 1
        except (ValueError, IndexError, UnicodeDecodeError):
            self.malformed += 1

    # ---- the estimators ---------------------------------------------------------------------

    def reference(self, stream: str, h: int, size: int, tenant: str, hit: bool, reads: int = 1,
                  volume: int | None = None) -> None:
        """A sampled read (of hash ``h``, ``size`` bytes), the last of ``reads`` reads of its
        stream and tenant (``volume`` bytes) its worker served since its previous sample."""
        volume = size if volume is None else volume
        with self.lock:
            estimator = self._streams[stream]
            window = self._windows[stream]
            window.all_references += reads
            window.size += volume
            estimator.observe(reads, volume)
            tenants = self._tenants[stream]
            own = tenants.get(tenant)
            if own is None and len(tenants) < MAX_TENANTS:
                own = tenants[tenant] = reuse.Shards(self.rate, max(64 << 10, self.memory // 4))
            if own is not None:
                own.observe(reads, volume)
                own.record(h, size)
            if h >= estimator.threshold:  # the rate lowered to fit the memory bound
                return
            window.references += 1
            window.hits += hit
            estimator.record(h, size)

    def snapshot(self) -> HubSnapshot:
        """Each stream's estimators (the live ones: the caller reads them under ``lock`` or in
        this thread before the next reference), costs and window; the window starts again."""
        self.drain()
        with self.lock:
            streams = {}
            for name in STREAMS:
                cost, window = self._costs[name], self._windows[name]
                known = cost.size >= _COST_PRIOR_BYTES
                streams[name] = StreamSnapshot(
                    self._streams[name], dict(self._tenants[name]), window.references, window.hits,
                    window.all_references, window.size,
                    cost.seconds / cost.size if known else None, cost.seconds / cost.count if known else None,
                    cost.count,
                )
                self._windows[name] = _Window()
            return HubSnapshot(streams, self.received, self.malformed)

    def decay(self, factor: float, cost_factor: float | None = None) -> None:
        """Old behaviour fades: every histogram weight times ``factor``, the cost sums times
        ``cost_factor`` (default the same)."""
        with self.lock:
            for name in STREAMS:
                self._streams[name].decay(factor)
                for estimator in self._tenants[name].values():
                    estimator.decay(factor)
                self._costs[name].decay(factor if cost_factor is None else cost_factor)

    def close(self) -> None:
        self._closing.set()
        if self._drainer is not None:
            self._drainer.join(2)
        if self._sock is not None:
            self._sock.close()
        if self._thread is not None:
            self._thread.join(2)
        if self.path is not None:
            with suppress(FileNotFoundError):
                os.unlink(self.path)
