"""Metadata write stamps shared by a node's workers (cachetier/read/generations.py): two metadata
caches over one table stand for two workers; the mmap'd file is the same table in each process."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from cachetier.lake import ObjectInfo
from cachetier.read.generations import Generations
from cachetier.read.metadata import MetadataCache


def info(bucket: str, key: str, etag: str) -> ObjectInfo:
    return ObjectInfo(bucket=bucket, key=key, size=1, etag=etag, last_modified=datetime.now(timezone.utc))


def test_a_write_through_one_worker_makes_the_others_entries_stale() -> None:
    shared = Generations()
    one, two = (MetadataCache(60, lambda: 0.0, generations=shared) for _ in range(2))
    for cache in (one, two):
        cache.put(info("b", "k", '"old"'))
        cache.put(info("b", "other", '"x"'))
    one.invalidate("b", "k")  # the writing worker
    assert two.get("b", "k") is None and two.get("b", "other") is not None
    one.invalidate_bucket("b")
    assert two.get("b", "other") is None


def test_an_answer_fetched_across_a_write_is_stale_at_once() -> None:
    shared = Generations()
    one, two = (MetadataCache(60, lambda: 0.0, generations=shared) for _ in range(2))
    stamp = two.stamp("b", "k")  # worker two's lookup leaves for the lake ...
    one.invalidate("b", "k")  # ... worker one writes the key meanwhile
    two.put(info("b", "k", '"maybe old"'), stamp)
    assert two.get("b", "k") is None


def test_the_table_is_one_file_for_every_process(tmp_path: Path) -> None:
    path = tmp_path / "generations"
    a, b = Generations(path), Generations(path)
    before = b.stamp("b", "k")
    a.bump("b", "k")
    assert b.stamp("b", "k") != before
    a.close()
    b.close()


def test_a_lone_process_keeps_no_table() -> None:
    cache = MetadataCache(60, lambda: 0.0)
    cache.put(info("b", "k", '"e"'))
    assert cache.generations is None and cache.get("b", "k") is not None
    cache.invalidate("b", "k")
    assert cache.get("b", "k") is None
