"""The lake boundary of fairness: every byte read from the lake is charged to the tenant whose
request caused the read (``cachetier.context``), as it arrives, on the node's ``lake_bytes``
resource (Pisces' scarcest: the lake link). A block fetch that several readers joined (the read
path's single flight) runs once, so it is charged once, to the tenant that started it; a block
an owner fetches for a peer is charged on the owner, to the tenant the peer named.

When the read names its exact bytes (a block of a known version: a range with both ends and
``If-Match``, as the read path's block fetches are), they are charged before the request is
sent, so the lake link never carries more than the budget: waiting with a response unread
would still let the lake push a TCP window per waiting request onto the link (measured: other
tenants' small lake requests then queued for hundreds of milliseconds behind those bursts).
Any other read (the first block of a key whose size is not known yet, a read that bypasses the
cache) is charged piece by piece as it arrives, each before the next is taken in: a tenant past
its share waits with the lake's response unread, so TCP's flow control slows that transfer and
no bytes pile up in memory.

``MeteredLake`` wraps a ``Lake``: ``get_object`` is metered, everything else is the lake's own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, cast

from cachetier.context import current
from cachetier.lake import Lake, ObjectStream, Served
from cachetier.lake.conditions import Conditions
from cachetier.lake.ranges import ByteRange

Charge = Callable[[str, str, float], Awaitable[None]]  # (tenant, resource, amount)


class MeteredLake:
    """``lake`` with its reads charged through ``charge`` (``Fairness.acquire``)."""

    def __init__(self, lake: Lake, charge: Charge) -> None:
        self.lake = lake
        self._charge = charge

    async def get_object(
        self, bucket: str, key: str, range: ByteRange | None = None, conditions: Conditions = Conditions()
    ) -> ObjectStream:
        tenant = current.get().tenant
        exact = range is not None and range.first is not None and range.last is not None and conditions.if_match
        if exact:
            assert range is not None and range.first is not None and range.last is not None
            await self._charge(tenant, "lake_bytes", range.last - range.first + 1)
            return await self.lake.get_object(bucket, key, range, conditions)
        stream = await self.lake.get_object(bucket, key, range, conditions)
        return ObjectStream(stream.info, stream.content_range, _Metered(stream.body, self._charge, tenant),
                            stream.first_in)

    def __getattr__(self, name: str) -> Any:  # every other call is the lake's own
        return getattr(self.lake, name)


class _Metered:
    """A lake body whose pieces are charged as they are taken in. Not an async generator: one
    closed before its first piece would never run its ``finally``, so the lake's body under it
    (its connection) would stay open until garbage collection; ``aclose`` here always closes it."""

    def __init__(self, body: Served, charge: Charge, tenant: str) -> None:
        self._body = body
        self._pieces = aiter(body)
        self._charge = charge
        self._tenant = tenant

    def __aiter__(self) -> _Metered:
        return self

    async def __anext__(self) -> Any:
        piece = await anext(self._pieces)
        await self._charge(self._tenant, "lake_bytes", len(piece))
        return piece

    async def aclose(self) -> None:
        aclose = getattr(self._body, "aclose", None)
        if aclose is not None:
            await aclose()


def metered(lake: Lake, charge: Charge) -> Lake:
    """``lake`` metered (a ``Lake`` by delegation: mypy does not see ``__getattr__`` members)."""
    return cast(Lake, MeteredLake(lake, charge))
