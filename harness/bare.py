"""The floor of the node benchmark: a bare ASGI app answering every request with one constant
4 KiB body, served by uvicorn with lakegate's own HTTP protocol (gateway.httpserver.
LakegateHttpProtocol within the default HttpLimits, uvicorn's default loop, no access log), as
`lakegate serve` runs it. What serving a 4 KiB response costs before any S3 work.

    python -m harness.bare PORT [BODY_BYTES]      (or BareServer(port).start() / .stop())
"""

from __future__ import annotations

import functools
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from harness.processes import LoopbackServer, REPO_ROOT, cancel_on_exit, gateway_environment, log, on_exit, terminate, wait_listening

BODY_BYTES = 4096


def make_app(body: bytes) -> Callable[[dict[str, Any], Any, Any], Awaitable[None]]:
    head = {"type": "http.response.start", "status": 200,
            "headers": [(b"content-type", b"application/octet-stream"), (b"content-length", str(len(body)).encode())]}
    message = {"type": "http.response.body", "body": body}

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await send(head)
        await send(message)

    return app


def serve(port: int, body_bytes: int = BODY_BYTES) -> None:
    import uvicorn

    from gateway.httplimits import HttpLimits
    from gateway.httpserver import LakegateHttpProtocol

    uvicorn.run(make_app(b"x" * body_bytes), host="127.0.0.1", port=port, ws="none", access_log=False,
                log_level="warning", server_header=False, lifespan="off",
                http=functools.partial(LakegateHttpProtocol, limits=HttpLimits()))  # type: ignore[arg-type]


@dataclass
class BareServer(LoopbackServer):
    port: int
    body_bytes: int = BODY_BYTES
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> str:
        on_exit("bare ASGI server", self.stop)
        self.proc = subprocess.Popen([sys.executable, "-m", "harness.bare", str(self.port), str(self.body_bytes)],
                                     cwd=REPO_ROOT, env=gateway_environment(), stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        if not wait_listening(self.proc, self.port, 20.0):
            self.stop()
            raise RuntimeError("the bare ASGI server did not start")
        log(f"bare ASGI server (uvicorn + LakegateHttpProtocol) at {self.url} (pid {self.pid})")
        return self.url

    def stop(self) -> None:
        cancel_on_exit(self.stop)
        terminate(self.proc, signal.SIGTERM, grace=10)


if __name__ == "__main__":
    serve(int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else BODY_BYTES)
