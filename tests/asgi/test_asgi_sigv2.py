"""SigV2 through the whole front end: boto3's DEFAULT ``generate_presigned_url`` (SigV2 for s3
with botocore 1.43 when no signature version is configured) fetched through the in-process
bridge, a SigV2-signed client's round trip in both addressing styles, and ``LAKEGATE_SIGV2=false``."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSPreparedRequest, AWSResponse
from botocore.config import Config
from botocore.exceptions import ClientError
from harness.endpoints import REGION
from inprocess import AsgiBridge


def default_client(target: Any, **options: Any) -> Any:
    """boto3 on its defaults (no signature version chosen), reaching the app in-process."""
    client = boto3.client(
        "s3",
        endpoint_url=target.endpoint_url,
        region_name=REGION,
        aws_access_key_id=target.access_key,
        aws_secret_access_key=target.secret_key,
        **options,
    )
    assert target.bridge is not None
    client.meta.events.register_last("before-send.s3", target.bridge.send)
    return client


def fetch(bridge: AsgiBridge, url: str, method: str = "GET", body: bytes | None = None) -> AWSResponse:
    """What curl would get for ``url``: a bare request, no headers but a body's length."""
    headers = {} if body is None else {"Content-Length": str(len(body))}
    return bridge.send(AWSPreparedRequest(method, url, headers, body, True))


def error_code(response: AWSResponse) -> str:
    return ET.fromstring(response.content).findtext("Code") or ""


@pytest.fixture
def presigner(target: Any) -> Any:
    return default_client(target)


def test_default_presigned_get_is_sigv2_and_returns_the_object(
    target: Any, s3: Any, bucket: str, presigner: Any
) -> None:
    key = "dir/a b+c%é.txt"
    s3.put_object(Bucket=bucket, Key=key, Body=b"hello sigv2")
    url = presigner.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=300)
    assert "AWSAccessKeyId=" in url and "Signature=" in url and "X-Amz-Signature" not in url
    assert target.bridge is not None
    response = fetch(target.bridge, url)
    assert (response.status_code, response.content) == (200, b"hello sigv2")
    head = presigner.generate_presigned_url("head_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=300)
    assert fetch(target.bridge, head, "HEAD").status_code == 200


def test_expired_and_tampered_presigned_urls(target: Any, s3: Any, bucket: str, presigner: Any) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    s3.put_object(Bucket=bucket, Key="other", Body=b"y")
    assert target.bridge is not None
    expired = presigner.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "k"}, ExpiresIn=-10)
    response = fetch(target.bridge, expired)
    assert (response.status_code, error_code(response)) == (403, "AccessDenied")
    assert b"Request has expired" in response.content
    url = presigner.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "k"}, ExpiresIn=300)
    for tampered in (url.replace(f"/{bucket}/k?", f"/{bucket}/other?"), url.replace("Expires=", "Expires=1")):
        response = fetch(target.bridge, tampered)
        assert (response.status_code, error_code(response)) == (403, "SignatureDoesNotMatch")
    unknown = url.replace(f"AWSAccessKeyId={target.access_key}", "AWSAccessKeyId=NOBODY")
    response = fetch(target.bridge, unknown)
    assert (response.status_code, error_code(response)) == (403, "InvalidAccessKeyId")
    malformed = url.split("&Expires=")[0] + "&Expires=tomorrow"
    response = fetch(target.bridge, malformed)
    assert (response.status_code, error_code(response)) == (403, "AccessDenied")


def test_presigned_put(target: Any, s3: Any, bucket: str, presigner: Any) -> None:
    url = presigner.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "up"}, ExpiresIn=300)
    assert target.bridge is not None
    response = fetch(target.bridge, url, "PUT", b"uploaded")
    assert response.status_code == 200
    assert s3.get_object(Bucket=bucket, Key="up")["Body"].read() == b"uploaded"


@pytest.mark.parametrize("style", ["path", "virtual"])
def test_sigv2_header_auth_round_trip(target: Any, bucket: str, style: str) -> None:
    client = default_client(target, config=Config(signature_version="s3", s3={"addressing_style": style}))
    key = "a b/ü+%"
    client.put_object(Bucket=bucket, Key=key, Body=b"v2 body", Metadata={"note": "two  spaces"})
    got = client.get_object(Bucket=bucket, Key=key, ResponseContentType="text/x-v2")
    assert got["Body"].read() == b"v2 body" and got["ContentType"] == "text/x-v2"
    assert got["Metadata"] == {"note": "two  spaces"}
    assert [o["Key"] for o in client.list_objects_v2(Bucket=bucket)["Contents"]] == [key]
    upload = client.create_multipart_upload(Bucket=bucket, Key="mp")["UploadId"]
    part = client.upload_part(Bucket=bucket, Key="mp", UploadId=upload, PartNumber=1, Body=b"p1")
    parts = {"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]}
    client.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=upload, MultipartUpload=parts)
    client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": key}, {"Key": "mp"}]})
    assert client.list_objects_v2(Bucket=bucket)["KeyCount"] == 0


def test_sigv2_header_with_a_wrong_secret(target: Any, bucket: str) -> None:
    client = boto3.client(
        "s3", endpoint_url=target.endpoint_url, region_name=REGION, aws_access_key_id=target.access_key,
        aws_secret_access_key="not-the-secret", config=Config(signature_version="s3", retries={"max_attempts": 1}),
    )  # fmt: skip
    assert target.bridge is not None
    client.meta.events.register_last("before-send.s3", target.bridge.send)
    with pytest.raises(ClientError) as caught:
        client.head_bucket(Bucket=bucket)
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403


def test_sigv2_switched_off(sigv2_off_target: Any) -> None:
    sigv2_off = sigv2_off_target
    sigv4 = sigv2_off.client()
    sigv4.create_bucket(Bucket="off")
    sigv4.put_object(Bucket="off", Key="k", Body=b"x")
    assert sigv2_off.bridge is not None
    url = default_client(sigv2_off).generate_presigned_url("get_object", Params={"Bucket": "off", "Key": "k"})
    response = fetch(sigv2_off.bridge, url)
    assert (response.status_code, error_code(response)) == (400, "InvalidRequest")
    assert b"Please use AWS4-HMAC-SHA256." in response.content
    header = default_client(sigv2_off, config=Config(signature_version="s3", retries={"max_attempts": 1}))
    with pytest.raises(ClientError) as caught:
        header.get_object(Bucket="off", Key="k")
    assert caught.value.response["Error"]["Code"] == "InvalidRequest"
    assert sigv4.get_object(Bucket="off", Key="k")["Body"].read() == b"x"  # SigV4 unaffected
