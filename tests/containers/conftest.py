"""Containers tier: lakegate's image (Dockerfile, `make image`) and compose stack
(deploy/compose/) run for real with podman, against the test RGW (like tests/integration).

Podman on this machine kind needs runc, the cgroupfs manager and ulimits at or below the host's
hard limits (../shared/recipes/containers/); no registry is reachable, so the image is built
FROM a Debian base made locally with mmdebstrap (`make base-image`, kept while it exists). The
session builds the image once, from wheels built on the host (`make image`). Every test is
marked `containers` (and `integration`: it needs the RGW); skipped only where podman is missing
(`make test` installs it) or without S3_ENDPOINT_URL.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from podmanrun import BASE_IMAGE, IMAGE, ROOT, podman

from harness.endpoints import Target, empty_and_delete_bucket, unique_bucket_name

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.containers)
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def image() -> Iterator[str]:
    """localhost/lakegate:test, built once a session by `make base-image image` (the base kept);
    removed afterwards with the builds' untagged images (its build stage, earlier builds)."""
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed: this tier runs lakegate's image with it "
                    "(`make test` installs podman, runc and mmdebstrap from Debian)")
    if not os.environ.get("S3_ENDPOINT_URL"):
        pytest.skip("S3_ENDPOINT_URL is not set: this tier runs the image against a Ceph RGW (`make test` starts one)")
    make = ["make", "-C", str(ROOT), "--no-print-directory", f"VENV={sys.prefix}", "CONTAINER_ENGINE=podman",
            f"LOCAL_BASE_IMAGE={BASE_IMAGE}", f"BASE_IMAGE={BASE_IMAGE}", f"IMAGE={IMAGE}", "base-image", "image"]
    result = subprocess.run(make, capture_output=True, text=True, timeout=900)
    try:
        assert result.returncode == 0, f"make image failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        yield IMAGE
    finally:
        podman("rmi", "-f", IMAGE, check=False)
        podman("image", "prune", "-f", "--filter", "label=org.opencontainers.image.title=lakegate", check=False)


@pytest.fixture
def lake_bucket(rgw_target: Target, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh bucket on the RGW (the lake), emptied and deleted afterwards."""
    s3 = rgw_target.client()
    name = unique_bucket_name(request.node.originalname.removeprefix("test_"))
    s3.create_bucket(Bucket=name)
    yield name
    empty_and_delete_bucket(s3, name)
