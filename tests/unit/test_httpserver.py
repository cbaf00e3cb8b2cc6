"""``CoalescingTransport``: a small write waits for the end of the loop's turn and leaves with
the write that follows it in that turn; nothing is lost, reordered or held past the turn."""

from __future__ import annotations

import asyncio
from typing import Any

from doubles import FakeTransport

from gateway.httpserver import _HOLD_MAX, CoalescingTransport


def on_a_loop(test: Any) -> None:
    async def main() -> None:
        fake = FakeTransport()
        await test(CoalescingTransport(fake, asyncio.get_running_loop()), fake)  # type: ignore[arg-type]

    asyncio.run(main())


def test_a_head_and_the_body_written_in_the_same_turn_leave_in_one_call() -> None:
    async def test(transport: CoalescingTransport, fake: FakeTransport) -> None:
        transport.write(b"HTTP/1.1 200 OK\r\ncontent-length: 1048576\r\n\r\n")
        assert fake.calls == []  # held for the rest of this turn
        transport.write(b"x" * (1 << 20))
        transport.write(b"y" * 10)  # nothing held now: a small write is held again
        await asyncio.sleep(0)
        assert fake.calls == [b"HTTP/1.1 200 OK\r\ncontent-length: 1048576\r\n\r\n" + b"x" * (1 << 20), b"y" * 10]

    on_a_loop(test)


def test_a_small_write_alone_leaves_at_the_end_of_the_turn() -> None:
    async def test(transport: CoalescingTransport, fake: FakeTransport) -> None:
        transport.write(b"HTTP/1.1 204 No Content\r\n\r\n")
        assert transport.get_write_buffer_size() == len(b"HTTP/1.1 204 No Content\r\n\r\n")
        await asyncio.sleep(0)
        assert fake.calls == [b"HTTP/1.1 204 No Content\r\n\r\n"]
        await asyncio.sleep(0)
        assert len(fake.calls) == 1  # sent once

    on_a_loop(test)


def test_a_large_write_with_nothing_held_goes_at_once() -> None:
    async def test(transport: CoalescingTransport, fake: FakeTransport) -> None:
        transport.write(b"z" * (_HOLD_MAX + 1))
        assert fake.calls == [b"z" * (_HOLD_MAX + 1)]

    on_a_loop(test)


def test_close_and_write_eof_send_what_is_held_first_and_abort_drops_it() -> None:
    async def test(transport: CoalescingTransport, fake: FakeTransport) -> None:
        transport.write(b"head")
        transport.write_eof()
        assert fake.calls == [b"head"] and fake.eof
        transport.write(b"last")
        transport.close()
        assert fake.calls == [b"head", b"last"] and fake.closed

    on_a_loop(test)

    async def aborting(transport: CoalescingTransport, fake: FakeTransport) -> None:
        transport.write(b"head")
        transport.abort()
        await asyncio.sleep(0)
        assert fake.calls == [] and fake.aborted

    on_a_loop(aborting)


def test_everything_else_is_the_wrapped_transports() -> None:
    async def test(transport: CoalescingTransport, fake: FakeTransport) -> None:
        assert transport.get_extra_info("peername") == ("127.0.0.1", 1234)
        assert transport.is_closing() is False

    on_a_loop(test)
