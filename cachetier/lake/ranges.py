"""Byte ranges as S3 reads them from a ``Range`` header (one range only, as S3 serves)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from cachetier.errors import InvalidRange

_RANGE = re.compile(r"^\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*$")


@dataclass(frozen=True)
class ByteRange:
    """``bytes=first-last`` (``last`` may be open) or a suffix ``bytes=-suffix``."""

    first: int | None
    last: int | None = None
    suffix: int | None = None

    @classmethod
    def parse(cls, header: str | None) -> ByteRange | None:
        """The range a header asks for, or None when S3 would ignore the header and serve the
        whole object (absent, malformed, multi-range, or last < first)."""
        if not header:
            return None
        m = _RANGE.match(header)
        if m is None:
            return None
        first, last = m.group(1), m.group(2)
        if first == "" and last == "":
            return None
        if first == "":
            return cls(first=None, suffix=int(last))
        if last != "" and int(last) < int(first):
            return None
        return cls(first=int(first), last=int(last) if last != "" else None)

    def resolve(self, size: int) -> tuple[int, int]:
        """Inclusive (start, end) within an object of ``size`` bytes; raises InvalidRange when no
        byte of the object is covered (S3: 416)."""
        if self.suffix is not None:
            if self.suffix == 0 or size == 0:
                raise InvalidRange(headers={"Content-Range": f"bytes */{size}"})
            return max(0, size - self.suffix), size - 1
        assert self.first is not None
        if self.first >= size:
            raise InvalidRange(headers={"Content-Range": f"bytes */{size}"})
        end = size - 1 if self.last is None else min(self.last, size - 1)
        return self.first, end

    def header(self) -> str:
        if self.suffix is not None:
            return f"bytes=-{self.suffix}"
        return f"bytes={self.first}-{'' if self.last is None else self.last}"
