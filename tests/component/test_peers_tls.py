"""Peers over HTTPS with a private CA: LAKEGATE_PEER_CA_FILE reaches the peer client that
``gateway.wiring.build_cluster`` makes, and without it the system's CAs refuse the peer."""

from __future__ import annotations

import asyncio
import json
import ssl
from pathlib import Path

import trustme

from gateway.wiring import build_cluster
from gateway.settings import Settings

REPO = Path(__file__).resolve().parents[2]
SECRET = "a-cluster-secret-of-some-length"


async def _heartbeat_server(context: ssl.SSLContext) -> tuple[asyncio.Server, int]:
    """A peer that answers every request with node2's heartbeat."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                await reader.readexactly(length)
                body = json.dumps({"id": "node2", "url": "https://127.0.0.1:1", "weight": 1.0, "load": {}}).encode()
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                             % (len(body), body))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=context)
    return server, server.sockets[0].getsockname()[1]


def _live_after_one_round(tmp_path: Path, with_ca: bool) -> list[str]:
    authority = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("127.0.0.1").configure_cert(server_context)
    ca_file = tmp_path / "ca.pem"
    authority.cert_pem.write_to_path(str(ca_file))

    async def main() -> list[str]:
        server, port = await _heartbeat_server(server_context)
        settings = Settings.load(
            tenants_file=REPO / "deploy" / "tenants.example.toml",
            node_id="node1",
            peers=f"node2=https://127.0.0.1:{port}",
            cluster_secret=SECRET,
            peer_ca_file=ca_file if with_ca else None,
        )
        assert settings.cluster is not None
        cluster = build_cluster(settings.cluster, clock=asyncio.get_running_loop().time)
        try:
            await cluster.heartbeat_round({})
            return [m.id for m in cluster.membership.live()]
        finally:
            await cluster.aclose()
            server.close()
            await server.wait_closed()

    return asyncio.run(main())


def test_a_peer_with_a_private_ca_is_reached_with_peer_ca_file(tmp_path: Path) -> None:
    assert _live_after_one_round(tmp_path, with_ca=True) == ["node1", "node2"]


def test_without_peer_ca_file_the_system_cas_refuse_that_peer(tmp_path: Path) -> None:
    assert _live_after_one_round(tmp_path, with_ca=False) == ["node1"]
