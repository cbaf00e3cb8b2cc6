"""The trace format: one read request per record, as JSON Lines or CSV.

A record says when a request arrives (seconds from the start of the trace), which job and
tenant issue it, which object it reads, and optionally which bytes (an inclusive range, as
in an HTTP ``Range: bytes=first-last`` header) and the object's size::

    {"offset": 0.25, "job": "job-00003", "tenant": "etl", "bucket": "logs", "key": "d/p-7",
     "first": 0, "last": 8388607, "size": 20000000}

CSV has the same fields as its header row (``offset,job,tenant,bucket,key,first,last,size``);
an empty cell is an absent optional field. ``first``/``last`` come together or not at all;
``size`` lets a replay check that a whole-object read got every byte. Unknown fields are
refused, so a misspelt ``frist`` is an error rather than a silent whole-object read.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

FIELDS = ("offset", "job", "tenant", "bucket", "key", "first", "last", "size")
_REQUIRED_TEXT = ("job", "tenant", "bucket", "key")
_OPTIONAL_INTS = ("first", "last", "size")


class TraceFormatError(ValueError):
    """A trace file that cannot be read; the message names the file and line."""


@dataclass(frozen=True)
class TraceRecord:
    offset: float
    job: str
    tenant: str
    bucket: str
    key: str
    first: int | None = None
    last: int | None = None
    size: int | None = None

    @property
    def byte_range(self) -> tuple[int, int] | None:
        return None if self.first is None or self.last is None else (self.first, self.last)

    @property
    def range_header(self) -> str | None:
        return None if self.byte_range is None else f"bytes={self.first}-{self.last}"

    @property
    def expected_bytes(self) -> int | None:
        """What a correct answer carries: the range (cut at the object's end, as S3 does),
        the whole object, or None when the trace does not say how big the object is."""
        if self.first is None or self.last is None:
            return self.size
        last = self.last if self.size is None else min(self.last, self.size - 1)
        return max(0, last - self.first + 1)

    def to_row(self) -> dict[str, Any]:
        """The record as a JSON object, absent optional fields left out."""
        return {k: v for k, v in asdict(self).items() if v is not None}


def parse_record(row: Mapping[str, Any]) -> TraceRecord:
    """One record from a JSON object or a CSV row (where every value is text, and an empty
    cell is an absent field); raises ValueError or TypeError saying what is wrong."""
    unknown = sorted(set(row) - set(FIELDS))
    if unknown:
        raise ValueError(f"unknown field(s) {unknown}; fields are {', '.join(FIELDS)}")
    values = {k: v for k, v in row.items() if v is not None and v != ""}
    for name in ("offset", *_REQUIRED_TEXT):
        if name not in values:
            raise ValueError(f"missing field {name!r}")
    offset = _number(values["offset"], "offset")
    text = {name: _text(values[name], name) for name in _REQUIRED_TEXT}
    ints = {name: _count(values[name], name) if name in values else None for name in _OPTIONAL_INTS}
    record = TraceRecord(offset=offset, **text, **ints)  # type: ignore[arg-type]  # names checked above
    _check_range(record)
    return record


def _number(value: Any, name: str) -> float:
    try:
        number = float(value) if isinstance(value, str) else value
    except ValueError:
        number = None
    if isinstance(number, bool) or not isinstance(number, (int, float)) or not (math.isfinite(number) and number >= 0):
        raise ValueError(f"{name} must be a number of seconds >= 0, not {value!r}")
    return float(number)


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, not {value!r}")
    return value


def _count(value: Any, name: str) -> int:
    if isinstance(value, str) and value.isdigit():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise ValueError(f"{name} must be a whole number >= 0, not {value!r}")


def _check_range(record: TraceRecord) -> None:
    if (record.first is None) != (record.last is None):
        raise ValueError("first and last come together (an inclusive byte range) or not at all")
    if record.first is not None and record.last is not None:
        if record.first > record.last:
            raise ValueError(f"first ({record.first}) is after last ({record.last})")
        if record.size is not None and record.first >= record.size:
            raise ValueError(f"range starts at {record.first}, past the object's size {record.size}")


def trace_format(path: Path) -> str:
    """``jsonl`` or ``csv``, by the file name's suffix (``.csv``; anything else is JSON Lines)."""
    return "csv" if path.suffix.lower() == ".csv" else "jsonl"


def read_trace(path: Path) -> list[TraceRecord]:
    """Every record of a trace file, in file order."""
    try:
        with open(path, newline="") as stream:
            return list(parse_trace(stream, trace_format(path), str(path)))
    except OSError as exc:
        raise TraceFormatError(f"{path}: {exc.strerror or exc}") from exc


def parse_trace(stream: Iterable[str], fmt: str, name: str = "trace") -> Iterator[TraceRecord]:
    """Records from lines of JSON Lines (blank lines skipped) or CSV (with a header row)."""
    rows = _csv_rows(stream, name) if fmt == "csv" else _jsonl_rows(stream, name)
    for line, row in rows:
        try:
            yield parse_record(row)
        except (ValueError, TypeError) as exc:
            raise TraceFormatError(f"{name}:{line}: {exc}") from None


def _jsonl_rows(stream: Iterable[str], name: str) -> Iterator[tuple[int, Mapping[str, Any]]]:
    for line, text in enumerate(stream, start=1):
        if not text.strip():
            continue
        try:
            row = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TraceFormatError(f"{name}:{line}: not JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise TraceFormatError(f"{name}:{line}: a record is a JSON object, not {type(row).__name__}")
        yield line, row


def _csv_rows(stream: Iterable[str], name: str) -> Iterator[tuple[int, Mapping[str, Any]]]:
    reader = csv.DictReader(stream)
    if reader.fieldnames is None:
        return
    for row in reader:
        if None in row:  # more cells than the header has names
            raise TraceFormatError(f"{name}:{reader.line_num}: more cells than header fields")
        yield reader.line_num, row


def write_trace(path: Path, records: Iterable[TraceRecord]) -> None:
    """Write records as JSON Lines or CSV (by the suffix, as :func:`read_trace` reads it)."""
    with open(path, "w", newline="") as stream:
        stream.write(format_trace(records, trace_format(path)))


def format_trace(records: Iterable[TraceRecord], fmt: str) -> str:
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=FIELDS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(record.to_row() for record in records)
        return out.getvalue()
    return "".join(json.dumps(record.to_row(), separators=(",", ":")) + "\n" for record in records)


def reuse_fraction(records: Iterable[TraceRecord]) -> float:
    """The fraction of requested bytes that are reuse: bytes of requests whose
    (bucket, key, range) was already requested earlier in the trace (by arrival offset,
    ties in file order). An exact-match measure: it is the fraction of bytes a cache that
    keeps everything would serve without the lake when requests are aligned (as synth's
    splits are). Raises ValueError for a record whose byte count the trace does not give."""
    seen: set[tuple[str, str, tuple[int, int] | None]] = set()
    total = reused = 0
    for record in sorted(records, key=lambda r: r.offset):
        size = record.expected_bytes
        if size is None:
            raise ValueError(f"{record.bucket}/{record.key}: a whole-object read without a size")
        identity = (record.bucket, record.key, record.byte_range)
        total += size
        if identity in seen:
            reused += size
        seen.add(identity)
    return reused / total if total else 0.0
