"""``S3LakeConfig``: what ``S3Lake`` needs to reach and sign for one S3 lake, and the one place
its defaults live (the gateway's settings take theirs from here)."""

from __future__ import annotations

import dataclasses
from typing import Literal, get_args

import httpx2

ConditionalWrites = Literal["put", "all"]
CONDITIONAL_WRITES: tuple[str, ...] = get_args(ConditionalWrites)


@dataclasses.dataclass(frozen=True)
class S3LakeConfig:
    """``endpoint`` is the lake's first endpoint (kept for the callers that name one);
    ``endpoints`` all of them: gateways of one lake (RGW instances on one Ceph cluster), each
    reached through its own connection pool. Left empty, it is ``(endpoint,)``."""

    endpoint: str  # http(s)://host[:port], path-style requests go to /bucket/key
    access_key: str
    secret_key: str = dataclasses.field(repr=False)
    region: str = "us-east-1"
    timeout: float = 30.0  # seconds for each read, write and wait for a pooled connection
    connect_timeout: float = 5.0
    retries: int = 3  # of idempotent requests, on connection errors and 5xx
    max_connections: int = 64  # per endpoint
    endpoints: tuple[str, ...] = ()
    # which conditional writes the lake decides: "put", PutObject's (Ceph RGW 16.2, and every S3
    # that has them): lakegate answers a conditional CompleteMultipartUpload or DeleteObject 501
    # NotImplemented, for RGW 16.2 does them ignoring the condition; "all" (AWS S3, MinIO): those too
    conditional_writes: ConditionalWrites = "put"

    def __post_init__(self) -> None:
        if self.conditional_writes not in CONDITIONAL_WRITES:
            raise ValueError(f"conditional_writes must be one of {', '.join(CONDITIONAL_WRITES)}")
        if not self.endpoints:
            object.__setattr__(self, "endpoints", (self.endpoint,))
        elif self.endpoints[0] != self.endpoint:
            raise ValueError("the lake's first endpoint must be its endpoint")
        if len(set(self.endpoints)) != len(self.endpoints):
            raise ValueError("the lake's endpoints must differ")
        schemes = set()
        for endpoint in self.endpoints:
            url = httpx2.URL(endpoint)
            if url.scheme not in ("http", "https") or not url.host or url.path not in ("", "/"):
                raise ValueError("the lake endpoint must be http(s)://host[:port]")
            schemes.add(url.scheme)
        if len(schemes) > 1:
            raise ValueError("the lake's endpoints must be all http or all https")

    @property
    def timeouts(self) -> httpx2.Timeout:
        return httpx2.Timeout(self.timeout, connect=self.connect_timeout)
