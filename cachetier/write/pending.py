"""``PendingLake``: the lake as a client of this node sees it while write-back writes are pending
(issue 14's read-your-writes): a ``Lake`` over the real one in which the journal's pending
versions, this node's and the notices of other nodes', come first.

- HEAD and GET of a key with a pending version answer that version (a pending delete: NoSuchKey);
  its bytes come from this node's journal, or from a holder's over the peer API. A holder that
  no longer has it (flushed meanwhile) sends the read to the lake, and the notice is dropped.
- LIST merges: within the key range the lake's page covers, pending puts are added (or replace
  the lake's entry) and pending deletes removed; a pending key under a delimiter adds its common
  prefix. A merged page longer than max-keys is cut, and its continuation token is lakegate's
  own (``lgwb.`` then the last key, base64): a following request is sent on to the lake as
  start-after that key. Deliberately different from S3: a common prefix whose only keys are
  pending deletes may still be listed until they are flushed.
- ListMultipartUploads merges this node's write-back uploads (``merged_uploads``) the same way:
  within the lake page's range, at most max-uploads entries, lakegate's markers.
- Everything else is the lake's.

The read path sits on this layer, so blocks of a pending version are cached under its ETag as
any other; the lake gets the same bytes and, for a PUT, the same ETag (for a multipart object,
the same part boundaries, so the same ``-N`` ETag). Last-Modified is the acknowledgement time
until the flush, then the lake's.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from typing import Any, cast

from cachetier.cluster.client import PeerUnavailable
from cachetier.errors import InvalidArgument, InvalidPartNumber, NoSuchKey, ServiceUnavailable
from cachetier.lake import (
    Lake, ListEntry, ListPage, ListQuery, ObjectInfo, ObjectPart, ObjectStream, UploadInfo, UploadsPage, UploadsQuery,
    prepend,
)
from cachetier.lake.conditions import Conditions
from cachetier.lake.dirlake.listing import MAX_KEYS, common_prefix
from cachetier.lake.ranges import ByteRange
from cachetier.write.journal import Version
from cachetier.write.messages import BodyRequest
from cachetier.write.peers import NotHeld, file_pieces
from cachetier.write.writeback import WriteBack

TOKEN_PREFIX = "lgwb."


def info_of(version: Version) -> ObjectInfo:
    return ObjectInfo(
        version.bucket, version.key, version.size, version.etag,
        datetime.fromtimestamp(int(version.last_modified), tz=timezone.utc),
        version.content_type or "binary/octet-stream", dict(version.metadata), dict(version.headers),
    )


class PendingLake:
    """``lake`` with ``writeback``'s pending versions first (see the module docstring)."""

    def __init__(self, lake: Lake, writeback: WriteBack) -> None:
        self.lake = lake
        self.wb = writeback

    async def _pending(self, bucket: str, key: str) -> Version | None:
        version = await self.wb.latest(bucket, key)
        if version is not None and version.kind == "delete":
            raise NoSuchKey()
        return version

    async def head_object(self, bucket: str, key: str) -> ObjectInfo:
        version = await self._pending(bucket, key)
        if version is None:
            return await self.lake.head_object(bucket, key)
        return info_of(version)

    async def object_part(self, bucket: str, key: str, part_number: int) -> ObjectPart:
        version = await self._pending(bucket, key)
        if version is None:
            return await self.lake.object_part(bucket, key, part_number)
        info = info_of(version)
        sizes = version.part_sizes or (version.size,)
        if part_number > len(sizes):
            raise InvalidPartNumber()
        first = sum(sizes[: part_number - 1])
        count = len(version.part_sizes) if version.part_sizes else None
        return ObjectPart(info, part_number, first, first + sizes[part_number - 1] - 1, count)

    async def get_object(
        self, bucket: str, key: str, range: ByteRange | None = None, conditions: Conditions = Conditions()
    ) -> ObjectStream:
        version = await self._pending(bucket, key)
        if version is None:
            return await self.lake.get_object(bucket, key, range, conditions)
        info = info_of(version)
        conditions.check(info.etag, info.last_modified)
        span = range.resolve(info.size) if range is not None else None
        first, last = span if span is not None else (0, info.size - 1)
        try:
            body = await self._body(version, first, last)
        except NotHeld:  # flushed meanwhile: the lake has it now (or something newer)
            await asyncio.to_thread(self.wb.journal.remove, bucket, key, version.seq)
            return await self.lake.get_object(bucket, key, range, conditions)
        return ObjectStream(info, span, body)

    async def _body(self, version: Version, first: int, last: int) -> AsyncIterator[bytes]:
        """The bytes, from this node's journal or a holder's, the first piece already in (so a
        holder that lost it is NotHeld here, before any byte went out)."""
        if last < first:
            return _pieces([])
        if version.local:
            pieces = file_pieces(self.wb.journal, version, first, last)
            try:
                return prepend(await anext(pieces), pieces)
            except FileNotFoundError:
                raise NotHeld() from None
        return await self._remote(version, first, last)

    async def _remote(self, version: Version, first: int, last: int) -> AsyncIterator[bytes]:
        cluster, peers = self.wb.cluster, self.wb.peers
        live = {m.id: m for m in cluster.membership.peers()} if cluster is not None else {}
        request = BodyRequest(version.bucket, version.key, version.seq, first, last)
        missing = 0
        for holder in version.holders:
            member = live.get(holder)
            if member is None or peers is None:
                continue
            pieces = aiter(peers.journal_body(member, request))
            try:
                return prepend(await anext(pieces), pieces)
            except NotHeld:
                missing += 1
            except PeerUnavailable:
                continue
        if missing:
            raise NotHeld()
        raise ServiceUnavailable("No node holding this pending write answers; try again shortly.")

    async def list_objects(self, bucket: str, query: ListQuery) -> ListPage:
        after, query = _lake_query(query)
        pending = await asyncio.to_thread(self.wb.journal.listing, bucket, query.prefix, after, MAX_KEYS + 1)
        page = await self.lake.list_objects(bucket, query)
        if not pending:
            return page
        return _merged(page, pending, query, after)

    def __getattr__(self, name: str) -> Any:  # every other call is the lake's own
        return getattr(self.lake, name)


def pending_lake(lake: Lake, writeback: WriteBack) -> Lake:
    """``lake`` with pending writes first (a ``Lake`` by delegation)."""
    return cast(Lake, PendingLake(lake, writeback))


def _lake_query(query: ListQuery) -> tuple[str, ListQuery]:
    """Where the page starts, and the query the lake gets (lakegate's token as start-after)."""
    token = query.continuation_token
    if query.v2 and token is not None and token.startswith(TOKEN_PREFIX):
        try:
            after = base64.urlsafe_b64decode(token[len(TOKEN_PREFIX):].encode()).decode("utf-8")
        except (ValueError, binascii.Error):
            raise InvalidArgument("The continuation token provided is incorrect") from None
        return after, ListQuery(query.prefix, query.delimiter, query.max_keys, True, start_after=after)
    if query.v2:
        return (query.start_after if token is None else ""), query
    return query.marker, query


def _merged(page: ListPage, pending: list[Version], query: ListQuery, after: str) -> ListPage:
    """The lake's ``page`` with the pending versions of its key range merged in."""
    ceiling = _page_end(page) if page.is_truncated else None
    entries = {e.key: e for e in page.entries}
    prefixes = set(page.common_prefixes)
    for version in pending:
        if version.key <= after or (ceiling is not None and version.key > ceiling):
            continue
        rolled = common_prefix(version.key, query.prefix, query.delimiter)
        if rolled is not None:
            if version.kind == "put" and rolled > after:
                prefixes.add(rolled)
        elif version.kind == "put":
            entries[version.key] = ListEntry(version.key, version.size, version.etag, info_of(version).last_modified)
        else:
            entries.pop(version.key, None)
    items: list[tuple[str, ListEntry | None]] = sorted(
        [(k, e) for k, e in entries.items()] + [(p, None) for p in prefixes], key=lambda item: item[0])
    limit = min(query.max_keys, MAX_KEYS)
    truncated = page.is_truncated or len(items) > limit
    if len(items) <= limit and not page.is_truncated:
        return ListPage([e for _, e in items if e is not None], [p for p, e in items if e is None], False)
    items = items[:limit]
    last = items[-1][0] if items else (ceiling or after)
    kept = [e for _, e in items if e is not None], [p for p, e in items if e is None]
    if query.v2:
        token = TOKEN_PREFIX + base64.urlsafe_b64encode(last.encode("utf-8")).decode("ascii")
        return ListPage(kept[0], kept[1], truncated, next_continuation_token=token)
    return ListPage(kept[0], kept[1], truncated, next_marker=last)


def merged_uploads(page: UploadsPage, pending: list[UploadInfo], query: UploadsQuery) -> UploadsPage:
    """The lake's ListMultipartUploads ``page`` with the journal's ``pending`` uploads merged in,
    paged as one listing of both: at most max-uploads entries (uploads and common prefixes) in
    (key, upload id) order; when the lake's page is truncated, none past its end (they come on a
    later page, after the markers of this one)."""
    limit = min(query.max_uploads, MAX_KEYS)
    if limit <= 0:
        return page
    end = (page.next_key_marker or "", page.next_upload_id_marker or "") if page.is_truncated else None
    items: dict[tuple[str, str], UploadInfo | None] = {(u.key, u.upload_id): u for u in page.uploads}
    items.update({(p, ""): None for p in page.common_prefixes})
    for upload in pending:
        if not upload.key.startswith(query.prefix) or not _after_marker(upload, query):
            continue
        rolled = common_prefix(upload.key, query.prefix, query.delimiter)
        if rolled is not None and query.key_marker and rolled <= query.key_marker:
            continue  # that prefix was listed on an earlier page
        at = (upload.key, upload.upload_id) if rolled is None else (rolled, "")
        if end is None or at <= end:
            items.setdefault(at, upload if rolled is None else None)
    ordered = sorted(items.items(), key=lambda item: item[0])
    shown = ordered[:limit]
    uploads = [u for _, u in shown if u is not None]
    prefixes = [prefix for (prefix, _), u in shown if u is None]
    if not shown:  # every upload of the lake's page was hidden
        return UploadsPage([], [], page.is_truncated, page.next_key_marker, page.next_upload_id_marker)
    if not (page.is_truncated or len(ordered) > limit):
        return UploadsPage(uploads, prefixes, False)
    (name, upload_id), last = shown[-1]
    return UploadsPage(uploads, prefixes, True, next_key_marker=name,
                       next_upload_id_marker=upload_id if last is not None else None)


def _after_marker(upload: UploadInfo, query: UploadsQuery) -> bool:
    """After the query's markers, as S3 reads them (upload-id-marker only with key-marker)."""
    if not query.key_marker:
        return True
    if query.upload_id_marker:
        return (upload.key, upload.upload_id) > (query.key_marker, query.upload_id_marker)
    return upload.key > query.key_marker


def _page_end(page: ListPage) -> str | None:
    """The last key or prefix a truncated lake page covers."""
    names = [e.key for e in page.entries] + list(page.common_prefixes)
    return max(names) if names else page.next_marker


async def _pieces(pieces: list[bytes]) -> AsyncIterator[bytes]:
    for piece in pieces:
        yield piece
