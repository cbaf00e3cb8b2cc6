"""The membership control loop: a round of heartbeats every ``heartbeat_interval`` seconds,
carrying the host's load (psutil), the cache's fill and the node's anomaly reports
(``gateway.loops.telemetry``). The node's ``Cluster`` is built by
``gateway.wiring``."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Mapping

import psutil

from cachetier.cluster.node import Cluster
from gateway.loops.telemetry import NodeTelemetry

log = logging.getLogger("lakegate.cluster")


def host_load(extra: Callable[[], Mapping[str, float]] | None = None) -> dict[str, float]:
    """What a heartbeat tells peers about this node: CPU, load average, memory, cache fill."""
    load = {
        "cpu_percent": psutil.cpu_percent(interval=None),  # since the previous call
        "load1": os.getloadavg()[0],
        "mem_percent": psutil.virtual_memory().percent,
    }
    if extra is not None:
        load.update(extra())
    return load


async def heartbeat_loop(cluster: Cluster, load: Callable[[], Mapping[str, float]],
                         telemetry: NodeTelemetry | None = None) -> None:
    """Forever: one heartbeat round (with the node's anomaly reports), then sleep out the rest
    of the interval."""
    loop = asyncio.get_running_loop()
    while True:
        started = loop.time()
        try:
            reports = telemetry.reports() if telemetry is not None else ()
            await cluster.heartbeat_round(load(), reports)
            if telemetry is not None:
                telemetry.sent(reports, len(cluster.membership.known()))
        except Exception:  # noqa: BLE001 - the loop must outlive any one round
            log.exception("heartbeat round failed")
        await asyncio.sleep(max(0.0, cluster.heartbeat_interval - (loop.time() - started)))
