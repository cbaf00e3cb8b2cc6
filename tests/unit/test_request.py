"""Request parsing: bucket/key from path or host, and the operation a request names."""

import pytest

from cachetier.errors import MethodNotAllowed, Unimplemented
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


def test_post_to_service_not_allowed():
    with pytest.raises(MethodNotAllowed):
        from_scope(scope("POST", b"/"), SUFFIXES)


def test_unimplemented_renders_as_s3_not_implemented():
    assert Unimplemented().code == "NotImplemented" and Unimplemented().status == 501
