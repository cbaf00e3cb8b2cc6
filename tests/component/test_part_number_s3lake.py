"""partNumber through ``S3Lake``, end to end, over a lake that implements it: this machine's
Ceph RGW 16.2 ignores partNumber, so the S3 lake here is another `lakegate serve` (over a folder
lake), which answers HEAD/GET ``?partNumber=`` as AWS S3 does. The outer gateway must find each
part's place from the lake's HEAD and serve its bytes through its cache, twice (the second time
from L1)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from conformance import multipart_etag
from harness.endpoints import ALICE
from harness.gateway import Gateway

MiB = 1 << 20
PARTS = [b"a" * (5 * MiB + 1), b"b" * (5 * MiB), b"c" * 1000]


def client(gateway: Gateway) -> Any:
    return boto3.client("s3", endpoint_url=gateway.url, region_name="us-east-1",
                        aws_access_key_id=ALICE.access_key, aws_secret_access_key=ALICE.secret_key)


def test_each_part_is_read_through_an_s3_lake_that_has_parts(tmp_path: Path) -> None:
    with Gateway(f"dir:{tmp_path / 'lake'}", tenants=(ALICE,), workdir=tmp_path / "inner") as inner, \
            Gateway(inner.endpoint(ALICE), tenants=(ALICE,), workdir=tmp_path / "outer") as outer:
        s3 = client(outer)
        s3.create_bucket(Bucket="parts")
        upload_id = s3.create_multipart_upload(Bucket="parts", Key="mp")["UploadId"]
        done = [{"PartNumber": n, "ETag": s3.upload_part(
            Bucket="parts", Key="mp", UploadId=upload_id, PartNumber=n, Body=data)["ETag"]}
            for n, data in enumerate(PARTS, 1)]
        s3.complete_multipart_upload(
            Bucket="parts", Key="mp", UploadId=upload_id, MultipartUpload={"Parts": done})
        total = sum(map(len, PARTS))
        for _ in range(2):
            first = 0
            for number, data in enumerate(PARTS, 1):
                got = s3.get_object(Bucket="parts", Key="mp", PartNumber=number)
                last = first + len(data) - 1
                assert got["Body"].read() == data
                assert (got["ContentRange"], got["PartsCount"]) == (f"bytes {first}-{last}/{total}", 3)
                assert got["ETag"] == multipart_etag(PARTS)
                first = last + 1
        assert (outer.admin_stats()["cache"]["per_tenant"]["alice"]).get("hits", 0) > 0  # the second pass hit L1
        with pytest.raises(ClientError) as raised:
            s3.get_object(Bucket="parts", Key="mp", PartNumber=4)
        assert raised.value.response["Error"]["Code"] == "InvalidPartNumber"
