"""Strict parsing of the numbers and echoed text a request carries.

Python's ``int()`` accepts ``"+1"``, ``" 1"``, ``"1_000"`` and non-ASCII digits (``"١"``), and
``str.isdigit()`` accepts ``"²"``, which ``int()`` then refuses; neither may reach lakegate from a
client. Every header, query parameter and XML element read as a number goes through
:func:`decimal` (or :func:`hexadecimal`): ASCII digits only, at most :data:`MAX_DIGITS` of them.
"""

from __future__ import annotations

from cachetier.errors import InvalidArgument

MAX_DIGITS = 19  # the longest decimal an unsigned 63-bit integer needs; S3's sizes fit
_DECIMAL = frozenset("0123456789")
_HEX = frozenset("0123456789abcdefABCDEF")


def is_decimal(text: str, max_digits: int = MAX_DIGITS) -> bool:
    """``text`` is 1 to ``max_digits`` ASCII digits, nothing else (no sign, space or ``_``)."""
    return 0 < len(text) <= max_digits and _DECIMAL.issuperset(text)


def decimal(text: str, name: str, max_digits: int = MAX_DIGITS) -> int:
    """The value of ``text`` as :func:`is_decimal` allows it; otherwise InvalidArgument naming ``name``."""
    if not is_decimal(text, max_digits):
        raise InvalidArgument(f"{name} must be a non-negative integer of at most {max_digits} ASCII digits")
    return int(text)


def is_hexadecimal(text: str, max_digits: int) -> bool:
    return 0 < len(text) <= max_digits and _HEX.issuperset(text)


def has_control(text: str) -> bool:
    """``text`` holds CR, LF or another control character (which no header value may)."""
    return any(ord(c) < 0x20 and c != "\t" or ord(c) == 0x7F for c in text)


def header_value(text: str, name: str) -> str:
    """``text``, fit to echo into a response header; InvalidArgument if it is not."""
    if has_control(text):
        raise InvalidArgument(f"{name} must not contain control characters")
    return text
