"""``S3LakeConfig``: what ``S3Lake`` needs to reach and sign for one S3 endpoint, and the one place
its defaults live (the gateway's settings take theirs from here)."""

from __future__ import annotations

import dataclasses

import httpx2


@dataclasses.dataclass(frozen=True)
class S3LakeConfig:
    endpoint: str  # http(s)://host[:port], path-style requests go to /bucket/key
    access_key: str
    secret_key: str = dataclasses.field(repr=False)
    region: str = "us-east-1"
    timeout: float = 30.0  # seconds for each read, write and wait for a pooled connection
    connect_timeout: float = 5.0
    retries: int = 3  # of idempotent requests, on connection errors and 5xx
    max_connections: int = 64

    def __post_init__(self) -> None:
        url = httpx2.URL(self.endpoint)
        if url.scheme not in ("http", "https") or not url.host or url.path not in ("", "/"):
            raise ValueError("the lake endpoint must be http(s)://host[:port]")

    @property
    def timeouts(self) -> httpx2.Timeout:
        return httpx2.Timeout(self.timeout, connect=self.connect_timeout)
