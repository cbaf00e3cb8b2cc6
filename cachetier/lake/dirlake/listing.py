"""S3 listing semantics for DirLake: ListObjects v1/v2 and ListMultipartUploads paging, over any
source that yields keys in S3 order. Pure (no files, no sqlite), so it is tested on its own.

S3 lists keys in UTF-8 binary order. Python compares ``str`` by code point and sqlite's BINARY
collation compares UTF-8 bytes; for valid UTF-8 (keys are checked to be) all three orders agree.

Rules kept here, as AWS and Ceph RGW answer them:

- A key under ``prefix`` whose rest contains ``delimiter`` rolls up into a common prefix (up to
  and including the first delimiter); a common prefix counts once toward ``max_keys``.
- Listing resumes after a marker (v1 ``marker``, v2 ``continuation_token`` or ``start_after``).
  When the marker lies inside a common prefix (it *is* the prefix when it came from NextMarker),
  every key under that prefix is skipped, so a prefix is never returned twice across pages.
- ``max_keys`` is capped at 1000; 0 gives an empty, untruncated page.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Iterator

from cachetier.errors import InvalidArgument
from cachetier.lake import ListEntry, ListPage, ListQuery, UploadInfo, UploadsPage, UploadsQuery

MAX_KEYS = 1000

# scan(lower, inclusive, limit): up to ``limit`` entries with key >= lower (> lower when not
# inclusive), in key order.
Scan = Callable[[str, bool, int], list[ListEntry]]


def prefix_end(prefix: str) -> str | None:
    """The least string greater than every string starting with ``prefix`` (None: none is).

    Bumping the last code point works because code point order is UTF-8 byte order; the
    surrogate block is skipped since it cannot appear in a valid key."""
    chars = list(prefix)
    while chars:
        point = ord(chars.pop())
        if point < 0x10FFFF:
            point += 1
            if 0xD800 <= point <= 0xDFFF:
                point = 0xE000
            return "".join(chars) + chr(point)
    return None


def common_prefix(key: str, prefix: str, delimiter: str) -> str | None:
    """The common prefix ``key`` rolls up into, or None when it is listed as itself."""
    if not delimiter:
        return None
    cut = key.find(delimiter, len(prefix))
    if cut < 0:
        return None
    return key[: cut + len(delimiter)]


def encode_token(position: str) -> str:
    """A v2 continuation token: opaque to clients, the last key or prefix returned."""
    return base64.urlsafe_b64encode(position.encode("utf-8")).decode("ascii")


def decode_token(token: str) -> str:
    try:
        if not token:
            raise ValueError("empty token")
        return base64.b64decode(token, altchars=b"-_", validate=True).decode("utf-8")
    except (ValueError, binascii.Error) as exc:
        raise InvalidArgument("The continuation token provided is incorrect") from exc


def _start(prefix: str, delimiter: str, after: str) -> tuple[str, bool] | None:
    """Where the scan starts: (lower bound, inclusive), or None when nothing can follow."""
    if not after or after < prefix:
        return prefix, True
    skipped = common_prefix(after, prefix, delimiter) if after.startswith(prefix) else None
    if skipped is None:
        return after, False
    end = prefix_end(skipped)
    return None if end is None else (end, True)


def _walk(scan: Scan, query: ListQuery, after: str, batch: int) -> Iterator[tuple[str, ListEntry | None]]:
    """Listing items in order: (key, entry) or (common prefix, None). Each common prefix makes
    the scan jump past every key under it, so a prefix costs one small query, not one per key."""
    prefix, delimiter = query.prefix, query.delimiter
    start = _start(prefix, delimiter, after)
    if start is None:
        return
    lower, inclusive = start
    size = batch
    while True:
        rows = scan(lower, inclusive, size)
        for row in rows:
            if not row.key.startswith(prefix):
                return
            rolled = common_prefix(row.key, prefix, delimiter)
            if rolled is None:
                yield row.key, row
                continue
            yield rolled, None
            end = prefix_end(rolled)
            if end is None:
                return
            # after a jump, fetch little: the next row may well roll up and jump again
            lower, inclusive, size = end, True, min(batch, 16)
            break
        else:
            if len(rows) < size:
                return
            lower, inclusive, size = rows[-1].key, False, min(batch, size * 4)


def list_objects_page(scan: Scan, query: ListQuery) -> ListPage:
    """One ListObjects (v1) or ListObjectsV2 page, from an ordered ``scan`` of a bucket."""
    if query.max_keys < 0:
        raise InvalidArgument("max-keys cannot be negative")
    max_keys = min(query.max_keys, MAX_KEYS)
    if query.v2 and query.continuation_token is not None:
        after = decode_token(query.continuation_token)  # takes precedence over start_after
    else:
        after = query.start_after if query.v2 else query.marker
    if max_keys == 0:
        return ListPage(entries=[], common_prefixes=[], is_truncated=False)
    items: list[tuple[str, ListEntry | None]] = []
    for item in _walk(scan, query, after, max_keys + 1):
        items.append(item)
        if len(items) > max_keys:  # one more than asked says the listing is truncated
            break
    truncated = len(items) > max_keys
    items = items[:max_keys]
    entries = [entry for _, entry in items if entry is not None]
    prefixes = [name for name, entry in items if entry is None]
    if not truncated:
        return ListPage(entries=entries, common_prefixes=prefixes, is_truncated=False)
    last = items[-1][0]
    if query.v2:
        return ListPage(entries, prefixes, True, next_continuation_token=encode_token(last))
    return ListPage(entries, prefixes, True, next_marker=last)


def _after_marker(upload: UploadInfo, query: UploadsQuery) -> bool:
    if not query.key_marker:
        return True
    if query.upload_id_marker:  # S3 ignores upload-id-marker without key-marker
        return (upload.key, upload.upload_id) > (query.key_marker, query.upload_id_marker)
    return upload.key > query.key_marker


def list_uploads_page(uploads: list[UploadInfo], query: UploadsQuery) -> UploadsPage:
    """One ListMultipartUploads page. ``uploads`` must be sorted by (key, upload_id); DirLake's
    upload ids start with their creation time, so that is S3's order (key, then initiated)."""
    if query.max_uploads < 0:
        raise InvalidArgument("max-uploads cannot be negative")
    limit = min(query.max_uploads, MAX_KEYS)
    if limit == 0:
        return UploadsPage(uploads=[], common_prefixes=[], is_truncated=False)
    items: list[tuple[str, UploadInfo | None]] = []
    for upload in uploads:
        if not upload.key.startswith(query.prefix) or not _after_marker(upload, query):
            continue
        rolled = common_prefix(upload.key, query.prefix, query.delimiter)
        if rolled is None:
            items.append((upload.key, upload))
        elif (not query.key_marker or rolled > query.key_marker) and (not items or items[-1][0] != rolled):
            items.append((rolled, None))
        if len(items) > limit:
            break
    truncated = len(items) > limit
    items = items[:limit]
    page_uploads = [u for _, u in items if u is not None]
    prefixes = [name for name, u in items if u is None]
    if not truncated:
        return UploadsPage(uploads=page_uploads, common_prefixes=prefixes, is_truncated=False)
    name, last = items[-1]
    return UploadsPage(
        page_uploads,
        prefixes,
        True,
        next_key_marker=name,
        next_upload_id_marker=last.upload_id if last is not None else None,
    )
