"""The flusher: the node's background write-back traffic (issue 14), lake flushes and the
asynchronous copies beyond K, scheduled by ``policies.replication`` (Pfimbi: tenant weights,
then replica position; yielding to foreground lake reads; held back above T).

One worker of the node runs it (the flush lock in the journal's directory; the kernel releases
it with the worker, and another worker takes over within a second). Each round:

1. The journal's local versions are read, and each is given to whoever should flush it: the
   first of its holders that is live (the receiving node while it lives; after it, the next
   holder that still has the version, asked by ``journal/held``). A node that restarted holds
   its versions unverified: before flushing one it waits a grace period (so that the live
   nodes re-announce the pending writes they hold, which drops what was superseded meanwhile),
   asks the other holders, and, when none holds it any more, asks the lake: a version the lake
   has (same ETag) or has something newer than (Last-Modified later) is dropped, not flushed
   again (the later Last-Modified only in a cluster: see ``_wanted``). So a returning node does
   not flush what another copy already flushed.
2. The scheduler picks which jobs start within the slots it allows.
3. A flush writes the version (paced to a tenth of the node's lake budget while tenants' lake
   reads wait: ``Pacer``) (a PUT, a multipart upload with the same part sizes so that the
   lake's ETag is the one the client got, or a DELETE); each piece first checks the version is
   still wanted, and a flush of a superseded version stops mid-body (nothing reaches the lake).
   After the lake's answer: the journal drops the version, and every live node is told
   (``flushed``) and drops its copy or notice.
4. A lake that does not answer marks the lake down (new writes past T + delta then get
   SlowDown) and the version is retried after ``flush_retry``.

On SIGTERM (``gateway.drain``), ``drain`` waits, bounded, for the writes this node received
(position 0) to be flushed by these rounds; what is left stays journaled for the next start.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from cachetier.cluster.client import PeerUnavailable
from cachetier.errors import NoSuchKey, S3Error, ServiceUnavailable
from cachetier.lake import Lake, ObjectAttributes
from cachetier.write.journal import Journal, Version
from cachetier.cluster.ring import Member
from cachetier.write.messages import Copy, Held, HeldQuery, Notice
from cachetier.write.peers import Superseded, file_pieces
from cachetier.write.writeback import WriteBack
from policies import replication

log = logging.getLogger("lakegate.write")

Pace = Callable[[int], Awaitable[None]]  # awaited before each piece sent to the lake
Ident = tuple[str, str, int]
_RECHECK_S = 30.0  # how often a copy held for a live receiver is checked with it
_VERIFY_PER_ROUND = 16  # unverified versions (after a restart) checked in one round
_PERMANENT_RETRY = 60.0  # a version the lake refuses for good (its bucket gone) is tried again this late


def ident(version: Version) -> Ident:
    return (version.bucket, version.key, version.seq)


async def write_to_lake(lake: Lake, journal: Journal, version: Version,
                        still: Callable[[], Awaitable[bool]] | None = None, pace: Pace | None = None) -> None:
    """``version`` written to the lake: a DELETE, a PUT, or (assembled from parts) a multipart
    upload with the same part boundaries, aborted if anything fails."""
    bucket, key = version.bucket, version.key
    if version.kind == "delete":
        try:
            await lake.delete_object(bucket, key)
        except NoSuchKey:
            pass
        return
    attrs = ObjectAttributes(version.content_type, dict(version.metadata), dict(version.headers))

    def body(first: int, last: int) -> AsyncIterator[bytes]:
        return _paced(file_pieces(journal, version, first, last, still), pace)

    if not version.part_sizes:
        await lake.put_object(bucket, key, body(0, version.size - 1), version.size, attrs)
        return
    upload_id = await lake.create_multipart_upload(bucket, key, attrs)
    try:
        await asyncio.to_thread(journal.record_lake_upload, upload_id, bucket, key)
        parts, offset = [], 0
        for number, size in enumerate(version.part_sizes, 1):
            result = await lake.upload_part(bucket, key, upload_id, number, body(offset, offset + size - 1), size)
            parts.append((number, result.etag))
            offset += size
        await lake.complete_multipart_upload(bucket, key, upload_id, parts)
    except BaseException:
        try:
            await lake.abort_multipart_upload(bucket, key, upload_id)
        except Exception as exc:  # noqa: BLE001 - the first failure is the one to report
            log.info("abort of the flush upload of %s/%s failed: %s", bucket, key, exc)
        raise


async def _paced(pieces: AsyncIterator[bytes], pace: Pace | None) -> AsyncIterator[bytes]:
    try:
        async for piece in pieces:
            if pace is not None:
                await pace(len(piece))
            yield piece
    finally:
        await pieces.aclose()  # type: ignore[attr-defined]


class Pacer:
    """The background's bytes to the lake at ``policies.replication.background_rate``: each
    piece leaves once the rate allows (shared by all of the flusher's transfers), unpaced while
    no foreground read waits. ``budget()``: the node's lake budget now (bytes/s)."""

    def __init__(self, waiting: Callable[[], bool], budget: Callable[[], float], dirty: Callable[[], int],
                 thresholds: replication.Thresholds, clock: Callable[[], float] = time.monotonic) -> None:
        self.waiting = waiting
        self.budget = budget
        self.dirty = dirty
        self.thresholds = thresholds
        self.clock = clock
        self._next = 0.0

    async def __call__(self, amount: int) -> None:
        rate = replication.background_rate(self.budget(), self.waiting(), self.dirty(), self.thresholds)
        now = self.clock()
        if not math.isfinite(rate) or rate <= 0:
            self._next = now
            return
        start = max(now, self._next)
        self._next = start + amount / rate
        if start > now:
            await asyncio.sleep(start - now)


class Flusher:
    """The node's background write-back work, driven by ``run`` (in the worker that holds the
    flush lock). ``foreground_waiting`` says whether foreground lake reads wait for the lake
    link (the fairness budget's queue); ``budget`` is the node's lake budget (bytes/s), which
    paces the flushes while they wait (``Pacer``). Per tenant, the scheduler orders the
    background work by the tenants' weights."""

    def __init__(self, writeback: WriteBack, *, budget: Callable[[], float] = lambda: math.inf,
                 foreground_waiting: Callable[[], bool] = lambda: False,
                 tenant_weights: Callable[[], dict[str, float]] = dict, grace: float = 5.0,
                 interval: float = 0.2) -> None:
        self.wb = writeback
        self.journal = writeback.journal
        self.dirty = 0
        self.pace = Pacer(foreground_waiting, budget, lambda: self.dirty, writeback.config.thresholds)
        self.foreground_waiting = foreground_waiting
        self.tenant_weights = tenant_weights
        self.grace = grace
        self.interval = interval
        self.started = time.monotonic()
        self.state = replication.SchedulerState.initial()
        self.running: dict[str, tuple[replication.Job, asyncio.Task[None]]] = {}
        self.retry_at: dict[Ident, float] = {}
        self.copied: set[tuple[Ident, str]] = set()
        self.checked: dict[Ident, float] = {}  # copies held for a live receiver: when last checked with it  # async copies made (or given up) by this process
        self.live: set[str] = set()
        self.pid = os.getpid()
        self.active = False  # this process holds the flush lock and runs the rounds

    async def run(self) -> None:
        log.info("this worker (pid %d) runs the node's write-back flusher", self.pid)
        self.active = True
        self.wb.lake_health.set(True)  # what a previous run found is not known now: the next flush tells
        try:
            while True:
                try:
                    await self.round()
                except Exception:  # noqa: BLE001 - the loop outlives one bad round
                    log.exception("write-back flush round failed")
                self.wb.wake.clear()
                try:
                    await asyncio.wait_for(self.wb.wake.wait(), self.interval)
                except TimeoutError:
                    pass
        finally:
            for _, task in list(self.running.values()):
                task.cancel()
            await asyncio.gather(*(t for _, t in self.running.values()), return_exceptions=True)

    async def drain(self, timeout: float, poll: float = 0.2) -> int:
        """SIGTERM's flush: wait at most ``timeout`` seconds until the writes this node received
        (journal position 0) are in the lake, the rounds flushing them meanwhile; how many are
        left (they stay journaled, and copied to peers: flushed after the next start). In a
        worker that does not run the flusher, at once: the one that does drains the journal."""
        if not self.active:
            return 0
        deadline = time.monotonic() + timeout
        while True:
            left = await asyncio.to_thread(self._received_pending)
            if not left or time.monotonic() >= deadline:
                break
            self.wb.wake.set()
            await asyncio.sleep(poll)
        if left:
            log.warning("write-back: %d writes not flushed within %g s: kept in the journal for the next start",
                        left, timeout)
        else:
            log.info("write-back: every write this node received is in the lake")
        return left

    def _received_pending(self) -> int:
        return sum(1 for v in self.journal.local_versions() if v.position == 0)

    async def round(self) -> None:
        """One scheduling round (tests call it directly)."""
        versions = await asyncio.to_thread(self.journal.local_versions)
        if not versions:
            self.wb.lake_health.set(True)  # nothing waits on the lake: "down" means a flush is failing
        versions = await self._verified(versions)
        versions = await self._still_wanted_copies(versions)
        await self._announce(versions)
        jobs = {job.id: (job, version) for version in versions for job in await self._jobs(version)}
        queued = tuple(job for job_id, (job, _) in jobs.items() if job_id not in self.running)
        dirty = self.dirty = sum(v.size for v in versions)
        config = self.wb.config
        if config.flow_control:
            slots = replication.background_slots(config.flush_concurrency, self.foreground_waiting(), dirty,
                                                 config.thresholds)
            weights, positions = self.tenant_weights(), config.position_weights
        else:  # the ablation: all the slots, equal weights, nothing yields
            slots, weights, positions = config.flush_concurrency, {}, (1.0,)
        snapshot = replication.Snapshot(queued, tuple(job for job, _ in self.running.values()), slots, weights,
                                        positions)
        decision = replication.decide(self.state, snapshot, time.monotonic())
        self.state = decision.state
        for job in decision.start:
            version = jobs[job.id][1]
            work = self._flush(version) if job.position == 1 else self._async_copy(version, job.id.split("|")[-1])
            task = asyncio.create_task(work)
            self.running[job.id] = (job, task)
            task.add_done_callback(functools.partial(self._done, job.id))

    def _done(self, job_id: str, _: object = None) -> None:
        self.running.pop(job_id, None)
        self.wb.wake.set()

    async def _jobs(self, version: Version) -> list[replication.Job]:
        now = time.monotonic()
        vid = ident(version)
        jobs = []
        order = f"{version.bucket}/{version.key}"
        if self.retry_at.get(vid, 0.0) <= now and await self._mine(version):
            jobs.append(replication.Job(f"flush|{vid}", version.tenant, 1, max(version.size, 1), order, version.seq))
        if version.position == 0 and version.verified:
            for place, holder in enumerate(version.holders[version.sync:], start=2):
                if (vid, holder) not in self.copied:
                    jobs.append(replication.Job(f"copy|{vid}|{holder}", version.tenant, place, max(version.size, 1),
                                                f"copy|{order}|{holder}", version.seq))
        return jobs

    async def _verified(self, versions: list[Version]) -> list[Version]:
        """The versions to work on: a restarted node's unverified ones wait the grace period,
        then each is checked once (``_wanted``: dropped when flushed or overtaken meanwhile,
        kept otherwise), at most ``_VERIFY_PER_ROUND`` a round."""
        if all(v.verified for v in versions):
            return versions
        if time.monotonic() - self.started < self.grace:
            return [v for v in versions if v.verified]
        kept, checked = [], 0
        for version in versions:
            if not version.verified:
                if checked >= _VERIFY_PER_ROUND:
                    continue
                checked += 1
                if not await self._wanted(version):
                    log.info("write-back: %s/%s@%d was flushed or overtaken while this node was away: dropped",
                             *ident(version))
                    await self._drop(version)
                    continue
                await asyncio.to_thread(self.journal.mark_verified, version)
            kept.append(version)
        return kept

    async def _still_wanted_copies(self, versions: list[Version]) -> list[Version]:
        """Copies this node holds for a live receiving node are checked with it now and then
        (``_RECHECK_S``, at most ``_VERIFY_PER_ROUND`` a round): a copy whose receiver flushed it
        or saw it overtaken while a notice did not reach this node (a network blip) is dropped,
        so it can never reach the lake after a newer write."""
        cluster = self.wb.cluster
        if cluster is None:
            return versions
        live = {m.id: m for m in cluster.membership.peers()}
        now = time.monotonic()
        kept, checked = [], 0
        for version in versions:
            receiver = live.get(version.holders[0]) if version.holders else None
            vid = ident(version)
            if (version.position > 0 and receiver is not None and checked < _VERIFY_PER_ROUND
                    and now - self.checked.setdefault(vid, now) >= _RECHECK_S):
                checked += 1
                self.checked[vid] = now
                if (await self._holds(receiver, version)).gone:
                    await asyncio.to_thread(self.journal.remove, *vid)
                    self.checked.pop(vid, None)
                    continue
            kept.append(version)
        if len(self.checked) > 4 * len(versions) + 1024:  # forget the versions gone meanwhile
            present = {ident(v) for v in versions}
            self.checked = {vid: at for vid, at in self.checked.items() if vid in present}
        return kept

    async def _mine(self, version: Version) -> bool:
        """Whether this node flushes ``version``: the receiving node does while it lives (no
        question asked: it holds the version until it flushes it); after it, the first live
        holder that still has it."""
        cluster = self.wb.cluster
        if cluster is None or version.position <= 0:
            return version.position >= 0
        live = {m.id: m for m in cluster.membership.peers()}
        if version.holders[0] in live:
            return False
        for holder in version.holders[1 : version.position]:
            member = live.get(holder)
            if member is not None and (await self._holds(member, version)).held:
                return False
        return True

    async def _holds(self, member: Member, version: Version) -> Held:
        peers = self.wb.peers
        if peers is None:
            return Held(False)
        try:
            return await peers.journal_held(member, HeldQuery(*ident(version)), self.wb.config.notice_timeout)
        except PeerUnavailable:
            return Held(False)

    async def _wanted(self, version: Version) -> bool:
        """An unverified version (this node restarted): kept while another live holder holds
        it; dropped when one flushed it or saw it overtaken (its journal's gone mark); with no
        holder that knows, dropped when the lake has it (same ETag) or, in a cluster, something
        written after it (Last-Modified, to the second), kept (and flushed) otherwise.

        "Overtaken" is asked only in a cluster, where a newer write of the key may have been
        flushed by another node while this one was away. Alone, every newer write went through
        this journal and dropped the version before its 200, so a version still here is the
        newest: a later Last-Modified is the flush of an older version that the lake finished
        (and stamped) after this version was acknowledged, and the version must still be flushed."""
        cluster = self.wb.cluster
        if cluster is not None:
            live = {m.id: m for m in cluster.membership.peers()}
            answers = [await self._holds(live[h], version) for h in version.holders if h != self.wb.me and h in live]
            if any(a.gone for a in answers):
                return False
            if any(a.held for a in answers):
                return True
        try:
            info = await self.wb.lake.head_object(version.bucket, version.key)
        except NoSuchKey:
            return version.kind == "put"
        if info.etag == version.etag and version.kind == "put":
            return False
        return cluster is None or info.last_modified.timestamp() <= version.last_modified

    async def _still(self, version: Version) -> bool:
        versions = await asyncio.to_thread(self.journal.versions, version.bucket, version.key)
        return any(v.seq == version.seq and v.local for v in versions)

    async def _flush(self, version: Version) -> None:
        vid = ident(version)
        try:
            if not await asyncio.to_thread(self.journal.begin_flush, version, self.pid):
                return  # a newer write removed it
            pace = self.pace if self.wb.config.flow_control else None
            try:
                await write_to_lake(self.wb.lake, self.journal, version, lambda: self._still(version), pace)
            finally:
                await asyncio.to_thread(self.journal.end_flush, version)
        except Superseded:
            self.wb.counters["flush_aborted"] += 1
            return
        except FileNotFoundError as exc:  # the body: a newer write dropped the version after _still
            if not await self._still(version):
                self.wb.counters["flush_aborted"] += 1
                return
            self._failed(version, exc, self.wb.config.flush_retry, down=False)
            return
        except (ServiceUnavailable, ConnectionError, OSError) as exc:
            self._failed(version, exc, self.wb.config.flush_retry, down=True)
            return
        except S3Error as exc:
            down = exc.status >= 500
            self._failed(version, exc, self.wb.config.flush_retry if down else _PERMANENT_RETRY, down=down)
            return
        self.wb.lake_health.set(True)
        self.retry_at.pop(vid, None)
        self.wb.counters["flushed"] += 1
        self.wb.counters["flushed_bytes"] += version.size
        await self._drop(version)

    async def _drop(self, version: Version) -> None:
        await self.wb.flushed(*ident(version))
        await self.wb.notify_all(Notice("flushed", *ident(version)))

    def _failed(self, version: Version, exc: Exception, retry: float, *, down: bool) -> None:
        self.wb.counters["flush_failures"] += 1
        if down:
            self.wb.lake_health.set(False)
        self.retry_at[ident(version)] = time.monotonic() + retry
        log.warning("write-back flush of %s/%s failed (%s); retrying in %.0f s", version.bucket, version.key, exc,
                    retry)

    async def _async_copy(self, version: Version, holder: str) -> None:
        vid = ident(version)
        self.copied.add((vid, holder))  # tried once: the copies beyond K are best effort
        cluster, peers = self.wb.cluster, self.wb.peers
        member = next((m for m in cluster.membership.peers() if m.id == holder), None) if cluster else None
        dirty = await asyncio.to_thread(self.journal.dirty_bytes)
        held_back = self.wb.config.flow_control and not replication.async_copy_allowed(
            dirty, version.size, self.wb.config.thresholds)
        if member is None or peers is None or held_back:
            self.wb.counters["async_copy_failures"] += 1
            return
        md5 = version.md5
        try:
            body = file_pieces(self.journal, version, 0, version.size - 1, lambda: self._still(version))
            await peers.journal_copy(member, Copy(version, md5), body, self.wb.config.copy_timeout)
            self.wb.counters["async_copies"] += 1
        except (PeerUnavailable, Superseded, FileNotFoundError) as exc:
            self.wb.counters["async_copy_failures"] += 1
            log.info("background copy of %s/%s to %s failed: %s", version.bucket, version.key, holder, exc)

    async def _announce(self, versions: list[Version]) -> None:
        """Tell each node that became live the pending versions this node holds (a restarted
        node dropped its notices, and may have missed newer writes)."""
        cluster = self.wb.cluster
        if cluster is None:
            return
        live = {m.id for m in cluster.membership.peers()}
        new = live - self.live
        self.live = live
        if not new or not versions:
            return
        skip = live - new
        for version in versions:
            if version.verified and await self._still(version):  # not flushed meanwhile
                await self.wb.notify_all(Notice.pending(version), skip=skip)
