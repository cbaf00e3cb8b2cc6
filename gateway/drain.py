"""SIGTERM's drain: how a node stops (issue 16), for one worker (``lakegate serve``, uvicorn in
this process) and for several (``gateway.workers.Supervisor`` SIGTERMs each worker, waits for
them all, exits 0).

The shutdown order, in each worker process:

1. SIGTERM (or SIGINT) arrives: ``DrainingServer.handle_exit`` starts the process's ``Drain``.
   From this moment ``/_lakegate/health/ready`` answers 503 ``draining`` (on connections still
   open) and uvicorn stops: its listening socket closes (a new connection is refused), idle
   keep-alive connections close, busy ones close once their response is sent.
2. At once, the node leaves the ring (``Departure``): its heartbeats stop first, so no
   heartbeat follows the goodbye, then ``wire.Goodbye`` goes to every live peer, which drops the
   node from its ring now (not after the failure timeout) and ignores its heartbeats for a
   failure timeout (a late one of another worker of the node). Said at SIGTERM rather than
   after the in-flight requests, because from SIGTERM on the node refuses new connections: a
   peer that still routed block reads to it would only get refusals. The node's own in-flight
   requests keep using its view of the ring (its peers still answer it).
3. In-flight requests finish, for at most ``LAKEGATE_SHUTDOWN_TIMEOUT`` seconds (uvicorn's
   ``timeout_graceful_shutdown``; past it they are cancelled).
4. The app's lifespan ends: the worker that runs the write-back flusher waits, for at most
   ``LAKEGATE_SHUTDOWN_FLUSH_TIMEOUT`` seconds, until the writes this node received (journal
   position 0) are in the lake (``Flusher.drain``). What is left stays journaled (fsynced, and
   copied to its K - 1 peers), and is flushed after the next start (``recover_journal``) or by
   a peer holding a copy: the node is no longer live for them, so they may flush it meanwhile
   too (the same version twice, the same bytes and ETag in the lake). With several workers, a
   write another worker finishes after the flusher's worker has exited stays journaled too.
5. Everything the node opened closes in reverse order (``gateway.wiring``); the process exits 0
   (uvicorn would re-raise the signal and die by it; ``DrainingServer`` does not).

The supervisor's SIGKILL grace is longer than the whole drain (``supervisor_grace``).

On the receiving side, a peer's goodbye reaches one worker of this node (whichever the kernel
gave the connection to); ``SharedGoodbyes`` tells the node's other workers within a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import json
import os
import threading
import time
from collections.abc import Callable, Generator
from pathlib import Path

import uvicorn
from uvicorn.server import HANDLED_SIGNALS

from cachetier.cluster import wire
from cachetier.cluster.node import Cluster
from cachetier.cluster.ring import Member

log = logging.getLogger("lakegate.drain")

_GOODBYE_TIMEOUT = 2.0  # seconds each peer gets to acknowledge the goodbye
_CLOSE_MARGIN = 15.0  # seconds for the goodbye and the node's closing, past the two timeouts


class Drain:
    """Whether this process is draining (it received SIGTERM), and who waits for it. Started
    from a signal handler, so ``start`` only records and schedules; waiters run on their loop."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.since: float | None = None
        self._wakers: list[Callable[[], None]] = []

    @property
    def draining(self) -> bool:
        return self.since is not None

    def start(self) -> None:
        if self.since is not None:
            return
        self.since = self.clock()
        for wake in list(self._wakers):
            wake()

    async def wait(self) -> None:
        """Return once the drain has started."""
        if self.draining:
            return
        loop = asyncio.get_running_loop()
        started = asyncio.Event()

        def wake() -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(started.set)

        self._wakers.append(wake)
        try:
            await started.wait()
        finally:
            self._wakers.remove(wake)


PROCESS_DRAIN = Drain()  # the process's: signals are the process's


class DrainingServer(uvicorn.Server):
    """uvicorn's server, which starts ``drain`` when SIGTERM or SIGINT arrives and, once it has
    shut down gracefully, returns instead of re-raising the signal (exit status 0)."""

    def __init__(self, config: uvicorn.Config, drain: Drain = PROCESS_DRAIN) -> None:
        super().__init__(config)
        self.drain = drain

    def handle_exit(self, sig: int, frame: object) -> None:
        self.drain.start()
        super().handle_exit(sig, frame)  # type: ignore[arg-type]

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        original = {sig: signal.signal(sig, self.handle_exit) for sig in HANDLED_SIGNALS}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)


def supervisor_grace(shutdown_timeout: float, flush_timeout: float) -> float:
    """How long the supervisor waits for a SIGTERMed worker before SIGKILL: the whole drain."""
    return shutdown_timeout + flush_timeout + _CLOSE_MARGIN


class Departure:
    """The node's leaving of the ring, once: when the drain starts or, without one, when the node
    closes. The heartbeat loop stops first, so no heartbeat of this process follows its goodbye."""

    def __init__(self, cluster: Cluster, heartbeat: asyncio.Task[None], timeout: float = _GOODBYE_TIMEOUT) -> None:
        self.cluster = cluster
        self.heartbeat = heartbeat
        self.timeout = timeout
        self.done = False

    async def leave(self) -> None:
        if self.done:
            return
        self.done = True
        self.heartbeat.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.heartbeat
        try:
            await self.cluster.leave(self.timeout)
        except Exception:  # noqa: BLE001 - a failed goodbye leaves the peers their failure timeout
            log.exception("goodbye failed")

    async def on_drain(self, drain: Drain) -> None:
        await drain.wait()
        await self.leave()


class SharedGoodbyes:
    """With several workers: the goodbyes this worker received, told to the node's others. Each
    worker keeps the goodbyes it received in a file of its own in ``directory`` (a folder of its
    own: the workers' board reads every JSON file in its folder), written whole and renamed;
    every ``interval`` seconds each applies the others' that it has not applied yet and that are
    younger than the failure timeout (older ones: the peer left every ring by silence already,
    or it has restarted since)."""

    def __init__(self, directory: Path, cluster: Cluster, *, name: str | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.cluster = cluster
        self.path = directory / f"goodbyes-{name or os.getpid()}.json"
        self.clock = clock  # wall-clock seconds: the stamps are compared across processes
        self.received: dict[str, list[object]] = {}  # node id -> [member doc, when]
        self.applied: dict[str, float] = {}  # node id -> the stamp of the goodbye last applied
        cluster.goodbye_heard = self.heard

    def heard(self, member: Member) -> None:
        now = self.clock()
        self.applied[member.id] = now
        self.received[member.id] = [{"id": member.id, "url": member.url, "weight": member.weight}, now]
        tmp = self.path.with_suffix(".tmp")
        try:
            tmp.write_text(json.dumps(self.received))
            os.replace(tmp, self.path)
        except OSError as exc:  # a full disk: the other workers drop the peer by its silence
            log.warning("could not share %s's goodbye with this node's workers: %s", member.id, exc)

    def apply_others(self) -> None:
        now = self.clock()
        timeout = self.cluster.membership.failure_timeout
        for path in self.directory.glob("goodbyes-*.json"):
            if path == self.path:
                continue
            try:
                doc = json.loads(path.read_text())
            except (OSError, ValueError):
                continue  # a worker's file being replaced, or gone
            for node_id, (member, stamp) in doc.items():
                if stamp > self.applied.get(node_id, 0.0) and now - stamp < timeout:
                    self.applied[node_id] = stamp
                    self.cluster.apply_goodbye(wire.member_from(member))

    async def loop(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await asyncio.to_thread(self.apply_others)
            except Exception:  # noqa: BLE001 - the loop must outlive one bad round
                log.exception("applying the other workers' goodbyes failed")
