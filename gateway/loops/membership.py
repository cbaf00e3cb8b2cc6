"""Cluster wiring and the membership control loop: builds this node's ``Cluster`` from settings
and sends a round of heartbeats every ``heartbeat_interval`` seconds, carrying the host's load
(psutil) and the cache's fill."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Mapping

import psutil

from cachetier.cluster.node import Cluster
from cachetier.cluster.membership import Membership, parse_peers
from cachetier.cluster.client import PeerClient
from cachetier.cluster.ring import Member
from gateway.settings import Settings

log = logging.getLogger("lakegate.cluster")


def build_cluster(settings: Settings, clock: Callable[[], float]) -> Cluster:
    seeds, dns = parse_peers(settings.peers)
    me = Member(settings.self_id, settings.self_url, settings.node_weight)
    membership = Membership(
        me,
        partitions=settings.partitions,
        replicas=settings.replicas,
        failure_timeout=settings.failure_timeout,
        suspect_for=settings.heartbeat_interval,
        clock=clock,
    )
    client = PeerClient(
        me,
        settings.cluster_secret.get_secret_value().encode(),
        timeout=settings.lake_timeout,
        clock=time.time,
        connect_timeout=min(1.0, settings.failure_timeout / 3),
        verify_tls=str(settings.peer_ca_file) if settings.peer_ca_file else True,
    )
    return Cluster(membership, client, seeds=seeds, dns=dns, heartbeat_interval=settings.heartbeat_interval)


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


async def heartbeat_loop(cluster: Cluster, load: Callable[[], Mapping[str, float]]) -> None:
    """Forever: one heartbeat round, then sleep out the rest of the interval."""
    loop = asyncio.get_running_loop()
    while True:
        started = loop.time()
        try:
            await cluster.heartbeat_round(load())
        except Exception:  # noqa: BLE001 - the loop must outlive any one round
            log.exception("heartbeat round failed")
        await asyncio.sleep(max(0.0, cluster.heartbeat_interval - (loop.time() - started)))
