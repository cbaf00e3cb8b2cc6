"""Tenants: who may call lakegate, with which keys, weight and buckets.

The tenants file is TOML, one table per tenant::

    [[tenant]]
    name = "analytics"
    access_key = "AKIDANALYTICS0000001"
    secret_key = "..."
    weight = 2.0                 # share of the cluster's resources (default 1.0)
    buckets = ["lake-*", "tmp"]  # allowed bucket names or globs (default: all)
    demo = false                 # true: `lakegate serve` prints this tenant's secret at start
    max_request_rate = 500       # optional hard cap, requests/s over the whole cluster
    max_lake_bandwidth = "20MB/s"  # optional hard cap on what it pulls from the lake, cluster-wide
    write_mode = "write-back"    # optional: its writes' mode when neither request nor bucket says

Weights are shares, used only when resources are scarce (work conserving); the two caps are
limits that hold even on an idle cluster, for operators who need them on top of shares.

The gateway talks to the lake with its own credentials; tenants never see them.
"""

from __future__ import annotations

import fnmatch
import tomllib
from dataclasses import dataclass
from pathlib import Path

from gateway.rates import parse_rate


class TenantsFileError(ValueError):
    pass


@dataclass(frozen=True)
class Tenant:
    name: str
    access_key: str
    secret_key: str
    weight: float = 1.0
    buckets: tuple[str, ...] = ("*",)
    demo: bool = False
    anonymous: bool = False  # the front end's reader of public buckets, never from the file
    max_request_rate: float | None = None  # requests/s, cluster-wide (None: no cap)
    max_lake_bandwidth: float | None = None  # bytes/s from the lake, cluster-wide (None: no cap)
    write_mode: str | None = None  # "write-back" or "write-through" (None: the bucket's or the node's)

    def limits(self) -> dict[str, float]:
        """Its hard caps by fairness resource (policies.fairness), cluster-wide."""
        caps = {"requests": self.max_request_rate, "lake_bytes": self.max_lake_bandwidth}
        return {resource: cap for resource, cap in caps.items() if cap is not None}

    def may_use(self, bucket: str) -> bool:
        for pattern in self.buckets:  # a loop, not any(generator): this runs on every request
            # "*" (every bucket, the default) matches whatever fnmatch would: no pattern to run
            if pattern == "*" or fnmatch.fnmatchcase(bucket, pattern):
                return True
        return False

    def __repr__(self) -> str:  # never show the secret in logs or tracebacks
        return f"Tenant(name={self.name!r}, access_key={self.access_key!r}, weight={self.weight})"


class TenantDirectory:
    """Tenants by access key."""

    def __init__(self, tenants: list[Tenant]) -> None:
        self._by_key = {t.access_key: t for t in tenants}
        self.tenants = tenants

    @classmethod
    def load(cls, path: Path) -> TenantDirectory:
        try:
            doc = tomllib.loads(path.read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise TenantsFileError(f"{path}: {exc}") from exc
        rows = doc.get("tenant")
        if not isinstance(rows, list) or not rows:
            raise TenantsFileError(f"{path}: no [[tenant]] tables")
        tenants = [_parse(path, i, row) for i, row in enumerate(rows)]
        for attr in ("name", "access_key"):
            values = [getattr(t, attr) for t in tenants]
            if len(set(values)) != len(values):
                raise TenantsFileError(f"{path}: duplicate tenant {attr}")
        return cls(tenants)

    def weights(self) -> dict[str, float]:
        """Tenant name -> weight."""
        return {t.name: t.weight for t in self.tenants}

    def limits(self) -> dict[str, dict[str, float]]:
        """Tenant name -> its hard caps by resource, for the tenants that have any (cluster-wide)."""
        return {t.name: t.limits() for t in self.tenants if t.limits()}

    def by_access_key(self, access_key: str) -> Tenant | None:
        return self._by_key.get(access_key)

    def secret_for(self, access_key: str) -> str | None:
        tenant = self._by_key.get(access_key)
        return tenant.secret_key if tenant else None


def _parse(path: Path, index: int, row: object) -> Tenant:
    where = f"{path}: tenant #{index + 1}"
    if not isinstance(row, dict):
        raise TenantsFileError(f"{where}: not a table")
    unknown = set(row) - {"name", "access_key", "secret_key", "weight", "buckets", "demo",
                          "max_request_rate", "max_lake_bandwidth", "write_mode"}
    if unknown:
        raise TenantsFileError(f"{where}: unknown keys {sorted(unknown)}")
    for key in ("name", "access_key", "secret_key"):
        if not isinstance(row.get(key), str) or not row[key]:
            raise TenantsFileError(f"{where}: {key} must be a non-empty string")
    weight = row.get("weight", 1.0)
    if not isinstance(weight, (int, float)) or isinstance(weight, bool) or weight <= 0:
        raise TenantsFileError(f"{where}: weight must be a positive number")
    buckets = row.get("buckets", ["*"])
    if not isinstance(buckets, list) or not buckets or not all(isinstance(b, str) and b for b in buckets):
        raise TenantsFileError(f"{where}: buckets must be a non-empty list of names or globs")
    request_rate = row.get("max_request_rate")
    if request_rate is not None and (
        not isinstance(request_rate, (int, float)) or isinstance(request_rate, bool) or not 0 < request_rate < 1e12
    ):
        raise TenantsFileError(f"{where}: max_request_rate must be a positive number of requests a second")
    try:
        lake_bandwidth = parse_rate(row["max_lake_bandwidth"]) if "max_lake_bandwidth" in row else None
    except ValueError as exc:
        raise TenantsFileError(f"{where}: max_lake_bandwidth: {exc}") from None
    if "max_lake_bandwidth" in row and lake_bandwidth is None:
        raise TenantsFileError(f"{where}: max_lake_bandwidth must be above 0 (leave it out for no cap)")
    write_mode = row.get("write_mode")
    if write_mode is not None and write_mode not in ("write-back", "write-through"):
        raise TenantsFileError(f"{where}: write_mode must be \"write-back\" or \"write-through\"")
    return Tenant(
        name=row["name"],
        access_key=row["access_key"],
        secret_key=row["secret_key"],
        weight=float(weight),
        buckets=tuple(buckets),
        demo=bool(row.get("demo", False)),
        max_request_rate=float(request_rate) if request_rate is not None else None,
        max_lake_bandwidth=lake_bandwidth,
        write_mode=write_mode,
    )
