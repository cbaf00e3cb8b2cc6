"""boto3 requests captured right before they would leave (no network), and checked with the
gateway's own SigV4 verification: what boto3 really sends, for the unit tests of signing,
checksums and aws-chunked bodies; and the awkward keys the signing tests (SigV4 and SigV2) run over.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import boto3
from botocore.config import Config


# Keys that show how a signer escapes paths (and whether the verifier reads them as it did).
AWKWARD_KEYS = [
    "plain.txt",
    "with space",
    "a+b",
    "100%",
    "100%25",
    "k=v&x=y",
    "ключ/ünïcødé/日本",
    "a//b///c",
    "~tilde~",
    "!*'()",
    "./dot/../dotdot/.",
    "semi;colon,comma:colon@at$dollar",
    "?question#hash[]",
    "emoji 😀",
    "trailing/",
]


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
