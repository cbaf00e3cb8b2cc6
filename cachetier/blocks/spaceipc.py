"""The space managers of a node's tiers, served to its worker processes over a Unix socket.

The node's supervisor (``lakegate serve --workers N``) runs a ``SpaceServer`` holding one
``Space`` per tier; each worker's block stores talk to it through one ``RemoteSpace`` per tier,
all sharing the worker's one connection. A connection is one writer: when it closes (the worker
exited, or was killed mid-put), the server settles that writer's reservations from the disk
(``Space.release``) and removes its tmp/ files. The socket lives in the cache directory with
mode 0600 (only the node's own user reaches it); requests are lines of text:

    H <pid>                       hello: the writer's process id             (no answer)
    R <tier> <key> <size> <tenant>   reserve, for a put by tenant            -> <answer> <evicted>
    C <tier> <key> / A ... / F ...   commit, abort, forget                   (no answer)
    U <tier> <tenant> <key>:<n> ...  the tenant's reads                      (no answer)
    S <tier> <capacity>           set the capacity                           -> <evicted>
    Q <tier>                      usage                 -> <used> <cap> <blocks> <headers> <stored>
    O <tier>                      bytes held by tenant (occupancy)           -> <tenant>=<bytes> ...
    W <tier> <tenant>=<weight> ...   set the tenants' weights (all of them)  (no answer)

Tenant names are percent-encoded (no space, ``=`` or ``:`` in a line's words). The supervisor
and its workers run the same code, so the protocol has no version.

Only requests that answer wait for one, so reads and commits cost a worker one send each.
Workers never ask on a hit. If the supervisor is gone, puts fail with OSError (the store keeps
nothing, reads go on); workers are stopped with it (``gateway.workers``).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Mapping
from contextlib import suppress
from typing import BinaryIO
from urllib.parse import quote, unquote

from cachetier.blocks.space import BUSY, FULL, NO_TENANT, OK, Grant, Space, Usage
from policies import occupancy

log = logging.getLogger("lakegate.space")

_MAX_LINE = 1 << 20
_READS_PER_LINE = 2000


class SpaceServer:
    """Serves ``spaces`` (tier name -> Space) on a Unix socket at ``path``, one thread per
    worker connection; every ``persist_interval`` seconds it stamps used blocks on disk and
    scrubs ``scrub_rate`` bytes a second of each tier's blocks (``Space.scrub``)."""

    def __init__(
        self, path: str, spaces: dict[str, Space], persist_interval: float = 1.0, scrub_rate: int = 0
    ) -> None:
        self.path = path
        self.spaces = spaces
        self.scrub_rate = scrub_rate
        with suppress(FileNotFoundError):
            os.unlink(path)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            self._sock.bind(path)
        finally:
            os.umask(old)
        self._sock.listen(64)
        self._closing = threading.Event()
        self._threads = [
            threading.Thread(target=self._accept, name="space-accept", daemon=True),
            threading.Thread(target=self._persist, args=(persist_interval,), name="space-persist", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), name="space-conn", daemon=True).start()

    def _persist(self, interval: float) -> None:
        while not self._closing.wait(interval):
            for space in self.spaces.values():
                try:
                    space.persist()
                    if self.scrub_rate:
                        space.scrub(int(self.scrub_rate * interval))
                except Exception as exc:  # noqa: BLE001 - logged; the next round tries again
                    log.warning("could not stamp block uses or scrub: %s", exc)

    def _serve(self, conn: socket.socket) -> None:
        owner = object()
        pid: int | None = None
        reader = conn.makefile("rb")
        try:
            while line := reader.readline(_MAX_LINE):
                words = line.decode().split()
                if not words:
                    continue
                if words[0] == "H":
                    pid = int(words[1])
                    continue
                answer = self._handle(words, owner)
                if answer is not None:
                    conn.sendall(answer.encode() + b"\n")
        except (OSError, ValueError, KeyError, IndexError) as exc:
            log.warning("space connection of worker %s failed: %s", pid, exc)
        finally:
            for space in self.spaces.values():
                space.release(owner, pid)
            reader.close()
            conn.close()

    def _handle(self, words: list[str], owner: object) -> str | None:
        op, space = words[0], self.spaces[words[1]]
        if op == "R":
            grant = space.reserve(words[2], int(words[3]), owner, unquote(words[4]))
            return f"{grant.answer} {grant.evicted}"
        if op == "C":
            space.commit(words[2], owner)
        elif op == "A":
            space.abort(words[2], owner)
        elif op == "F":
            space.forget(words[2])
        elif op == "U":
            reads = {}
            for item in words[3:]:
                key, _, times = item.partition(":")
                reads[key] = int(times)
            space.used(reads, unquote(words[2]))
        elif op == "S":
            return str(space.set_capacity(int(words[2])))
        elif op == "Q":
            u = space.usage()
            return f"{u.used} {u.capacity} {u.blocks} {u.headers} {u.stored}"
        elif op == "O":
            return " ".join(f"{quote(tenant, safe='')}={size}" for tenant, size in space.held().items())
        elif op == "W":
            space.set_weights({unquote(t): float(w) for t, _, w in (item.partition("=") for item in words[2:])})
        else:
            raise ValueError(f"unknown request {op!r}")
        return None

    def close(self) -> None:
        self._closing.set()
        with suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        with suppress(FileNotFoundError):
            os.unlink(self.path)
        for space in self.spaces.values():
            space.close()


class SpaceConnection:
    """A worker's one connection to its node's space server, shared by its tiers' clients and
    their threads (one request at a time)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._reader: BinaryIO | None = None

    def _connected(self) -> socket.socket:
        if self._sock is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(self.path)
                sock.sendall(f"H {os.getpid()}\n".encode())
            except OSError:
                sock.close()
                raise
            self._sock, self._reader = sock, sock.makefile("rb")
        return self._sock

    def send(self, line: str) -> None:
        with self._lock:
            self._send(line)

    def ask(self, line: str) -> list[str]:
        with self._lock:
            self._send(line)
            assert self._reader is not None
            answer = self._reader.readline(_MAX_LINE)
            if not answer.endswith(b"\n"):
                self._drop()
                raise ConnectionError("the space manager closed the connection")
            return answer.decode().split()

    def _send(self, line: str) -> None:
        try:
            self._connected().sendall(line.encode() + b"\n")
        except OSError:
            self._drop()  # a put that reserved is settled by the server; the next request reconnects
            raise

    def _drop(self) -> None:
        if self._reader is not None:
            self._reader.close()
        if self._sock is not None:
            self._sock.close()
        self._sock = self._reader = None

    def close(self) -> None:
        with self._lock:
            self._drop()


class RemoteSpace:
    """``SpaceLike`` for one tier, over the worker's connection to its node's space server."""

    def __init__(self, connection: SpaceConnection, tier: str) -> None:
        self.connection = connection
        self.tier = tier

    def reserve(self, key: str, size: int, tenant: str = NO_TENANT) -> Grant:
        answer, evicted = self.connection.ask(f"R {self.tier} {key} {size} {quote(tenant, safe='')}")
        return Grant(answer if answer in (OK, BUSY) else FULL, int(evicted))

    def commit(self, key: str) -> None:
        self.connection.send(f"C {self.tier} {key}")

    def abort(self, key: str) -> None:
        self.connection.send(f"A {self.tier} {key}")

    def forget(self, key: str) -> None:
        self.connection.send(f"F {self.tier} {key}")

    def used(self, reads: dict[str, int], tenant: str = NO_TENANT) -> None:
        items = [f"{key}:{times}" for key, times in reads.items()]
        head = f"U {self.tier} {quote(tenant, safe='')} "
        for start in range(0, len(items), _READS_PER_LINE):
            self.connection.send(head + " ".join(items[start : start + _READS_PER_LINE]))

    def set_capacity(self, capacity: int) -> int:
        (evicted,) = self.connection.ask(f"S {self.tier} {capacity}")
        return int(evicted)

    def usage(self) -> Usage:
        used, capacity, blocks, headers, stored = self.connection.ask(f"Q {self.tier}")
        return Usage(int(used), int(capacity), int(blocks), int(headers), int(stored))

    def held(self) -> dict[str, int]:
        """Node-wide: every worker's tenants, as the supervisor's manager counts them."""
        items = (word.partition("=") for word in self.connection.ask(f"O {self.tier}"))
        return {unquote(tenant): int(size) for tenant, _, size in items}

    def set_weights(self, weights: Mapping[str, float]) -> None:
        checked = occupancy.checked_weights(weights)  # here: a bad one would end the connection
        words = " ".join(f"{quote(t, safe='')}={w!r}" for t, w in checked.items())
        self.connection.send(f"W {self.tier} {words}".rstrip())

    def persist(self) -> None:
        pass  # the server stamps uses

    def scrub(self, budget: int) -> int:
        return 0  # the server scrubs

    def close(self) -> None:
        pass  # the connection is the worker's, closed by whoever opened it


def socket_path(cache_dir: str | os.PathLike[str], name: str = "space.sock") -> str:
    """Where a node's socket ``name`` lives (the space server's, by default): in its cache
    directory, or (a Unix socket's path is limited to 107 bytes) in a private directory under
    /tmp named after it."""
    path = os.path.join(os.path.abspath(os.fspath(cache_dir)), name)
    if len(path.encode()) <= 100:
        return path
    import hashlib
    import tempfile

    digest = hashlib.sha256(os.path.dirname(path).encode()).hexdigest()[:16]
    private = os.path.join(tempfile.gettempdir(), f"lakegate-{os.getuid()}-{digest}")
    os.makedirs(private, mode=0o700, exist_ok=True)
    return os.path.join(private, name)
