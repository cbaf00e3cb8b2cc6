"""A node served by several worker processes: ``lakegate serve --workers N`` (LAKEGATE_WORKERS;
default one per core).

The ``lakegate serve`` process becomes the node's supervisor. It checks the settings, opens the
space manager of each cache tier (``cachetier.blocks.space``: capacity and eviction, rebuilt from
the disk) and serves them on a Unix socket in the cache directory (``cachetier.blocks.spaceipc``),
creates the metadata write stamps (``cachetier.read.generations``), reserves the port, and
starts N workers (``Supervisor``), starting a new one in place of any that dies. Each worker
serves uvicorn on a socket of its own bound to the node's address with SO_REUSEPORT (the kernel
spreads connections over them), and is a whole gateway: same settings, same node id and peer
URL (one member of the cluster, one ring position), reading and writing the node's block files
directly (a block any worker fetched is a hit for all), asking the space manager only to put,
and reporting its reads in batches.

Node-level state, with several workers:

- blocks and their capacity (L1 and L2): one directory per tier, one manager (above);
- the L1/L2 split (``gateway.loops.sizing``): one sizing hub and loop, in the supervisor beside
  the managers it resizes; each worker samples the reads it serves and times its fills, and
  sends them to the hub as datagrams (``cachetier.telemetry.reuse``), so the curves are the
  node's interleaved stream; the report the hub writes is what every worker's admin endpoint
  and /metrics show;
- metadata: each worker caches its own, and a write or a peer's invalidation through any worker
  makes every worker's entry of the key stale before the write is acknowledged (write stamps);
- the HTTP bounds of the node are split: each worker takes LAKEGATE_MAX_CONNECTIONS / N
  connections and LAKEGATE_CACHE_ON_WRITE_BUDGET / N bytes of buffered uploads, so the node
  holds its bounds whatever worker the kernel hands a connection to;
- membership: each worker heartbeats its peers as the same member and keeps its own view of
  the ring (the same from the same heartbeats); a peer's heartbeat or fetch reaches any worker;
- the write-back journal (``cachetier.write``): one directory with one sqlite index every
  worker opens (WAL: each commits its own writes, each sees the others'); the supervisor
  recovers it once before the workers start; each worker takes the writes it is sent; one
  worker at a time runs the flusher (a file lock in the journal's directory);
- counters: each worker counts its own requests and publishes them every second; /metrics and
  the admin stats add up the node's workers (``gateway.workerstats``); the HTTP layer's refusal
  counter (lakegate_http_refused_total) stays per worker.

A worker stops when the supervisor dies (PR_SET_PDEATHSIG), so no orphan keeps the port or
the cache. A worker killed mid-put leaves a reservation and a tmp/ file; the space manager
settles both when the worker's connection closes (``cachetier.blocks.space``).
"""

from __future__ import annotations

import ctypes
import dataclasses
import logging
import multiprocessing
import multiprocessing.process
import os
import shutil
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path

from cachetier.blocks.files import BlockFiles
from cachetier.blocks.space import DirectoryTaken, Space
from cachetier.blocks.spaceipc import SpaceConnection, SpaceServer, socket_path
from cachetier.read.generations import Generations
from gateway.drain import supervisor_grace
from gateway.loops.sizing import TierControl, initial_split, start_sizing
from gateway.wiring import recover_journal
from gateway.settings import Settings
from gateway.workerstats import WorkerBoard

STARTUP_FAILURE = 3  # uvicorn's exit status when a server cannot start
SETTINGS_FAILURE = 2  # the CLI's, for settings or a tenants file it cannot load (changed since the start)

log = logging.getLogger("lakegate.workers")

# Set by the supervisor for its workers: where the space manager listens.
SPACE_SOCKET_ENV = "LAKEGATE_SPACE_SOCKET"
_PR_SET_PDEATHSIG = 1


def generations_path(settings: Settings) -> Path:
    return settings.cache.directory / "generations"


def board_path(settings: Settings) -> Path:
    return settings.cache.directory / "workers"


def worker_share(settings: Settings) -> Settings:
    """The settings of one of ``settings.server.workers`` workers: the node's bounds split."""
    n = settings.server.workers
    server = settings.server
    http = dataclasses.replace(server.http, max_connections=max(1, server.http.max_connections // n))
    on_write = settings.cache.on_write
    cache = dataclasses.replace(
        settings.cache, on_write=dataclasses.replace(on_write, budget_bytes=on_write.budget_bytes // n)
    )
    return dataclasses.replace(settings, server=dataclasses.replace(server, http=http), cache=cache)


def open_spaces(stack: ExitStack, settings: Settings) -> SpaceServer | None:
    """The node's space managers, served to its workers; None when the cache is off."""
    if not settings.cache.enabled:
        return None
    cache = settings.cache
    l1, l2 = initial_split(settings)
    capacities = {"l1": l1}
    if settings.cluster is not None:
        capacities["l2"] = l2
    spaces = {}
    for tier, capacity in capacities.items():
        space = Space(BlockFiles(cache.directory / tier), capacity, cache.eviction, fair=settings.fairness.occupancy)
        evicted = space.load()
        usage = space.usage()
        log.info("%s: %d blocks, %d bytes of %d%s", tier.upper(), usage.blocks, usage.used, capacity,
                 f" ({evicted} evicted to fit)" if evicted else "")
        spaces[tier] = space
    server = SpaceServer(socket_path(cache.directory), spaces, scrub_rate=cache.scrub_rate)
    stack.callback(server.close)
    # the node's sizing hub and loop, beside the managers they resize (issue 13)
    stack.callback(start_sizing(settings, {tier: _control(space) for tier, space in spaces.items()}))
    Generations(generations_path(settings)).close()  # created (or kept) before any worker maps it
    recover_journal(settings)  # the write-back journal, once, before any worker serves (issue 14)
    shutil.rmtree(board_path(settings), ignore_errors=True)  # counts of the node's last run
    return server


def _control(space: Space) -> TierControl:
    return TierControl(lambda: space.usage().capacity, space.set_capacity)


def supervise(settings: Settings, overrides: Mapping[str, str], uvicorn_options: dict[str, object]) -> None:
    """Run the node as ``settings.server.workers`` worker processes until SIGTERM or SIGINT.
    ``overrides`` (command-line flags by settings field) reach the workers as LAKEGATE_*
    variables, so each loads the settings this process checked."""
    for field, value in overrides.items():
        os.environ[f"LAKEGATE_{field.upper()}"] = value
    os.environ["LAKEGATE_WORKERS"] = str(settings.server.workers)
    with ExitStack() as stack:
        stack.enter_context(_claim(settings.server.host, settings.server.port))  # before the cache dir
        try:
            server = open_spaces(stack, settings)
        except DirectoryTaken as exc:
            print(f"lakegate: {exc}", file=sys.stderr)
            sys.exit(1)
        if server is not None:
            os.environ[SPACE_SOCKET_ENV] = server.path
        grace = supervisor_grace(settings.server.shutdown_timeout, settings.server.shutdown_flush_timeout)
        code = Supervisor(settings.server.workers, uvicorn_options, grace).run()
    if code:
        sys.exit(code)


@contextmanager
def _claim(host: str, port: int) -> Iterator[None]:
    """Hold the node's address for its workers: a socket bound to it with SO_REUSEPORT and never
    listening (no connection is queued where no worker accepts; a process without SO_REUSEPORT
    cannot bind it), and a Unix socket in the abstract namespace named after it, which only one
    process can hold: SO_REUSEPORT alone would let a second node of the same user join the
    first's sockets and take half its connections. Both go when this process ends, however it
    ends. A taken address: one line on stderr, exit status 1."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as lock:
        try:
            lock.bind(f"\0lakegate-node {host}:{port}")
            held = reuseport_socket(host, port)
        except OSError as exc:
            print(f"lakegate: cannot listen on {host}:{port}: {exc.strerror or exc} "
                  "(address already in use: another lakegate node, or another server)", file=sys.stderr)
            sys.exit(1)
        with held:
            yield


def reuseport_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to (host, port) with SO_REUSEPORT: each worker listens on its own, and
    the kernel spreads new connections over them evenly (one shared socket would hand most of
    them to whichever worker last waited on it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


class Supervisor:
    """Starts ``count`` workers (spawned processes, each serving uvicorn on its own SO_REUSEPORT
    socket), starts a new one in place of any that exits, and on SIGTERM or SIGINT stops them
    all: SIGTERM to each (its drain, ``gateway.drain``), then SIGKILL to any still running after
    ``grace`` seconds (longer than the whole drain: ``supervisor_grace``); it returns 0 then. A worker
    that fails to start (uvicorn's exit status 3: the app, TLS or the socket is broken; 2: the
    settings or tenants file no longer load) would fail again: the supervisor stops and returns
    that status."""

    def __init__(self, count: int, options: dict[str, object], grace: float = 15.0) -> None:
        self.count = count
        self.options = options
        self.grace = grace
        self._context = multiprocessing.get_context("spawn")
        self._stop = threading.Event()

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self._stop.set())
        workers = [self._start(i) for i in range(self.count)]
        code = 0
        while not self._stop.wait(0.5):
            for i, worker in enumerate(workers):
                if worker.is_alive():
                    continue
                if worker.exitcode in (STARTUP_FAILURE, SETTINGS_FAILURE):
                    log.error("worker %d (pid %s) failed to start: stopping the node", i, worker.pid)
                    code = int(worker.exitcode)
                    self._stop.set()
                    break
                log.warning("worker %d (pid %s) exited with %s: starting another", i, worker.pid, worker.exitcode)
                workers[i] = self._start(i)
        self._stop_all(workers)
        return code

    def _start(self, index: int) -> multiprocessing.process.BaseProcess:
        worker = self._context.Process(target=_serve_worker, args=(self.options,), name=f"lakegate-worker-{index}")
        worker.start()
        log.info("worker %d: pid %s", index, worker.pid)
        return worker

    def _stop_all(self, workers: list[multiprocessing.process.BaseProcess]) -> None:
        for worker in workers:
            if worker.is_alive() and worker.pid is not None:
                os.kill(worker.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.grace
        for worker in workers:
            worker.join(max(0.0, deadline - time.monotonic()))
            if worker.is_alive():
                log.warning("worker pid %s still running %.0f s after SIGTERM: killed", worker.pid, self.grace)
                worker.kill()
                worker.join()


def _serve_worker(options: dict[str, object]) -> None:
    """A worker process: uvicorn serving ``worker_app`` on a socket of its own."""
    import uvicorn

    from gateway.drain import DrainingServer

    _die_with_parent()
    host, port = str(options["host"]), int(options["port"])  # type: ignore[call-overload]
    sock = reuseport_socket(host, port)
    config = uvicorn.Config("gateway.workers:worker_app", factory=True, **options)  # type: ignore[arg-type]
    DrainingServer(config).run(sockets=[sock])


def worker_app() -> object:
    """The app of one worker (uvicorn calls this in each worker process)."""
    from gateway.app import LakegateApp
    from gateway.cli import configure_logging, load_settings, load_tenants
    from gateway.wiring import Shared

    settings = load_settings({})
    configure_logging(settings)
    tenants = load_tenants(settings)
    shared = None
    path = os.environ.get(SPACE_SOCKET_ENV)
    if path and settings.cache.enabled:
        shared = Shared(SpaceConnection(path), Generations(generations_path(settings)), WorkerBoard(board_path(settings)))
    return LakegateApp(worker_share(settings), tenants=tenants, shared=shared)


def _die_with_parent() -> None:
    """SIGTERM this worker when its supervisor dies (Linux), and exit now if it already has."""
    parent = multiprocessing.parent_process()
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        log.debug("PR_SET_PDEATHSIG unavailable: a worker outlives a killed supervisor")
    if parent is not None and os.getppid() != parent.pid:
        os._exit(0)

