"""cachetier.fairness.lake: every byte read from the lake is charged to the tenant of the request
that read it; a block of a known version (both ends of its range and If-Match) before the request
is sent, any other read piece by piece as it arrives; everything but reads passes through."""

from __future__ import annotations

import asyncio

from cachetier import context
from cachetier.fairness.lake import metered
from cachetier.lake.conditions import Conditions
from cachetier.lake.ranges import ByteRange
from tests.doubles import B, SMALL_CHUNK, memory_lake, put


class Charges:
    def __init__(self, events: list[str]) -> None:
        self.events = events
        self.charged: list[tuple[str, str, float]] = []

    async def __call__(self, tenant: str, resource: str, amount: float) -> None:
        self.events.append(f"charge {amount:g}")
        self.charged.append((tenant, resource, amount))


def test_a_known_block_is_charged_whole_before_the_lake_is_asked() -> None:
    async def test() -> None:
        events: list[str] = []
        inner = memory_lake(B)
        etag = await put(inner, "k", bytes(5000))
        original = inner.get_object

        async def get_object(*args: object, **kwargs: object):  # type: ignore[no-untyped-def]
            events.append("get")
            return await original(*args, **kwargs)  # type: ignore[arg-type]

        inner.get_object = get_object  # type: ignore[method-assign]
        charges = Charges(events)
        lake = metered(inner, charges)
        context.current.set(context.RequestContext("alpha"))
        stream = await lake.get_object(B, "k", ByteRange(first=1000, last=3999), Conditions(if_match=etag))
        body = b"".join([bytes(p) async for p in stream.body])  # type: ignore[arg-type]
        assert len(body) == 3000
        assert charges.charged == [("alpha", "lake_bytes", 3000)]
        assert events[:2] == ["charge 3000", "get"]

    asyncio.run(test())


def test_a_read_of_unknown_length_is_charged_as_its_pieces_arrive() -> None:
    async def test() -> None:
        inner = memory_lake(B)
        await put(inner, "k", bytes(2000))
        charges = Charges([])
        lake = metered(inner, charges)
        context.current.set(context.RequestContext("beta"))
        stream = await lake.get_object(B, "k", ByteRange(first=0, last=4095))  # a discovery read: no If-Match
        assert charges.charged == []  # nothing yet: the length is the lake's to say
        body = b"".join([bytes(p) async for p in stream.body])  # type: ignore[arg-type]
        assert len(body) == 2000
        assert sum(a for _, _, a in charges.charged) == 2000
        assert all(t == "beta" and a <= SMALL_CHUNK for t, _, a in charges.charged)

    asyncio.run(test())


def test_everything_but_reads_is_the_lakes_own() -> None:
    async def test() -> None:
        inner = memory_lake(B)
        await put(inner, "k", b"x" * 10)
        charges = Charges([])
        lake = metered(inner, charges)
        info = await lake.head_object(B, "k")
        assert info.size == 10 and charges.charged == []

    asyncio.run(test())


def test_a_stream_closed_before_its_first_piece_closes_the_lakes_body() -> None:
    async def test() -> None:
        inner = memory_lake(B)
        await put(inner, "k", bytes(2000))
        closed: list[bool] = []
        original = inner.get_object

        async def get_object(*args: object, **kwargs: object):  # type: ignore[no-untyped-def]
            stream = await original(*args, **kwargs)  # type: ignore[arg-type]
            body = stream.body

            async def watched():  # type: ignore[no-untyped-def]
                try:
                    async for piece in body:
                        yield piece
                finally:
                    closed.append(True)

            watched_body = watched()
            await anext(watched_body)  # started: its finally runs on aclose
            stream.body = watched_body
            return stream

        inner.get_object = get_object  # type: ignore[method-assign]
        lake = metered(inner, Charges([]))
        stream = await lake.get_object(B, "k", ByteRange(first=0, last=4095))  # unknown length: metered as read
        await stream.aclose()  # the read path cut it short: a cold key over the size limit
        assert closed == [True]

    asyncio.run(test())
