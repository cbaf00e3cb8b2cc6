"""Invalid settings: one clear message on stderr, exit code 2, before the port is bound."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.settings import Settings
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
    assert Settings().listen == "127.0.0.1:1111"
    assert Settings(listen="127.0.0.1:2222").listen == "127.0.0.1:2222"


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
