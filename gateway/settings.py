"""Settings: typed, validated once at start-up, one set of defaults.

Every field is read from the environment with the ``LAKEGATE_`` prefix (and from a ``.env``
file in the working directory); ``lakegate serve`` flags override them. Each is documented
in ``.env.example``.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from pydantic import ByteSize, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="LAKEGATE_", env_file=".env", extra="ignore")

    listen: str = "127.0.0.1:9000"
    lake: str = "dir:var/lake"
    lake_access_key: str = ""
    lake_secret_key: str = ""
    lake_region: str = "us-east-1"
    lake_timeout: float = Field(30.0, gt=0)
    lake_connect_timeout: float = Field(5.0, gt=0)
    lake_retries: int = Field(3, ge=0, le=10)
    lake_max_connections: int = Field(64, ge=1)
    tenants_file: Path = Path("deploy/tenants.example.toml")
    cache_dir: Path = Path("var/cache")
    cache: bool = True
    cache_capacity: ByteSize = ByteSize(4 << 30)
    cache_eviction: str = "lru"
    block_size: ByteSize = ByteSize(4 << 20)
    meta_ttl: float = Field(5.0, ge=0)
    readahead: int = Field(2, ge=0, le=64)
    cache_on_write: bool = True
    cache_on_write_max: ByteSize = ByteSize(64 << 20)
    cache_max_object_size: ByteSize = ByteSize(4 << 30)
    tls_cert: Path | None = None
    tls_key: Path | None = None
    virtual_host_suffixes: str = "localhost"
    anonymous_read_buckets: str = ""
    max_clock_skew: int = Field(900, ge=1)
    max_header_bytes: int = Field(16384, ge=1024)
    log_level: str = "info"
    access_log: bool = True
    # cluster (D3N's L2): empty peers = a node on its own (L1 only)
    node_id: str = ""
    peers: str = ""
    cluster_secret: SecretStr = SecretStr("")
    advertise_url: str = ""
    node_weight: float = Field(1.0, gt=0)
    l2_capacity: ByteSize = ByteSize(4 << 30)
    replicas: int = Field(1, ge=1, le=3)
    partitions: int = Field(1024, ge=1, le=1 << 16)
    heartbeat_interval: float = Field(1.0, gt=0)
    failure_timeout: float = Field(3.0, gt=0)
    peer_ca_file: Path | None = None

    @field_validator("listen")
    @classmethod
    def _listen(cls, v: str) -> str:
        host, sep, port = v.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"listen must be HOST:PORT, got {v!r}")
        return v

    @field_validator("lake")
    @classmethod
    def _lake(cls, v: str) -> str:
        if v.startswith("dir:"):
            if not v[4:]:
                raise ValueError("lake dir: needs a path, e.g. dir:var/lake")
            return v
        parts = urlsplit(v)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"lake must be dir:PATH or http(s)://host:port, got {v!r}")
        return v

    @field_validator("cache_eviction")
    @classmethod
    def _eviction(cls, v: str) -> str:
        if v.lower() not in ("lru", "lfu"):
            raise ValueError(f"cache_eviction must be lru or lfu, got {v!r}")
        return v.lower()

    @field_validator("block_size")
    @classmethod
    def _block_size(cls, v: ByteSize) -> ByteSize:
        if not (64 << 10) <= v <= (64 << 20):
            raise ValueError("block_size must be between 64KiB and 64MiB")
        return v

    @field_validator("log_level")
    @classmethod
    def _log_level(cls, v: str) -> str:
        if v.lower() not in ("critical", "error", "warning", "info", "debug"):
            raise ValueError(f"log_level must be one of critical, error, warning, info, debug; got {v!r}")
        return v.lower()

    @model_validator(mode="after")
    def _cross_checks(self) -> Settings:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key must be given together")
        for path in (self.tls_cert, self.tls_key, self.peer_ca_file):
            if path is not None and not path.is_file():
                raise ValueError(f"TLS file not found: {path}")
        if not self.tenants_file.is_file():
            raise ValueError(f"tenants file not found: {self.tenants_file}")
        if self.peers and len(self.cluster_secret.get_secret_value()) < 16:
            raise ValueError("a node with peers needs cluster_secret (LAKEGATE_CLUSTER_SECRET), 16 characters or more")
        if self.failure_timeout <= self.heartbeat_interval:
            raise ValueError("failure_timeout must be longer than heartbeat_interval")
        if self.is_s3_lake and not (self.lake_access_key and self.lake_secret_key):
            raise ValueError("an S3 lake needs lake_access_key and lake_secret_key (LAKEGATE_LAKE_ACCESS_KEY/...)")
        return self

    @property
    def is_s3_lake(self) -> bool:
        return not self.lake.startswith("dir:")

    @property
    def host(self) -> str:
        return self.listen.rpartition(":")[0].strip("[]")

    @property
    def port(self) -> int:
        return int(self.listen.rpartition(":")[2])

    @property
    def clustered(self) -> bool:
        return bool(self.peers)

    @property
    def self_id(self) -> str:
        return self.node_id or f"node-{self.port}"

    @property
    def self_url(self) -> str:
        if self.advertise_url:
            return self.advertise_url.rstrip("/")
        return f"{'https' if self.tls_cert else 'http'}://{self.listen}"

    @property
    def host_suffixes(self) -> tuple[str, ...]:
        return tuple(s.strip().lower() for s in self.virtual_host_suffixes.split(",") if s.strip())

    @property
    def anonymous_buckets(self) -> frozenset[str]:
        return frozenset(s.strip() for s in self.anonymous_read_buckets.split(",") if s.strip())
