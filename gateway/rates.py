"""Rates in settings and the tenants file: ``50MB/s``, ``400Mbit``, ``20MiB/s``, ``1.5GB``, or a
plain number of bytes a second. Byte units are decimal (kB, MB, GB: 10^3n) or binary (KiB, MiB,
GiB: 2^10n); bit units (bit, Kbit, Mbit, Gbit, also ``Mbps``) are decimal and divided by 8. A
trailing ``/s`` or ``ps`` is optional. ``0`` or an empty text means "no rate given" (None)."""

from __future__ import annotations

import math
import re

_RATE = re.compile(r"^\s*(?P<number>\d+(?:\.\d+)?)\s*(?P<unit>[A-Za-z]*)\s*(?:/s|ps)?\s*$")
_PREFIX = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"ki": 1 << 10, "mi": 1 << 20, "gi": 1 << 30, "ti": 1 << 40}


def parse_rate(text: str | float | int) -> float | None:
    """Bytes a second, or None for ``0``/empty; ValueError names what is wrong."""
    if isinstance(text, bool):
        raise ValueError(f"a rate must be a number or a text like 50MB/s, not {text!r}")
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        if not text.strip():
            return None
        found = _RATE.match(text)
        if found is None:
            raise ValueError(f"a rate must be like 50MB/s, 400Mbit or 1048576, not {text!r}")
        value = float(found["number"]) * _unit(found["unit"], text)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"a rate must be a finite number >= 0, not {text!r}")
    return value or None


def _unit(unit: str, text: str) -> float:
    lowered = unit.lower()
    for suffix, divisor in (("bit", 8), ("bps", 8), ("b", 1), ("", 1)):
        if lowered.endswith(suffix):
            prefix = lowered[: len(lowered) - len(suffix)]
            if suffix == "" and prefix not in _PREFIX and prefix not in _BINARY:
                break
            if prefix in _BINARY and divisor == 1:
                return _BINARY[prefix]
            if prefix in _PREFIX:
                return _PREFIX[prefix] / divisor
            break
    raise ValueError(f"unknown rate unit {unit!r} in {text!r} (B, kB, MB, GB, KiB, MiB, GiB, bit, Mbit, Gbit)")


def format_rate(rate: float | None) -> str:
    """A rate for people: ``12.5 MB/s`` (None: unlimited)."""
    if rate is None or math.isinf(rate):
        return "unlimited"
    for unit, size in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if rate >= size:
            return f"{rate / size:.3g} {unit}"
    return f"{rate:.3g} B/s"
