"""Bad input gets the right S3 error, never a crash or a leak, and nothing reaches the lake.

A gateway with two tenants runs in front of the real RGW; the RGW client (the lake's own
keys) checks afterwards that nothing was written. Path-traversal keys run on DirLake.
"""

from __future__ import annotations

import base64
import hashlib
import socket
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from unittest import mock

import httpx2
import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError
from defusedxml import ElementTree as ET

from harness.endpoints import ALICE, S3Endpoint, Target, Tenant, empty_and_delete_bucket, unique_bucket_name
from harness.gateway import Gateway

BOB = Tenant("bob", "AKIDBOB0000000000002", "bob-secret-0123456789", buckets=("bob-*",))


def _gateway(tmp: Path, lake: S3Endpoint | str) -> Iterator[Gateway]:
    gw = Gateway(lake, tenants=(ALICE, BOB), env={}, workdir=tmp)
    gw.start()
    try:
        yield gw
    finally:
        gw.stop()


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory, rgw_target: Target) -> Iterator[Gateway]:
    yield from _gateway(tmp_path_factory.mktemp("bad-input"), rgw_target.endpoint)


@pytest.fixture(scope="module")
def dir_gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Gateway, Path]]:
    root = tmp_path_factory.mktemp("jail") / "lake"
    for gw in _gateway(tmp_path_factory.mktemp("bad-input-dir"), f"dir:{root}"):
        yield gw, root


def _target(gw: Gateway, tenant: Tenant = ALICE) -> Target:
    return gw.target("gw", "rgw", tenant)


@pytest.fixture
def lake_bucket(gw: Gateway, rgw_target: Target) -> Iterator[str]:
    name = unique_bucket_name("bad")
    rgw = rgw_target.client()
    rgw.create_bucket(Bucket=name)
    yield name
    empty_and_delete_bucket(rgw, name)


def _keys(rgw_target: Target, bucket: str) -> list[str]:
    return [o["Key"] for o in rgw_target.client().list_objects_v2(Bucket=bucket).get("Contents", [])]


def _uploads(rgw_target: Target, bucket: str) -> list[str]:
    return [u["Key"] for u in rgw_target.client().list_multipart_uploads(Bucket=bucket).get("Uploads", [])]


def _code(exc: pytest.ExceptionInfo[ClientError]) -> tuple[str, int]:
    err = exc.value.response
    return err["Error"]["Code"], err["ResponseMetadata"]["HTTPStatusCode"]


class _PayloadAuth(S3SigV4Auth):  # type: ignore[misc]  # botocore is untyped
    """botocore's S3 SigV4 signer, signing a payload hash the test chooses."""

    def __init__(self, credentials: Credentials, payload_hash: str | None) -> None:
        super().__init__(credentials, "s3", "us-east-1")
        self._payload_hash = payload_hash

    def payload(self, request: AWSRequest) -> str:
        return self._payload_hash or hashlib.sha256(request.body or b"").hexdigest()


def _signed(method: str, url: str, tenant: Tenant = ALICE, headers: dict[str, str] | None = None,
            body: bytes = b"", payload_hash: str | None = None) -> httpx2.Request:
    """A request signed by botocore's signer (the client side of SigV4), with ``payload_hash``
    as its signed x-amz-content-sha256 (botocore would otherwise put the body's digest there:
    over http it hashes every payload)."""
    req = AWSRequest(method=method, url=url, data=body, headers=dict(headers or {}))
    _PayloadAuth(Credentials(tenant.access_key, tenant.secret_key), payload_hash).add_auth(req)
    return httpx2.Request(method, url, headers=dict(req.headers.items()), content=body)


def _send(req: httpx2.Request) -> httpx2.Response:
    with httpx2.Client(timeout=30) as client:
        return client.send(req)


def _error(resp: httpx2.Response) -> tuple[str, int]:
    doc = ET.fromstring(resp.content)
    assert doc.findtext("RequestId") == resp.headers["x-amz-request-id"]
    return doc.findtext("Code"), resp.status_code


def test_wrong_secret(gw: Gateway, lake_bucket: str, rgw_target: Target) -> None:
    s3 = _target(gw).client(secret_key="not-the-secret", retries=False)
    with pytest.raises(ClientError) as exc:
        s3.put_object(Bucket=lake_bucket, Key="k", Body=b"x")
    assert _code(exc) == ("SignatureDoesNotMatch", 403)
    assert _keys(rgw_target, lake_bucket) == []


def test_unknown_access_key(gw: Gateway, lake_bucket: str) -> None:
    s3 = _target(gw).client(access_key="AKIDNOBODY0000000000", retries=False)
    with pytest.raises(ClientError) as exc:
        s3.list_objects_v2(Bucket=lake_bucket)
    assert _code(exc) == ("InvalidAccessKeyId", 403)


def test_unsigned_request_is_denied(gw: Gateway, lake_bucket: str) -> None:
    resp = httpx2.get(f"{gw.url}/{lake_bucket}")
    assert _error(resp) == ("AccessDenied", 403)


def test_expired_presigned_url(gw: Gateway, lake_bucket: str, rgw_target: Target) -> None:
    rgw_target.client().put_object(Bucket=lake_bucket, Key="k", Body=b"secret bytes")
    s3 = _target(gw).client()
    url = s3.generate_presigned_url("get_object", Params={"Bucket": lake_bucket, "Key": "k"}, ExpiresIn=60)
    assert httpx2.get(url).content == b"secret bytes"
    expired = s3.generate_presigned_url("get_object", Params={"Bucket": lake_bucket, "Key": "k"}, ExpiresIn=1)
    time.sleep(2.1)
    resp = httpx2.get(expired)
    assert _error(resp) == ("AccessDenied", 403)
    assert b"secret bytes" not in resp.content


def test_skewed_clock(gw: Gateway, lake_bucket: str, rgw_target: Target) -> None:
    past = datetime.now(timezone.utc) - timedelta(minutes=20)
    with mock.patch("botocore.auth.get_current_datetime", return_value=past.replace(tzinfo=None)):
        req = _signed("PUT", f"{gw.url}/{lake_bucket}/k", body=b"x")
    assert _error(_send(req)) == ("RequestTimeTooSkewed", 403)
    assert _keys(rgw_target, lake_bucket) == []


def test_bucket_outside_allow_list(gw: Gateway, lake_bucket: str, rgw_target: Target) -> None:
    bob = _target(gw, BOB).client(retries=False)
    for call in (
        lambda: bob.put_object(Bucket=lake_bucket, Key="k", Body=b"x"),
        lambda: bob.list_objects_v2(Bucket=lake_bucket),
        lambda: bob.copy_object(Bucket="bob-mine", Key="k", CopySource={"Bucket": lake_bucket, "Key": "k"}),
    ):
        with pytest.raises(ClientError) as exc:
            call()
        assert _code(exc) == ("AccessDenied", 403)
    assert lake_bucket not in [b["Name"] for b in bob.list_buckets()["Buckets"]]
    assert lake_bucket in [b["Name"] for b in _target(gw).client().list_buckets()["Buckets"]]
    assert _keys(rgw_target, lake_bucket) == []


@pytest.mark.parametrize("name", ["Upper-Case", "ab", "-leading", "a..b", "192.168.1.1", "x" * 64, "under_score"])
def test_invalid_bucket_name(gw: Gateway, name: str) -> None:
    with pytest.raises(ClientError) as exc:
        _target(gw).client(retries=False).create_bucket(Bucket=name)
    assert _code(exc) == ("InvalidBucketName", 400)


def test_unsatisfiable_range(gw: Gateway, lake_bucket: str, rgw_target: Target) -> None:
    rgw_target.client().put_object(Bucket=lake_bucket, Key="k", Body=b"0123456789")
    with pytest.raises(ClientError) as exc:
        _target(gw).client().get_object(Bucket=lake_bucket, Key="k", Range="bytes=10-20")
    assert _code(exc) == ("InvalidRange", 416)


@pytest.mark.parametrize(
    "body",
    [b"not xml", b"<CompleteMultipartUpload/>", b"<CompleteMultipartUpload><Part><ETag>x</ETag></Part></CompleteMultipartUpload>",
     b'<!DOCTYPE d [<!ENTITY e "x">]><CompleteMultipartUpload>&e;</CompleteMultipartUpload>'],
)
def test_malformed_complete_multipart(gw: Gateway, lake_bucket: str, rgw_target: Target, body: bytes) -> None:
    s3 = _target(gw).client()
    upload = s3.create_multipart_upload(Bucket=lake_bucket, Key="mp")["UploadId"]
    s3.upload_part(Bucket=lake_bucket, Key="mp", UploadId=upload, PartNumber=1, Body=b"p" * 100)
    req = _signed("POST", f"{gw.url}/{lake_bucket}/mp?uploadId={upload}", body=body)
    assert _error(_send(req)) == ("MalformedXML", 400)
    assert _keys(rgw_target, lake_bucket) == []
    s3.abort_multipart_upload(Bucket=lake_bucket, Key="mp", UploadId=upload)


def test_malformed_delete_objects(gw: Gateway, lake_bucket: str, rgw_target: Target) -> None:
    rgw_target.client().put_object(Bucket=lake_bucket, Key="keep", Body=b"x")
    body = b"<Delete><Object><Key>keep</Key></Object>"  # not closed
    md5 = base64.b64encode(hashlib.md5(body).digest()).decode()
    req = _signed("POST", f"{gw.url}/{lake_bucket}?delete", body=body, headers={"Content-MD5": md5})
    assert _error(_send(req)) == ("MalformedXML", 400)
    assert _keys(rgw_target, lake_bucket) == ["keep"]


def test_content_md5_mismatch(gw: Gateway, lake_bucket: str, rgw_target: Target) -> None:
    wrong = base64.b64encode(hashlib.md5(b"other").digest()).decode()
    with pytest.raises(ClientError) as exc:
        _target(gw).client(retries=False).put_object(Bucket=lake_bucket, Key="k", Body=b"x" * 5000, ContentMD5=wrong)
    assert _code(exc) == ("BadDigest", 400)
    assert _keys(rgw_target, lake_bucket) == []


def test_signed_payload_hash_mismatch(gw: Gateway, lake_bucket: str, rgw_target: Target) -> None:
    signed = _signed("PUT", f"{gw.url}/{lake_bucket}/k", body=b"abd")
    req = httpx2.Request("PUT", signed.url, headers=signed.headers, content=b"abc")  # same length, other bytes
    assert _error(_send(req)) == ("XAmzContentSHA256Mismatch", 400)
    assert _keys(rgw_target, lake_bucket) == []


def test_chunked_body_shorter_than_declared(gw: Gateway, lake_bucket: str, rgw_target: Target) -> None:
    body = b"5\r\nhello\r\n0\r\n\r\n"
    req = _signed("PUT", f"{gw.url}/{lake_bucket}/k", body=body, payload_hash="STREAMING-UNSIGNED-PAYLOAD-TRAILER",
                  headers={"Content-Encoding": "aws-chunked", "x-amz-decoded-content-length": "10"})
    assert _error(_send(req)) == ("IncompleteBody", 400)
    assert _keys(rgw_target, lake_bucket) == []


def test_client_gone_before_content_length(gw: Gateway, lake_bucket: str, rgw_target: Target) -> None:
    """The client promises 1 MiB, sends half and closes: nothing reaches the lake, and the
    gateway keeps serving."""
    req = _signed("PUT", f"{gw.url}/{lake_bucket}/short", payload_hash="UNSIGNED-PAYLOAD",
                  headers={"Content-Length": str(1 << 20)})
    head = f"PUT /{lake_bucket}/short HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in req.headers.items()) + "\r\n"
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as sock:
        sock.sendall(head.encode() + b"x" * (1 << 19))
        sock.shutdown(socket.SHUT_WR)
        try:
            reply = sock.recv(65536)
        except OSError:
            reply = b""
    assert b" 200 " not in reply.split(b"\r\n", 1)[0]
    for _ in range(50):  # the abort propagates to the lake asynchronously
        if not _uploads(rgw_target, lake_bucket) and _keys(rgw_target, lake_bucket) == []:
            break
        time.sleep(0.1)
    assert _keys(rgw_target, lake_bucket) == []
    assert _target(gw).client().list_objects_v2(Bucket=lake_bucket)["KeyCount"] == 0


def test_oversized_headers(gw: Gateway, lake_bucket: str, rgw_target: Target) -> None:
    req = _signed("PUT", f"{gw.url}/{lake_bucket}/k", body=b"x", headers={"x-amz-meta-big": "v" * 20000})
    code, status = _error(_send(req))
    assert (code, status) == ("RequestHeaderSectionTooLarge", 400)
    assert _keys(rgw_target, lake_bucket) == []


@pytest.mark.parametrize("key", ["../../../../etc/lakegate-escape", "/abs/lakegate-escape", "a/../../lakegate-escape", "..", "%2e%2e/x"])
def test_path_traversal_keys_stay_inside_the_lake(dir_gw: tuple[Gateway, Path], key: str) -> None:
    gw, root = dir_gw
    s3 = _target(gw).client()
    bucket = unique_bucket_name("jail")
    s3.create_bucket(Bucket=bucket)
    assert gw.cache_dir is not None
    cache = gw.cache_dir

    near = root.parent.parent  # the session's temp folder: other tests' gateways may still run there

    def outside() -> set[Path]:  # everything near the lake but the lake and the block caches
        # (any node's cache folder: a worker of another test's node publishes its counts there
        # every second, a tmp file renamed into place, which no key of this lake can reach)
        return {p for p in near.rglob("*")
                if not {root, cache} & {p, *p.parents} and "cache" not in p.relative_to(near).parts}

    before = outside()
    s3.put_object(Bucket=bucket, Key=key, Body=b"jailed")
    assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == b"jailed"
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == [key]
    after = outside()
    assert after - before == set()
    assert not Path("/etc/lakegate-escape").exists() and not Path("/abs").exists()
    empty_and_delete_bucket(s3, bucket)


def test_key_with_nul_is_rejected(dir_gw: tuple[Gateway, Path]) -> None:
    gw, _ = dir_gw
    bucket = unique_bucket_name("nul")
    s3 = _target(gw).client()
    s3.create_bucket(Bucket=bucket)
    req = _signed("PUT", f"{gw.url}/{bucket}/a%00b", body=b"x")
    resp = _send(req)
    assert resp.status_code == 400
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0
    s3.delete_bucket(Bucket=bucket)


def test_no_secrets_in_the_log(gw: Gateway, rgw_target: Target) -> None:
    # the gateway's own output, not the test harness's "$ command line" record
    log = "\n".join(line for line in gw.log_path.read_text(errors="replace").splitlines() if not line.startswith("$ "))
    for secret in (rgw_target.secret_key, ALICE.secret_key, BOB.secret_key, "X-Amz-Signature"):
        assert secret not in log


def test_empty_body_with_a_wrong_checksum(gw: Gateway, lake_bucket: str, rgw_target: Target) -> None:
    """An empty body has no last byte to hold back: its checks must run before the lake hears
    of the PUT at all (RGW 16 ignores x-amz-checksum-* itself, so it would store the object)."""
    req = _signed("PUT", f"{gw.url}/{lake_bucket}/empty", body=b"", headers={"x-amz-checksum-crc32": "AAAAAQ=="})
    assert _error(_send(req)) == ("BadDigest", 400)
    assert _keys(rgw_target, lake_bucket) == []
