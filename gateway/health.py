"""The node's probes (issue 16), open like the old ``/_lakegate/health`` (no credential):

    GET /_lakegate/health/live    200 {"status": "live"} while the process serves
    GET /_lakegate/health/ready   200 {"status": "ready", ...} when
                                  - lake: the lake is reachable (a folder lake: its folder is
                                    there; an S3 lake: ListBuckets with the gateway's own
                                    credentials gets an S3 answer, any answer, 403 too; a
                                    connection error, a timeout or a failing lake (5xx after
                                    retries: ServiceUnavailable) is not), checked at most every
                                    ``cache_for`` seconds so probes do not load the lake;
                                  - ring (in a cluster): joined, i.e. the node's first heartbeat
                                    round has completed, so it knows the live set (a node whose
                                    peers are all down is ready, alone on its ring);
                                  - draining: not, i.e. no SIGTERM yet (``gateway.drain``);
                                  else 503 {"status": "draining" | "not ready", "failed":
                                  {condition: why}}

With several workers each worker answers for the node: the lake and the drain are the same
for all of them, and each worker's ring is joined by its own heartbeats.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from cachetier.cluster.node import Cluster
from cachetier.errors import S3Error, ServiceUnavailable
from cachetier.lake import Lake
from cachetier.lake.dirlake import DirLake
from gateway.drain import Drain

LakeProbe = Callable[[], Awaitable[str | None]]  # None: reachable; else why not
_PROBE_TIMEOUT = 2.0  # seconds the lake gets to answer a readiness check


def lake_probe(lake: Lake, timeout: float = _PROBE_TIMEOUT) -> LakeProbe:
    """How readiness checks ``lake``: its folder for a folder lake, else one ListBuckets."""
    if isinstance(lake, DirLake):
        folder = lake.root

        async def folder_there() -> str | None:
            try:
                there = await asyncio.wait_for(asyncio.to_thread(folder.is_dir), timeout)
            except TimeoutError:
                return f"the lake's folder {folder} did not answer in {timeout:g} s"
            return None if there else f"the lake's folder {folder} is not there"

        return folder_there

    async def answers() -> str | None:
        try:
            await asyncio.wait_for(lake.list_buckets(), timeout)
        except TimeoutError:
            return f"the lake did not answer in {timeout:g} s"
        except ServiceUnavailable as exc:
            return exc.message
        except S3Error:
            return None  # an answer, even a refusal, is a lake that is there
        except OSError as exc:
            return f"the lake is unreachable ({type(exc).__name__})"
        return None

    return answers


class Readiness:
    """The ready probe's answer: (ready, the JSON body)."""

    def __init__(self, lake: LakeProbe, cluster: Cluster | None, drain: Drain, *,
                 clock: Callable[[], float] = time.monotonic, cache_for: float = 2.0) -> None:
        self.lake = lake
        self.cluster = cluster
        self.drain = drain
        self.clock = clock
        self.cache_for = cache_for
        self._checked: tuple[float, str | None] | None = None  # (when, the lake's answer)
        self._lock = asyncio.Lock()  # one lake check at a time: probes arriving together share it

    async def check(self) -> tuple[bool, dict[str, object]]:
        failed: dict[str, str] = {}
        if self.drain.draining:
            failed["draining"] = "SIGTERM received: finishing in-flight requests, then leaving"
        lake = await self._lake()
        if lake is not None:
            failed["lake"] = lake
        if self.cluster is not None and not self.cluster.joined:
            failed["ring"] = "not joined yet: the first heartbeat round has not completed"
        if failed:
            return False, {"status": "draining" if "draining" in failed else "not ready", "failed": failed}
        doc: dict[str, object] = {"status": "ready", "lake": "reachable"}
        if self.cluster is not None:
            membership = self.cluster.membership
            doc["ring"] = {"version": membership.ring.version, "live": [m.id for m in membership.live()]}
        return True, doc

    async def _lake(self) -> str | None:
        async with self._lock:
            now = self.clock()
            if self._checked is None or now - self._checked[0] >= self.cache_for:
                self._checked = (now, await self.lake())
            return self._checked[1]
