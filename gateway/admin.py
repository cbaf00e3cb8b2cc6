"""The admin credential: who may read ``/_lakegate/admin/*`` (and ``/metrics`` when
``LAKEGATE_METRICS_AUTH`` is on).

Two ways in, both checked here and nowhere else:

- a SigV4-signed request (service ``s3``, any region, the S3 front end's clock skew) with the
  admin access key, header or presigned URL; verified by ``gateway.s3.sigv4`` with a lookup that
  knows only the admin key, so a tenant's key, the cluster secret or a SigV2 signature never pass;
- ``Authorization: Bearer TOKEN`` when ``LAKEGATE_ADMIN_TOKEN_FILE`` is set (e.g. Prometheus'
  ``authorization.credentials_file``), compared in constant time.

Every refusal is one 403 ``{"error": "AccessDenied", "message": ...}`` that says no more than
that the admin credential is needed (or that none is configured, naming the settings).
"""

from __future__ import annotations

import dataclasses
import hmac
import json
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import unquote

from cachetier.errors import S3Error
from gateway.s3 import sigv4

SETTINGS_HINT = (
    "LAKEGATE_ADMIN_ACCESS_KEY with LAKEGATE_ADMIN_SECRET_KEY (or LAKEGATE_ADMIN_SECRET_KEY_FILE), "
    "or LAKEGATE_ADMIN_TOKEN_FILE"
)
NOT_CONFIGURED = f"the admin endpoints are off: no admin credential is configured ({SETTINGS_HINT})"
NEEDS_ADMIN = "this endpoint needs the admin credential (SigV4 with the admin key, or the admin bearer token)"
_BEARER = "bearer "


@dataclasses.dataclass(frozen=True)
class AdminConfig:
    """The admin credential; all empty: the admin endpoints answer 403 to everyone."""

    access_key: str = ""
    secret_key: str = dataclasses.field(default="", repr=False)
    token: str = dataclasses.field(default="", repr=False)  # the bearer token, "" for none
    metrics_auth: bool = False  # /metrics needs the admin credential too

    @property
    def configured(self) -> bool:
        return bool(self.access_key and self.secret_key) or bool(self.token)


class AdminKeyIsTenantKey(ValueError):
    """The admin access key is also a tenant's; ``str()`` is the one line to show."""


def check_not_a_tenant_key(config: AdminConfig, access_keys: Iterable[str]) -> None:
    """A tenant signing with its own key must never be taken for the admin (nor the reverse)."""
    if config.access_key and config.access_key in set(access_keys):
        raise AdminKeyIsTenantKey("LAKEGATE_ADMIN_ACCESS_KEY: is also a tenant's access key in the tenants file")


def claimed_access_key(scope: dict[str, Any]) -> str | None:
    """The access key a SigV4 request names (Authorization header or X-Amz-Credential), unchecked."""
    for name, value in scope["headers"]:
        if name == b"authorization":
            _, found, rest = value.decode("latin-1").partition("Credential=")
            return rest.partition("/")[0].strip() if found else None
    for part in scope.get("query_string", b"").split(b"&"):
        name, _, value = part.partition(b"=")
        if name == b"X-Amz-Credential":
            return unquote(value.decode("latin-1")).partition("/")[0]
    return None


class AdminGuard:
    """Decides whether a request carries the admin credential; ``refusal`` is None when it does."""

    def __init__(self, config: AdminConfig, max_skew: timedelta, clock: Callable[[], datetime]) -> None:
        self.config = config
        self.max_skew = max_skew
        self.clock = clock

    def claims_admin(self, scope: dict[str, Any]) -> bool:
        """The request presents itself as the admin's (bearer, or signed with the admin key), so a
        ``GET /metrics`` goes to the metrics, not to S3 (where it would be bucket "metrics")."""
        if _authorization(scope).lower().startswith(_BEARER):
            return True
        return bool(self.config.access_key) and claimed_access_key(scope) == self.config.access_key

    def refusal(self, scope: dict[str, Any]) -> str | None:
        if not self.config.configured:
            return NOT_CONFIGURED
        authorization = _authorization(scope)
        if authorization.lower().startswith(_BEARER):
            offered = authorization[len(_BEARER):].strip().encode("utf-8", "replace")
            token = self.config.token.encode()
            return None if token and hmac.compare_digest(offered, token) else NEEDS_ADMIN
        try:
            auth = sigv4.authenticate(_signed_request(scope), self._secret_for, self.clock(), max_skew=self.max_skew)
        except S3Error:  # unknown key, bad signature, skew, malformed: all the same to the caller
            return NEEDS_ADMIN
        return None if auth is not None else NEEDS_ADMIN

    def _secret_for(self, access_key: str) -> str | None:
        if self.config.access_key and self.config.secret_key and access_key == self.config.access_key:
            return self.config.secret_key
        return None

    async def deny(self, message: str, send: Callable[[dict[str, Any]], Any]) -> None:
        body = json.dumps({"error": "AccessDenied", "message": message}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 403, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _authorization(scope: dict[str, Any]) -> str:
    for name, value in scope["headers"]:
        if name == b"authorization":
            return str(value.decode("latin-1"))
    return ""


def _signed_request(scope: dict[str, Any]) -> sigv4.SignedRequest:
    raw_path = scope.get("raw_path") or scope.get("path", "/").encode("utf-8")
    headers = [(name.decode("latin-1").lower(), value.decode("latin-1")) for name, value in scope["headers"]]
    return sigv4.SignedRequest(scope["method"], raw_path, scope.get("query_string", b""), headers)
