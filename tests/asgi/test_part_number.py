"""GetObject and HeadObject with ``PartNumber`` (``?partNumber=N``), as SDKs' multipart
downloads send them, against the app in-process over both lakes.

Here and not in tests/conformance.py: what Ceph RGW answers (which releases implement
partNumber on GET/HEAD, and with which error codes past the count) is not verified, and that
suite also runs against the RGW itself. The answers asserted are AWS S3's, as documented.
"""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError
from conformance import multipart_etag, status_of

MIB = 1 << 20
# three parts of different sizes, all but the last at least the 5 MiB minimum
PARTS = [b"a" * (5 * MIB + 1), b"b" * (5 * MIB), b"c" * 1000]


@pytest.fixture
def multipart(s3: Any, bucket: str) -> str:
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key="mp")["UploadId"]
    done = []
    for number, data in enumerate(PARTS, 1):
        etag = s3.upload_part(Bucket=bucket, Key="mp", UploadId=upload_id, PartNumber=number, Body=data)["ETag"]
        done.append({"PartNumber": number, "ETag": etag})
    s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=upload_id, MultipartUpload={"Parts": done})
    return "mp"


def error_of(call: Any, **kwargs: Any) -> tuple[int, str]:
    with pytest.raises(ClientError) as raised:
        call(**kwargs)
    response = raised.value.response
    return response["ResponseMetadata"]["HTTPStatusCode"], response["Error"]["Code"]


def test_each_part_of_a_multipart_object(s3: Any, bucket: str, multipart: str) -> None:
    total, first = sum(map(len, PARTS)), 0
    for number, data in enumerate(PARTS, 1):
        last = first + len(data) - 1
        got = s3.get_object(Bucket=bucket, Key=multipart, PartNumber=number)
        assert status_of(got) == 206 and got["Body"].read() == data
        assert (got["ContentRange"], got["ContentLength"]) == (f"bytes {first}-{last}/{total}", len(data))
        assert (got["PartsCount"], got["ETag"]) == (3, multipart_etag(PARTS))  # the object's ETag
        head = s3.head_object(Bucket=bucket, Key=multipart, PartNumber=number)
        assert status_of(head) == 206 and head["ContentRange"] == got["ContentRange"]
        assert (head["ContentLength"], head["PartsCount"]) == (len(data), 3)
        first = last + 1
    # an ordinary range read of the same bytes answers alike (the part is read as that range)
    ranged = s3.get_object(Bucket=bucket, Key=multipart, Range=f"bytes={len(PARTS[0])}-{len(PARTS[0]) + 9}")
    assert ranged["Body"].read() == b"b" * 10


def test_a_part_past_the_count_is_not_satisfiable(s3: Any, bucket: str, multipart: str) -> None:
    assert error_of(s3.get_object, Bucket=bucket, Key=multipart, PartNumber=4) == (416, "InvalidPartNumber")
    assert error_of(s3.head_object, Bucket=bucket, Key=multipart, PartNumber=4)[0] == 416


def test_part_one_of_a_single_part_object_is_the_whole_object(s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="one", Body=b"0123456789")
    got = s3.get_object(Bucket=bucket, Key="one", PartNumber=1)
    assert status_of(got) == 206 and got["Body"].read() == b"0123456789"
    assert got["ContentRange"] == "bytes 0-9/10" and "PartsCount" not in got
    head = s3.head_object(Bucket=bucket, Key="one", PartNumber=1)
    assert (status_of(head), head["ContentLength"], head["ContentRange"]) == (206, 10, "bytes 0-9/10")
    assert "PartsCount" not in head
    assert error_of(s3.get_object, Bucket=bucket, Key="one", PartNumber=2) == (416, "InvalidPartNumber")
    s3.put_object(Bucket=bucket, Key="empty", Body=b"")  # nothing to range over: served whole
    assert s3.get_object(Bucket=bucket, Key="empty", PartNumber=1)["Body"].read() == b""


def test_part_number_with_a_range_is_refused(s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="one", Body=b"0123456789")
    for call in (s3.get_object, s3.head_object):
        status, code = error_of(call, Bucket=bucket, Key="one", PartNumber=1, Range="bytes=0-1")
        assert status == 400 and code in ("InvalidRequest", "400")  # a HEAD's error has no body


@pytest.mark.parametrize("value", ["0", "10001", "abc", "-1", "1.5", ""])
def test_a_part_number_not_in_1_to_10000_is_an_invalid_argument(s3: Any, bucket: str, value: str) -> None:
    s3.put_object(Bucket=bucket, Key="one", Body=b"0123456789")

    def rewrite(request: Any, **_: Any) -> None:  # boto3 sends only integers; the wire can say more
        request.url = request.url.replace("partNumber=1", f"partNumber={value}")

    s3.meta.events.register("before-sign.s3.GetObject", rewrite)
    try:
        assert error_of(s3.get_object, Bucket=bucket, Key="one", PartNumber=1) == (400, "InvalidArgument")
    finally:
        s3.meta.events.unregister("before-sign.s3.GetObject", rewrite)


def test_part_reads_keep_their_conditions(s3: Any, bucket: str, multipart: str) -> None:
    etag = s3.head_object(Bucket=bucket, Key=multipart)["ETag"]
    assert error_of(s3.get_object, Bucket=bucket, Key=multipart, PartNumber=3, IfNoneMatch=etag)[0] == 304
    assert error_of(s3.get_object, Bucket=bucket, Key=multipart, PartNumber=3, IfMatch='"other"')[0] == 412
    assert s3.get_object(Bucket=bucket, Key=multipart, PartNumber=3, IfMatch=etag)["Body"].read() == PARTS[2]
