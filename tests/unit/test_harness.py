"""The pure parts of harness/: tenants files the gateway reads back, the RGW the environment
names, s3.env files, statistics, py-spy's collapsed stacks and RGW's access-log lines."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from gateway.tenants import TenantDirectory
from harness.ceph import read_env_file, rgw_endpoint, rgw_endpoints
from harness.endpoints import ALICE, S3Endpoint, Tenant, lake_target, tenants_toml
from harness.load import collapsed_stacks
from harness.results import percentile, rounded
from harness.rgwlog import Request


def test_a_tenants_file_reads_back_as_written(tmp_path: Path) -> None:
    bob = Tenant("bob", "AKIDBOB0000000000002", "bob-secret-0123456789", weight=2.0, buckets=("bob-*",))
    path = tmp_path / "tenants.toml"
    path.write_text(tenants_toml([ALICE, bob]))
    directory = TenantDirectory.load(path)
    read = directory.by_access_key(bob.access_key)
    assert read is not None and (read.name, read.weight, read.buckets) == ("bob", 2.0, ("bob-*",))
    assert directory.secret_for(ALICE.access_key) == ALICE.secret_key


def test_the_rgw_of_the_environment() -> None:
    assert rgw_endpoint({}) is None
    environ = {"S3_ENDPOINT_URL": "http://127.0.0.1:7480/", "AWS_ACCESS_KEY_ID": "A", "AWS_SECRET_ACCESS_KEY": "S"}
    assert rgw_endpoint(environ) == S3Endpoint("http://127.0.0.1:7480", "A", "S")
    with pytest.raises(KeyError, match="AWS_SECRET_ACCESS_KEY"):
        rgw_endpoint({"S3_ENDPOINT_URL": "http://x:1", "AWS_ACCESS_KEY_ID": "A"})
    target = lake_target(S3Endpoint("http://x:1", "A", "S"))
    assert (target.endpoint_url, target.via_gateway, target.port) == ("http://x:1", False, 1)


def test_the_rgw_instances_of_the_environment() -> None:
    keys = {"AWS_ACCESS_KEY_ID": "A", "AWS_SECRET_ACCESS_KEY": "S"}
    assert rgw_endpoints({}) == []
    assert rgw_endpoints({"S3_ENDPOINT_URL": "http://h:1", **keys}) == [S3Endpoint("http://h:1", "A", "S")]
    both = {"S3_ENDPOINT_URL": "http://h:1", "S3_ENDPOINT_URLS": "http://h:1,http://h:2/", **keys}
    assert rgw_endpoints(both) == [S3Endpoint("http://h:1", "A", "S"), S3Endpoint("http://h:2", "A", "S")]


def test_an_s3_env_file(tmp_path: Path) -> None:
    path = tmp_path / "s3.env"
    path.write_text("# written by start-ceph.sh\nexport S3_ENDPOINT_URL='http://127.0.0.1:7590'\nAWS_ACCESS_KEY_ID=\"A\"\n")
    assert read_env_file(path) == {"S3_ENDPOINT_URL": "http://127.0.0.1:7590", "AWS_ACCESS_KEY_ID": "A"}


def test_percentiles_interpolate_between_ranks() -> None:
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    assert percentile([1.0], 99) == 1.0
    assert math.isnan(percentile([], 50))
    assert rounded(1.23456) == 1.235 and math.isnan(rounded(float("nan")))


def test_collapsed_stacks(tmp_path: Path) -> None:
    path = tmp_path / "profile.txt"
    path.write_text("main (a.py:1);work (a.py:9) 12\nnot a stack\n")
    assert collapsed_stacks(path) == [(["main (a.py:1)", "work (a.py:9)"], 12)]


def test_an_rgw_access_log_line() -> None:
    line = ('2026-11-30T06:01:45 7f beast: 0x7f00aa: 127.0.0.1 - lakegate [30/Nov/2026:06:01:45.628 +0000] '
            '"GET /bucket/a%20key?x=1 HTTP/1.1" 206 4194304 - "lakegate" bytes=0-4194303 latency=0.008000000s')
    request = Request.parse(line)
    assert request is not None
    assert (request.method, request.path, request.query, request.status) == ("GET", "/bucket/a key", "x=1", 206)
    assert (request.user_agent, request.range) == ("lakegate", "bytes=0-4194303")


def test_nothing_shipped_imports_harness() -> None:
    """harness/ is dev-only: the packages lakegate installs never import it."""
    repo = Path(__file__).resolve().parents[2]
    offenders = [
        str(path.relative_to(repo))
        for package in ("gateway", "cachetier", "policies", "tools")
        for path in sorted((repo / package).rglob("*.py"))
        if any(line.lstrip().startswith(("import harness", "from harness")) for line in path.read_text().splitlines())
    ]
    assert offenders == []
