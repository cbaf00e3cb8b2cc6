"""What the cache tests over the real RGW share: gateways with the cache settings a test asks
for, RGW's log (lake requests counted), boto3 straight to RGW, a bucket of the test's own.
Test modules import the fixtures by name."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from harness.endpoints import ALICE, Target, empty_and_delete_bucket, unique_bucket_name
from harness.gateway import Gateway as GatewayProcess
from harness.rgwlog import RgwLog

MiB = 1024 * 1024
BLOCK = 4 * MiB  # the default block size


@dataclass
class Gateway:
    """One `lakegate serve` over RGW, its cache directory and the clients the test opened."""

    process: GatewayProcess
    cache_dir: Path
    clients: list[Any] = field(default_factory=list)

    @property
    def l1_dir(self) -> Path:
        return self.cache_dir / "l1"

    def client(self) -> Any:
        client = self.process.target("gw", "rgw").client()
        self.clients.append(client)
        return client

    def stats(self) -> dict[str, Any]:
        return self.process.admin_stats()  # signed with the admin key the harness gives the process

    def metrics(self) -> str:
        with urllib.request.urlopen(self.process.url + "/metrics", timeout=10) as resp:
            return str(resp.read().decode())

    def wait_stored(self, size: int, timeout: float = 10.0) -> None:
        """Wait until L1 holds ``size`` bytes of blocks: a block reaches the disk just after
        its bytes reach the readers."""
        deadline = time.monotonic() + timeout
        while self.stats()["cache"]["l1"]["used_bytes"] < size:
            assert time.monotonic() < deadline, f"L1 never held {size} bytes: {self.stats()}"
            time.sleep(0.05)

    def stop(self) -> None:
        for client in self.clients:
            client.close()  # no idle keep-alive connection holds the gateway's shutdown up
        self.clients.clear()
        self.process.stop()


StartGateway = Callable[..., Gateway]


@pytest.fixture(scope="module")
def rgw_log() -> RgwLog:
    try:
        return RgwLog.from_environment()
    except RuntimeError as exc:  # an RGW not started by deploy/ceph: its log is elsewhere
        pytest.skip(f"counting lake requests needs RGW's log: {exc}")


@pytest.fixture
def rgw(rgw_s3: Any) -> Any:
    """boto3 straight to RGW with the lake's keys (conftest's): puts test objects, reads the reference."""
    return rgw_s3


@pytest.fixture
def lake_bucket(rgw: Any, request: pytest.FixtureRequest) -> Iterator[str]:
    name = unique_bucket_name("cache-" + request.node.originalname.removeprefix("test_"))
    rgw.create_bucket(Bucket=name)
    yield name
    empty_and_delete_bucket(rgw, name)


@pytest.fixture
def start_gateway(tmp_path: Path, rgw_target: Target) -> Iterator[StartGateway]:
    """``start_gateway(cache_dir=None, **settings)``: a gateway over RGW whose settings are
    ``LAKEGATE_<NAME>`` = value, e.g. ``meta_ttl="1"``; stopped when the test ends."""
    started: list[Gateway] = []

    def start(cache_dir: Path | None = None, **cache_settings: str) -> Gateway:
        n = len(started)
        cache_dir = cache_dir or tmp_path / f"cache-{n}"
        process = GatewayProcess(rgw_target.endpoint, tenants=(ALICE,), workdir=tmp_path / f"gateway-{n}",
                                 cache_dir=cache_dir,
                                 env={f"LAKEGATE_{k.upper()}": v for k, v in cache_settings.items()})
        gateway = Gateway(process, cache_dir)
        started.append(gateway)
        process.start()
        return gateway

    yield start
    for gateway in started:
        gateway.stop()


def coexisting_bytes(folders: list[Path]) -> int:
    """Bytes of the files under ``folders`` that all exist at the end of the scan, at the sizes
    seen during it: at most what they hold together at that moment (a file counted and then
    evicted, whose space a newer file took meanwhile, is left out; files only grow while
    written), so a tier within its capacity never measures above it."""
    seen = {}
    for folder in folders:
        for path in folder.rglob("*"):
            try:
                if path.is_file():
                    seen[path] = path.stat().st_size
            except FileNotFoundError:  # evicted, or renamed, meanwhile
                pass
    return sum(size for path, size in seen.items() if path.exists())
