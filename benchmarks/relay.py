"""A TCP relay that only forwards bytes: the floor for any proxy hop on this machine.

It parses nothing, signs nothing and caches nothing: each accepted connection gets its own
connection to the target, and bytes go both ways as they come (uvloop, the event loop lakegate
runs on; TCP_NODELAY on both sides, as uvloop sets). A SigV4 client pointed at the relay is
answered by the target itself (the signed Host header is the relay's, which the target checks
as sent). hot_read's cold reads go through it too, so that what lakegate adds to a cold time to
first byte can be told apart from what any process in the path adds here.

    python -m benchmarks.relay --listen 127.0.0.1:7600 --to 127.0.0.1:7591

With ``--delay-file PATH`` it holds every byte the target sends for the number of seconds the
file says (re-read every 0.1 s; missing or empty: no delay), in order: a slow link to one lake
endpoint or peer on a kernel without netem (``TcpRelay.set_delay``). Requests pass at once.

With ``--listen-netns NAME`` it listens inside the network namespace NAME (benchmarks/netns.py)
and connects to the target from its own (the root) namespace: a bridge that lets nodes in a
shaped namespace reach a lake outside it (the session's RGW), the listening port shaped as the
lake link (``NetnsBridge``).
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import socket
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.ports import free_port, port_busy
from harness.processes import on_exit, terminate


class Delay:
    """The delay a relay holds the target's bytes for, as its file says."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.seconds = 0.0

    async def follow(self) -> None:
        while self.path is not None:
            try:
                text = Path(self.path).read_text().strip()
                self.seconds = max(0.0, float(text)) if text else 0.0
            except (OSError, ValueError):
                self.seconds = 0.0
            await asyncio.sleep(0.1)


_NO_DELAY = Delay(None)


class _Side(asyncio.Protocol):
    """One end of a relayed connection; what it receives goes out of ``peer``, after ``delay``
    (the target's side), in order."""

    def __init__(self, delay: Delay = _NO_DELAY) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: _Side | None = None
        self.pending: list[bytes] | None = []  # received before the peer was connected
        self.delay = delay
        self._release = 0.0  # when the last held bytes go out: later bytes never before them

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.pending is not None:
            self.pending.append(data)
        elif self.peer is not None and self.peer.transport is not None:
            if self.delay.seconds <= 0 and self._release <= 0:
                self.peer.transport.write(data)
                return
            loop = asyncio.get_running_loop()
            self._release = max(loop.time() + self.delay.seconds, self._release)
            loop.call_at(self._release, self._forward, data)

    def _forward(self, data: bytes) -> None:
        if self.peer is not None and self.peer.transport is not None and not self.peer.transport.is_closing():
            self.peer.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None and self.peer.transport is not None:
            loop = asyncio.get_running_loop()
            if self._release > loop.time():  # bytes still held: they go first
                loop.call_at(self._release, self.peer.transport.close)
            else:
                self.peer.transport.close()

    def pair(self, peer: _Side) -> None:
        self.peer = peer
        assert peer.transport is not None
        for data in self.pending or ():
            peer.transport.write(data)
        self.pending = None

    # flow control: a slow reader on one side stops reading on the other
    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()


_CLONE_NEWNET = 0x40000000


def listen_in_namespace(netns: str, listen: tuple[str, int]) -> socket.socket:
    """A listening TCP socket inside ``netns``, made by this (root-namespace) process: setns(2)
    into it, bind, and back. The socket keeps its namespace; what this process connects to
    afterwards is in its own."""
    libc = ctypes.CDLL(None, use_errno=True)
    with open("/proc/self/ns/net", "rb") as own, open(f"/run/netns/{netns}", "rb") as target:
        if libc.setns(target.fileno(), _CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns({netns})")
        try:
            sock = socket.create_server(listen, reuse_port=False)
        finally:
            if libc.setns(own.fileno(), _CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns(back)")
    return sock


async def serve(listen: tuple[str, int], target: tuple[str, int], netns: str | None = None,
                delay_file: str | None = None) -> None:
    loop = asyncio.get_running_loop()
    delay = Delay(delay_file)
    follower = loop.create_task(delay.follow())  # noqa: F841 - runs as long as the server

    def accepted() -> _Side:
        client = _Side()

        async def connect() -> None:
            try:
                _, upstream = await loop.create_connection(lambda: _Side(delay), *target)
            except OSError:
                if client.transport is not None:
                    client.transport.close()
                return
            if client.transport is None or client.transport.is_closing():
                if upstream.transport is not None:  # the client left while we connected
                    upstream.transport.close()
                return
            upstream.pair(client)
            client.pair(upstream)

        loop.create_task(connect())
        return client

    if netns is not None:
        server = await loop.create_server(accepted, sock=listen_in_namespace(netns, listen))
    else:
        server = await loop.create_server(accepted, *listen)
    async with server:
        await server.serve_forever()


class TcpRelay:
    """``python -m benchmarks.relay`` as a subprocess, stopped at exit."""

    def __init__(self, target_url: str, port: int = 0, delay_file: Path | None = None) -> None:
        host, _, target_port = target_url.removeprefix("http://").rstrip("/").partition(":")
        self.target = (host, int(target_port or 80))
        self.port = port
        self.delay_file = delay_file
        self.proc: subprocess.Popen[bytes] | None = None

    def set_delay(self, seconds: float) -> None:
        """Hold the target's bytes this long from now on (the relay re-reads within 0.1 s)."""
        assert self.delay_file is not None, "a relay started without a delay file"
        tmp = self.delay_file.with_name(self.delay_file.name + ".tmp")
        tmp.write_text(f"{seconds}\n")
        tmp.replace(self.delay_file)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _extra_args(self) -> list[str]:
        return ["--delay-file", str(self.delay_file)] if self.delay_file is not None else []

    def _listening(self) -> bool:
        return port_busy(self.port)

    def start(self, timeout: float = 10.0) -> str:
        self.port = self.port or free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.relay", "--listen", f"127.0.0.1:{self.port}",
             "--to", f"{self.target[0]}:{self.target[1]}", *self._extra_args()],
            cwd=Path(__file__).resolve().parents[1], stdin=subprocess.DEVNULL, start_new_session=True,
        )
        on_exit("relay", self.stop)
        deadline = time.monotonic() + timeout
        while not self._listening():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the TCP relay did not start listening on port {self.port}")
            time.sleep(0.05)
        return self.url

    def stop(self) -> None:
        terminate(self.proc, 15, 5.0)
        self.proc = None


class NetnsBridge(TcpRelay):
    """The relay listening at ``port`` inside the namespace ``netns`` for ``target_url`` outside
    it: ``url`` is how processes inside reach the target."""

    def __init__(self, netns: str, target_url: str, port: int, delay_file: Path | None = None) -> None:
        super().__init__(target_url, port, delay_file)
        self.netns = netns

    def _extra_args(self) -> list[str]:
        return [*super()._extra_args(), "--listen-netns", self.netns]

    def _listening(self) -> bool:
        done = subprocess.run(["ip", "netns", "exec", self.netns, "ss", "-Htln", f"sport = :{self.port}"],
                              capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)
        return bool(done.stdout.strip())


def _address(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    return host or "127.0.0.1", int(port)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="benchmarks.relay", description=__doc__.split("\n\n")[0])
    p.add_argument("--listen", type=_address, required=True, metavar="HOST:PORT")
    p.add_argument("--to", type=_address, required=True, metavar="HOST:PORT")
    p.add_argument("--listen-netns", metavar="NAME", help="listen inside this network namespace")
    p.add_argument("--delay-file", metavar="PATH", help="hold the target's bytes the seconds this file says")
    args = p.parse_args(argv)
    import uvloop

    uvloop.run(serve(args.listen, args.to, args.listen_netns, args.delay_file))


if __name__ == "__main__":
    main()
