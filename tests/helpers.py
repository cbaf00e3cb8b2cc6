"""Shared test helpers: S3 endpoints as test targets, boto3 clients for them, and a
`lakegate serve` subprocess that tests start, wait for and stop.

Nothing here knows which test tier uses it; the fixtures in the tiers' conftest.py
files decide what to start.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

# the endpoints the integration tier runs its suites against (tests/integration/conftest.py)
TARGETS = ("rgw", "gw-rgw", "gw-dir", "gw-rgw-tls", "gw-dir-tls")

REGION = "us-east-1"
HEALTH_PATH = "/_lakegate/health"
GATEWAY_START_TIMEOUT_S = 30.0
GATEWAY_STOP_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Tenant:
    name: str
    access_key: str
    secret_key: str
    weight: float = 1.0
    buckets: Sequence[str] = ("*",)

    def to_toml(self) -> str:
        buckets = ", ".join(f'"{b}"' for b in self.buckets)
        return (
            "[[tenant]]\n"
            f'name = "{self.name}"\n'
            f'access_key = "{self.access_key}"\n'
            f'secret_key = "{self.secret_key}"\n'
            f"weight = {self.weight}\n"
            f"buckets = [{buckets}]\n"
        )


ALICE = Tenant("alice", "AKIDALICE00000000001", "alice-secret-0123456789")


@dataclass(frozen=True)
class Target:
    """One S3 endpoint the conformance suite runs against.

    `lake` says what finally stores the data ("rgw" or "dir"), so a test can state where
    the behaviour comes from; `via_gateway` is False only for the lake itself.
    """

    name: str
    endpoint_url: str
    access_key: str
    secret_key: str
    lake: str
    via_gateway: bool
    ca_bundle: str | None = None
    log_path: Path | None = None

    @property
    def port(self) -> int:
        return int(self.endpoint_url.rsplit(":", 1)[1].split("/", 1)[0])

    @property
    def tls(self) -> bool:
        return self.endpoint_url.startswith("https:")

    def client(self, *, addressing_style: str = "path", endpoint_url: str | None = None,
               access_key: str | None = None, secret_key: str | None = None,
               retries: bool = True) -> Any:
        """A boto3 S3 client with boto3's default config (checksums on), SigV4.

        `retries=False` for a request expected to fail with an error that boto3 retries
        (BadDigest: four retries with back-off, seconds of waiting for nothing)."""
        config = Config(signature_version="s3v4", s3={"addressing_style": addressing_style})
        if not retries:
            config = config.merge(Config(retries={"total_max_attempts": 1}))
        return boto3.client(
            "s3",
            endpoint_url=endpoint_url or self.endpoint_url,
            region_name=REGION,
            aws_access_key_id=access_key or self.access_key,
            aws_secret_access_key=secret_key or self.secret_key,
            verify=self.ca_bundle if self.tls else None,
            config=config,
        )

    def log_tail(self, lines: int = 40) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def unique_bucket_name(hint: str = "t") -> str:
    """A valid, unique S3 bucket name; `hint` (e.g. the test name) helps find leftovers."""
    clean = "".join(c if c.isalnum() else "-" for c in hint.lower()).strip("-")[:40].strip("-")
    return f"lg-{clean or 't'}-{uuid.uuid4().hex[:10]}"


def empty_and_delete_bucket(s3: Any, bucket: str) -> None:
    """Abort unfinished uploads, delete every object, delete the bucket."""
    for page in s3.get_paginator("list_multipart_uploads").paginate(Bucket=bucket):
        for upload in page.get("Uploads", []):
            s3.abort_multipart_upload(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for obj in page.get("Contents", []):
            s3.delete_object(Bucket=bucket, Key=obj["Key"])
    s3.delete_bucket(Bucket=bucket)


def lakegate_command() -> list[str]:
    """How to run the `lakegate` CLI of the environment the tests run in."""
    script = shutil.which("lakegate", path=str(Path(sys.executable).parent))
    if script:
        return [script]
    return [sys.executable, "-c", "import sys; from gateway.cli import main; sys.exit(main())"]


def gateway_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The test runner's environment without S3/AWS credentials or endpoints, so a gateway
    can reach the lake only with the keys given on its command line."""
    env = {
        k: v for k, v in os.environ.items()
        if not k.startswith(("AWS_", "S3_", "LAKEGATE_"))
    }
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


@dataclass
class GatewayProcess:
    """A `lakegate serve` child process, started by :meth:`start`, stopped by :meth:`stop`."""

    args: list[str]
    port: int
    log_path: Path
    ca_bundle: str | None = None
    env: dict[str, str] = field(default_factory=gateway_environment)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        scheme = "https" if self.ca_bundle else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    def start(self, timeout: float = GATEWAY_START_TIMEOUT_S) -> None:
        cmd = [*lakegate_command(), "serve", "--listen", f"127.0.0.1:{self.port}", *self.args]
        with open(self.log_path, "ab") as log:
            log.write(f"$ {' '.join(cmd)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, env=self.env,
                                         start_new_session=True)
        self._wait_healthy(timeout)

    def _wait_healthy(self, timeout: float) -> None:
        assert self.proc is not None
        context = ssl.create_default_context(cafile=self.ca_bundle) if self.ca_bundle else None
        deadline = time.monotonic() + timeout
        last_error = "no answer yet"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"lakegate serve exited with code {self.proc.returncode} before it was "
                    f"healthy; its output ({self.log_path}):\n{self.output_tail()}")
            try:
                with urllib.request.urlopen(self.base_url + HEALTH_PATH, timeout=2,
                                            context=context) as response:
                    if response.status == 200:
                        return
                    last_error = f"HTTP {response.status}"
            except urllib.error.HTTPError as exc:
                last_error = f"HTTP {exc.code}"
            except (OSError, ValueError) as exc:
                last_error = repr(exc)
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(
            f"lakegate serve did not answer GET {HEALTH_PATH} with 200 within {timeout:.0f} s "
            f"(last: {last_error}); its output ({self.log_path}):\n{self.output_tail()}")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=GATEWAY_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            with open(self.log_path, "a") as log:
                log.write(f"(tests: no exit {GATEWAY_STOP_TIMEOUT_S:.0f} s after SIGTERM, killed)\n")
            self.proc.kill()
            self.proc.wait(timeout=30)

    def output_tail(self, lines: int = 60) -> str:
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])



class _Captured(Exception):
    """Stops boto3 right before a request leaves."""


def boto3_request(endpoint_url: str, operation: str, **params: Any) -> Any:
    """The request boto3 (default config, SigV4, path style) would send for one call, captured
    before it leaves: no network. Over https, boto3 sends bodies aws-chunked with trailers."""
    client = boto3.client(
        "s3",
        endpoint_url=endpoint_url,
        region_name="us-east-1",
        aws_access_key_id="AK",
        aws_secret_access_key="SK",
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"}),
    )
    box: dict[str, Any] = {}

    def capture(request: Any, **_: Any) -> None:
        box["request"] = request
        raise _Captured()

    client.meta.events.register("before-send.s3.*", capture)
    try:
        getattr(client, operation)(**params)
    except _Captured:
        return box["request"]
    raise AssertionError(f"boto3 did not send {operation}")


def authenticate_sent(sent: Any, secrets: Mapping[str, str]) -> tuple[Any, list[tuple[str, str]]]:
    """Verify a captured boto3 request with the gateway's SigV4 check: (AuthContext, the
    request's headers as the gateway sees them, lower-case names)."""
    from datetime import UTC, datetime
    from urllib.parse import urlsplit

    from gateway.s3.sigv4 import SignedRequest, authenticate

    headers = [(k.lower(), v.decode() if isinstance(v, bytes) else v) for k, v in sent.headers.items()]
    url = urlsplit(sent.url)
    auth = authenticate(
        SignedRequest(sent.method, url.path.encode(), url.query.encode(), headers), secrets.get, datetime.now(UTC)
    )
    return auth, headers

def chunks(data: bytes, size: int) -> Iterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start:start + size]
