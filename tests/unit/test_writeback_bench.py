"""benchmarks/write_back.py's pure parts: the job plan, the read sizes, the summaries (job
completion, latency percentiles, the replica completion timeline), the drain check, the node
environment per config and the targets."""

from __future__ import annotations

import math

from benchmarks.write_back import (
    CONFIGS, Request, all_drained, job_completions, latency_summary, node_env, read_sizes, replica_timeline,
    targets, writer_jobs,
)
from harness.units import MiB


def test_writer_jobs_spread_over_the_nodes_round_robin_with_their_files_in_order() -> None:
    jobs = writer_jobs(4, 2, ["node1", "node2", "node3"], prefix="wt/")
    assert [node for node, _ in jobs.values()] == ["node1", "node2", "node3", "node1"]
    assert jobs["job3"][1] == ["wt/job3/part-0000", "wt/job3/part-0001"]


def test_read_sizes_are_seeded_whole_kib_within_bounds() -> None:
    sizes = read_sizes(200, seed=7)
    assert sizes == read_sizes(200, seed=7) and sizes != read_sizes(200, seed=8)
    assert all(1 * MiB <= s <= 4 * MiB and s % 1024 == 0 for s in sizes)


def test_job_completion_is_first_start_to_last_200_and_ignores_readers() -> None:
    reqs = [Request("job0", "a", 1.0, 2.0, True), Request("job0", "b", 2.0, 4.5, True),
            Request("job1", "c", 0.5, 1.5, True), Request("job1", "d", 1.5, 9.0, False),
            Request("reader", "x", 0.0, 20.0, True)]
    got = job_completions(reqs)
    assert got["jobs_s"] == {"job0": 3.5, "job1": 1.0}  # job1's last 200 at 1.5
    assert got["avg_s"] == 2.25 and got["max_s"] == 3.5
    assert got["failed"] == ["job1"]


def test_latency_summary_in_ms_and_nan_when_empty() -> None:
    s = latency_summary([0.01 * i for i in range(1, 101)])
    assert s["n"] == 100 and s["p50_ms"] == 505.0 and 990 < s["p99_ms"] <= 1000
    assert math.isnan(latency_summary([])["p99_ms"])


def test_replica_timeline_orders_by_ack_and_leaves_unseen_objects_open() -> None:
    t = replica_timeline({"b": 2.0, "a": 1.0, "c": 3.0}, {"a": 1.5, "b": 6.0})
    assert [r["key"] for r in t["objects"]] == ["a", "b", "c"]
    assert [r["lag_s"] for r in t["objects"]] == [0.5, 4.0, None]
    assert t["landed"] == 2 and t["acknowledged"] == 3 and t["last_landed_s"] == 6.0 and t["lag_max_s"] == 4.0


def test_drained_needs_every_node_at_zero_pending_objects() -> None:
    assert all_drained({"n1": {"pending_objects": 0}, "n2": {"pending_objects": 0}})
    assert not all_drained({"n1": {"pending_objects": 0}, "n2": {"pending_objects": 1}})
    assert not all_drained({"n1": {}})
    assert not all_drained({})


def test_node_env_differs_only_in_write_mode_and_flow_control() -> None:
    envs = {c: node_env(c, "180Mbit/s", "512MiB", "256MiB") for c in CONFIGS}
    assert envs["write-through"]["LAKEGATE_WRITE_MODE"] == "write-through"
    assert "LAKEGATE_WRITE_FLOW_CONTROL" not in envs["write-through"]
    assert envs["write-back-no-fc"]["LAKEGATE_WRITE_FLOW_CONTROL"] == "false"
    assert envs["write-back-fc"]["LAKEGATE_WRITE_FLOW_CONTROL"] == "true"
    common = {k: v for k, v in envs["write-through"].items() if k != "LAKEGATE_WRITE_MODE"}
    for env in envs.values():
        assert {k: env[k] for k in common} == common
        assert env["LAKEGATE_LAKE_BANDWIDTH"] == "180Mbit/s"


def _summary(avg_s: float, put_p50: float, read_p99: float) -> dict[str, object]:
    return {"jobs": {"avg_s": avg_s}, "put": {"p50_ms": put_p50},
            "reads": {"p99_ms": read_p99 / 2, "p999_ms": read_p99 * 2},
            "reads_background": {"p99_ms": read_p99}, "drain_s": 5.0}


def test_targets_met_and_missed_by_the_issue_bounds() -> None:
    met = targets({"write-through": _summary(10.0, 500.0, 800.0), "write-back-no-fc": _summary(3.0, 60.0, 2000.0),
                   "write-back-fc": _summary(8.0, 90.0, 900.0)})
    assert met["job_completion_speedup_fc_vs_write_through"]["met"]  # 20% faster
    assert met["put_p50_fc_over_write_through"]["value"] == 0.18 and met["put_p50_fc_over_write_through"]["met"]
    assert met["read_p99_fc_over_no_fc"]["value"] == 0.45 and met["all_met"]
    missed = targets({"write-through": _summary(10.0, 500.0, 800.0), "write-back-no-fc": _summary(3.0, 60.0, 1000.0),
                      "write-back-fc": _summary(8.5, 101.0, 600.0)})
    assert not missed["job_completion_speedup_fc_vs_write_through"]["met"]  # 15% faster
    assert not missed["put_p50_fc_over_write_through"]["met"]
    assert not missed["read_p99_fc_over_no_fc"]["met"] and not missed["all_met"]
    assert missed["ratios"]["avg_job_completion_no_fc_over_write_through"] == 0.3


def test_a_target_not_measured_is_missed() -> None:
    nan = float("nan")
    got = targets({"write-through": _summary(nan, 500.0, 800.0), "write-back-no-fc": _summary(3.0, 60.0, 1000.0),
                   "write-back-fc": _summary(8.0, 90.0, 400.0)})
    assert not got["job_completion_speedup_fc_vs_write_through"]["met"] and not got["all_met"]


def test_background_reads_are_those_begun_before_the_journals_drained() -> None:
    from benchmarks.write_back import Request, background_reads

    gets = [Request("reader", "a", 1.0, 2.0, True), Request("reader", "b", 5.0, 5.5, True),
            Request("reader", "c", 2.0, 9.0, False)]
    assert background_reads(gets, 4.0, 3.0) == [1.0]
    assert background_reads(gets, float("nan"), 6.0) == [1.0, 0.5]  # nothing drained: until the writers' end
