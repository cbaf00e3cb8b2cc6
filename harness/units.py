"""Byte units, spelled once for the tests and the benchmarks."""

from __future__ import annotations

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB
