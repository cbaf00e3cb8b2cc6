"""Invalid settings: one clear message on stderr naming the setting, exit code 2, before the port is
bound; from ``lakegate serve`` and from the app factory. And one set of defaults: .env.example's."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.cli import load_settings
from gateway.settings import Environment, Settings
from gateway.tenants import TenantDirectory, TenantsFileError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_TENANTS = ROOT / "deploy" / "tenants.example.toml"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-c", "from gateway.cli import main; main()", "serve", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--lake", "ftp://example"], "lake must be dir:PATH or http(s)://host:port"),
        (["--listen", "nowhere"], "listen must be HOST:PORT"),
        (["--tenants", "/nonexistent/tenants.toml"], "tenants file not found"),
        (["--lake", "http://127.0.0.1:7480"], "lake_access_key and lake_secret_key"),
        (["--tls-cert", str(EXAMPLE_TENANTS)], "tls_cert and tls_key must be given together"),
        (["--log-level", "loud"], "log_level"),
    ],
)
def test_invalid_settings_exit_2_without_binding(args: list[str], needle: str, tmp_path: Path) -> None:
    port = _free_port()
    result = _serve("--listen", f"127.0.0.1:{port}", "--tenants", str(EXAMPLE_TENANTS), *args)
    assert result.returncode == 2, result.stderr
    assert needle in result.stderr
    assert result.stderr.count("\n") == 1  # one message, no traceback
    with socket.socket() as s:  # nobody bound the port
        s.bind(("127.0.0.1", port))


def test_bad_tenants_file(tmp_path: Path) -> None:
    bad = tmp_path / "t.toml"
    bad.write_text('[[tenant]]\nname = "a"\naccess_key = "K"\n')
    result = _serve("--tenants", str(bad), "--listen", f"127.0.0.1:{_free_port()}")
    assert result.returncode == 2
    assert "secret_key must be a non-empty string" in result.stderr


def test_flags_override_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAKEGATE_LISTEN", "127.0.0.1:1111")
    monkeypatch.setenv("LAKEGATE_TENANTS_FILE", str(EXAMPLE_TENANTS))
    assert Settings.load().server.listen == "127.0.0.1:1111"
    assert Settings.load(listen="127.0.0.1:2222").server.listen == "127.0.0.1:2222"


def test_sigv2_is_on_unless_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAKEGATE_TENANTS_FILE", str(EXAMPLE_TENANTS))
    monkeypatch.delenv("LAKEGATE_SIGV2", raising=False)
    assert Settings.load(_env_file=None).server.frontend.sigv2
    monkeypatch.setenv("LAKEGATE_SIGV2", "false")
    assert not Settings.load(_env_file=None).server.frontend.sigv2


def test_tenants_file(tmp_path: Path) -> None:
    tenants = TenantDirectory.load(EXAMPLE_TENANTS)
    demo = tenants.by_access_key("LAKEGATEDEMOKEY00001")
    assert demo is not None and demo.may_use("anything")
    etl = tenants.by_access_key("LAKEGATEETLKEY000002")
    assert etl is not None and etl.weight == 2.0
    assert etl.may_use("etl-2026") and etl.may_use("shared") and not etl.may_use("other")
    assert "secret" not in repr(etl)
    dup = tmp_path / "dup.toml"
    dup.write_text('[[tenant]]\nname="a"\naccess_key="K"\nsecret_key="s"\n[[tenant]]\nname="b"\naccess_key="K"\nsecret_key="t"\n')
    with pytest.raises(TenantsFileError, match="duplicate tenant access_key"):
        TenantDirectory.load(dup)


# Every LAKEGATE_* variable with a value it refuses. Free-form ones (LAKE_REGION, NODE_ID,
# VIRTUAL_HOST_SUFFIXES, ANONYMOUS_READ_BUCKETS) have none.
MALFORMED = [
    ("LISTEN", "nowhere"), ("LISTEN", "127.0.0.1:99999"),
    ("LAKE", "ftp://x"), ("LAKE", "dir:"), ("LAKE", "http://lake/prefix"), ("LAKE", f"dir:{EXAMPLE_TENANTS}"),
    ("LAKE_ACCESS_KEY", ""), ("LAKE_SECRET_KEY", ""),
    ("LAKE_TIMEOUT", "soon"), ("LAKE_TIMEOUT", "0"), ("LAKE_CONNECT_TIMEOUT", "-1"),
    ("LAKE_RETRIES", "many"), ("LAKE_RETRIES", "11"), ("LAKE_MAX_CONNECTIONS", "0"),
    ("TENANTS_FILE", "/nonexistent/tenants.toml"),
    ("CACHE_DIR", str(EXAMPLE_TENANTS)),
    ("CACHE", "maybe"), ("CACHE_CAPACITY", "lots"), ("CACHE_CAPACITY", "-1"), ("CACHE_EVICTION", "fifo"),
    ("BLOCK_SIZE", "1KiB"), ("BLOCK_SIZE", "1GiB"), ("BLOCK_SIZE", "big"),
    ("META_TTL", "-1"), ("META_TTL", "later"), ("READAHEAD", "65"), ("READAHEAD", "-1"),
    ("CACHE_ON_WRITE", "perhaps"), ("CACHE_ON_WRITE_MAX", "x"), ("CACHE_MAX_OBJECT_SIZE", "x"),
    ("TLS_CERT", str(EXAMPLE_TENANTS)), ("TLS_KEY", str(EXAMPLE_TENANTS)), ("TLS_CERT", "/nonexistent/cert.pem"),
    ("MAX_CLOCK_SKEW", "0"), ("MAX_CLOCK_SKEW", "x"), ("MAX_HEADER_BYTES", "100"),
    ("LOG_LEVEL", "loud"), ("ACCESS_LOG", "x"), ("SIGV2", "maybe"),
    ("PEERS", "ftp://x"), ("PEERS", "dns:nohost"), ("PEERS", "node2="), ("PEERS", "http://"), ("PEERS", "http://h:port"),
    ("CLUSTER_SECRET", "short"),
    ("ADVERTISE_URL", "ftp://x"), ("ADVERTISE_URL", "http://h:port"),
    ("NODE_WEIGHT", "0"), ("L2_CAPACITY", "x"), ("REPLICAS", "4"), ("REPLICAS", "0"),
    ("PARTITIONS", "0"), ("PARTITIONS", "70000"),
    ("HEARTBEAT_INTERVAL", "0"), ("HEARTBEAT_INTERVAL", "5"), ("FAILURE_TIMEOUT", "0"), ("FAILURE_TIMEOUT", "1"),
    ("PEER_CA_FILE", "/nonexistent/ca.pem"),
    ("SIZING", "elastic"), ("SIZING_INTERVAL", "0"), ("SIZING_SAMPLE_RATE", "0"), ("SIZING_SAMPLE_RATE", "2"),
    ("SIZING_MEMORY", "1KiB"), ("SIZING_MIN_L1", "0.95"), ("SIZING_MAX_L1", "1.5"), ("SIZING_STEP", "0"),
    ("SIZING_HALF_LIFE", "-1"),
]
# what a malformed value needs around it to be reached
CONTEXT = {
    "LAKE_ACCESS_KEY": {"LAKEGATE_LAKE": "http://lake:7480", "LAKEGATE_LAKE_SECRET_KEY": "s"},
    "LAKE_SECRET_KEY": {"LAKEGATE_LAKE": "http://lake:7480", "LAKEGATE_LAKE_ACCESS_KEY": "a"},
    "TLS_CERT": {"LAKEGATE_TLS_KEY": str(EXAMPLE_TENANTS)},
    "CLUSTER_SECRET": {"LAKEGATE_PEERS": "http://peer:9001"},
}


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """No LAKEGATE_* variable and no .env but the example tenants file."""
    for name in [n for n in __import__("os").environ if n.startswith("LAKEGATE_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LAKEGATE_TENANTS_FILE", str(EXAMPLE_TENANTS))
    return monkeypatch


@pytest.mark.parametrize("name,value", MALFORMED, ids=[f"{n}={v}" for n, v in MALFORMED])
def test_each_malformed_value_is_one_line_naming_it_and_exit_2(
    name: str, value: str, clean_environment: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    if name == "TLS_CERT" and value == str(EXAMPLE_TENANTS):
        context = {}  # the certificate alone
    else:
        context = CONTEXT.get(name, {})
    for key, setting in {**context, f"LAKEGATE_{name}": value}.items():
        clean_environment.setenv(key, setting)
    with pytest.raises(SystemExit) as exited:
        load_settings({})
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("lakegate: invalid settings: "), err
    assert f"LAKEGATE_{name}" in err or name.lower() in err, err
    assert "Traceback" not in err
    assert value not in err or name != "CLUSTER_SECRET"  # a secret is never echoed


def test_the_defaults_are_valid_and_those_of_env_example(clean_environment: pytest.MonkeyPatch) -> None:
    """.env.example documents every variable with its default: the same set, the same values."""
    documented = {}
    for line in (ROOT / ".env.example").read_text().splitlines():
        if line.startswith("LAKEGATE_"):
            name, _, value = line.partition("=")
            documented[name.removeprefix("LAKEGATE_").lower()] = value
    assert set(documented) == set(Environment.model_fields)
    assert Settings.load().cluster is None
    clean_environment.delenv("LAKEGATE_TENANTS_FILE")
    for name, value in documented.items():
        clean_environment.setenv(f"LAKEGATE_{name.upper()}", value)
    written = Environment().model_dump()  # .env.example's values, parsed
    clean_environment.chdir(ROOT)  # the default tenants file is relative to the checkout
    for name in documented:
        clean_environment.delenv(f"LAKEGATE_{name.upper()}")
    assert written == Environment().model_dump()


@pytest.mark.parametrize("command", [
    ["-c", "from gateway.cli import main; main()", "serve"],
    ["-m", "uvicorn", "--factory", "gateway.app:create_app", "--port", "21210"],
])
def test_peers_ftp_is_one_line_and_exit_2_from_serve_and_the_app_factory(command: list[str]) -> None:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKEGATE_")}
    env |= {"LAKEGATE_PEERS": "ftp://x", "LAKEGATE_TENANTS_FILE": str(EXAMPLE_TENANTS), "LAKEGATE_LISTEN": "127.0.0.1:21211"}
    result = subprocess.run([sys.executable, *command], capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)
    assert result.returncode == 2, result.stderr
    assert result.stderr == "lakegate: invalid settings: LAKEGATE_PEERS: a peer must be [id=]http(s)://host:port, got 'ftp://x'\n"
