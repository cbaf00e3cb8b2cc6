"""The admin credential's settings (gateway/admin.py, gateway/settings.py): the secret from the
environment or a file, never both; the secret and the token 16+ characters and not the cluster
secret; the key pair together; the access key no tenant's; none of it echoed; the banner names
the access key, never the secret, or the settings that turn the admin endpoints on. And the
other secrets a container is given as files (compose and Kubernetes secrets): the cluster secret
(LAKEGATE_CLUSTER_SECRET_FILE) and the lake's secret key (LAKEGATE_LAKE_SECRET_KEY_FILE), each
from its variable or its file, never both, the file's final newline dropped, never echoed."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.admin import AdminConfig, AdminKeyIsTenantKey
from gateway.app import LakegateApp
from gateway.cli import _banner, load_tenants
from gateway.settings import Settings, SettingsError
from gateway.tenants import TenantDirectory

ROOT = Path(__file__).resolve().parents[2]
TENANTS = ROOT / "deploy" / "tenants.example.toml"
DEMO_KEY = "LAKEGATEDEMOKEY00001"  # a tenant of the example tenants file
SECRET = "admin-secret-0123456789"
CLUSTER_SECRET = "a-cluster-secret-of-some-length"
LAKE_SECRET = "lake-secret-0123456789"
PEERS = "node2=http://127.0.0.1:9001"
S3_LAKE = {"lake": "http://127.0.0.1:7480", "lake_access_key": "LAKEKEY"}


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in __import__("os").environ if n.startswith("LAKEGATE_")]:
        monkeypatch.delenv(name)


def _load(tmp_path: Path, **overrides: object) -> Settings:
    base = {"lake": f"dir:{tmp_path / 'lake'}", "cache_dir": tmp_path / "cache", "tenants_file": TENANTS}
    return Settings.load(_env_file=None, **(base | overrides))


def _file(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_no_admin_credential_by_default(tmp_path: Path) -> None:
    admin = _load(tmp_path).admin
    assert admin == AdminConfig() and not admin.configured and not admin.metrics_auth


def test_the_secret_from_the_environment_or_from_a_file(tmp_path: Path) -> None:
    assert _load(tmp_path, admin_access_key="AK", admin_secret_key=SECRET).admin.secret_key == SECRET
    from_file = _load(tmp_path, admin_access_key="AK", admin_secret_key_file=_file(tmp_path, "s", SECRET + "\n"))
    assert from_file.admin.secret_key == SECRET and SECRET not in repr(from_file)
    token = _load(tmp_path, admin_token_file=_file(tmp_path, "t", "t" * 16 + "\r\n")).admin
    assert token.token == "t" * 16 and token.configured and not token.access_key


# (settings, the variable the one-line message names)
INVALID = [
    ({"admin_access_key": "AK"}, "LAKEGATE_ADMIN_SECRET_KEY"),
    ({"admin_secret_key": SECRET}, "LAKEGATE_ADMIN_ACCESS_KEY"),
    ({"admin_access_key": "AK", "admin_secret_key": "short-secret"}, "LAKEGATE_ADMIN_SECRET_KEY"),
    ({"admin_access_key": "AK", "admin_secret_key": SECRET, "admin_secret_key_file": "FILE"},
     "LAKEGATE_ADMIN_SECRET_KEY_FILE"),
    ({"admin_access_key": "AK", "admin_secret_key_file": "/nonexistent/secret"}, "LAKEGATE_ADMIN_SECRET_KEY_FILE"),
    ({"admin_token_file": "SHORT"}, "LAKEGATE_ADMIN_TOKEN_FILE"),
    ({"admin_token_file": "/nonexistent/token"}, "LAKEGATE_ADMIN_TOKEN_FILE"),
    ({"admin_access_key": "AK", "admin_secret_key": CLUSTER_SECRET, "peers": "http://peer:9001",
      "cluster_secret": CLUSTER_SECRET}, "LAKEGATE_ADMIN_SECRET_KEY"),
    ({"admin_token_file": "CLUSTER", "peers": "http://peer:9001", "cluster_secret": CLUSTER_SECRET},
     "LAKEGATE_ADMIN_TOKEN_FILE"),
    ({"metrics_auth": True}, "LAKEGATE_METRICS_AUTH"),
]


@pytest.mark.parametrize("settings,named", INVALID, ids=[f"{i}-{n}" for i, (_, n) in enumerate(INVALID)])
def test_an_invalid_admin_setting_is_one_error_naming_it(tmp_path: Path, settings: dict[str, object], named: str) -> None:
    files = {"FILE": SECRET, "SHORT": "short-token", "CLUSTER": CLUSTER_SECRET}
    settings = {k: _file(tmp_path, k, files[v]) if v in files else v for k, v in settings.items()}
    with pytest.raises(SettingsError) as raised:
        _load(tmp_path, **settings)
    message = str(raised.value)
    assert message.startswith(f"{named}:"), message
    for secret in (SECRET, CLUSTER_SECRET, "short-secret", "short-token"):
        assert secret not in message


def test_the_admin_access_key_is_no_tenants(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings = _load(tmp_path, admin_access_key=DEMO_KEY, admin_secret_key=SECRET)
    with pytest.raises(SystemExit) as exited:
        load_tenants(settings)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "LAKEGATE_ADMIN_ACCESS_KEY" in err and SECRET not in err
    with pytest.raises(AdminKeyIsTenantKey):
        LakegateApp(settings, tenants=TenantDirectory.load(TENANTS))


def test_the_banner_names_the_admin_key_never_the_secret(tmp_path: Path) -> None:
    tenants = TenantDirectory.load(TENANTS)
    off = _banner(_load(tmp_path), tenants)
    assert "admin endpoints: off" in off and "LAKEGATE_ADMIN_ACCESS_KEY" in off
    on = _banner(_load(tmp_path, admin_access_key="ADMINKEY", admin_secret_key=SECRET), tenants)
    assert "ADMINKEY" in on and SECRET not in on and "/_lakegate/admin/stats" in on


# ---- the cluster secret and the lake's secret key as files -------------------------------------


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
def test_invalid_secret_files(tmp_path: Path, overrides: dict[str, str], variable: str) -> None:
    files = {"FILE": _file(tmp_path, "f", CLUSTER_SECRET), "SHORT": _file(tmp_path, "s", "short")}
    resolved = {k: files.get(v, v) for k, v in overrides.items()}
    with pytest.raises(SettingsError) as caught:
        _load(tmp_path, **resolved)
    message = str(caught.value)
    assert message.startswith(variable + ":") and CLUSTER_SECRET not in message and LAKE_SECRET not in message
