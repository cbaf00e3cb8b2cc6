"""The metrics the dashboards and alert rules need beyond the data plane's snapshots
(gateway.metrics): the lake endpoints' requests and errors (a series per endpoint from the
start, so a healthy lake's error rate is 0, not absent), added up over a node's workers; the
cache disk's size and free bytes; the write-back journal's dirty thresholds T and T + delta."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gateway.metrics import DiskCollector, LakeCollector, WriteBackCollector
from gateway.workerstats import WorkerBoard, node_lake

A, B = "http://lake-a:7480", "http://lake-b:7480"


def samples(*collectors: object) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry(auto_describe=True)
    for collector in collectors:
        registry.register(collector)  # type: ignore[arg-type]
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_the_lake_endpoints_are_exported_with_zero_errors_from_the_start() -> None:
    stats = {A: {"requests": 0, "errors": 0, "outstanding": 0}, B: {"requests": 7, "errors": 2, "outstanding": 1}}
    found = samples(LakeCollector(lambda: stats))
    assert found[("lakegate_lake_errors_total", (("endpoint", A),))] == 0
    assert found[("lakegate_lake_requests_total", (("endpoint", B),))] == 7
    assert found[("lakegate_lake_errors_total", (("endpoint", B),))] == 2
    assert found[("lakegate_lake_outstanding", (("endpoint", B),))] == 1


def test_the_lake_counts_are_the_node_s_over_its_workers(tmp_path: Path) -> None:
    one, two, three = (WorkerBoard(tmp_path, pid) for pid in (201, 202, 203))
    two.publish(None, None, lake={A: {"requests": 5, "errors": 1, "outstanding": 0}})
    three.publish(None, None, lake={B: {"requests": 2, "errors": 0, "outstanding": 1}})
    own = {A: {"requests": 10, "errors": 0, "outstanding": 2}}
    assert node_lake(own, one.others()) == {A: {"requests": 15, "errors": 1, "outstanding": 2},
                                            B: {"requests": 2, "errors": 0, "outstanding": 1}}


def test_the_cache_disk_size_and_free_bytes(tmp_path: Path) -> None:
    found = samples(DiskCollector(tmp_path))
    size, free = found[("lakegate_cache_disk_size_bytes", ())], found[("lakegate_cache_disk_free_bytes", ())]
    assert 0 < free <= size
    assert samples(DiskCollector(tmp_path / "not-there")) == {}  # no figures rather than wrong ones


def test_the_write_back_thresholds_are_exported() -> None:
    report = {"dirty_bytes": 10, "pending_objects": 1, "lag_s": {"0": 1.5}, "lake_up": True,
              "thresholds": {"soft": 1000, "delta": 500}, "counters": {"flushed": 3}}
    found = samples(WriteBackCollector(lambda: report))
    assert found[("lakegate_writeback_dirty_soft_bytes", ())] == 1000
    assert found[("lakegate_writeback_dirty_hard_bytes", ())] == 1500
    assert found[("lakegate_writeback_lag_seconds", (("position", "0"),))] == 1.5
