"""How a write is to be made (issue 14): write-back or write-through, and its replication.

The request's own ``x-lakegate-write-mode`` comes first, then the first of the bucket rules
(``LAKEGATE_WRITE_MODE_BUCKETS``) that matches, then the tenant's ``write_mode`` (tenants
file), then ``LAKEGATE_WRITE_MODE``. ``x-lakegate-replicas: N`` and
``x-lakegate-sync-replicas: K`` set the replication of a write-back write (1 <= K <= N <=
LAKEGATE_WRITE_MAX_REPLICAS); a value outside that is 400 InvalidArgument, not silently
clamped. These headers are lakegate's own: the lake never sees them.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass

from cachetier.context import WRITE_THROUGH, WriteIntent
from cachetier.errors import InvalidArgument

MODE_HEADER = "x-lakegate-write-mode"
REPLICAS_HEADER = "x-lakegate-replicas"
SYNC_HEADER = "x-lakegate-sync-replicas"
MODES = ("write-through", "write-back")

# the operations a write mode applies to
WRITE_OPERATIONS = frozenset({
    "PutObject", "CopyObject", "DeleteObject", "DeleteObjects", "CreateMultipartUpload",
    "CompleteMultipartUpload",
})


@dataclass(frozen=True)
class WriteModes:
    """The node's rules: its default mode, per-bucket modes (glob, mode) and the most replicas."""

    default: str = "write-through"
    buckets: tuple[tuple[str, str], ...] = ()
    max_replicas: int = 3

    def intent(self, headers: Mapping[str, str], bucket: str, tenant_mode: str | None) -> WriteIntent:
        """The write intent of a request with ``headers`` (lower-case names) to ``bucket``."""
        mode = headers.get(MODE_HEADER)
        if mode is not None:
            mode = mode.strip().lower()
            if mode not in MODES:
                raise InvalidArgument(f"{MODE_HEADER} must be write-back or write-through.")
        else:
            mode = self._bucket_mode(bucket) or tenant_mode or self.default
        replicas = self._count(headers, REPLICAS_HEADER)
        sync = self._count(headers, SYNC_HEADER)
        if replicas is not None and sync is not None and sync > replicas:
            raise InvalidArgument(f"{SYNC_HEADER} must not exceed {REPLICAS_HEADER}.")
        if mode == "write-through" and replicas is None and sync is None:
            return WRITE_THROUGH
        return WriteIntent(back=mode == "write-back", replicas=replicas, sync_replicas=sync)

    def _bucket_mode(self, bucket: str) -> str | None:
        for glob, mode in self.buckets:
            if fnmatch.fnmatchcase(bucket, glob):
                return mode
        return None

    def _count(self, headers: Mapping[str, str], name: str) -> int | None:
        value = headers.get(name)
        if value is None:
            return None
        value = value.strip()
        if not value.isdigit() or not 1 <= int(value) <= self.max_replicas:
            raise InvalidArgument(f"{name} must be a number from 1 to {self.max_replicas}.")
        return int(value)
