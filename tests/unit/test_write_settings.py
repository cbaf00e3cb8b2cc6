"""The write settings (issue 14; gateway/settings.py, WriteSettings): write-through by default;
N = K = 1 on a node alone, 2/2 with peers; K > N, N > the most replicas, a bad mode or bucket
rule, and write-back with the cache off refused with a message naming the variable; the
journal's bounds T and delta 10% and 5% of the cache unless given; a tenant's write_mode in
the tenants file checked."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gateway.settings import Settings, SettingsError, WriteSettings
from gateway.tenants import TenantDirectory, TenantsFileError
from policies.replication import Thresholds

PEERS = {"peers": "http://peer:9001", "cluster_secret": "a-cluster-secret-of-some-length"}
GIB = 1 << 30
TENANT = '[[tenant]]\nname = "t"\naccess_key = "AKIDT000000000000001"\nsecret_key = "s"\n'


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith("LAKEGATE_")]:
        monkeypatch.delenv(name)


def _load(tmp_path: Path, **overrides: object) -> Settings:
    tenants = tmp_path / "tenants.toml"
    tenants.write_text(TENANT)
    base = {"lake": f"dir:{tmp_path / 'lake'}", "cache_dir": tmp_path / "cache", "tenants_file": tenants}
    return Settings.load(_env_file=None, **(base | overrides))


def test_write_through_by_default_with_one_copy_alone(tmp_path: Path) -> None:
    write = _load(tmp_path, cache_capacity=10 * GIB).write
    assert (write.mode, write.bucket_modes, write.replicas, write.sync_replicas) == ("write-through", (), 1, 1)
    assert write.max_replicas == WriteSettings.max_replicas
    assert (write.dirty_soft, write.dirty_delta) == (GIB, GIB // 2)  # 10% and 5% of the cache
    config = write.config()
    assert (config.replicas, config.sync_replicas, config.thresholds) == (1, 1, Thresholds(GIB, GIB // 2))


def test_two_copies_both_synchronous_with_peers_and_l2_counted_in_the_bounds(tmp_path: Path) -> None:
    write = _load(tmp_path, cache_capacity=6 * GIB, l2_capacity=4 * GIB, **PEERS).write
    assert (write.replicas, write.sync_replicas) == (2, 2)
    assert (write.dirty_soft, write.dirty_delta) == (GIB, GIB // 2)  # of L1 + L2


def test_explicit_values_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {"LAKEGATE_WRITE_MODE": "Write-Back", "LAKEGATE_WRITE_MODE_BUCKETS": "scratch-*=write-back, "
                        "logs=write-through", "LAKEGATE_WRITE_REPLICAS": "3", "LAKEGATE_WRITE_SYNC_REPLICAS": "2",
                        "LAKEGATE_WRITE_DIRTY_SOFT": "200MiB", "LAKEGATE_WRITE_DIRTY_DELTA": "50MiB"}.items():
        monkeypatch.setenv(name, value)
    write = _load(tmp_path, **PEERS).write
    assert write.mode == "write-back"
    assert write.bucket_modes == (("scratch-*", "write-back"), ("logs", "write-through"))
    assert (write.replicas, write.sync_replicas) == (3, 2)
    assert (write.dirty_soft, write.dirty_delta) == (200 << 20, 50 << 20)


def test_only_n_given_k_follows_it_down(tmp_path: Path) -> None:
    write = _load(tmp_path, write_replicas=1, **PEERS).write
    assert (write.replicas, write.sync_replicas) == (1, 1)


# (settings, the variable the one-line message names)
INVALID = [
    ({"write_sync_replicas": 2}, "LAKEGATE_WRITE_SYNC_REPLICAS"),  # alone N = 1
    ({"write_replicas": 2, "write_sync_replicas": 3}, "LAKEGATE_WRITE_SYNC_REPLICAS"),
    ({"write_replicas": 4}, "LAKEGATE_WRITE_REPLICAS"),  # above LAKEGATE_WRITE_MAX_REPLICAS (3)
    ({"write_mode": "later"}, "LAKEGATE_WRITE_MODE"),
    ({"write_mode_buckets": "scratch-*"}, "LAKEGATE_WRITE_MODE_BUCKETS"),
    ({"write_mode_buckets": "scratch-*=later"}, "LAKEGATE_WRITE_MODE_BUCKETS"),
    ({"write_mode_buckets": "=write-back"}, "LAKEGATE_WRITE_MODE_BUCKETS"),
    ({"write_mode": "write-back", "cache": False}, "LAKEGATE_WRITE_MODE"),
]


@pytest.mark.parametrize("settings,named", INVALID, ids=[f"{i}-{n}" for i, (_, n) in enumerate(INVALID)])
def test_an_invalid_write_setting_is_refused_naming_it(tmp_path: Path, settings: dict[str, object],
                                                       named: str) -> None:
    with pytest.raises(SettingsError) as raised:
        _load(tmp_path, **settings)
    message = str(raised.value)
    assert message.startswith(f"{named}:"), message


def test_a_bucket_rule_in_write_back_with_the_cache_off_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="LAKEGATE_CACHE=true"):
        _load(tmp_path, write_mode_buckets="tmp-*=write-back", cache=False)


def test_write_through_with_the_cache_off_is_fine(tmp_path: Path) -> None:
    assert _load(tmp_path, cache=False, write_mode_buckets="logs=write-through").write.mode == "write-through"


@pytest.mark.parametrize("line, mode", [("", None), ('write_mode = "write-back"\n', "write-back"),
                                        ('write_mode = "write-through"\n', "write-through")])
def test_a_tenants_write_mode(tmp_path: Path, line: str, mode: str | None) -> None:
    path = tmp_path / "tenants.toml"
    path.write_text(TENANT + line)
    tenant = TenantDirectory.load(path).by_access_key("AKIDT000000000000001")
    assert tenant is not None and tenant.write_mode == mode


@pytest.mark.parametrize("line", ['write_mode = "later"\n', "write_mode = 1\n"])
def test_a_bad_tenants_write_mode_is_refused(tmp_path: Path, line: str) -> None:
    path = tmp_path / "tenants.toml"
    path.write_text(TENANT + line)
    with pytest.raises(TenantsFileError, match="write_mode"):
        TenantDirectory.load(path)
