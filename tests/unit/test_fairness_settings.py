"""Fairness settings and the tenants file's caps: rates as people write them, refusals naming the
variable, the modes of the ablation, and the node-level state gateway.admission keeps."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from gateway.admission import NodeFairness, NodeState, Totals, limited, wants
from gateway.rates import format_rate, parse_rate
from gateway.settings import FairnessSettings, Settings, SettingsError
from gateway.tenants import Tenant, TenantDirectory, TenantsFileError


@pytest.mark.parametrize(
    ("text", "rate"),
    [("50MB/s", 50e6), ("400Mbit", 50e6), ("20MiB/s", 20 * 2**20), ("1.5GB", 1.5e9), ("1048576", 1048576.0),
     ("100Mbps", 12.5e6), ("3KiB/s", 3072.0), ("10k", 1e4), ("0", None), ("", None), (2.5e6, 2.5e6)],
)
def test_rates_are_read_as_people_write_them(text: str | float, rate: float | None) -> None:
    assert parse_rate(text) == rate


@pytest.mark.parametrize("text", ["fast", "5Q", "-1", "1e9", "Mib", "nan", "10 MB/h"])
def test_a_rate_that_is_not_one_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_rate(text)


def test_format_rate() -> None:
    assert format_rate(None) == "unlimited"
    assert format_rate(12.5e6) == "12.5 MB/s"


def test_fairness_settings_and_their_refusals() -> None:
    fair = Settings.load(fairness="fq+pp", lake_bandwidth="400Mbit", node_request_rate=80,
                         node_send_rate="6MB/s").fairness
    assert (fair.fq, fair.pp, fair.wa, fair.occupancy) == (True, True, False, False)
    assert (fair.lake_bandwidth, fair.request_rate, fair.send_rate) == (50e6, 80.0, 6e6)
    assert Settings.load().fairness.mode == "all" and Settings.load().fairness.occupancy
    with pytest.raises(SettingsError, match="LAKEGATE_FAIRNESS"):
        Settings.load(fairness="max")
    with pytest.raises(SettingsError, match="LAKEGATE_LAKE_BANDWIDTH"):
        Settings.load(lake_bandwidth="lots")
    with pytest.raises(SettingsError, match="LAKEGATE_TENANT_QUEUE"):
        Settings.load(tenant_queue=0)


def _tenants(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "tenants.toml"
    path.write_text(f'[[tenant]]\nname = "a"\naccess_key = "AK"\nsecret_key = "SK"\n{extra}\n')
    return path


def test_the_tenants_file_carries_cluster_wide_caps(tmp_path: Path) -> None:
    tenant = TenantDirectory.load(_tenants(tmp_path, 'max_request_rate = 500\nmax_lake_bandwidth = "20MB/s"')).tenants[0]
    assert tenant.limits() == {"requests": 500.0, "lake_bytes": 20e6}
    assert TenantDirectory.load(_tenants(tmp_path, "")).tenants[0].limits() == {}


@pytest.mark.parametrize("extra", ["max_request_rate = 0", "max_request_rate = true", 'max_request_rate = "5"',
                                   'max_lake_bandwidth = "0"', 'max_lake_bandwidth = "lots"'])
def test_a_bad_cap_is_one_error_naming_the_tenant(tmp_path: Path, extra: str) -> None:
    with pytest.raises(TenantsFileError, match="tenant #1"):
        TenantDirectory.load(_tenants(tmp_path, extra))


def _node(settings: FairnessSettings, *tenants: Tenant, workers: int = 1, nodes: int = 1) -> NodeFairness:
    return NodeFairness(settings, TenantDirectory(list(tenants)), workers=workers, nodes=nodes, clock=lambda: 0.0)


def test_the_node_starts_with_an_even_part_of_the_cluster_budget_and_the_tenants_weights() -> None:
    a = Tenant("a", "AK1", "s", weight=2.0, max_lake_bandwidth=9e6)
    node = _node(FairnessSettings(lake_bandwidth=30e6, request_rate=90.0), a, nodes=3)
    assert node.capacity()["lake_bytes"] == pytest.approx(10e6)
    assert node.capacity()["requests"] == 90.0
    assert node.state.weights == {"a": 2.0}
    assert node.state.limits == {"a": {"lake_bytes": pytest.approx(3e6)}}
    assert math.isinf(_node(FairnessSettings(send_rate=None), a).capacity()["lake_bytes"])


def test_a_leader_update_is_applied_once_and_an_older_one_ignored() -> None:
    node = _node(FairnessSettings(), Tenant("a", "AK1", "s"), Tenant("b", "AK2", "s"))
    assert node.apply(NodeState({"a": 1.5, "b": 0.5, "ghost": 9.0}, 5e6, {}, epoch=2, leader="n1"))
    assert node.state.weights == {"a": 1.5, "b": 0.5}  # a tenant the file does not name is dropped
    assert node.capacity()["lake_bytes"] == 5e6
    assert not node.apply(NodeState({"a": 1.0, "b": 1.0}, None, {}, epoch=1, leader="n1"))
    assert node.state.weights == {"a": 1.5, "b": 0.5}


def test_a_backlogged_tenant_asks_for_all_of_a_finite_resource() -> None:
    capacity = {"requests": 100.0, "client_bytes": math.inf}
    assert wants({"requests": 20.0}, {"requests": 24.0}, capacity, 1.0) == {"requests": 100.0}
    assert wants({"requests": 20.0}, {"requests": 20.0}, capacity, 1.0) == {"requests": 20.0}
    assert wants({"client_bytes": 5.0}, {"client_bytes": 9.0}, capacity, 1.0) == {"client_bytes": 9.0}


def test_off_with_a_capacity_is_one_queue_and_without_none() -> None:
    assert limited(FairnessSettings(mode="off", request_rate=10.0))
    assert not limited(FairnessSettings(mode="off"))
    node = _node(FairnessSettings(mode="off", request_rate=10.0), Tenant("a", "AK1", "s"))
    assert node.fifo


def test_totals_read_from_a_worker_survive_garbage() -> None:
    assert Totals.from_doc({"served": {"a": {"requests": "x"}}}).served == {}
    assert Totals.from_doc(None).served == {}
    totals = Totals.from_doc({"served": {"a": {"requests": 3}}, "refused": {"a": 1}})
    assert totals.served == {"a": {"requests": 3.0}} and totals.refused == {"a": 1}


def test_a_worker_takes_the_part_of_the_node_its_tenants_demand_there() -> None:
    alpha, beta = Tenant("alpha", "AK1", "s"), Tenant("beta", "AK2", "s")
    node = _node(FairnessSettings(request_rate=100.0), alpha, beta, workers=2)
    assert node.fairness._queue.rate("requests") == 50.0  # an even part before any demand is seen
    # all of alpha's connections reached this worker, beta's are spread: both backlogged
    here = Totals({"alpha": {"requests": 30.0}, "beta": {"requests": 20.0}},
                  {"alpha": {"requests": 40.0}, "beta": {"requests": 30.0}})
    there = Totals({"beta": {"requests": 50.0}}, {"beta": {"requests": 60.0}})
    node._split_by_demand(here, [{"window": there.to_doc()}])
    part = node.fairness._queue.rate("requests")
    weights = node._weights
    # alpha's node-wide share (50) is all here; beta's 50 split by its demand on both workers
    alpha_here = part * weights["alpha"] / (weights["alpha"] + weights["beta"])
    assert alpha_here == pytest.approx(50.0 * 0.95 + 2.5, rel=0.05)
    assert part > 50.0


def test_a_leader_update_reaching_one_worker_reaches_the_others(tmp_path: Path) -> None:
    tenants = (Tenant("a", "AK1", "s"), Tenant("b", "AK2", "s"))
    settings = FairnessSettings(request_rate=100.0)
    one = NodeFairness(settings, TenantDirectory(list(tenants)), workers=2, directory=tmp_path, clock=lambda: 0.0)
    two = NodeFairness(settings, TenantDirectory(list(tenants)), workers=2, directory=tmp_path, clock=lambda: 0.0)
    assert one.apply(NodeState({"a": 1.5, "b": 0.5}, 7e6, {}, epoch=5, leader="n1", cluster_mmr=0.9,
                               nodes={"n1": {"a": 1.5}, "n2": {"a": 0.25}}))
    two.tick([])  # the other worker's next second
    assert two.state.weights == {"a": 1.5, "b": 0.5} and two.state.lake_capacity == 7e6
    assert two.state.cluster_mmr == 0.9
    assert two.weight_on("n2", "a") == 0.25 and two.weight_on("n2", "b") is None and two.weight_on("n9", "a") is None
    one.tick([])  # its own write is not news to the worker that wrote it
    assert one.state.epoch == 5


def test_lake_waiting_counts_every_worker_of_the_node(tmp_path: Path) -> None:
    """Write-back's flusher runs in one worker and yields to lake reads waiting on any: the
    others' as they last published."""
    tenants = TenantDirectory([Tenant("a", "AK1", "s")])
    node = NodeFairness(FairnessSettings(request_rate=100.0), tenants, workers=2, directory=tmp_path,
                        clock=lambda: 0.0)
    assert node.published()["lake_waiting"] is False
    assert not node.lake_waiting([{"lake_waiting": False}, {}])
    assert node.lake_waiting([{"lake_waiting": False}, {"lake_waiting": True}])
