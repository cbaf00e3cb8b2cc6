"""One node from lakegate's image (Dockerfile) in podman, in front of the RGW: an S3 round trip
through it, its health endpoints and the image's HEALTHCHECK, a non-root user, and SIGTERM
(`podman kill -s TERM`) with a download in flight: the download completes, the container exits 0."""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from podmanrun import ULIMITS, container_logs, http_status, podman, wait_for, write_secrets

from harness.endpoints import ALICE, Target

PORT = 18301
URL = f"http://127.0.0.1:{PORT}"
BIG = 48 << 20  # bytes of the download SIGTERM interrupts: far more than the sockets' buffers


@pytest.fixture
def node(image: str, rgw_target: Target, tmp_path: Path) -> Iterator[str]:
    """The container, started detached on the host network at PORT with a read-only root; removed
    afterwards (with its anonymous cache volume)."""
    secrets = write_secrets(tmp_path / "secrets", rgw_target)
    name = f"lakegate-test-{uuid.uuid4().hex[:8]}"
    # a read-only root with a writable /tmp, as the helm chart runs it (readOnlyRootFilesystem)
    podman("run", "-d", "--name", name, "--network", "host", *ULIMITS, "--read-only", "--tmpfs", "/tmp",
           "-v", f"{secrets / 'tenants.toml'}:/etc/lakegate/tenants.toml:ro",
           "-v", f"{secrets / 'lake_secret_key'}:/run/secrets/lake_secret_key:ro",
           "-e", f"LAKEGATE_LISTEN=127.0.0.1:{PORT}", "-e", "LAKEGATE_WORKERS=1",
           "-e", f"LAKEGATE_LAKE={rgw_target.endpoint_url}", "-e", f"LAKEGATE_LAKE_ACCESS_KEY={rgw_target.access_key}",
           "-e", "LAKEGATE_LAKE_SECRET_KEY_FILE=/run/secrets/lake_secret_key", "-e", "LAKEGATE_CACHE_CAPACITY=256MiB",
           "-e", "LAKEGATE_MAX_CONNECTIONS=512",
           image)
    try:
        wait_for("an HTTP answer", lambda: http_status(URL + "/_lakegate/health/live") != 0, name)
        yield name
    finally:
        podman("rm", "-f", "-v", "-t", "5", name, check=False)


@pytest.mark.timeout(900)
def test_a_node_from_the_image(image: str, node: str, lake_bucket: str, rgw_target: Target) -> None:
    s3 = rgw_target.client(endpoint_url=URL, access_key=ALICE.access_key, secret_key=ALICE.secret_key)
    data = os.urandom(3 << 20)
    s3.put_object(Bucket=lake_bucket, Key="dir/a.bin", Body=data)
    assert s3.get_object(Bucket=lake_bucket, Key="dir/a.bin")["Body"].read() == data
    assert s3.get_object(Bucket=lake_bucket, Key="dir/a.bin")["Body"].read() == data  # now from the cache
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=lake_bucket, Prefix="dir/")["Contents"]] == ["dir/a.bin"]
    # what the lake holds is what was put through the node
    assert rgw_target.client().get_object(Bucket=lake_bucket, Key="dir/a.bin")["Body"].read() == data

    assert http_status(URL + "/_lakegate/health/live") == 200
    wait_for("GET /_lakegate/health/ready 200", lambda: http_status(URL + "/_lakegate/health/ready") == 200, node)
    assert podman("healthcheck", "run", node, check=False).returncode == 0, container_logs(node)
    config = json.loads(podman("image", "inspect", image).stdout)[0]["Config"]
    assert config["User"] == "10001:10001" and "9000/tcp" in config["ExposedPorts"]
    assert "/var/cache/lakegate" in config["Volumes"] and config["Entrypoint"] == ["lakegate", "serve"]

    # SIGTERM with a download in flight: it completes, then the node exits 0
    big = os.urandom(BIG)
    s3.put_object(Bucket=lake_bucket, Key="big.bin", Body=big)
    body = s3.get_object(Bucket=lake_bucket, Key="big.bin")["Body"]
    first = body.read(1 << 20)
    podman("kill", "-s", "TERM", node)
    time.sleep(1)  # the node is draining while the client still reads (no timing is asserted)
    rest = body.read()
    assert hashlib.sha256(first + rest).digest() == hashlib.sha256(big).digest()
    exit_code = podman("wait", node, timeout=120).stdout.strip()
    assert exit_code == "0", f"exit code {exit_code}; the container's log:\n{container_logs(node)}"
