"""``benchmarks/relay.py``: bytes go both ways unchanged, in order, and a close on one side
closes the other; with a delay file, the target's bytes are held that long, in order."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

from benchmarks.relay import serve
from harness.ports import free_port


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(1 << 16):
        writer.write(data)
        await writer.drain()
    writer.close()


@contextlib.asynccontextmanager
async def _relayed(delay_file: str | None = None) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """A connection through a relay (with ``delay_file``) to an echo server."""
    target = await asyncio.start_server(_echo, "127.0.0.1", 0)
    port = free_port()
    relay = asyncio.ensure_future(serve(("127.0.0.1", port), ("127.0.0.1", target.sockets[0].getsockname()[1]),
                                        delay_file=delay_file))
    try:
        for _ in range(100):  # until the relay listens
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                break
            except OSError:
                await asyncio.sleep(0.02)
        yield reader, writer
    finally:
        relay.cancel()
        target.close()


async def _closes(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write_eof()  # the echo server ends, and the relay closes our side
    assert await asyncio.wait_for(reader.read(), 10) == b""
    writer.close()


def test_the_relay_forwards_both_ways_and_closes_with_the_server() -> None:
    async def main() -> None:
        async with _relayed() as (reader, writer):
            payload = os.urandom(3 << 20)  # more than the socket buffers hold: flow control
            writer.write(payload)
            assert await asyncio.wait_for(reader.readexactly(len(payload)), 10) == payload
            await _closes(reader, writer)

    asyncio.run(main())


def test_a_delay_file_holds_the_targets_bytes_in_order(tmp_path: Path) -> None:
    delay = tmp_path / "delay"
    delay.write_text("0.3\n")

    async def main() -> None:
        async with _relayed(str(delay)) as (reader, writer):
            await asyncio.sleep(0.2)  # the relay has read the file
            payload = os.urandom(1 << 20)
            started = time.monotonic()
            writer.write(payload)
            received = await asyncio.wait_for(reader.readexactly(len(payload)), 10)
            assert received == payload and time.monotonic() - started >= 0.3
            delay.write_text("0\n")
            await asyncio.sleep(0.2)
            writer.write(b"x")
            assert await asyncio.wait_for(reader.readexactly(1), 10) == b"x"
            await _closes(reader, writer)

    asyncio.run(main())
