"""Settings: typed, validated once at start-up, one set of defaults.

Two layers, built in one place (``Settings.load``):

- ``Environment``: flat, one field per ``LAKEGATE_*`` variable (read from the environment and a
  ``.env`` file in the working directory; ``lakegate serve`` flags override them), each
  documented in ``.env.example``. It checks each value's syntax.
- ``Settings``: the same values as nested, frozen value objects, one per part of the node
  (``settings.server``, ``settings.lake``, ``settings.cache``, ``settings.cluster``), holding
  the data plane's and the S3 front end's own config types (``S3LakeConfig``, ``ReadConfig``,
  ``CacheOnWrite``, ``MembershipConfig``, ``FrontendConfig``), whose defaults are the only ones: ``Environment`` takes its defaults
  from them. Checks across values and of files on disk run here.

Any invalid value is one ``SettingsError`` whose message names the variable (``LAKEGATE_X:
...``); ``lakegate serve`` and the app factory print it as one line and exit with status 2.
"""

from __future__ import annotations

import dataclasses
import os
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import ByteSize, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from cachetier.blocks.store import DEFAULT_EVICTION, EVICTION_POLICIES
from cachetier.cachedlake import CacheOnWrite
from cachetier.cluster.config import MembershipConfig
from cachetier.cluster.membership import parse_peers
from cachetier.lake.s3.config import ConditionalWrites, S3LakeConfig
from cachetier.read.config import ReadConfig
from cachetier.write.writeback import WriteBackConfig
from gateway.admin import AdminConfig
from gateway.adminops import AdminOpsConfig
from gateway.httplimits import HttpLimits
from gateway.rates import parse_rate
from gateway.s3.config import FrontendConfig
from policies.replication import Thresholds
from policies.selection import POLICIES as REPLICA_POLICIES

_LOG_LEVELS = ("critical", "error", "warning", "info", "debug")
_SECRET_FIELDS = frozenset({"cluster_secret", "lake_secret_key", "admin_secret_key"})  # never echoed in an error
_MIN_SECRET = 16  # characters of the cluster secret, the admin secret and the admin token


FAIRNESS_MODES = ("all", "off", "fq", "fq+pp", "fq+pp+wa")  # LAKEGATE_FAIRNESS: the Pisces ablation


@dataclasses.dataclass(frozen=True)
class FairnessSettings:
    """Tenant fairness (Pisces): which mechanisms run, and each node's capacity per resource
    (units a second; None: not limited, so not scheduled)."""

    mode: str = "all"  # all = fq + pp + wa + tenant-fair cache occupancy
    lake_bandwidth: float | None = None  # bytes/s the whole cluster may pull from the lake
    request_rate: float | None = None  # requests/s one node admits
    send_rate: float | None = None  # bytes/s one node sends; None: its interface's speed (gateway.fairwiring)
    tenant_queue: int = 64  # requests queued per tenant on a node past which: 503 SlowDown
    allocation_interval: float = 2.0  # seconds between the leader's weight allocations (WA)
    placement_interval: float = 120.0  # seconds between the leader's partition placements (PP)
    placement_moves: int = 8  # partitions moved at most per placement round

    @property
    def fq(self) -> bool:
        return self.mode != "off"

    @property
    def pp(self) -> bool:
        return self.mode in ("fq+pp", "fq+pp+wa", "all")

    @property
    def wa(self) -> bool:
        return self.mode in ("fq+pp+wa", "all")

    @property
    def occupancy(self) -> bool:
        """Tenant-fair eviction in the block stores."""
        return self.mode == "all"


SIZING_MODES = ("adaptive", "fixed")  # LAKEGATE_SIZING: D3N's adaptive L1/L2 split, or the two capacities


@dataclasses.dataclass(frozen=True)
class SizingSettings:
    """The L1/L2 split (D3N's cache management, issue 13). ``adaptive``: the node's total
    (LAKEGATE_CACHE_CAPACITY + LAKEGATE_L2_CAPACITY) moves between the tiers every ``interval``
    seconds, from the tiers' miss-ratio curves and miss costs; ``fixed``: the two capacities as
    set. The curves are estimated in both modes (for operators)."""

    mode: str = "fixed"
    interval: float = 30.0  # seconds between split decisions (an epoch)
    sample_rate: float = 0.01  # SHARDS' spatial sampling rate of block references
    memory: int = 1 << 20  # bytes each stream's estimator may hold (the rate lowers to fit)
    min_l1: float = 0.1  # fractions of the total L1 may take, with adaptive sizing
    max_l1: float = 0.9
    step: float = 0.1  # the most of the total that moves in one epoch
    half_life: float = 300.0  # seconds after which a reference weighs half in the curves
    total: int = 0  # adaptive: the node's total, LAKEGATE_CACHE_CAPACITY + LAKEGATE_L2_CAPACITY

    @property
    def adaptive(self) -> bool:
        return self.mode == "adaptive"


WRITE_MODES = ("write-through", "write-back")  # LAKEGATE_WRITE_MODE, tenants' write_mode, x-lakegate-write-mode


@dataclasses.dataclass(frozen=True)
class WriteSettings:
    """Writes (D3N write-back, Pfimbi replication; issue 14): the default mode, per-bucket modes
    (glob, mode) tried in order, the replication a request gets when it does not say (N copies
    on cache nodes, K of them durable before the answer), and the journal's dirty bounds T and
    T + delta (bytes; policies/replication.py)."""

    mode: str = "write-through"
    bucket_modes: tuple[tuple[str, str], ...] = ()
    replicas: int = 1
    sync_replicas: int = 1
    max_replicas: int = 3
    dirty_soft: int = 1 << 30
    dirty_delta: int = 512 << 20
    flush_concurrency: int = 4
    flush_retry: float = 1.0
    copy_timeout: float = 30.0
    flow_control: bool = True

    def config(self) -> WriteBackConfig:
        return WriteBackConfig(
            replicas=self.replicas, sync_replicas=self.sync_replicas, max_replicas=self.max_replicas,
            thresholds=Thresholds(self.dirty_soft, self.dirty_delta), copy_timeout=self.copy_timeout,
            flush_concurrency=self.flush_concurrency, flush_retry=self.flush_retry, flow_control=self.flow_control,
        )


# SIGTERM's drain (gateway.health): in-flight requests' time, then the write-back journal's flush
SHUTDOWN_TIMEOUT = 30.0
SHUTDOWN_FLUSH_TIMEOUT = 60.0


class SettingsError(ValueError):
    """An invalid setting; ``str()`` is the one line to show."""


class Environment(BaseSettings):
    """The ``LAKEGATE_*`` variables as read, flat; defaults come from the config value objects."""

    model_config = SettingsConfigDict(env_prefix="LAKEGATE_", env_file=".env", extra="ignore")

    listen: str = "127.0.0.1:9000"
    workers: int = Field(0, ge=0, le=256)  # processes serving the node; 0: one per core
    shutdown_timeout: float = Field(SHUTDOWN_TIMEOUT, ge=0)  # SIGTERM: in-flight requests' time
    shutdown_flush_timeout: float = Field(SHUTDOWN_FLUSH_TIMEOUT, ge=0)  # then the journal's flush
    zero_copy: bool = True  # large L1 hits sent with sendfile (plain HTTP), checked by the scrub
    scrub_rate: ByteSize = ByteSize(32 << 20)  # bytes/s of cached blocks re-verified in the background
    lake: str = "dir:var/lake"
    lake_access_key: str = ""
    lake_secret_key: str = ""
    lake_secret_key_file: Path | None = None  # or the secret in a file (Docker and Kubernetes secrets)
    lake_region: str = S3LakeConfig.region
    lake_timeout: float = Field(S3LakeConfig.timeout, gt=0)
    lake_connect_timeout: float = Field(S3LakeConfig.connect_timeout, gt=0)
    lake_retries: int = Field(S3LakeConfig.retries, ge=0, le=10)
    lake_max_connections: int = Field(S3LakeConfig.max_connections, ge=1)
    lake_conditional_writes: ConditionalWrites = S3LakeConfig.conditional_writes  # which ones the lake decides
    tenants_file: Path = Path("deploy/tenants.example.toml")
    cache_dir: Path = Path("var/cache")
    cache: bool = True
    cache_capacity: ByteSize = ByteSize(4 << 30)
    cache_eviction: str = DEFAULT_EVICTION
    block_size: ByteSize = ByteSize(ReadConfig.block_size)
    meta_ttl: float = Field(ReadConfig.meta_ttl, ge=0)
    readahead: int = Field(ReadConfig.readahead, ge=0, le=64)
    cache_on_write: bool = CacheOnWrite.enabled
    cache_on_write_max: ByteSize = ByteSize(CacheOnWrite.max_bytes)
    cache_on_write_budget: ByteSize = ByteSize(CacheOnWrite.budget_bytes)
    cache_max_object_size: ByteSize = ByteSize(ReadConfig.max_cached_object)
    tls_cert: Path | None = None
    tls_key: Path | None = None
    virtual_host_suffixes: str = ",".join(FrontendConfig.host_suffixes)
    anonymous_read_buckets: str = ",".join(FrontendConfig.anonymous_buckets)
    max_clock_skew: int = Field(int(FrontendConfig.max_skew.total_seconds()), ge=1)
    max_header_bytes: int = Field(FrontendConfig.max_header_bytes, ge=1024)
    # the HTTP layer's bounds (gateway.httplimits), before the front end sees a request
    max_headers: int = Field(HttpLimits.max_headers, ge=16)
    max_request_line_bytes: int = Field(HttpLimits.max_request_line_bytes, ge=1024)
    header_timeout: float = Field(HttpLimits.header_timeout, gt=0)
    idle_timeout: float = Field(HttpLimits.idle_timeout, gt=0)
    send_timeout: float = Field(HttpLimits.send_timeout, gt=0)
    max_connections: int = Field(HttpLimits.max_connections, ge=1)
    log_level: str = "info"
    access_log: bool = FrontendConfig.access_log
    sigv2: bool = FrontendConfig.sigv2
    body_timeout: float = Field(FrontendConfig.body_timeout, gt=0)
    # cluster (D3N's L2): empty peers = a node on its own (L1 only)
    node_id: str = ""
    peers: str = ""
    cluster_secret: SecretStr = SecretStr("")
    cluster_secret_file: Path | None = None  # or the secret in a file (Docker and Kubernetes secrets)
    advertise_url: str = ""
    node_weight: float = Field(1.0, gt=0)
    l2_capacity: ByteSize = ByteSize(4 << 30)
    replicas: int = Field(MembershipConfig.replicas, ge=1, le=3)
    partitions: int = Field(MembershipConfig.partitions, ge=1, le=1 << 16)
    heartbeat_interval: float = Field(MembershipConfig.heartbeat_interval, gt=0)
    failure_timeout: float = Field(MembershipConfig.failure_timeout, gt=0)
    peer_ca_file: Path | None = None
    # the admin credential (gateway/admin.py): /_lakegate/admin/* and, with metrics_auth, /metrics
    admin_access_key: str = AdminConfig.access_key
    admin_secret_key: SecretStr = SecretStr("")
    admin_secret_key_file: Path | None = None
    admin_token_file: Path | None = None
    metrics_auth: bool = AdminConfig.metrics_auth
    # admin operations (gateway/adminops.py): objects a warm reads at once, objects a cached query examines
    warm_concurrency: int = Field(AdminOpsConfig.warm_concurrency, ge=1, le=256)
    admin_max_objects: int = Field(AdminOpsConfig.max_objects, ge=1, le=1_000_000)
    # tenant fairness (Pisces): which mechanisms, and the resources they share
    fairness: str = FairnessSettings.mode
    lake_bandwidth: str = ""  # bytes/s the whole cluster may pull from the lake; empty: unlimited
    node_request_rate: float = Field(0.0, ge=0)  # requests/s this node admits; 0: not limited
    node_send_rate: str = "0"  # bytes/s this node sends to clients; 0: its network interface's speed
    tenant_queue: int = Field(FairnessSettings.tenant_queue, ge=1, le=1 << 20)
    allocation_interval: float = Field(FairnessSettings.allocation_interval, gt=0)
    placement_interval: float = Field(FairnessSettings.placement_interval, gt=0)
    placement_moves: int = Field(FairnessSettings.placement_moves, ge=0, le=1 << 16)
    # the L1/L2 split (D3N): adaptive (default in a cluster) or fixed (default alone)
    sizing: str = ""
    sizing_interval: float = Field(SizingSettings.interval, gt=0)
    sizing_sample_rate: float = Field(SizingSettings.sample_rate, gt=0, le=1)
    sizing_memory: ByteSize = Field(ByteSize(SizingSettings.memory), ge=64 << 10)
    sizing_min_l1: float = Field(SizingSettings.min_l1, ge=0, le=1)
    sizing_max_l1: float = Field(SizingSettings.max_l1, ge=0, le=1)
    sizing_step: float = Field(SizingSettings.step, gt=0, le=1)
    sizing_half_life: float = Field(SizingSettings.half_life, gt=0)
    # replica choice (MicroMon, C3, Pisces RS): which lake endpoint, which of a block's owners
    replica_policy: str = "micromon"
    # writes (D3N write-back + Pfimbi): the mode, replication defaults, the journal's dirty bounds
    write_mode: str = WriteSettings.mode
    write_mode_buckets: str = ""  # GLOB=MODE,...: a bucket's mode (before the tenant's and the default)
    write_replicas: int = Field(0, ge=0, le=8)  # N; 0: 2 in a cluster, 1 alone
    write_sync_replicas: int = Field(0, ge=0, le=8)  # K; 0: 2 in a cluster, 1 alone
    write_max_replicas: int = Field(WriteSettings.max_replicas, ge=1, le=8)
    write_dirty_soft: ByteSize | None = None  # T; empty: 10% of the cache (L1 + L2)
    write_dirty_delta: ByteSize | None = None  # delta; empty: 5% of the cache
    write_flush_concurrency: int = Field(WriteSettings.flush_concurrency, ge=1, le=256)
    write_flush_retry: float = Field(WriteSettings.flush_retry, gt=0)
    write_copy_timeout: float = Field(WriteSettings.copy_timeout, gt=0)
    write_flow_control: bool = WriteSettings.flow_control

    @field_validator("write_mode")
    @classmethod
    def _write_mode(cls, v: str) -> str:
        v = v.strip().lower()
        if v not in WRITE_MODES:
            raise ValueError(f"must be one of {', '.join(WRITE_MODES)}")
        return v

    @field_validator("write_mode_buckets")
    @classmethod
    def _write_mode_buckets(cls, v: str) -> str:
        parse_bucket_modes(v)
        return v

    @field_validator("write_dirty_soft", "write_dirty_delta", mode="before")
    @classmethod
    def _unset_size(cls, v: object) -> object:
        return None if v == "" else v

    @field_validator("replica_policy")
    @classmethod
    def _replica_policy(cls, v: str) -> str:
        v = v.strip().lower()
        if v not in REPLICA_POLICIES:
            raise ValueError(f"must be one of {', '.join(REPLICA_POLICIES)}")
        return v

    @field_validator("sizing")
    @classmethod
    def _sizing(cls, v: str) -> str:
        v = v.strip().lower()
        if v and v not in SIZING_MODES:
            raise ValueError(f"must be one of {', '.join(SIZING_MODES)} (or empty: adaptive in a cluster)")
        return v

    @field_validator("fairness")
    @classmethod
    def _fairness(cls, v: str) -> str:
        if v.lower() not in FAIRNESS_MODES:
            raise ValueError(f"fairness must be one of {', '.join(FAIRNESS_MODES)}, got {v!r}")
        return v.lower()

    @field_validator("lake_bandwidth", "node_send_rate")
    @classmethod
    def _rate(cls, v: str) -> str:
        parse_rate(v)
        return v

    @field_validator("tls_cert", "tls_key", "peer_ca_file", "admin_secret_key_file", "admin_token_file",
                     "lake_secret_key_file", "cluster_secret_file", mode="before")
    @classmethod
    def _unset_path(cls, v: object) -> object:
        return None if v == "" else v  # ``LAKEGATE_TLS_CERT=`` as .env.example writes it: none

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
        urls = [url.strip() for url in v.split(",")]
        schemes = set()
        for url in urls:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
                raise ValueError(f"lake must be dir:PATH or http(s)://host:port[,http(s)://host:port...], got {url!r}")
            schemes.add(parts.scheme)
        if len(schemes) > 1:
            raise ValueError(f"the lake's endpoints must be all http or all https, got {v!r}")
        if len(set(urls)) != len(urls):
            raise ValueError(f"the lake's endpoints must differ, got {v!r}")
        return ",".join(urls)

    @field_validator("cache_eviction")
    @classmethod
    def _eviction(cls, v: str) -> str:
        if v.lower() not in EVICTION_POLICIES:
            raise ValueError(f"cache_eviction must be {' or '.join(EVICTION_POLICIES)}, got {v!r}")
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
        if v.lower() not in _LOG_LEVELS:
            raise ValueError(f"log_level must be one of {', '.join(_LOG_LEVELS)}; got {v!r}")
        return v.lower()

    @field_validator("peers")
    @classmethod
    def _peers(cls, v: str) -> str:
        seeds, _ = parse_peers(v)
        for _, url in seeds:
            _check_url("a peer", url)
        return v

    @field_validator("advertise_url")
    @classmethod
    def _advertise_url(cls, v: str) -> str:
        if v:
            _check_url("advertise_url", v)
        return v

    @property
    def self_url(self) -> str:
        if self.advertise_url:
            return self.advertise_url.rstrip("/")
        return f"{'https' if self.tls_cert else 'http'}://{self.listen}"


def parse_bucket_modes(spec: str) -> tuple[tuple[str, str], ...]:
    """``GLOB=MODE,GLOB=MODE`` as (glob, mode) pairs; ValueError for anything else."""
    pairs = []
    for item in (part.strip() for part in spec.split(",")):
        if not item:
            continue
        glob, sep, mode = item.partition("=")
        if not sep or not glob.strip() or mode.strip().lower() not in WRITE_MODES:
            raise ValueError(f"must be GLOB=MODE,... with MODE one of {', '.join(WRITE_MODES)}, got {item!r}")
        pairs.append((glob.strip(), mode.strip().lower()))
    return tuple(pairs)


def _check_url(what: str, url: str) -> None:
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        raise ValueError(f"{what} must be http(s)://host:port, got {url!r}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{what} must be http(s)://host:port, got {url!r}")


# ---- the nested value objects ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ServerSettings:
    """The S3 endpoint: where it listens, whom it serves, how it logs."""

    listen: str
    tls_cert: Path | None
    tls_key: Path | None
    tenants_file: Path
    log_level: str
    frontend: FrontendConfig
    http: HttpLimits = HttpLimits()
    workers: int = 1  # processes accepting on ``listen``, sharing the node (gateway.workers)
    zero_copy: bool = False  # large L1 hits leave with sendfile (gateway.httpserver), plain HTTP only
    shutdown_timeout: float = SHUTDOWN_TIMEOUT  # SIGTERM: seconds in-flight requests get to finish (gateway.health)
    shutdown_flush_timeout: float = SHUTDOWN_FLUSH_TIMEOUT  # then seconds to flush this node's write-back journal to the lake

    @property
    def host(self) -> str:
        return self.listen.rpartition(":")[0].strip("[]")

    @property
    def port(self) -> int:
        return int(self.listen.rpartition(":")[2])

    @property
    def scheme(self) -> str:
        return "https" if self.tls_cert else "http"


@dataclasses.dataclass(frozen=True)
class LakeSettings:
    """The lake: an embedded folder (``directory``) or an S3 endpoint (``s3``), never both."""

    location: str  # as given: dir:PATH or http(s)://host:port[,http(s)://host:port...]
    directory: Path | None = None
    s3: S3LakeConfig | None = None


@dataclasses.dataclass(frozen=True)
class CacheSettings:
    """The block cache (D3N's L1 on this node's SSD); ``enabled=False``: every read goes to the lake."""

    enabled: bool
    directory: Path  # L1 under directory/l1, L2 (in a cluster) under directory/l2
    l1_capacity: int
    eviction: str
    read: ReadConfig
    on_write: CacheOnWrite
    scrub_rate: int = 0  # bytes a second of cached blocks re-verified (cachetier.blocks.space)


@dataclasses.dataclass(frozen=True)
class ClusterSettings:
    """This node as a member of a cluster (D3N's L2); ``Settings.cluster`` is None without peers."""

    node_id: str
    url: str  # where peers reach this node
    weight: float
    seeds: tuple[tuple[str | None, str], ...]  # (id or None, url) of the peers named
    dns: str | None  # NAME:PORT whose A records are the peers, looked up every heartbeat
    secret: bytes = dataclasses.field(repr=False)
    l2_capacity: int
    membership: MembershipConfig
    peer_ca_file: Path | None
    peer_timeout: float  # seconds for a peer's answer (the lake's timeout, as before)


@dataclasses.dataclass(frozen=True)
class Settings:
    """A node's settings, nested by part. Room for the coming mechanisms' own value objects
    (sizing, write-back) next to these."""

    server: ServerSettings
    lake: LakeSettings
    cache: CacheSettings
    cluster: ClusterSettings | None
    admin: AdminConfig = AdminConfig()
    admin_ops: AdminOpsConfig = AdminOpsConfig()
    fairness: FairnessSettings = FairnessSettings()
    sizing: SizingSettings = SizingSettings()
    replica_policy: str = "micromon"  # policies.selection: lake endpoints and a block's peer owners
    write: WriteSettings = WriteSettings()

    @classmethod
    def load(cls, **overrides: object) -> Settings:
        """The environment (and ``.env``) with ``overrides`` on top, checked; ``SettingsError``."""
        try:
            env = Environment(**overrides)  # type: ignore[arg-type]
        except ValidationError as exc:
            raise SettingsError("; ".join(_problem(e) for e in exc.errors())) from None
        return cls.from_environment(env)

    @classmethod
    def from_environment(cls, env: Environment) -> Settings:
        _cross_checks(env)
        return cls(server=_server(env), lake=_lake(env), cache=_cache(env), cluster=_cluster(env), admin=_admin(env),
                   admin_ops=AdminOpsConfig(env.warm_concurrency, env.admin_max_objects), fairness=_fairness(env), sizing=_sizing(env), replica_policy=env.replica_policy,
                   write=_write(env))


def _problem(error: object) -> str:
    """One pydantic error as ``LAKEGATE_FIELD: message (got 'value')``."""
    assert isinstance(error, dict)
    field = ".".join(map(str, error["loc"]))
    message = str(error["msg"]).removeprefix("Value error, ")
    value = error.get("input")
    if isinstance(value, str) and field not in _SECRET_FIELDS and "got " not in message:
        message += f" (got {value!r})"
    return f"LAKEGATE_{field.upper()}: {message}" if field else message


def _fail(field: str, message: str) -> SettingsError:
    return SettingsError(f"LAKEGATE_{field.upper()}: {message}")


def _cross_checks(env: Environment) -> None:
    _membership(env)  # also without peers: a value the node would refuse once it has some
    if (env.tls_cert is None) != (env.tls_key is None):
        raise _fail("tls_key" if env.tls_key is None else "tls_cert", "tls_cert and tls_key must be given together")
    for field in ("tls_cert", "tls_key", "peer_ca_file"):
        path = getattr(env, field)
        if path is not None and not path.is_file():
            raise _fail(field, f"TLS file not found: {path}")
    if env.sizing_min_l1 > env.sizing_max_l1:
        raise _fail("sizing_min_l1", f"must not exceed sizing_max_l1 ({env.sizing_max_l1})")
    if not env.tenants_file.is_file():
        raise _fail("tenants_file", f"tenants file not found: {env.tenants_file}")
    folders = {"cache_dir": env.cache_dir, "lake": Path(env.lake[4:]) if env.lake.startswith("dir:") else None}
    for field, folder in folders.items():
        if folder is not None and folder.exists() and not folder.is_dir():
            raise _fail(field, f"{field} must name a directory (it may not exist yet), not the file {folder}")


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity, which containers and taskset set)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _server(env: Environment) -> ServerSettings:
    return ServerSettings(
        listen=env.listen,
        tls_cert=env.tls_cert,
        tls_key=env.tls_key,
        tenants_file=env.tenants_file,
        log_level=env.log_level,
        workers=env.workers or available_cores(),
        zero_copy=env.zero_copy and env.scrub_rate > 0,  # a hit sent unread is one the scrub checks
        shutdown_timeout=env.shutdown_timeout,
        shutdown_flush_timeout=env.shutdown_flush_timeout,
        frontend=FrontendConfig(
            host_suffixes=tuple(s.strip().lower() for s in env.virtual_host_suffixes.split(",") if s.strip()),
            anonymous_buckets=frozenset(s.strip() for s in env.anonymous_read_buckets.split(",") if s.strip()),
            max_skew=timedelta(seconds=env.max_clock_skew),
            max_header_bytes=env.max_header_bytes,
            access_log=env.access_log,
            sigv2=env.sigv2,
            body_timeout=env.body_timeout,
        ),
        http=HttpLimits(
            max_header_bytes=env.max_header_bytes,
            max_headers=env.max_headers,
            max_request_line_bytes=env.max_request_line_bytes,
            header_timeout=env.header_timeout,
            idle_timeout=env.idle_timeout,
            send_timeout=env.send_timeout,
            max_connections=env.max_connections,
        ),
    )


def _lake(env: Environment) -> LakeSettings:
    if env.lake.startswith("dir:"):
        return LakeSettings(env.lake, directory=Path(env.lake[4:]))
    lake_secret_key = _secret_or_file(env, "lake_secret_key")
    if not (env.lake_access_key and lake_secret_key):
        field = "lake_access_key" if not env.lake_access_key else "lake_secret_key"
        raise _fail(field, "an S3 lake needs lake_access_key and lake_secret_key (LAKEGATE_LAKE_ACCESS_KEY/...)")
    endpoints = tuple(env.lake.split(","))  # validated: one or more http(s) URLs
    s3 = S3LakeConfig(
        endpoints[0],
        env.lake_access_key,
        lake_secret_key,
        env.lake_region,
        timeout=env.lake_timeout,
        connect_timeout=env.lake_connect_timeout,
        retries=env.lake_retries,
        max_connections=env.lake_max_connections,
        endpoints=endpoints,
        conditional_writes=env.lake_conditional_writes,
    )
    return LakeSettings(env.lake, s3=s3)


def _cache(env: Environment) -> CacheSettings:
    read = ReadConfig(
        block_size=int(env.block_size),
        meta_ttl=env.meta_ttl,
        readahead=env.readahead,
        max_cached_object=int(env.cache_max_object_size),
    )
    return CacheSettings(
        enabled=env.cache,
        directory=env.cache_dir,
        l1_capacity=int(env.cache_capacity),
        eviction=env.cache_eviction,
        read=read,
        on_write=CacheOnWrite(env.cache_on_write, int(env.cache_on_write_max), int(env.cache_on_write_budget)),
        scrub_rate=int(env.scrub_rate),
    )


def _membership(env: Environment) -> MembershipConfig:
    try:
        return MembershipConfig(env.partitions, env.replicas, env.heartbeat_interval, env.failure_timeout)
    except ValueError as exc:
        raise _fail("failure_timeout", str(exc)) from None


def _cluster(env: Environment) -> ClusterSettings | None:
    if not env.peers:
        return None
    secret = _secret_or_file(env, "cluster_secret")
    if len(secret) < _MIN_SECRET:
        raise _fail("cluster_secret", "a node with peers needs cluster_secret (LAKEGATE_CLUSTER_SECRET), 16 characters or more")
    seeds, dns = parse_peers(env.peers)
    return ClusterSettings(
        node_id=env.node_id or f"node-{env.listen.rpartition(':')[2]}",
        url=env.self_url,
        weight=env.node_weight,
        seeds=tuple(seeds),
        dns=dns,
        secret=secret.encode(),
        l2_capacity=int(env.l2_capacity),
        membership=_membership(env),
        peer_ca_file=env.peer_ca_file,
        peer_timeout=env.lake_timeout,
    )


def _fairness(env: Environment) -> FairnessSettings:
    return FairnessSettings(
        mode=env.fairness,
        lake_bandwidth=parse_rate(env.lake_bandwidth),
        request_rate=env.node_request_rate or None,
        send_rate=parse_rate(env.node_send_rate),
        tenant_queue=env.tenant_queue,
        allocation_interval=env.allocation_interval,
        placement_interval=env.placement_interval,
        placement_moves=env.placement_moves,
    )


def _sizing(env: Environment) -> SizingSettings:
    return SizingSettings(
        mode=env.sizing or ("adaptive" if env.peers else "fixed"),
        interval=env.sizing_interval,
        sample_rate=env.sizing_sample_rate,
        memory=int(env.sizing_memory),
        min_l1=env.sizing_min_l1,
        max_l1=env.sizing_max_l1,
        step=env.sizing_step,
        half_life=env.sizing_half_life,
        total=int(env.cache_capacity) + int(env.l2_capacity),
    )


def _write(env: Environment) -> WriteSettings:
    clustered = 2 if env.peers else 1
    replicas = env.write_replicas or clustered
    sync = env.write_sync_replicas or min(clustered, replicas)
    if sync > replicas:
        raise _fail("write_sync_replicas", f"must not exceed write_replicas ({replicas})")
    if replicas > env.write_max_replicas:
        raise _fail("write_replicas", f"must not exceed write_max_replicas ({env.write_max_replicas})")
    if not env.cache and (env.write_mode == "write-back" or "write-back" in env.write_mode_buckets.lower()):
        raise _fail("write_mode", "write-back journals on the cache disk: it needs the cache (LAKEGATE_CACHE=true)")
    total = int(env.cache_capacity) + (int(env.l2_capacity) if env.peers else 0)
    thresholds = Thresholds.for_disk(total, None if env.write_dirty_soft is None else int(env.write_dirty_soft),
                                     None if env.write_dirty_delta is None else int(env.write_dirty_delta))
    return WriteSettings(
        mode=env.write_mode, bucket_modes=parse_bucket_modes(env.write_mode_buckets), replicas=replicas,
        sync_replicas=sync, max_replicas=env.write_max_replicas, dirty_soft=thresholds.soft,
        dirty_delta=thresholds.delta, flush_concurrency=env.write_flush_concurrency,
        flush_retry=env.write_flush_retry, copy_timeout=env.write_copy_timeout, flow_control=env.write_flow_control,
    )


def _admin(env: Environment) -> AdminConfig:
    if env.admin_secret_key.get_secret_value() and env.admin_secret_key_file is not None:
        raise _fail("admin_secret_key_file", "give admin_secret_key or admin_secret_key_file, not both")
    secret = env.admin_secret_key.get_secret_value()
    if env.admin_secret_key_file is not None:
        secret = _secret_file("admin_secret_key_file", env.admin_secret_key_file)
    token = _secret_file("admin_token_file", env.admin_token_file) if env.admin_token_file is not None else ""
    if bool(env.admin_access_key) != bool(secret):
        field = "admin_secret_key" if env.admin_access_key else "admin_access_key"
        raise _fail(field, "admin_access_key and admin_secret_key (or admin_secret_key_file) must be given together")
    cluster_secret = _secret_or_file(env, "cluster_secret")
    for field, value in (("admin_secret_key", secret), ("admin_token_file", token)):
        if value and len(value) < _MIN_SECRET:
            raise _fail(field, f"the admin {'token' if 'token' in field else 'secret'} must be {_MIN_SECRET} characters or more")
        if value and value == cluster_secret:
            raise _fail(field, "must differ from cluster_secret (LAKEGATE_CLUSTER_SECRET)")
    admin = AdminConfig(env.admin_access_key, secret, token, env.metrics_auth)
    if env.metrics_auth and not admin.configured:
        raise _fail("metrics_auth", "metrics_auth=true needs an admin credential (LAKEGATE_ADMIN_ACCESS_KEY/...)")
    return admin


def _secret_or_file(env: Environment, field: str) -> str:
    """A secret given either in its variable or in a file (``FIELD_FILE``), not both."""
    value = getattr(env, field)
    secret = value.get_secret_value() if isinstance(value, SecretStr) else str(value)
    path: Path | None = getattr(env, f"{field}_file")
    if path is None:
        return secret
    if secret:
        raise _fail(f"{field}_file", f"give {field} or {field}_file, not both")
    return _secret_file(f"{field}_file", path)


def _secret_file(field: str, path: Path) -> str:
    """A secret kept in a file (Docker and Kubernetes secrets): its text, without the final newline."""
    try:
        return path.read_text().rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise _fail(field, f"cannot read {path}: {exc.strerror if isinstance(exc, OSError) else 'not text'}") from None
