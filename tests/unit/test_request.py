"""Request parsing: bucket/key from path or host, the operation a request names, and the
Range and If-* headers read into the Lake interface's ByteRange and Conditions."""

from datetime import datetime, timezone

import pytest

from cachetier.errors import InvalidRange, MethodNotAllowed, Unimplemented
from cachetier.lake.conditions import Conditions
from cachetier.lake.ranges import ByteRange
from cachetier.lake.s3.headers import range_header
from gateway.s3.errors import response_headers
from gateway.s3.headers import byte_range, conditions
from gateway.s3.request import from_scope


def scope(method: str, raw_path: bytes, query: bytes = b"", host: str = "127.0.0.1:9000", headers=()):
    return {
        "type": "http",
        "method": method,
        "path": raw_path.decode(),
        "raw_path": raw_path,
        "query_string": query,
        "headers": [(b"host", host.encode()), *headers],
    }


SUFFIXES = ("localhost",)


@pytest.mark.parametrize(
    "method,path,query,headers,op",
    [
        ("GET", b"/", b"", (), "ListBuckets"),
        ("PUT", b"/b", b"", (), "CreateBucket"),
        ("HEAD", b"/b", b"", (), "HeadBucket"),
        ("DELETE", b"/b", b"", (), "DeleteBucket"),
        ("GET", b"/b", b"location", (), "GetBucketLocation"),
        ("GET", b"/b", b"uploads", (), "ListMultipartUploads"),
        ("GET", b"/b", b"list-type=2&prefix=a", (), "ListObjectsV2"),
        ("GET", b"/b/", b"prefix=a", (), "ListObjects"),
        ("POST", b"/b", b"delete", (), "DeleteObjects"),
        ("GET", b"/b/k", b"", (), "GetObject"),
        ("HEAD", b"/b/k", b"", (), "HeadObject"),
        ("PUT", b"/b/k", b"", (), "PutObject"),
        ("PUT", b"/b/k", b"", ((b"x-amz-copy-source", b"/s/k"),), "CopyObject"),
        ("PUT", b"/b/k", b"partNumber=1&uploadId=u", (), "UploadPart"),
        ("PUT", b"/b/k", b"partNumber=1&uploadId=u", ((b"x-amz-copy-source", b"/s/k"),), "UploadPartCopy"),
        ("POST", b"/b/k", b"uploads", (), "CreateMultipartUpload"),
        ("POST", b"/b/k", b"uploadId=u", (), "CompleteMultipartUpload"),
        ("DELETE", b"/b/k", b"uploadId=u", (), "AbortMultipartUpload"),
        ("GET", b"/b/k", b"uploadId=u", (), "ListParts"),
        ("DELETE", b"/b/k", b"", (), "DeleteObject"),
    ],
)
def test_operation(method, path, query, headers, op):
    assert from_scope(scope(method, path, query, headers=headers), SUFFIXES).operation == op


def test_keys_are_decoded_exactly():
    req = from_scope(scope("GET", b"/bkt/a%20b%2Bc+%25d%3De//f/%C3%BC"), SUFFIXES)
    assert req.bucket == "bkt"
    assert req.key == "a b+c+%d=e//f/ü"  # '+' in a path is a plus, not a space


def test_virtual_host_style():
    req = from_scope(scope("GET", b"/dir/key.txt", host="my-bucket.localhost:9000"), SUFFIXES)
    assert (req.bucket, req.key, req.operation) == ("my-bucket", "dir/key.txt", "GetObject")
    req = from_scope(scope("GET", b"/", b"list-type=2", host="my-bucket.localhost"), SUFFIXES)
    assert (req.bucket, req.key, req.operation) == ("my-bucket", "", "ListObjectsV2")


def test_unsupported_subresource_is_not_implemented():
    with pytest.raises(Unimplemented):
        from_scope(scope("GET", b"/b", b"acl"), SUFFIXES)


@pytest.mark.parametrize(("method", "path", "header", "value"), [
    ("PUT", b"/b/k", b"x-amz-server-side-encryption", b"AES256"),
    ("PUT", b"/b/k", b"x-amz-server-side-encryption", b"aws:kms"),
    ("PUT", b"/b/k", b"x-amz-server-side-encryption-aws-kms-key-id", b"key"),
    ("GET", b"/b/k", b"x-amz-server-side-encryption-customer-key", b"a2V5"),  # SSE-C read
    ("PUT", b"/b/k", b"x-amz-copy-source-server-side-encryption-customer-algorithm", b"AES256"),
    ("PUT", b"/b/k", b"x-amz-object-lock-mode", b"COMPLIANCE"),
    ("PUT", b"/b/k", b"x-amz-object-lock-legal-hold", b"ON"),
    ("PUT", b"/b/k", b"x-amz-tagging", b"team=etl"),
    ("PUT", b"/b", b"x-amz-bucket-object-lock-enabled", b"True"),
])
def test_a_header_asking_for_what_lakegate_lacks_is_not_implemented_not_dropped(method, path, header, value):
    with pytest.raises(Unimplemented) as refused:
        from_scope(scope(method, path, headers=[(header, value)]), SUFFIXES)
    assert refused.value.resource == header.decode()


def test_a_version_id_is_not_implemented_but_the_null_version_is_the_object() -> None:
    with pytest.raises(Unimplemented):
        from_scope(scope("GET", b"/b/k", b"versionId=3sL4kqtJlcpXroDTDmJ"), SUFFIXES)
    with pytest.raises(Unimplemented):
        from_scope(scope("DELETE", b"/b/k", b"versionId=3sL4kqtJlcpXroDTDmJ"), SUFFIXES)
    assert from_scope(scope("GET", b"/b/k", b"versionId=null"), SUFFIXES).operation == "GetObject"


def test_headers_near_the_refused_ones_pass():
    for header, value in [(b"x-amz-bucket-object-lock-enabled", b"false"), (b"x-amz-storage-class", b"STANDARD"),
                          (b"x-amz-acl", b"private"), (b"x-amz-meta-x-amz-tagging", b"a user's metadata")]:
        assert from_scope(scope("PUT", b"/b/k", headers=[(header, value)]), SUFFIXES).operation == "PutObject"


def test_post_to_service_not_allowed():
    with pytest.raises(MethodNotAllowed):
        from_scope(scope("POST", b"/"), SUFFIXES)


def test_unimplemented_renders_as_s3_not_implemented():
    assert Unimplemented().code == "NotImplemented" and Unimplemented().status == 501


@pytest.mark.parametrize(
    "header,size,expected",
    [
        ("bytes=0-9", 100, (0, 9)),
        ("bytes=90-200", 100, (90, 99)),
        ("bytes=10-", 100, (10, 99)),
        ("bytes=-10", 100, (90, 99)),
        ("bytes=-500", 100, (0, 99)),
        ("bytes=0-0", 1, (0, 0)),
    ],
)
def test_resolve(header, size, expected):
    assert byte_range(header).resolve(size) == expected


@pytest.mark.parametrize("header", [None, "", "items=0-1", "bytes=0-1,4-5", "bytes=5-1", "bytes=-", "bytes=a-b"])
def test_ignored_headers_mean_whole_object(header):
    assert byte_range(header) is None


@pytest.mark.parametrize("header,size", [("bytes=100-", 100), ("bytes=100-200", 100), ("bytes=-0", 100), ("bytes=0-", 0)])
def test_unsatisfiable(header, size):
    with pytest.raises(InvalidRange) as info:
        byte_range(header).resolve(size)
    assert info.value.status == 416
    assert response_headers(info.value)["Content-Range"] == f"bytes */{size}"


def test_conditions_from_headers_and_copy_source_headers():
    when = "Wed, 01 May 2024 12:00:00 GMT"
    parsed = datetime(2024, 5, 1, 12, tzinfo=timezone.utc)
    headers = {"if-match": '"a"', "if-modified-since": when, "x-amz-copy-source-if-none-match": '"b"',
               "x-amz-copy-source-if-unmodified-since": when, "if-unmodified-since": "not a date"}
    assert conditions(headers) == Conditions(if_match='"a"', if_modified_since=parsed)
    assert conditions(headers, "x-amz-copy-source-") == Conditions(if_none_match='"b"', if_unmodified_since=parsed)
    assert not conditions({})


@pytest.mark.parametrize("rng", [ByteRange(0, 9), ByteRange(10), ByteRange(None, suffix=5)])
def test_a_range_sent_to_the_lake_reads_back_the_same(rng):
    assert byte_range(range_header(rng)) == rng
