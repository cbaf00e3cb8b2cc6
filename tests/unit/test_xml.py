"""XML rendering and request-body parsing, on both sides: what the gateway renders S3Lake reads
back, and what S3Lake sends the gateway parses (the shapes are shared, cachetier.lake.xmlshapes)."""

from datetime import datetime, timezone

import pytest
from defusedxml import ElementTree as ET

from cachetier.errors import NoSuchKey
from cachetier.errors import InvalidRange, MalformedXML, NotModified, Unimplemented
from cachetier.lake import (
    DeleteOutcome, ListEntry, ListPage, ListQuery, PartInfo, PartsPage, UploadInfo, UploadsPage, UploadsQuery,
)
from cachetier.lake import xmlshapes
from cachetier.lake.s3 import xml as lakexml
from gateway.s3 import xml
from gateway.s3.errors import render, response_headers

T = datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=timezone.utc)
NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


def test_error_document():
    doc = ET.fromstring(render(NoSuchKey(resource="/b/<k>"), "REQ1"))
    assert doc.tag == "Error"
    assert doc.findtext("Code") == "NoSuchKey"
    assert doc.findtext("Resource") == "/b/<k>"
    assert doc.findtext("RequestId") == "REQ1"


def test_error_headers_come_from_the_error_fields():
    assert response_headers(InvalidRange(size=5)) == {"Content-Range": "bytes */5"}
    assert response_headers(InvalidRange()) == {}
    assert response_headers(NotModified(etag='"e"', last_modified=T)) == {
        "ETag": '"e"', "Last-Modified": "Fri, 02 Jan 2026 03:04:05 GMT"}
    assert response_headers(NoSuchKey()) == {}


def test_list_v2_url_encoding_and_escaping():
    page = ListPage(entries=[ListEntry("a b+&<c>", 3, '"e"', T)], common_prefixes=["p/"], is_truncated=True,
                    next_continuation_token="tok")
    body = xml.list_objects("bkt", ListQuery(v2=True, delimiter="/", max_keys=2), page, url_encode=True, owner=None)
    doc = ET.fromstring(body)
    assert doc.findtext(f"{NS}Contents/{NS}Key") == "a%20b%2B%26%3Cc%3E"
    assert doc.findtext(f"{NS}KeyCount") == "2"
    assert doc.findtext(f"{NS}NextContinuationToken") == "tok"
    assert doc.findtext(f"{NS}Contents/{NS}LastModified") == "2026-01-02T03:04:05.678Z"
    body = xml.list_objects("bkt", ListQuery(v2=True), page, url_encode=False, owner=None)
    assert ET.fromstring(body).findtext(f"{NS}Contents/{NS}Key") == "a b+&<c>"


def test_parse_complete():
    body = b"""<CompleteMultipartUpload xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
      <Part><PartNumber>1</PartNumber><ETag>"a"</ETag></Part>
      <Part><ETag>"b"</ETag><PartNumber>2</PartNumber></Part></CompleteMultipartUpload>"""
    assert xml.parse_complete_multipart(body) == [(1, '"a"'), (2, '"b"')]


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"<CompleteMultipartUpload>",
        b"<Other/>",
        b"<CompleteMultipartUpload></CompleteMultipartUpload>",
        b"<CompleteMultipartUpload><Part><PartNumber>x</PartNumber><ETag>e</ETag></Part></CompleteMultipartUpload>",
        b'<!DOCTYPE x [<!ENTITY a "aaaa">]><CompleteMultipartUpload>&a;</CompleteMultipartUpload>',
    ],
)
def test_malformed_complete(body):
    with pytest.raises(MalformedXML):
        xml.parse_complete_multipart(body)


@pytest.mark.parametrize("named", [
    "<VersionId>3sL4kqtJlcpXroDTDmJ</VersionId>", "<ETag>\"abc\"</ETag>", "<Size>5</Size>",
    "<LastModifiedTime>2026-01-01T00:00:00Z</LastModifiedTime>",
])
def test_a_delete_of_a_version_or_with_a_condition_is_not_implemented_not_a_plain_delete(named: str) -> None:
    body = f'<Delete xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Object><Key>a</Key>{named}</Object></Delete>'
    with pytest.raises(Unimplemented):
        xml.parse_delete(body.encode())
    assert xml.parse_delete(b"<Delete><Object><Key>a</Key><VersionId>null</VersionId></Object></Delete>") == (["a"], False)


def test_parse_delete():
    keys, quiet = xml.parse_delete(b"<Delete><Quiet>true</Quiet><Object><Key>a</Key></Object>"
                                   b"<Object><Key>b &amp; c</Key></Object></Delete>")
    assert keys == ["a", "b & c"] and quiet
    with pytest.raises(MalformedXML):
        xml.parse_delete(b"<Delete><Object><Nope/></Object></Delete>")


def test_control_characters_are_character_references():
    assert xmlshapes.escape("a&b<c>\r\t") == "a&amp;b&lt;c&gt;&#13;&#9;"
    doc = ET.fromstring(xml.list_buckets([("a\rb", T)], "t"))
    assert doc.findtext(f"{NS}Buckets/{NS}Bucket/{NS}Name") == "a\rb"  # a literal CR would read as LF


def test_what_the_gateway_renders_s3lake_reads_back():
    entries = [ListEntry("a b+&<c>\r", 3, '"e"', T), ListEntry("ü", 0, '"f"', T, "GLACIER")]
    page = ListPage(entries=entries, common_prefixes=["p q/"], is_truncated=True, next_marker="p q/")
    query = ListQuery(delimiter="/", max_keys=2)
    assert lakexml.parse_list_objects(xml.list_objects("b", query, page, url_encode=True, owner="t"), False) == page
    parts = PartsPage(parts=[PartInfo(1, '"x"', 5, T)], is_truncated=True, next_part_number_marker=1, max_parts=1)
    assert lakexml.parse_list_parts(xml.list_parts("b", "k", "u", parts, "t")) == parts
    uploads = UploadsPage(uploads=[UploadInfo("k&", "u1", T)], common_prefixes=[], is_truncated=False)
    body = xml.list_uploads("b", UploadsQuery(), uploads, "t", url_encode=True)
    assert lakexml.parse_list_uploads(body) == uploads
    outcomes = [DeleteOutcome("a"), DeleteOutcome("b", "AccessDenied", "no")]
    assert lakexml.parse_delete_result(xml.delete_result(outcomes, quiet=False)) == outcomes


def test_what_s3lake_sends_the_gateway_parses():
    keys = ["a&b<c>\r", "x"]
    assert xml.parse_delete(xmlshapes.delete_request(keys)) == (keys, False)
    assert xml.parse_complete_multipart(xmlshapes.complete_request([(1, '"a"'), (2, '"b"')])) == [(1, '"a"'), (2, '"b"')]
    assert xml.parse_create_bucket(xmlshapes.create_bucket_request("eu-west-1")) == "eu-west-1"
