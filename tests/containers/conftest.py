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
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness.endpoints import ALICE, Target, empty_and_delete_bucket, tenants_toml, unique_bucket_name

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
BASE_IMAGE = "localhost/lakegate-base:bookworm"
IMAGE = "localhost/lakegate:test"
PODMAN_ARGS = ("--runtime", "/usr/sbin/runc", "--cgroup-manager=cgroupfs")
ULIMITS = ("--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.containers)
            item.add_marker(pytest.mark.integration)


def podman(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """One podman command with this machine kind's settings; its output, text."""
    result = subprocess.run(["podman", *PODMAN_ARGS, *args], capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)}: exit {result.returncode}\n{result.stderr[-3000:]}")
    return result


@pytest.fixture(scope="session")
def image() -> str:
    """localhost/lakegate:test, built once a session by `make base-image image` (the base kept)."""
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed: this tier runs lakegate's image with it "
                    "(`make test` installs podman, runc and mmdebstrap from Debian)")
    if not os.environ.get("S3_ENDPOINT_URL"):
        pytest.skip("S3_ENDPOINT_URL is not set: this tier runs the image against a Ceph RGW (`make test` starts one)")
    make = ["make", "-C", str(ROOT), "--no-print-directory", f"VENV={sys.prefix}", "CONTAINER_ENGINE=podman",
            f"LOCAL_BASE_IMAGE={BASE_IMAGE}", f"BASE_IMAGE={BASE_IMAGE}", f"IMAGE={IMAGE}", "base-image", "image"]
    result = subprocess.run(make, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, f"make image failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return IMAGE


@pytest.fixture
def lake_bucket(rgw_target: Target, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh bucket on the RGW (the lake), emptied and deleted afterwards."""
    s3 = rgw_target.client()
    name = unique_bucket_name(request.node.originalname.removeprefix("test_"))
    s3.create_bucket(Bucket=name)
    yield name
    empty_and_delete_bucket(s3, name)


def write_secrets(folder: Path, rgw_target: Target) -> Path:
    """The files compose.yml's secrets (and a single container's mounts) read: the tenants
    file (ALICE), the lake's secret key, a cluster secret and an admin token."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {"tenants.toml": tenants_toml([ALICE]) + "\n", "lake_secret_key": rgw_target.secret_key + "\n",
             "cluster_secret": uuid.uuid4().hex + "\n", "admin_token": uuid.uuid4().hex + "\n"}
    for name, text in files.items():
        (folder / name).write_text(text)
        (folder / name).chmod(0o644)  # read by the container's user (uid 10001)
    return folder


def container_logs(name: str, lines: int = 60) -> str:
    result = podman("logs", "--tail", str(lines), name, check=False)
    return result.stdout + result.stderr


def http_status(url: str) -> int:
    """The HTTP status of a GET of url; 0 when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


def wait_for(what: str, check: Callable[[], bool], container: str, timeout: float = 150) -> None:
    """Poll check until it holds; else fail with what was awaited and the container's log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise AssertionError(f"{what} not seen in {timeout:.0f} s; the log of {container}:\n{container_logs(container)}")
