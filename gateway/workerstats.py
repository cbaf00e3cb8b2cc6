"""Counters of a node served by several workers: each worker counts its own requests and
publishes its counts every second (``WorkerBoard.publish``: a JSON file per worker, written
whole and renamed into place); /metrics and /_lakegate/admin/stats, answered by whichever worker
the connection reached, add the other workers' last published counts to its own live ones. So
the node's counters are at most a second behind for the other workers' requests, and never go
back: a worker that died keeps its last file (its replacement has a new pid), and the
supervisor clears the folder when the node starts.

What is added: per-tenant cache counters, the tiers' hits, misses, evictions and corrupt blocks,
the cluster counters, the lake endpoints' requests and errors, the cache-on-write bytes buffered now, and each worker's fairness counts
(``gateway.admission`` adds them). Capacities and bytes used are the node's already (the tiers'
space manager answers them).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections import Counter
from collections.abc import Mapping
from contextlib import suppress
from pathlib import Path
from typing import Any

from cachetier.telemetry.snapshots import CacheSnapshot, TierStats

log = logging.getLogger("lakegate.workers")

_TIER_COUNTS = ("hits", "misses", "evictions", "corrupt")


class WorkerBoard:
    """The folder where a node's workers publish their counts, one file each."""

    def __init__(self, directory: Path, pid: int | None = None) -> None:
        self.directory = directory
        self.pid = os.getpid() if pid is None else pid
        directory.mkdir(parents=True, exist_ok=True)

    def publish(self, cache: CacheSnapshot | None, cluster: Mapping[str, int] | None,
                fairness: Mapping[str, object] | None = None, telemetry: Mapping[str, object] | None = None,
                writeback: Mapping[str, int] | None = None,
                lake: Mapping[str, Mapping[str, int]] | None = None) -> None:
        doc = {
            "lake": {url: dict(counts) for url, counts in (lake or {}).items()},
            "writeback": dict(writeback or {}),
            "fairness": dict(fairness or {}),
            "telemetry": dict(telemetry or {}),
            "per_tenant": cache.per_tenant if cache is not None else {},
            "tiers": {name: {f: getattr(t, f) for f in _TIER_COUNTS} for name, t in (cache.tiers if cache else {}).items()},
            "write_buffered_bytes": cache.write_buffered_bytes if cache is not None else 0,
            "cluster": dict(cluster or {}),
        }
        tmp = self.directory / f".{self.pid}.json.tmp"
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, self.directory / f"{self.pid}.json")

    def others(self) -> list[dict[str, object]]:
        """The other workers' last published counts (a file being replaced is skipped)."""
        found = []
        for path in self.directory.glob("*.json"):
            if path.stem == str(self.pid):
                continue
            with suppress(OSError, ValueError):
                found.append(json.loads(path.read_text()))
        return found


def node_cache(own: CacheSnapshot, others: list[dict[str, object]]) -> CacheSnapshot:
    """``own`` with the other workers' counts added."""
    per_tenant: dict[str, Counter[str]] = {t: Counter(c) for t, c in own.per_tenant.items()}
    tiers = {name: dataclasses.asdict(t) for name, t in own.tiers.items()}
    buffered = own.write_buffered_bytes
    for doc in others:
        for tenant, counts in _mapping(doc.get("per_tenant")).items():
            per_tenant.setdefault(tenant, Counter()).update(_counts(counts))
        for name, counts in _mapping(doc.get("tiers")).items():
            if name in tiers:
                for field in _TIER_COUNTS:
                    tiers[name][field] += _counts(counts).get(field, 0)
        buffered += int(doc.get("write_buffered_bytes", 0) or 0)  # type: ignore[call-overload]
    return dataclasses.replace(
        own,
        per_tenant={t: dict(c) for t, c in per_tenant.items()},
        tiers={name: TierStats(**fields) for name, fields in tiers.items()},
        write_buffered_bytes=buffered,
    )


def node_counters(own: Mapping[str, int], others: list[dict[str, object]], part: str) -> dict[str, int]:
    total = Counter(own)
    for doc in others:
        total.update(_counts(doc.get(part)))
    return {name: total[name] for name in own}


def node_lake(own: Mapping[str, Mapping[str, int]], others: list[dict[str, object]]) -> dict[str, dict[str, int]]:
    """Per lake endpoint, ``own`` counts with the other workers' added (their endpoints too)."""
    total: dict[str, Counter[str]] = {url: Counter(counts) for url, counts in own.items()}
    for doc in others:
        for url, counts in _mapping(doc.get("lake")).items():
            total.setdefault(url, Counter()).update(_counts(counts))
    return {url: dict(counts) for url, counts in total.items()}


def _mapping(value: object) -> dict[str, object]:
    return value if isinstance(value, dict) else {}


def _counts(value: object) -> dict[str, int]:
    return {k: v for k, v in _mapping(value).items() if isinstance(v, int)}


class SharedDoc:
    """One JSON document the node's workers hand each other through the board's folder (an
    update from the cluster's leader that reached one worker): written whole and renamed into
    place, read by the others when its file changed."""

    def __init__(self, directory: Path, name: str) -> None:
        self.path = directory / name
        self._seen = 0  # the mtime (ns) of the version last read or written here

    def write(self, doc: Mapping[str, object]) -> None:
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        try:
            tmp.write_text(json.dumps(doc))
            os.replace(tmp, self.path)
            self._seen = self.path.stat().st_mtime_ns
        except OSError as exc:  # a full disk: the other workers keep their last until the next
            log.warning("could not share %s with the node's other workers: %s", self.path.name, exc)

    def changed(self) -> dict[str, Any] | None:
        """The document, if another worker wrote a new one since the last call (else None)."""
        try:
            stamp = self.path.stat().st_mtime_ns
            if stamp == self._seen:
                return None
            doc = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        self._seen = stamp
        return doc if isinstance(doc, dict) else None
