"""`lakegate admin warm|drop|stats`: a client of a node's admin operations
(``/_lakegate/admin/{warm,drop,cached}``, gateway/adminroutes.py), over HTTP like any operator's
tool; imports nothing of lakegate.

Credentials, first found: ``--token-file`` (the admin bearer token), ``--access-key`` and
``--secret-key``, else ``LAKEGATE_ADMIN_ACCESS_KEY`` with ``LAKEGATE_ADMIN_SECRET_KEY`` (or
``LAKEGATE_ADMIN_SECRET_KEY_FILE``), signed with botocore's SigV4 (service s3), as the node's
admin check reads it. A refusal or an error is one line on stderr and exit status 1 (2 for
usage); no secret is ever printed.
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

ADMIN = "/_lakegate/admin"
DEFAULT_ENDPOINT = "http://127.0.0.1:9000"  # `lakegate serve`'s default LAKEGATE_LISTEN
REGION = "us-east-1"  # any region is accepted by the node's admin check
POLL_S = 0.5


class AdminError(Exception):
    """A refusal or failure; ``str()`` is the one line to show."""


@dataclass(frozen=True)
class Credential:
    access_key: str = ""
    secret_key: str = field(default="", repr=False)
    token: str = field(default="", repr=False)


def credential(args: argparse.Namespace, env: Mapping[str, str]) -> Credential:
    """The admin credential from the options, else the environment (see the module docstring)."""
    if args.token_file:
        return Credential(token=_read_secret(Path(args.token_file), "--token-file"))
    access_key = args.access_key or env.get("LAKEGATE_ADMIN_ACCESS_KEY", "")
    secret_key = args.secret_key or env.get("LAKEGATE_ADMIN_SECRET_KEY", "")
    if not secret_key and env.get("LAKEGATE_ADMIN_SECRET_KEY_FILE"):
        secret_key = _read_secret(Path(env["LAKEGATE_ADMIN_SECRET_KEY_FILE"]), "LAKEGATE_ADMIN_SECRET_KEY_FILE")
    if not access_key or not secret_key:
        raise AdminError("no admin credential: give --access-key and --secret-key, --token-file, or "
                         "LAKEGATE_ADMIN_ACCESS_KEY with LAKEGATE_ADMIN_SECRET_KEY(_FILE)")
    return Credential(access_key, secret_key)


def _read_secret(path: Path, name: str) -> str:
    try:
        return path.read_text().strip()
    except OSError as exc:
        raise AdminError(f"{name}: cannot read {path}: {exc.strerror}") from None


def query(params: Mapping[str, str | int | None]) -> str:
    """``?a=b&...`` of the given parameters, every byte but unreserved ones percent-encoded (as
    SigV4 canonicalises them, so the signature holds for a prefix with ``/``)."""
    parts = [f"{quote(k, safe='')}={quote(str(v), safe='')}" for k, v in params.items() if v not in (None, "")]
    return "?" + "&".join(parts) if parts else ""


class AdminClient:
    """Signed calls of one node's admin endpoints, answered as JSON."""

    def __init__(self, endpoint: str, cred: Credential, *, timeout: float = 60.0, ca_bundle: str | None = None):
        self.endpoint = endpoint.rstrip("/")
        self.cred = cred
        self.timeout = timeout
        self.context = ssl.create_default_context(cafile=ca_bundle) if ca_bundle else None

    def call(self, method: str, path: str) -> dict[str, Any]:
        url = f"{self.endpoint}{ADMIN}{path}"
        request = urllib.request.Request(url, method=method, headers=self._headers(method, url))
        try:
            with urllib.request.urlopen(request, timeout=self.timeout, context=self.context) as response:
                return dict(json.load(response))
        except urllib.error.HTTPError as exc:
            raise AdminError(f"{method} {path.partition('?')[0]}: {exc.code} {_message(exc)}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise AdminError(f"cannot reach {self.endpoint}: {getattr(exc, 'reason', exc)}") from None
        except ValueError:
            raise AdminError(f"{method} {path}: the answer is not JSON (is {self.endpoint} a lakegate node?)") from None

    def _headers(self, method: str, url: str) -> dict[str, str]:
        if self.cred.token:
            return {"Authorization": f"Bearer {self.cred.token}"}
        request = AWSRequest(method, url)
        S3SigV4Auth(Credentials(self.cred.access_key, self.cred.secret_key), "s3", REGION).add_auth(request)
        return dict(request.headers.items())


def _message(exc: urllib.error.HTTPError) -> str:
    try:
        doc = json.loads(exc.read())
        return f"{doc.get('error', '')}: {doc.get('message', doc.get('detail', ''))}"
    except ValueError:
        return str(exc.reason)


# ---- the commands ---------------------------------------------------------------------------


def warm(client: AdminClient, args: argparse.Namespace, out: Callable[[str], None]) -> int:
    job = client.call("POST", "/warm" + query({"bucket": args.bucket, "prefix": args.prefix, "tenant": args.tenant}))
    if args.no_wait:
        out(json.dumps(job) if args.json else job["id"])
        return 0
    while job["state"] == "running":
        out(progress(job))
        time.sleep(args.interval)
        job = client.call("GET", f"/warm/{job['id']}")
    out(json.dumps(job) if args.json else progress(job))
    for error in job.get("errors", []):
        print(f"lakegate admin warm: {error}", file=sys.stderr)
    return 0 if job["state"] == "done" else 1


def progress(job: Mapping[str, Any]) -> str:
    listing = "+" if job.get("listing") else ""
    return (f"warm {job['id']} {job['state']}: {job['objects_done']}/{job['objects_total']}{listing} objects, "
            f"{_size(job['bytes_done'])}/{_size(job['bytes_total'])}{listing}, {job['error_count']} errors")


def drop(client: AdminClient, args: argparse.Namespace, out: Callable[[str], None]) -> int:
    if not args.bucket and not args.tenant:
        raise AdminError("drop needs --bucket (and --prefix) or --tenant")
    doc = client.call("POST", "/drop" + query({"bucket": args.bucket, "prefix": args.prefix, "tenant": args.tenant}))
    out(json.dumps(doc) if args.json else
        f"dropped {doc['objects']} objects, {doc['blocks']} blocks, {_size(doc['bytes'])} "
        f"from {', '.join(doc['buckets']) or 'no bucket'} (peers told: {doc['peers']})")
    return 0


def stats(client: AdminClient, args: argparse.Namespace, out: Callable[[str], None]) -> int:
    doc = client.call("GET", "/cached" + query({"bucket": args.bucket, "prefix": args.prefix,
                                                "max_objects": args.max_objects, "limit": args.limit}))
    if args.json:
        out(json.dumps(doc))
        return 0
    for line in table(doc):
        out(line)
    return 0


def table(doc: Mapping[str, Any]) -> list[str]:
    """What ``GET /cached`` answered, as text: per tier, then per object."""
    more = " (more not examined)" if doc["truncated"] else ""
    lines = [f"{doc['bucket']}/{doc['prefix']}: {doc['objects_cached']} of {doc['objects_examined']} objects "
             f"cached{more}", "", f"{'tier':<6}{'objects':>10}{'blocks':>10}{'bytes':>12}"]
    for name, tier in doc["tiers"].items():
        lines.append(f"{name:<6}{tier['objects']:>10}{tier['blocks']:>10}{_size(tier['bytes']):>12}")
    if doc["objects"]:
        tiers = list(doc["tiers"])
        lines += ["", f"{'key':<40}{'size':>12}{'blocks':>8}" + "".join(f"{t:>6}" for t in tiers)]
        for item in doc["objects"]:
            cached = "".join(f"{item['cached'].get(t, 0):>6}" for t in tiers)
            lines.append(f"{item['key'][:40]:<40}{_size(item['size']):>12}{item['blocks']:>8}{cached}")
    return lines


def _size(n: int) -> str:
    if n < 1024:
        return f"{n}B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            break
    return f"{value:.1f}{unit}"


COMMANDS: dict[str, Callable[[AdminClient, argparse.Namespace, Callable[[str], None]], int]] = {
    "warm": warm, "drop": drop, "stats": stats,
}


def _run(args: argparse.Namespace) -> None:
    try:
        client = AdminClient(args.endpoint, credential(args, os.environ), timeout=args.timeout,
                             ca_bundle=args.ca_bundle)
        code = COMMANDS[args.admin_command](client, args, lambda line: print(line, flush=True))
    except AdminError as exc:
        print(f"lakegate admin: {exc}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
    sys.exit(code)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    admin = sub.add_parser("admin", help="warm, drop or show what a node caches")
    commands = admin.add_subparsers(dest="admin_command", required=True)
    warm_p = commands.add_parser("warm", help="read a prefix into the cache ahead of a job; shows progress")
    warm_p.add_argument("--tenant", help="charge its lake reads to this tenant (default: background work)")
    warm_p.add_argument("--no-wait", action="store_true", help="print the job id and return")
    warm_p.add_argument("--interval", type=float, default=POLL_S, help="seconds between progress lines")
    drop_p = commands.add_parser("drop", help="drop a prefix, or a tenant's buckets, from the node's cache")
    drop_p.add_argument("--tenant", help="drop every bucket this tenant may use (narrowed by --bucket)")
    stats_p = commands.add_parser("stats", help="what is cached for a prefix, per tier and object")
    stats_p.add_argument("--max-objects", type=int, help="objects the node examines at most")
    stats_p.add_argument("--limit", type=int, help="objects listed at most (default 100)")
    for parser, needs_bucket in ((warm_p, True), (drop_p, False), (stats_p, True)):
        parser.add_argument("--bucket", required=needs_bucket)
        parser.add_argument("--prefix", default="")
        parser.add_argument("--endpoint", default=os.environ.get("LAKEGATE_ENDPOINT", DEFAULT_ENDPOINT),
                            help=f"the node's URL (default: LAKEGATE_ENDPOINT or {DEFAULT_ENDPOINT})")
        parser.add_argument("--access-key", help="the admin access key (default: LAKEGATE_ADMIN_ACCESS_KEY)")
        parser.add_argument("--secret-key", help="default: LAKEGATE_ADMIN_SECRET_KEY(_FILE); prefer the environment")
        parser.add_argument("--token-file", help="a file holding the admin bearer token")
        parser.add_argument("--ca-bundle", help="CA bundle (PEM) for an https endpoint")
        parser.add_argument("--timeout", type=float, default=60.0, help="seconds per request")
        parser.add_argument("--json", action="store_true", help="print the node's JSON answer")
        parser.set_defaults(run=_run)
