"""deploy/compose/compose.yml brought up with podman-compose on loopback (compose.loopback.yml:
the host network, the test RGW as the lake, Debian's Prometheus): a boto3 round trip through
each of the 3 nodes, and Prometheus' targets (every node) all up; then `down` with its volumes."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from podmanrun import BASE_IMAGE, PODMAN_ARGS, ROOT, http_status, podman, wait_for, write_secrets

from harness.endpoints import ALICE, Target

COMPOSE = ROOT / "deploy" / "compose"
NODES = {"lakegate-1": 18311, "lakegate-2": 18312, "lakegate-3": 18313}
PROMETHEUS = "http://127.0.0.1:18390"
RULES = ROOT / "deploy" / "prometheus" / "lakegate-rules.yml"


def _get_json(url: str) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.load(response)
    except (OSError, ValueError):
        return None


def _prometheus_config(path: Path) -> Path:
    """Prometheus' configuration for the loopback run: compose's, with the nodes' loopback ports."""
    targets = [{"targets": [f"127.0.0.1:{port}"], "labels": {"node": f"node{i}"}}
               for i, port in enumerate(NODES.values(), start=1)]
    config = {"global": {"scrape_interval": "2s", "evaluation_interval": "2s"},
              "rule_files": ["/etc/prometheus/lakegate-rules.yml"],  # compose.yml mounts deploy/prometheus/
              "scrape_configs": [{"job_name": "lakegate", "static_configs": targets}]}
    path.write_text(json.dumps(config))  # YAML is a superset of JSON
    path.chmod(0o644)
    return path


class Stack:
    def __init__(self, project: str, env: dict[str, str]) -> None:
        self.project, self.env = project, env

    def compose(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "podman_compose", f"--podman-args={' '.join(PODMAN_ARGS)}",
                   "-p", self.project, "-f", str(COMPOSE / "compose.yml"), "-f", str(COMPOSE / "compose.loopback.yml"),
                   *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=self.env, cwd=COMPOSE)

    def container(self, service: str) -> str:
        return f"{self.project}_{service}_1"

    def wait_for(self, what: str, check: Callable[[], bool], service: str) -> None:
        wait_for(what, check, self.container(service))


@pytest.fixture
def stack(image: str, rgw_target: Target, tmp_path: Path) -> Iterator[Stack]:
    if importlib.util.find_spec("podman_compose") is None:
        pytest.fail("podman-compose is not installed: pip install -e '.[test]' (make test) brings it")
    env = dict(os.environ, LAKEGATE_IMAGE=image, BASE_IMAGE=BASE_IMAGE,
               LAKEGATE_SECRETS_DIR=str(write_secrets(tmp_path / "secrets", rgw_target)),
               LOOPBACK_PROMETHEUS_CONFIG=str(_prometheus_config(tmp_path / "prometheus.yml")),
               S3_ENDPOINT_URL=rgw_target.endpoint_url, AWS_ACCESS_KEY_ID=rgw_target.access_key)
    stack = Stack(f"lgtest{uuid.uuid4().hex[:8]}", env)
    up = stack.compose("up", "-d", "--no-deps", *NODES, "prometheus")
    try:
        assert up.returncode == 0, f"podman-compose up: exit {up.returncode}\n{up.stdout[-2000:]}\n{up.stderr[-3000:]}"
        yield stack
    finally:
        down = stack.compose("down", "-v", "-t", "10")
        leftovers = podman("ps", "-a", "-q", "--filter", f"label=io.podman.compose.project={stack.project}", check=False)
        volumes = podman("volume", "ls", "-q", "--filter", f"label=io.podman.compose.project={stack.project}", check=False)
        assert down.returncode == 0 and not leftovers.stdout.strip() and not volumes.stdout.strip(), (
            f"podman-compose down: exit {down.returncode}\n{down.stderr[-2000:]}\n"
            f"left: {leftovers.stdout} {volumes.stdout}")


@pytest.mark.timeout(900)
def test_the_compose_stack(stack: Stack, lake_bucket: str, rgw_target: Target) -> None:
    for service, port in NODES.items():
        stack.wait_for(f"{service}'s /_lakegate/health/ready 200",
                       lambda: http_status(f"http://127.0.0.1:{port}/_lakegate/health/ready") == 200, service)

    clients = {service: rgw_target.client(endpoint_url=f"http://127.0.0.1:{port}", access_key=ALICE.access_key,
                                          secret_key=ALICE.secret_key) for service, port in NODES.items()}
    objects = {f"via-{service}": os.urandom((1 << 20) + i) for i, service in enumerate(NODES)}
    for (key, data), s3 in zip(objects.items(), clients.values()):
        s3.put_object(Bucket=lake_bucket, Key=key, Body=data)
    for service, s3 in clients.items():  # every object through every node (L1, L2 or the lake)
        for key, data in objects.items():
            assert s3.get_object(Bucket=lake_bucket, Key=key)["Body"].read() == data, (service, key)
        listed = [o["Key"] for o in s3.list_objects_v2(Bucket=lake_bucket)["Contents"]]
        assert listed == sorted(objects), service

    def all_up() -> bool:
        answer = _get_json(f"{PROMETHEUS}/api/v1/targets?state=active")
        active = answer["data"]["activeTargets"] if answer else []
        return sorted(t["labels"].get("node") for t in active if t["health"] == "up") == ["node1", "node2", "node3"]

    stack.wait_for("Prometheus' 3 lakegate targets up", all_up, "prometheus")
    if RULES.exists():  # deploy/prometheus/lakegate-rules.yml, loaded by name
        groups = _get_json(f"{PROMETHEUS}/api/v1/rules")["data"]["groups"]
        assert groups and all(g["file"] == "/etc/prometheus/lakegate-rules.yml" for g in groups)
