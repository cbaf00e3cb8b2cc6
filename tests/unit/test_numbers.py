"""gateway.s3.numbers: ASCII digits only, bounded, and header values without control characters;
and the readers built on it (Range, X-Amz-Expires, X-Amz-Date) refusing what int() would take."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from cachetier.errors import AccessDenied, InvalidArgument
from gateway.s3 import numbers
from gateway.s3.errors import AuthorizationQueryParametersError
from gateway.s3.headers import byte_range, http_date
from gateway.s3.sigv4 import SignedRequest, authenticate

NOT_NUMBERS = ["", "+1", "-1", " 1", "1 ", "1_000", "١", "²", "０", "0x1", "1.0", "1e3", "9" * 20, "9" * 5000]


@pytest.mark.parametrize("text", ["0", "7", "0042", "9" * 19])
def test_ascii_digits_up_to_nineteen_are_numbers(text: str) -> None:
    assert numbers.is_decimal(text)
    assert numbers.decimal(text, "n") == int(text)


@pytest.mark.parametrize("text", NOT_NUMBERS)
def test_anything_else_is_invalid_argument(text: str) -> None:
    assert not numbers.is_decimal(text)
    with pytest.raises(InvalidArgument, match="max-keys"):
        numbers.decimal(text, "max-keys")


def test_a_smaller_bound_is_honoured() -> None:
    assert numbers.is_decimal("10000", 5) and not numbers.is_decimal("100000", 5)


@pytest.mark.parametrize("text", ["ff", "0", "DEADbeef"])
def test_hexadecimal(text: str) -> None:
    assert numbers.is_hexadecimal(text, 16)


@pytest.mark.parametrize("text", ["", "0x1", "+f", "g", "١", "f" * 17])
def test_not_hexadecimal(text: str) -> None:
    assert not numbers.is_hexadecimal(text, 16)


@pytest.mark.parametrize("text", ["a\r\nb", "a\nb", "a\rb", "a\x00b", "a\x7fb", "\x1b[31m"])
def test_control_characters_cannot_be_echoed_into_a_header(text: str) -> None:
    assert numbers.has_control(text)
    with pytest.raises(InvalidArgument, match="response-content-type"):
        numbers.header_value(text, "response-content-type")


@pytest.mark.parametrize("text", ["text/html; charset=utf-8", "attachment;\tfilename=\"a b.txt\"", "é"])
def test_ordinary_text_is_echoed(text: str) -> None:
    assert numbers.header_value(text, "x") == text


@pytest.mark.parametrize("header", ["bytes=١-٢", "bytes=0-²", "bytes=0-" + "9" * 20, "bytes=-" + "9" * 5000,
                                    "bytes=" + "9" * 20 + "-", "bytes\u00a0=0-1"])
def test_a_range_with_numbers_int_would_take_is_ignored(header: str) -> None:
    assert byte_range(header) is None


def test_a_nineteen_digit_range_is_read() -> None:
    rng = byte_range("bytes=0-" + "9" * 19)
    assert rng is not None and rng.last == int("9" * 19)


def _presigned(expires: str, amz_date: str = "20260101T000000Z") -> SignedRequest:
    query = (
        "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AK%2F20260101%2Fus-east-1%2Fs3%2Faws4_request"
        f"&X-Amz-Date={amz_date}&X-Amz-Expires={expires}&X-Amz-SignedHeaders=host&X-Amz-Signature={'0' * 64}"
    )
    return SignedRequest("GET", b"/b/k", query.encode(), [("host", "localhost")])


@pytest.mark.parametrize("expires", ["%C2%B2", "%D9%A1", "%2B60", "60_0", "%2060", "9" * 30, "9" * 5000])
def test_presigned_expires_is_ascii_digits(expires: str) -> None:
    with pytest.raises(AuthorizationQueryParametersError):
        authenticate(_presigned(expires), lambda _: "secret", datetime(2026, 1, 1, tzinfo=UTC))


def test_presigned_date_is_ascii_digits() -> None:
    arabic = "%D9%A2%D9%A0%D9%A2%D9%A6%D9%A0%D9%A1%D9%A0%D9%A1T%D9%A0%D9%A0%D9%A0%D9%A0%D9%A0%D9%A0Z"
    with pytest.raises(AuthorizationQueryParametersError):
        authenticate(_presigned("60", arabic), lambda _: "secret", datetime(2026, 1, 1, tzinfo=UTC))


@pytest.mark.parametrize("value", ["Mon, 01 Jan 99999999999999999999999 00:00:00 GMT",
                                   "Mon, 99999999999999999999 Jan 2026 00:00:00 GMT",
                                   "Mon, 01 Jan 2026 00:00:00 +99999999999999999999"])
def test_an_http_date_with_a_huge_number_reads_as_absent(value: str) -> None:
    assert http_date(value) is None


def test_a_date_header_with_a_huge_year_is_access_denied_not_a_crash() -> None:
    headers = [
        ("host", "localhost"),
        ("date", "Mon, 01 Jan 99999999999999999999999 00:00:00 GMT"),
        ("x-amz-content-sha256", "UNSIGNED-PAYLOAD"),
        ("authorization", "AWS4-HMAC-SHA256 Credential=AK/20260101/us-east-1/s3/aws4_request, "
                          f"SignedHeaders=host, Signature={'0' * 64}"),
    ]
    with pytest.raises(AccessDenied):
        authenticate(SignedRequest("GET", b"/b/k", b"", headers), lambda _: "secret", datetime(2026, 1, 1, tzinfo=UTC))
