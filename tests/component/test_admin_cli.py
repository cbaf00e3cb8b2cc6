"""`lakegate admin warm|drop|stats` against a real `lakegate serve` process (two workers, a
folder lake): a warm's progress is read through whichever worker answers, a GET of the warmed
prefix then hits, stats shows its blocks, drop removes them; a tenant's key is refused with one
line on stderr and exit status 1, and no secret is printed."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from botocore.config import Config

from harness.endpoints import ADMIN_ENV, ADMIN_SECRET_KEY, ALICE, BENCH_TENANT
from harness.gateway import Gateway
from harness.processes import gateway_environment, lakegate_command

MiB = 1 << 20
SIZES = {"job/part-0": 3 * MiB, "job/part-1": MiB // 2, "job/part-2": 2 * MiB}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    lake = f"dir:{tmp_path_factory.mktemp('lake')}"
    env = {"LAKEGATE_ACCESS_LOG": "false", "LAKEGATE_WORKERS": "2", "LAKEGATE_BLOCK_SIZE": str(MiB),
           "LAKEGATE_CACHE_ON_WRITE": "false"}
    with Gateway(lake, tenants=(BENCH_TENANT, ALICE), env=env) as gateway:
        s3 = client(gateway)
        s3.create_bucket(Bucket="jobs")
        for key, size in SIZES.items():
            s3.put_object(Bucket="jobs", Key=key, Body=b"p" * size)
        yield gateway


def client(gateway: Gateway) -> object:
    return boto3.client("s3", endpoint_url=gateway.url, aws_access_key_id=ALICE.access_key,
                        aws_secret_access_key=ALICE.secret_key, region_name="us-east-1",
                        config=Config(s3={"addressing_style": "path"}))


def admin(gateway: Gateway, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*lakegate_command(), "admin", *args, "--endpoint", gateway.url],
                          env=gateway_environment(ADMIN_ENV if env is None else env),
                          capture_output=True, text=True, timeout=120)


def stats(gateway: Gateway) -> dict[str, object]:
    done = admin(gateway, "stats", "--bucket", "jobs", "--prefix", "job/", "--json")
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def test_warm_stats_drop(gateway: Gateway) -> None:
    warmed = admin(gateway, "warm", "--bucket", "jobs", "--prefix", "job/", "--interval", "0.1")
    assert warmed.returncode == 0, warmed.stderr
    assert "done: 3/3 objects" in warmed.stdout.splitlines()[-1]
    doc = stats(gateway)
    assert doc["tiers"] == {"l1": {"objects": 3, "blocks": 6, "bytes": sum(SIZES.values())}}
    table = admin(gateway, "stats", "--bucket", "jobs", "--prefix", "job/")
    assert table.returncode == 0 and "job/part-0" in table.stdout and "l1" in table.stdout
    dropped = admin(gateway, "drop", "--bucket", "jobs", "--prefix", "job/")
    assert dropped.returncode == 0, dropped.stderr
    assert dropped.stdout.startswith("dropped 3 objects, 6 blocks")
    assert stats(gateway)["tiers"] == {"l1": {"objects": 0, "blocks": 0, "bytes": 0}}


def test_no_wait_prints_the_job_id(gateway: Gateway) -> None:
    started = admin(gateway, "warm", "--bucket", "jobs", "--no-wait")
    assert started.returncode == 0 and len(started.stdout.strip()) == 16


def test_a_tenant_key_is_refused_in_one_line(gateway: Gateway, tmp_path: Path) -> None:
    env = {"LAKEGATE_ADMIN_ACCESS_KEY": ALICE.access_key, "LAKEGATE_ADMIN_SECRET_KEY": ALICE.secret_key}
    refused = admin(gateway, "stats", "--bucket", "jobs", env=env)
    assert refused.returncode == 1 and refused.stdout == ""
    assert len(refused.stderr.splitlines()) == 1 and "403" in refused.stderr
    assert ALICE.secret_key not in refused.stderr
    missing = admin(gateway, "drop", "--bucket", "jobs", env={})
    assert missing.returncode == 1 and "no admin credential" in missing.stderr
    bad = admin(gateway, "warm", "--bucket", "jobs", "--tenant", "nobody")
    assert bad.returncode == 1 and "400" in bad.stderr and ADMIN_SECRET_KEY not in bad.stderr + bad.stdout
