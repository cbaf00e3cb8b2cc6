"""Byte ranges as S3 serves them (one range only): the value type of the Lake interface, and
its resolution against an object's size. Reading one from a request's ``Range`` header is the
gateway's (:mod:`gateway.s3.headers`); writing one to a lake's is the S3 client's
(:mod:`cachetier.lake.s3.headers`)."""

from __future__ import annotations

from dataclasses import dataclass

from cachetier.errors import InvalidRange


@dataclass(frozen=True)
class ByteRange:
    """``bytes=first-last`` (``last`` may be open) or a suffix ``bytes=-suffix``."""

    first: int | None
    last: int | None = None
    suffix: int | None = None

    def resolve(self, size: int) -> tuple[int, int]:
        """Inclusive (start, end) within an object of ``size`` bytes; raises InvalidRange when no
        byte of the object is covered (S3: 416)."""
        if self.suffix is not None:
            if self.suffix == 0 or size == 0:
                raise InvalidRange(size=size)
            return max(0, size - self.suffix), size - 1
        assert self.first is not None
        if self.first >= size:
            raise InvalidRange(size=size)
        end = size - 1 if self.last is None else min(self.last, size - 1)
        return self.first, end
