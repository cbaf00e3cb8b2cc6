"""SigV4 signing of lake requests, S3's way: the path signed as sent (never normalised, never
double-encoded), the payload hash in ``x-amz-content-sha256``.

``CrtSigner`` (awscrt, AWS's C implementation) signs what S3Lake sends. ``BotocoreSigner`` is
the same signature computed by botocore: the reference the tests check CrtSigner against for
every request shape S3Lake signs, and the baseline of ``benchmarks/signers.py``.
Measured (benchmarks/signers.py, 2 shared cores): 27-32 us of CPU per GET signature against
botocore's 67-86 us (S3SigV4Auth.add_auth, as S3Lake signed before).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Protocol

from awscrt import auth as crt_auth
from awscrt import http as crt_http
from botocore.auth import SIGV4_TIMESTAMP, S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
# The headers a signer adds, by their lower-case names.
SIGNING_HEADERS = ("x-amz-date", "x-amz-content-sha256", "authorization")


class Signer(Protocol):
    """Signs one request for the lake."""

    def sign(
        self, method: str, target: str, headers: Mapping[str, str], payload_hash: str, now: datetime
    ) -> dict[str, str]:
        """The headers that sign the request (``SIGNING_HEADERS``), to add to ``headers``.

        ``target`` is the path and query as sent (percent-encoded, S3's canonical form);
        ``headers`` are every header to be signed, lower-case names (``host`` among them),
        values as UTF-8 text; ``payload_hash`` is the body's hex SHA-256 or
        ``UNSIGNED-PAYLOAD``; ``now`` is an aware datetime."""
        ...


class CrtSigner:
    """SigV4 by awscrt (``aws_sign_request``); with static credentials it signs synchronously."""

    def __init__(self, access_key: str, secret_key: str, region: str) -> None:
        self._credentials = crt_auth.AwsCredentialsProvider.new_static(access_key, secret_key)
        self._region = region

    def sign(
        self, method: str, target: str, headers: Mapping[str, str], payload_hash: str, now: datetime
    ) -> dict[str, str]:
        config = crt_auth.AwsSigningConfig(
            algorithm=crt_auth.AwsSigningAlgorithm.V4,
            signature_type=crt_auth.AwsSignatureType.HTTP_REQUEST_HEADERS,
            credentials_provider=self._credentials,
            region=self._region,
            service="s3",
            date=now,
            use_double_uri_encode=False,  # S3 signs the path once-encoded, as sent
            should_normalize_uri_path=False,  # "." and "//" are key bytes in S3
            signed_body_value=payload_hash,
            signed_body_header_type=crt_auth.AwsSignedBodyHeaderType.X_AMZ_CONTENT_SHA_256,
        )
        request = crt_http.HttpRequest(method, target, crt_http.HttpHeaders(list(headers.items())))
        # The signer trims header values in place; only the headers it adds are taken, so
        # what goes on the wire is the caller's (the lake canonicalises the same way).
        signed = crt_auth.aws_sign_request(request, config).result()
        return {name.lower(): value for name, value in signed.headers if name.lower() in SIGNING_HEADERS}


class BotocoreSigner:
    """botocore's S3SigV4Auth behind the same interface, at a given ``now``."""

    def __init__(self, access_key: str, secret_key: str, region: str) -> None:
        self._credentials = Credentials(access_key, secret_key)
        self._region = region

    def sign(
        self, method: str, target: str, headers: Mapping[str, str], payload_hash: str, now: datetime
    ) -> dict[str, str]:
        request = AWSRequest(method=method, url="http://" + headers["host"] + target, headers=dict(headers))
        _FixedS3SigV4Auth(self._credentials, self._region, payload_hash, now).add_auth(request)
        return {name.lower(): value for name, value in request.headers.items() if name.lower() in SIGNING_HEADERS}


class _FixedS3SigV4Auth(S3SigV4Auth):  # type: ignore[misc]  # botocore is untyped
    """S3SigV4Auth with the payload hash and the time given, not derived: botocore 1.43's
    ``add_auth`` reads the clock and hashes the body itself; this is its body with those two
    inputs replaced (tests/unit/test_lake_signing.py fails if botocore's steps change)."""

    def __init__(self, credentials: Credentials, region: str, payload_hash: str, now: datetime) -> None:
        super().__init__(credentials, "s3", region)
        self._payload_hash = payload_hash
        self._now = now

    def payload(self, request: AWSRequest) -> str:
        return self._payload_hash

    def add_auth(self, request: AWSRequest) -> None:
        request.context["timestamp"] = self._now.astimezone(UTC).strftime(SIGV4_TIMESTAMP)
        self._modify_request_before_signing(request)
        string_to_sign = self.string_to_sign(request, self.canonical_request(request))
        self._inject_signature_to_request(request, self.signature(string_to_sign, request))
