"""nginx proxy_cache + slice in front of an S3 endpoint (RGW), as a child process on loopback:
the reference cache the node benchmark (benchmarks/node_perf.py) compares lakegate with.

    nginx = NginxCache(lake_url, port=7610, workers=2)
    nginx.start()          # returns once it accepts connections
    nginx.url, nginx.pid   # the master; its workers and cache manager are its children
    nginx.stop()

How an S3 request gets through: RGW answers SigV4-signed requests only, and nginx cannot sign.
The client signs its request for nginx's own address (Host: 127.0.0.1:<nginx port>), and nginx
forwards it with that Host unchanged (``proxy_set_header Host $http_host``) and the client's
Authorization, X-Amz-Date and X-Amz-Content-SHA256 as they came; RGW verifies the signature
over the Host header it receives, not over its own address, so the request is valid there. The
slice module replaces Range with ``$slice_range`` (bytes=0-4194303, ...) on every upstream
request; Range is not among the signed headers (the harness signs host, x-amz-date and
x-amz-content-sha256; curl --aws-sigv4 the same), so each slice request still verifies. A
whole-object GET becomes one 206 per 4 MiB slice upstream, cached each under
``$uri$slice_range``; hits are served from the cache files (sendfile) without asking RGW, so
they are not authenticated at all (what lakegate does on every hit, nginx does not). The
Authorization of a request older than RGW's 15 min skew window would be refused on a miss.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from harness.ports import port_busy
from harness.processes import LoopbackServer, cancel_on_exit, log, on_exit, terminate, wait_listening

NGINX_INSTALL = "apt-get install -y nginx-light   (Debian/Ubuntu; it has the slice module; or 'nginx')"
SLICE = "4m"


def nginx_binary() -> str | None:
    return shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None)


def render_config(*, upstream: str, port: int, workers: int, prefix: Path, cache_size: str = "8g",
                  slice_size: str = SLICE, user: str | None = None) -> str:
    """The nginx.conf: ``workers`` worker processes on 127.0.0.1:``port``, a proxy cache in
    ``prefix``/cache sliced in ``slice_size`` pieces, in front of ``upstream`` (host:port)."""
    if not upstream or "/" in upstream or workers < 1:
        raise ValueError(f"upstream must be host:port and workers >= 1, got {upstream!r}, {workers}")
    user_line = f"user {user};\n" if user else ""
    return f"""\
{user_line}worker_processes {workers};
daemon off;
master_process on;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_requests 1000000;
    keepalive_timeout 120s;
    client_body_temp_path {prefix}/client_body;
    proxy_temp_path {prefix}/proxy_temp;
    fastcgi_temp_path {prefix}/fastcgi_temp;
    uwsgi_temp_path {prefix}/uwsgi_temp;
    scgi_temp_path {prefix}/scgi_temp;
    proxy_cache_path {prefix}/cache levels=1:2 keys_zone=lake:64m max_size={cache_size} inactive=1d use_temp_path=off;
    upstream lake {{
        server {upstream};
        keepalive 64;
    }}
    server {{
        listen 127.0.0.1:{port} reuseport;
        location / {{
            slice {slice_size};
            proxy_cache lake;
            proxy_cache_key $uri$is_args$args$slice_range;
            proxy_set_header Range $slice_range;
            proxy_cache_valid 200 206 1d;
            proxy_cache_lock on;
            proxy_cache_lock_timeout 60s;
            proxy_set_header Host $http_host;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering on;
            add_header X-Cache-Status $upstream_cache_status always;
            proxy_pass http://lake;
        }}
    }}
}}
"""


@dataclass
class NginxCache(LoopbackServer):
    upstream_url: str  # http://host:port of the S3 endpoint
    port: int
    workers: int = 2
    start_timeout: float = 15.0
    proc: subprocess.Popen[bytes] | None = None
    prefix: Path | None = None

    def start(self) -> str:
        binary = nginx_binary()
        if binary is None:
            raise RuntimeError(f"nginx is not installed: {NGINX_INSTALL}")
        if port_busy(self.port):
            raise RuntimeError(f"port {self.port} is taken")
        self.prefix = Path(tempfile.mkdtemp(prefix="lakegate-nginx-"))
        user = pwd.getpwuid(os.geteuid()).pw_name if os.geteuid() == 0 else None  # root: workers stay root
        conf = self.prefix / "nginx.conf"
        conf.write_text(render_config(upstream=urlsplit(self.upstream_url).netloc, port=self.port,
                                      workers=self.workers, prefix=self.prefix, user=user))
        on_exit("nginx", self.stop)
        out = open(self.prefix / "output.log", "ab")  # noqa: SIM115 - the child holds it
        self.proc = subprocess.Popen([binary, "-p", str(self.prefix), "-c", str(conf)], stdin=subprocess.DEVNULL,
                                     stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        out.close()
        if not wait_listening(self.proc, self.port, self.start_timeout):
            tail = self.log_tail()
            self.stop()
            raise RuntimeError(f"nginx did not start: {tail}")
        log(f"nginx serving at {self.url} (pid {self.pid}, {self.workers} workers, cache {self.prefix}/cache)")
        return self.url

    def log_tail(self) -> str:
        if self.prefix is None:
            return ""
        return "\n".join((self.prefix / name).read_text(errors="replace")[-2000:]
                         for name in ("output.log", "error.log") if (self.prefix / name).exists())

    def stop(self) -> None:
        cancel_on_exit(self.stop)
        terminate(self.proc, signal.SIGTERM, grace=10)  # fast shutdown; the workers go with it
        if self.prefix is not None:
            shutil.rmtree(self.prefix, ignore_errors=True)
            self.prefix = None
