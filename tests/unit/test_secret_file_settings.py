"""The secrets a container is given as files (compose and Kubernetes secrets): the cluster
secret (LAKEGATE_CLUSTER_SECRET_FILE) and the lake's secret key (LAKEGATE_LAKE_SECRET_KEY_FILE),
each from its variable or its file, never both, the file's final newline dropped, never echoed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gateway.settings import Settings, SettingsError

ROOT = Path(__file__).resolve().parents[2]
TENANTS = ROOT / "deploy" / "tenants.example.toml"
CLUSTER_SECRET = "a-cluster-secret-of-some-length"
LAKE_SECRET = "lake-secret-0123456789"
PEERS = "node2=http://127.0.0.1:9001"
S3_LAKE = {"lake": "http://127.0.0.1:7480", "lake_access_key": "LAKEKEY"}


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith("LAKEGATE_")]:
        monkeypatch.delenv(name)


def _load(tmp_path: Path, **overrides: object) -> Settings:
    base = {"lake": f"dir:{tmp_path / 'lake'}", "cache_dir": tmp_path / "cache", "tenants_file": TENANTS}
    return Settings.load(_env_file=None, **(base | overrides))


def _file(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_the_cluster_secret_from_a_file(tmp_path: Path) -> None:
    settings = _load(tmp_path, peers=PEERS, cluster_secret_file=_file(tmp_path, "c", CLUSTER_SECRET + "\n"))
    assert settings.cluster is not None and settings.cluster.secret == CLUSTER_SECRET.encode()
    assert CLUSTER_SECRET not in repr(settings)


def test_the_lake_secret_key_from_a_file(tmp_path: Path) -> None:
    settings = _load(tmp_path, **S3_LAKE, lake_secret_key_file=_file(tmp_path, "l", LAKE_SECRET + "\r\n"))
    assert settings.lake.s3 is not None and settings.lake.s3.secret_key == LAKE_SECRET


def test_an_empty_file_variable_means_none(tmp_path: Path) -> None:
    settings = _load(tmp_path, peers=PEERS, cluster_secret=CLUSTER_SECRET, cluster_secret_file="")
    assert settings.cluster is not None and settings.cluster.secret == CLUSTER_SECRET.encode()


def test_the_admin_secret_must_differ_from_a_cluster_secret_given_as_a_file(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="LAKEGATE_ADMIN_SECRET_KEY"):
        _load(tmp_path, peers=PEERS, cluster_secret_file=_file(tmp_path, "c", CLUSTER_SECRET),
              admin_access_key="AK", admin_secret_key=CLUSTER_SECRET)


@pytest.mark.parametrize(("overrides", "variable"), [
    ({"peers": PEERS, "cluster_secret": CLUSTER_SECRET, "cluster_secret_file": "FILE"},
     "LAKEGATE_CLUSTER_SECRET_FILE"),
    ({"peers": PEERS, "cluster_secret_file": "/nonexistent/secret"}, "LAKEGATE_CLUSTER_SECRET_FILE"),
    ({"peers": PEERS, "cluster_secret_file": "SHORT"}, "LAKEGATE_CLUSTER_SECRET"),
    ({**S3_LAKE, "lake_secret_key": LAKE_SECRET, "lake_secret_key_file": "FILE"}, "LAKEGATE_LAKE_SECRET_KEY_FILE"),
    ({**S3_LAKE, "lake_secret_key_file": "/nonexistent/secret"}, "LAKEGATE_LAKE_SECRET_KEY_FILE"),
])
def test_invalid(tmp_path: Path, overrides: dict[str, str], variable: str) -> None:
    files = {"FILE": _file(tmp_path, "f", CLUSTER_SECRET), "SHORT": _file(tmp_path, "s", "short")}
    resolved = {k: files.get(v, v) for k, v in overrides.items()}
    with pytest.raises(SettingsError) as caught:
        _load(tmp_path, **resolved)
    message = str(caught.value)
    assert message.startswith(variable + ":") and CLUSTER_SECRET not in message and LAKE_SECRET not in message
