"""Podman for tests/containers with this machine kind's settings (runc, cgroupfs, ulimits at or
below the host's hard limits: ../shared/recipes/containers/), and the tier's helpers."""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

from harness.endpoints import ALICE, Target, tenants_toml

ROOT = Path(__file__).resolve().parents[2]
BASE_IMAGE = "localhost/lakegate-base:bookworm"
IMAGE = "localhost/lakegate:test"
PODMAN_ARGS = ("--runtime", "/usr/sbin/runc", "--cgroup-manager=cgroupfs")
ULIMITS = ("--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096")


def podman(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """One podman command with this machine kind's settings; its output, text."""
    result = subprocess.run(["podman", *PODMAN_ARGS, *args], capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)}: exit {result.returncode}\n{result.stderr[-3000:]}")
    return result


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
