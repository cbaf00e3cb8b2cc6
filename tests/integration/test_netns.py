"""benchmarks/netns.py: the shaped network counts each class's bytes and goes away cleanly.

Bytes are pushed over each link (lake port, the peer address, a plain client port) inside a real
network namespace, and tc's class counters must count them. No rate is asserted: on a loaded
2-core machine timings are not for tests (the self-check, ``python -m benchmarks.netns
--selfcheck``, measures rates). Needs root and iproute2's ``ip`` and ``tc``; skipped otherwise.
Needs no Ceph.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

# benchmarks/ is a folder of the repo, not an installed package
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.netns import (
    CLIENT_HOST,
    PEER_HOST,
    LinkCounters,
    ShapedNetwork,
    available,
    measured_transfer,
    namespaces,
    parse_class_bytes,
)

LAKE_PORT, NODE_PORT = 7690, 9100
MiB = 1024 * 1024

TC_OUTPUT = """\
class htb 1:10 root prio 0 rate 300Mbit ceil 300Mbit burst 262860b cburst 262860b 
 Sent 75116977 bytes 2301 pkt (dropped 0, overlimits 1190 requeues 0) 
 backlog 0b 0p requeues 0
 lended: 1146 borrowed: 0 giants: 0
 tokens: 85690 ctokens: 85690

class htb 1:20 root prio 0 rate 1800Mbit ceil 1800Mbit burst 450000b cburst 450000b 
 Sent 450677977 bytes 13797 pkt (dropped 0, overlimits 6892 requeues 0) 
 backlog 0b 0p requeues 0

class htb 1:30 root prio 0 rate 100Gbit ceil 100Gbit burst 25000000b cburst 25000000b 
 Sent 1806 bytes 20 pkt (dropped 0, overlimits 0 requeues 0) 
"""


def test_parse_class_bytes_reads_each_class() -> None:
    assert parse_class_bytes(TC_OUTPUT) == LinkCounters(lake=75116977, cluster=450677977, other=1806)
    assert parse_class_bytes("") == LinkCounters()


needs_netns = pytest.mark.skipif(available() is not None, reason=f"shaped network: {available()}")


@pytest.fixture
def network() -> Iterator[tuple[ShapedNetwork, subprocess.Popen[bytes]]]:
    net = ShapedNetwork([LAKE_PORT], name=f"lakegate-bench-{os.getpid()}-test")
    with net:
        server = net.popen([sys.executable, "-m", "benchmarks.netns", "serve", str(LAKE_PORT), str(NODE_PORT)],
                           cwd=Path(__file__).resolve().parents[2], stdout=subprocess.PIPE)
        assert server.stdout is not None
        assert server.stdout.readline().strip() == b"ready"
        yield net, server
    server.wait(timeout=10)  # killed by the teardown
    server.stdout.close()


@needs_netns
@pytest.mark.parametrize(("link", "host", "port", "mode", "length"), [
    ("lake", CLIENT_HOST, LAKE_PORT, "G", 4 * MiB),  # a GET's body leaving RGW's port
    ("lake", CLIENT_HOST, LAKE_PORT, "P", 4 * MiB),
    ("cluster", PEER_HOST, NODE_PORT, "G", 16 * MiB),  # a peer fetching a block
    ("other", CLIENT_HOST, NODE_PORT, "G", 16 * MiB),  # a client reading from its node
])
def test_counters_count_the_bytes_of_their_link(network: tuple[ShapedNetwork, subprocess.Popen[bytes]],
                                                link: str, host: str, port: int, mode: str, length: int) -> None:
    net, _server = network
    counted = measured_transfer(net, host, port, mode, length)["counted"]
    # headers and ACKs come on top of the payload: ~0.2% with loopback's 64 KiB packets, but a
    # reader slowed by a loaded machine gets smaller segments (measured once: 5.7% over 16 MiB)
    assert length <= counted[link] <= length * 1.10 + 64 * 1024, counted
    for other_link, value in counted.items():
        if other_link != link:
            assert value < length * 0.01, counted


@needs_netns
def test_teardown_kills_what_runs_inside_and_deletes_the_namespace() -> None:
    net = ShapedNetwork(name=f"lakegate-bench-{os.getpid()}-teardown")
    with net:
        assert net.name in namespaces()
        sleeper = net.popen(["sleep", "600"])
        deadline = time.monotonic() + 10
        while sleeper.pid not in net.pids():  # `ip netns exec` joins the namespace, then execs
            assert time.monotonic() < deadline, net.pids()
            time.sleep(0.05)
    assert sleeper.wait(timeout=10) != 0
    assert net.name not in namespaces()
    net.stop()  # idempotent
