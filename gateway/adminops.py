"""Admin operations on the cache (issue 16): warm a prefix ahead of a job, drop a prefix or a
tenant, and show what is cached for a prefix. ``/_lakegate/admin/{warm,drop,cached}`` call these
(the admin credential is checked in ``gateway.app`` before any route); ``lakegate admin``
(``tools/admincli.py``) is their client.

**Warm.** A job lists ``bucket/prefix`` and reads each object through the node's own read path
(``CachedLake.get_object``), so its blocks land where a client's read would put them (L1 here; in
a cluster the L2 owners fill from the lake as for any read), and drops the bytes as they stream
(memory: one piece per object in flight). At most ``warm_concurrency`` objects are in flight.
Its lake reads pass through the lake fairness (``cachetier.fairness.lake``): with ``tenant=T``
they are charged to T, in T's turn at its weight (a job warming T's data spends T's share);
without, to ``WARM_TENANT``, as background work that also waits while any tenant's lake read
waits for the lake budget on any worker of the node (as write-back's flusher does), so a warm
never starves tenants' reads. The blocks a warm stores are held (for tenant-fair eviction) by the
tenant it is charged to, ``WARM_TENANT`` included, until a tenant's read claims them too.
Objects too large to cache are skipped (a read would bypass it).

A job runs in the worker that took the POST. Its state is a JSON file per job under
``CACHE_DIR/admin/warm/`` (written to a temp file and renamed: a reader sees a whole one), so
any worker answers its progress; a running job's file carries its worker's pid and is rewritten
at least every ``_BEAT`` seconds, so a job whose worker died (pid gone, or file stale) reads as
failed. A cancel from any worker is a ``ID.cancel`` file next to it, which the job polls.

**Drop.** The objects under ``bucket/prefix`` (a tenant: every bucket it may use, as the lake
lists them) leave this node: their blocks (every version the listing or the metadata cache
names) from L1 and L2, their metadata from every worker (``ReadPath.invalidate`` bumps the
shared write stamps), and, in a cluster, from every live peer (``wire.Invalidate``: the peer
forgets the metadata and drops the blocks of the versions it knew). The lake is only listed,
never written; the write-back journal is never touched (a pending version is still read from it).

**Cached.** Per tier, the blocks and bytes of the objects under a prefix held by this node's
stores (index lookups, no block read), with a bounded list of objects; at most ``max_objects``
are examined.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import re
import secrets
import time
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import Any

from cachetier.blocks.ids import BlockId, block_bounds, block_count
from cachetier.cachedlake import CachedLake
from cachetier.cluster.node import Cluster
from cachetier.context import RequestContext, current
from cachetier.errors import S3Error
from cachetier.lake import ListEntry, ListQuery
from gateway.tenants import Tenant, TenantDirectory
from policies import admission

log = logging.getLogger("lakegate.adminops")

WARM_TENANT = "lakegate-warm"  # what a warm without ``tenant=`` is charged to
_BEAT = 2.0  # a running job rewrites its state at least this often (seconds)
_STALE = 30.0  # a running job's state older than this: its worker is gone
_YIELD = 0.05  # a background warm's pause while tenants' lake reads wait (seconds)
_MAX_ERRORS = 20  # errors kept in a job's state (the count goes on)
_INVALIDATE_BATCH = 100  # keys per peer Invalidate message
_KEPT_JOBS = 100  # finished jobs' files kept (the oldest go as new jobs start)
_JOB_ID = re.compile(r"^[0-9a-f]{16}$")
RUNNING, DONE, FAILED, CANCELLED = "running", "done", "failed", "cancelled"


@dataclasses.dataclass(frozen=True)
class AdminOpsConfig:
    """Bounds of the admin operations; the one place their defaults live."""

    warm_concurrency: int = 4  # objects a warm job reads at once
    max_objects: int = 10_000  # objects a ``cached`` query examines at most


class BadRequest(ValueError):
    """A refused parameter; ``str()`` is the message (a 400)."""


@dataclasses.dataclass
class Counts:
    """What a drop removed (or a query found): objects with a block here, blocks, their bytes."""

    objects: int = 0
    blocks: int = 0
    bytes: int = 0


def _now() -> float:
    return time.time()  # wall clock: job files are compared across processes


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (a worker's, on this host: Linux's /proc)."""
    return Path(f"/proc/{pid}").exists()


def checked_job_id(job_id: str) -> str:
    if not _JOB_ID.match(job_id):
        raise BadRequest("not a warm job id")
    return job_id


def checked_bucket(bucket: str | None, *, required: bool = True) -> str:
    if not bucket:
        if required:
            raise BadRequest("bucket is required")
        return ""
    if len(bucket) > 255 or "/" in bucket:
        raise BadRequest("not a bucket name")
    return bucket


class JobFiles:
    """Warm jobs' state files: ``ID.json`` (whole, by rename) and ``ID.cancel``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def write(self, doc: dict[str, Any]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"{doc['id']}.json"
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, path)

    def read(self, job_id: str) -> dict[str, Any] | None:
        try:
            doc: dict[str, Any] = json.loads((self.directory / f"{job_id}.json").read_text())
        except (FileNotFoundError, ValueError):
            return None
        return _as_seen(doc, _now())

    def ids(self) -> list[str]:
        if not self.directory.is_dir():
            return []
        return sorted(p.stem for p in self.directory.glob("*.json") if _JOB_ID.match(p.stem))

    def prune(self, keep: int = _KEPT_JOBS) -> None:
        """Remove the oldest finished jobs' files past ``keep``."""
        finished = [(doc.get("updated", 0), doc["id"]) for doc in map(self.read, self.ids())
                    if doc is not None and doc.get("state") != RUNNING]
        for _, job_id in sorted(finished)[:max(0, len(finished) - keep)]:
            self.forget(job_id)

    def forget(self, job_id: str) -> None:
        for suffix in (".json", ".cancel"):
            with contextlib.suppress(FileNotFoundError):
                (self.directory / f"{job_id}{suffix}").unlink()

    def ask_cancel(self, job_id: str) -> None:
        (self.directory / f"{job_id}.cancel").touch()

    def cancel_asked(self, job_id: str) -> bool:
        return (self.directory / f"{job_id}.cancel").exists()


def _as_seen(doc: dict[str, Any], now: float) -> dict[str, Any]:
    """A running job whose worker is gone (its pid, or a state not rewritten for ``_STALE``
    seconds) is a failed one."""
    if doc.get("state") != RUNNING:
        return doc
    pid = doc.get("pid")
    gone = not isinstance(pid, int) or not pid_alive(pid)
    if gone or now - float(doc.get("updated", 0)) > _STALE:
        doc = {**doc, "state": FAILED, "errors": [*doc.get("errors", []), "the worker running the job is gone"]}
    return doc


class WarmJob:
    """One warm of ``bucket/prefix``, charged to ``tenant`` (None: background)."""

    def __init__(self, bucket: str, prefix: str, tenant: str | None) -> None:
        self.id = secrets.token_hex(8)
        self.doc: dict[str, Any] = {
            "id": self.id, "bucket": bucket, "prefix": prefix, "tenant": tenant or WARM_TENANT,
            "background": tenant is None, "state": RUNNING, "listing": True,
            "objects_total": 0, "objects_done": 0, "objects_skipped": 0, "bytes_total": 0, "bytes_done": 0,
            "error_count": 0, "errors": [], "pid": os.getpid(), "started": _now(), "updated": _now(),
        }

    def add(self, name: str, amount: int) -> None:
        self.doc[name] += amount

    def error(self, message: str) -> None:
        self.doc["error_count"] += 1
        if len(self.doc["errors"]) < _MAX_ERRORS:
            self.doc["errors"].append(message)


class AdminOps:
    """The node's admin operations over its cache (one per worker)."""

    def __init__(
        self, cache: CachedLake, directory: Path, tenants: TenantDirectory, config: AdminOpsConfig = AdminOpsConfig(),
        *, cluster: Cluster | None = None, lake_waiting: Callable[[], bool] = lambda: False,
    ) -> None:
        self.cache = cache
        self.files = JobFiles(directory)
        self.tenants = tenants
        self.config = config
        self.cluster = cluster
        self.lake_waiting = lake_waiting  # tenants' lake reads wait for the budget on the node
        self._jobs: dict[str, tuple[WarmJob, asyncio.Task[None]]] = {}

    # ---- warm --------------------------------------------------------------------------------

    def start_warm(self, bucket: str | None, prefix: str, tenant: str | None) -> dict[str, Any]:
        bucket = checked_bucket(bucket)
        job = WarmJob(bucket, prefix, self._tenant(tenant, bucket))
        self.files.prune()
        self.files.write(job.doc)
        task = asyncio.create_task(self._run(job))
        self._jobs[job.id] = (job, task)
        task.add_done_callback(lambda _: self._jobs.pop(job.id, None))
        return dict(job.doc)

    def job(self, job_id: str) -> dict[str, Any] | None:
        return self.files.read(checked_job_id(job_id))

    def jobs(self) -> list[dict[str, Any]]:
        return [doc for doc in map(self.files.read, self.files.ids()) if doc is not None]

    def cancel(self, job_id: str) -> dict[str, Any] | None:
        doc = self.job(job_id)
        if doc is None or doc["state"] != RUNNING:
            return doc
        self.files.ask_cancel(job_id)
        mine = self._jobs.get(job_id)
        if mine is not None:
            mine[1].cancel()
        return {**doc, "cancel_requested": True}

    def _tenant(self, name: str | None, bucket: str) -> str | None:
        """The tenant a warm of ``bucket`` is charged to: one that may read it (None: background)."""
        if not name:
            return None
        if not self._named(name).may_use(bucket):
            raise BadRequest(f"tenant {name!r} may not use bucket {bucket!r}")
        return name

    async def _run(self, job: WarmJob) -> None:
        current.set(RequestContext(tenant=job.doc["tenant"]))  # this task's reads are charged to it
        beat = asyncio.create_task(self._beat(job))
        try:
            await self._warm(job)
            job.doc["state"] = DONE
        except asyncio.CancelledError:
            job.doc["state"] = CANCELLED
        except Exception as exc:  # noqa: BLE001 - the job's state says what ended it
            job.doc["state"] = FAILED
            for leaf in _leaves(exc):  # the listing's error, or a task's, out of the task group
                job.error(_describe(leaf))
            log.warning("warm %s of %s/%s failed: %s", job.id, job.doc["bucket"], job.doc["prefix"], exc)
        finally:
            beat.cancel()
            job.doc["listing"] = False
            self._save(job)
            with contextlib.suppress(FileNotFoundError):
                (self.files.directory / f"{job.id}.cancel").unlink()

    async def _beat(self, job: WarmJob) -> None:
        while True:
            await asyncio.sleep(_BEAT / 2)
            if self.files.cancel_asked(job.id):
                mine = self._jobs.get(job.id)
                if mine is not None:
                    mine[1].cancel()
                return
            self._save(job)

    def _save(self, job: WarmJob) -> None:
        job.doc["updated"] = _now()
        try:
            self.files.write(job.doc)
        except OSError as exc:  # a full disk: the next beat tries again
            log.warning("warm %s: could not write its state: %s", job.id, exc)

    async def _warm(self, job: WarmJob) -> None:
        room = asyncio.Semaphore(self.config.warm_concurrency)
        async with asyncio.TaskGroup() as group:
            async for entry in self._listed(job.doc["bucket"], job.doc["prefix"]):
                if not admission.admits_read(self.cache.reads.limits, entry.size):
                    job.add("objects_skipped", 1)
                    continue
                job.add("objects_total", 1)
                job.add("bytes_total", entry.size)
                await room.acquire()
                group.create_task(self._warm_one(job, entry, room))
            job.doc["listing"] = False

    async def _warm_one(self, job: WarmJob, entry: ListEntry, room: asyncio.Semaphore) -> None:
        try:
            await self._background_turn(job)
            stream = await self.cache.get_object(job.doc["bucket"], entry.key)
            try:
                async for piece in stream.body:
                    job.add("bytes_done", len(piece))  # and dropped: nothing kept in memory
                    await self._background_turn(job)
            finally:
                await stream.aclose()
            job.add("objects_done", 1)
        except (S3Error, OSError) as exc:  # one object gone or unreadable: the job goes on
            job.error(f"{entry.key}: {_describe(exc)}")
        finally:
            room.release()

    async def _background_turn(self, job: WarmJob) -> None:
        """A background warm waits while tenants' lake reads wait for the lake budget."""
        while job.doc["background"] and self.lake_waiting():
            await asyncio.sleep(_YIELD)

    async def _listed(self, bucket: str, prefix: str, limit: int | None = None) -> AsyncIterator[ListEntry]:
        """The objects under ``bucket/prefix``, as the lake lists them (at most ``limit``)."""
        token: str | None = None
        seen = 0
        while True:
            page = await self.cache.list_objects(bucket, ListQuery(prefix=prefix, v2=True, continuation_token=token))
            for entry in page.entries:
                if limit is not None and seen >= limit:
                    return
                seen += 1
                yield entry
            if not page.is_truncated or page.next_continuation_token is None:
                return
            token = page.next_continuation_token

    # ---- drop --------------------------------------------------------------------------------

    async def drop(self, bucket: str | None, prefix: str, tenant: str | None) -> dict[str, Any]:
        if tenant:
            buckets = await self._tenant_buckets(tenant, checked_bucket(bucket, required=False))
        else:
            buckets = [checked_bucket(bucket)]
        total = Counts()
        for name in buckets:
            keys: list[str] = []
            async for entry in self._listed(name, prefix):
                found = await asyncio.to_thread(self._drop_blocks, name, entry)
                _add(total, found)
                self.cache.reads.invalidate(name, entry.key)  # every worker's metadata (write stamps)
                keys.append(entry.key)
                if len(keys) >= _INVALIDATE_BATCH:
                    await self._tell_peers(name, keys)
                    keys = []
            if keys:
                await self._tell_peers(name, keys)
        return {"buckets": buckets, "prefix": prefix, "tenant": tenant or None, **dataclasses.asdict(total),
                "peers": len(self.cluster.membership.peers()) if self.cluster is not None else 0}

    def _named(self, name: str) -> Tenant:
        for tenant in self.tenants.tenants:
            if tenant.name == name:
                return tenant
        raise BadRequest(f"no tenant named {name!r}")

    async def _tenant_buckets(self, name: str, bucket: str) -> list[str]:
        tenant = self._named(name)
        names = [bucket] if bucket else [b.name for b in await self.cache.list_buckets()]
        return [name for name in names if tenant.may_use(name)]

    async def _tell_peers(self, bucket: str, keys: list[str]) -> None:
        if self.cluster is not None:
            await self.cluster.broadcast_invalidate(bucket, list(keys))

    def _versions(self, bucket: str, entry: ListEntry) -> list[tuple[str, int]]:
        """(etag, size) of the key's versions this node may hold: the lake's, and the one its
        metadata cache knows (an older one read here)."""
        versions = {entry.etag: entry.size}
        known = self.cache.reads.meta.known(bucket, entry.key)
        if known is not None:
            versions.setdefault(known.etag, known.size)
        return list(versions.items())

    def _blocks(self, bucket: str, entry: ListEntry) -> Iterable[tuple[BlockId, int]]:
        size_of_block = self.cache.reads.block_size
        for etag, size in self._versions(bucket, entry):
            for index in range(block_count(size, size_of_block)):
                lo, hi = block_bounds(index, size, size_of_block)
                yield BlockId.of(bucket, entry.key, etag, index, size_of_block), hi - lo + 1

    def _drop_blocks(self, bucket: str, entry: ListEntry) -> Counts:
        """Delete the entry's blocks (and its marker) from every tier (blocking: in a thread)."""
        found = Counts()
        for bid, length in self._blocks(bucket, entry):
            for store in self.cache.tiers().values():
                with contextlib.suppress(OSError):  # a failing disk: eviction takes it later
                    if bid in store and store.delete(bid):
                        found.blocks += 1
                        found.bytes += length
        for store in self.cache.tiers().values():
            with contextlib.suppress(OSError):
                store.delete(BlockId.marker(bucket, entry.key))
        found.objects = 1 if found.blocks else 0
        return found

    # ---- cached ------------------------------------------------------------------------------

    async def cached(self, bucket: str | None, prefix: str, max_objects: int | None, limit: int) -> dict[str, Any]:
        bucket = checked_bucket(bucket)
        examine = self.config.max_objects if max_objects is None else max_objects
        if not 1 <= examine <= self.config.max_objects:
            raise BadRequest(f"max_objects is 1 to {self.config.max_objects}")
        if not 0 <= limit <= 1000:
            raise BadRequest("limit is 0 to 1000")
        tiers = {name: Counts() for name in self.cache.tiers()}
        objects: list[dict[str, Any]] = []
        examined = cached = 0
        async for entry in self._listed(bucket, prefix, examine + 1):
            if examined == examine:
                return self._cached_doc(bucket, prefix, examined, cached, tiers, objects, truncated=True)
            examined += 1
            held = self._held(bucket, entry, tiers)
            if any(held.values()):
                cached += 1
                if len(objects) < limit:
                    objects.append({"key": entry.key, "size": entry.size, "etag": entry.etag,
                                    "blocks": block_count(entry.size, self.cache.reads.block_size), "cached": held})
        return self._cached_doc(bucket, prefix, examined, cached, tiers, objects, truncated=False)

    def _held(self, bucket: str, entry: ListEntry, tiers: dict[str, Counts]) -> dict[str, int]:
        """Blocks of the lake's version of ``entry`` per tier (index lookups), added to ``tiers``."""
        held = {name: 0 for name in tiers}
        size_of_block = self.cache.reads.block_size
        for index in range(block_count(entry.size, size_of_block)):
            bid = BlockId.of(bucket, entry.key, entry.etag, index, size_of_block)
            lo, hi = block_bounds(index, entry.size, size_of_block)
            for name, store in self.cache.tiers().items():
                if bid in store:
                    held[name] += 1
                    tiers[name].blocks += 1
                    tiers[name].bytes += hi - lo + 1
        for name, count in held.items():
            tiers[name].objects += 1 if count else 0
        return held

    @staticmethod
    def _cached_doc(bucket: str, prefix: str, examined: int, cached: int, tiers: dict[str, Counts],
                    objects: list[dict[str, Any]], *, truncated: bool) -> dict[str, Any]:
        return {"bucket": bucket, "prefix": prefix, "objects_examined": examined, "objects_cached": cached,
                "truncated": truncated, "tiers": {n: dataclasses.asdict(c) for n, c in tiers.items()},
                "objects": objects}

    # ---- lifetime ----------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Stop this worker's jobs (their state says cancelled)."""
        tasks = [task for _, task in self._jobs.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _add(total: Counts, found: Counts) -> None:
    total.objects += found.objects
    total.blocks += found.blocks
    total.bytes += found.bytes


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _describe(exc: BaseException) -> str:
    code = getattr(exc, "code", None)
    return f"{code}: {exc}" if isinstance(code, str) else f"{type(exc).__name__}: {exc}"
