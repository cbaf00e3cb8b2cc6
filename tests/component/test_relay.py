"""``benchmarks/relay.py``: bytes go both ways unchanged, in order, and a close on one side
closes the other."""

from __future__ import annotations

import asyncio
import os

from benchmarks.relay import serve
from harness.ports import free_port


def test_the_relay_forwards_both_ways_and_closes_with_the_server() -> None:
    async def main() -> None:
        async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while data := await reader.read(1 << 16):
                writer.write(data)
                await writer.drain()
            writer.close()

        target = await asyncio.start_server(echo, "127.0.0.1", 0)
        port = free_port()
        relay = asyncio.ensure_future(serve(("127.0.0.1", port), ("127.0.0.1", target.sockets[0].getsockname()[1])))
        try:
            for _ in range(100):  # until the relay listens
                try:
                    reader, writer = await asyncio.open_connection("127.0.0.1", port)
                    break
                except OSError:
                    await asyncio.sleep(0.02)
            payload = os.urandom(3 << 20)  # more than the socket buffers hold: flow control
            writer.write(payload)
            received = await asyncio.wait_for(reader.readexactly(len(payload)), 10)
            assert received == payload
            writer.write_eof()  # the echo server ends, and the relay closes our side
            assert await asyncio.wait_for(reader.read(), 10) == b""
            writer.close()
        finally:
            relay.cancel()
            target.close()

    asyncio.run(main())


def test_a_delay_file_holds_the_targets_bytes_in_order(tmp_path: "os.PathLike[str]") -> None:
    import time
    from pathlib import Path

    delay = Path(tmp_path) / "delay"
    delay.write_text("0.3\n")

    async def main() -> None:
        async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while data := await reader.read(1 << 16):
                writer.write(data)
                await writer.drain()
            writer.close()

        target = await asyncio.start_server(echo, "127.0.0.1", 0)
        port = free_port()
        relay = asyncio.ensure_future(serve(("127.0.0.1", port), ("127.0.0.1", target.sockets[0].getsockname()[1]),
                                            delay_file=str(delay)))
        try:
            for _ in range(100):
                try:
                    reader, writer = await asyncio.open_connection("127.0.0.1", port)
                    break
                except OSError:
                    await asyncio.sleep(0.02)
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
            writer.write_eof()
            assert await asyncio.wait_for(reader.read(), 10) == b""
            writer.close()
        finally:
            relay.cancel()
            target.close()

    asyncio.run(main())
