"""S3 endpoints and who calls them: an endpoint with its keys, the tenants the tests and
benchmarks write into a gateway's tenants file, the admin credential every gateway the harness
starts is given (and the one signed GET of an admin endpoint), the conformance suite's targets
(with boto3 clients), uniquely named buckets that are emptied and deleted afterwards, and a
counter incremented by compare and swap (a table format's commit, for the conditional-write races).
"""

from __future__ import annotations

import json
import ssl
import urllib.request
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from gateway import tenants as gateway_tenants

REGION = "us-east-1"

# the endpoints the integration tier runs its conformance suite against (tests/integration/conftest.py)
TARGETS = ("rgw", "gw-rgw", "gw-dir", "gw-rgw-tls", "gw-dir-tls")


@dataclass(frozen=True)
class S3Endpoint:
    url: str  # http(s)://host:port
    access_key: str
    secret_key: str
    region: str = REGION


class Tenant(gateway_tenants.Tenant):
    """The gateway's own Tenant (gateway/tenants.py: defaults once), written out as a [[tenant]]
    of a tenants file."""

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


def tenants_toml(tenants: Sequence[Tenant]) -> str:
    return "\n".join(t.to_toml() for t in tenants)


ALICE = Tenant("alice", "AKIDALICE00000000001", "alice-secret-0123456789")  # the tests' tenant
BENCH_TENANT = Tenant("bench", "BENCHACCESSKEY000001", "bench-secret-0123456789")

# the admin credential of every gateway the harness starts (harness/gateway.py, harness/cluster.py)
ADMIN_ACCESS_KEY = "LAKEGATEADMINKEY0001"
ADMIN_SECRET_KEY = "admin-secret-0123456789abcdef"
ADMIN_ENV = {"LAKEGATE_ADMIN_ACCESS_KEY": ADMIN_ACCESS_KEY, "LAKEGATE_ADMIN_SECRET_KEY": ADMIN_SECRET_KEY}


def admin_signed(url: str, method: str = "GET", *, access_key: str = ADMIN_ACCESS_KEY,
                 secret_key: str = ADMIN_SECRET_KEY) -> AWSRequest:
    """``url`` signed the way the gateway's admin check reads it: SigV4 by botocore, service s3."""
    request = AWSRequest(method, url)
    S3SigV4Auth(Credentials(access_key, secret_key), "s3", REGION).add_auth(request)
    return request


def admin_get_json(url: str, *, timeout: float = 10.0, ca_bundle: str | None = None) -> Any:
    """GET an admin endpoint (``http(s)://host:port/_lakegate/admin/...``) with the admin key, as JSON."""
    signed = admin_signed(url)
    request = urllib.request.Request(url, headers=dict(signed.headers.items()))
    context = ssl.create_default_context(cafile=ca_bundle) if ca_bundle else None
    with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
        return json.load(response)


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

    @property
    def endpoint(self) -> S3Endpoint:
        return S3Endpoint(self.endpoint_url, self.access_key, self.secret_key)

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


def lake_target(endpoint: S3Endpoint, name: str = "rgw") -> Target:
    """The lake itself as a target: its own keys, no gateway in between."""
    return Target(name=name, endpoint_url=endpoint.url.rstrip("/"), access_key=endpoint.access_key,
                  secret_key=endpoint.secret_key, lake="rgw", via_gateway=False)


# -- buckets through boto3 -----------------------------------------------------------------------


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


def increment_by_swap(s3: Any, bucket: str, key: str, times: int, attempts: int,
                      lost: Callable[[ClientError], bool]) -> int:
    """Increment the integer object ``key`` ``times`` times, each by a GET then a PUT with
    If-Match its ETag, again while the PUT fails as ``lost`` says a lost race does (any other
    error is raised); AssertionError after ``attempts`` tries of one increment. Returns how many
    PUTs lost."""
    retried = 0
    for _ in range(times):
        for _ in range(attempts):
            got = s3.get_object(Bucket=bucket, Key=key)
            value = int(got["Body"].read())
            try:
                s3.put_object(Bucket=bucket, Key=key, Body=str(value + 1).encode(), IfMatch=got["ETag"])
                break
            except ClientError as error:
                if not lost(error):
                    raise
                retried += 1
        else:
            raise AssertionError(f"no swap of {key} in {attempts} attempts (a stale ETag from a cache?)")
    return retried
