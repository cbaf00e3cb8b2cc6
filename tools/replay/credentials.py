"""Whose keys sign each request: one credential set for every tenant, and/or a file of
tenant -> keys (lakegate's tenants TOML works as that file: name, access_key, secret_key).

Also the one place a botocore S3 client is made (SigV4, path style, as Hadoop's S3A and
most tools address a gateway on a plain host name).
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import botocore.session
from botocore.config import Config


class CredentialsError(ValueError):
    """Missing or unreadable credentials; the message says which."""


@dataclass(frozen=True)
class Keys:
    access_key: str
    secret_key: str

    def __repr__(self) -> str:  # never show the secret
        return f"Keys(access_key={self.access_key!r})"


@dataclass(frozen=True)
class Credentials:
    """Keys by tenant name, with ``default`` for tenants the file does not name."""

    by_tenant: dict[str, Keys]
    default: Keys | None = None

    @classmethod
    def load(cls, path: Path | None, access_key: str | None, secret_key: str | None) -> Credentials:
        if bool(access_key) != bool(secret_key):
            raise CredentialsError("give both --access-key and --secret-key, or neither")
        default = Keys(access_key, secret_key) if access_key and secret_key else None
        by_tenant = _read_file(path) if path is not None else {}
        if default is None and not by_tenant:
            raise CredentialsError("no credentials: give --access-key/--secret-key (or "
                                   "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY) or --credentials FILE")
        return cls(by_tenant, default)

    def keys_for(self, tenant: str) -> Keys:
        keys = self.by_tenant.get(tenant, self.default)
        if keys is None:
            raise CredentialsError(f"no keys for tenant {tenant!r}")
        return keys

    def check_covers(self, tenants: Iterable[str]) -> None:
        """Fail before any request goes out if some tenant has no keys."""
        missing = sorted({t for t in tenants if t not in self.by_tenant} if self.default is None else set())
        if missing:
            raise CredentialsError(f"no keys for tenant(s) {', '.join(missing)} in the credentials "
                                   "file, and no --access-key/--secret-key to fall back on")


def _read_file(path: Path) -> dict[str, Keys]:
    """Keys by tenant name from ``[[tenant]]`` tables. Unlike the gateway's tenants file,
    two tenants may share keys (a trace's tenants signed as one lake user); other keys of a
    table (weight, buckets) are ignored, so a lakegate tenants file reads as it is."""
    try:
        rows = tomllib.loads(path.read_text()).get("tenant")
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise CredentialsError(f"credentials file {path}: {exc}") from exc
    if not isinstance(rows, list) or not rows:
        raise CredentialsError(f"credentials file {path}: no [[tenant]] tables")
    by_tenant: dict[str, Keys] = {}
    for number, row in enumerate(rows, start=1):
        fields = [row.get(k) if isinstance(row, dict) else None for k in ("name", "access_key", "secret_key")]
        strings = [f for f in fields if isinstance(f, str) and f]
        if len(strings) != len(fields):
            raise CredentialsError(f"credentials file {path}: tenant #{number} needs name, access_key "
                                   "and secret_key (non-empty strings)")
        name, access_key, secret_key = strings
        if name in by_tenant:
            raise CredentialsError(f"credentials file {path}: tenant {name!r} given twice")
        by_tenant[name] = Keys(access_key, secret_key)
    return by_tenant


def s3_client(endpoint: str, keys: Keys, region: str, ca_bundle: str | None = None) -> Any:
    """A botocore S3 client: SigV4, path-style addressing."""
    return botocore.session.get_session().create_client(
        "s3",
        endpoint_url=endpoint,
        region_name=region,
        aws_access_key_id=keys.access_key,
        aws_secret_access_key=keys.secret_key,
        verify=ca_bundle,
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"}),
    )
