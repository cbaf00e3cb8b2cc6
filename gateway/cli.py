"""The ``lakegate`` command."""

from __future__ import annotations

import argparse
import functools
import logging
import sys
from collections.abc import Mapping
from typing import NoReturn

from gateway.admin import SETTINGS_HINT, AdminKeyIsTenantKey, check_not_a_tenant_key
from gateway.admission import limited
from gateway.loops.sizing import initial_split
from gateway.rates import format_rate
from gateway.settings import Settings, SettingsError
from gateway.tenants import TenantDirectory, TenantsFileError

# files a node holds besides client connections: lake and peer connections, cache files, logs
_OTHER_FILES = 256

# flag -> settings field; flags override LAKEGATE_* environment variables
_SERVE_FLAGS = {
    "--listen": "listen",
    "--workers": "workers",
    "--lake": "lake",
    "--lake-access-key": "lake_access_key",
    "--lake-secret-key": "lake_secret_key",
    "--lake-region": "lake_region",
    "--tenants": "tenants_file",
    "--cache-dir": "cache_dir",
    "--tls-cert": "tls_cert",
    "--tls-key": "tls_key",
    "--virtual-host-suffix": "virtual_host_suffixes",
    "--log-level": "log_level",
    "--node-id": "node_id",
    "--peers": "peers",
    "--advertise-url": "advertise_url",
    "--cache-capacity": "cache_capacity",
    "--l2-capacity": "l2_capacity",
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lakegate", description="A multi-tenant caching S3 gateway for data lakes.")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run one gateway node")
    for flag, field in _SERVE_FLAGS.items():
        serve.add_argument(flag, dest=field, default=None, help=f"overrides LAKEGATE_{field.upper()}")
    serve.set_defaults(run=_serve_command)
    for module in _command_modules():
        module.register(sub)  # each sets its parsers' ``run`` default
    return parser


def _command_modules() -> list:  # type: ignore[type-arg]
    """The other subcommands, one module each: ``register(subparsers)`` adds its parsers."""
    from tools import admincli, cachecurve, localcluster
    from tools.replay import cli as replay_cli

    return [localcluster, replay_cli, cachecurve, admincli]


def _fail(message: str) -> NoReturn:
    print(f"lakegate: {message}", file=sys.stderr)
    sys.exit(2)


def load_settings(overrides: Mapping[str, str | None]) -> Settings:
    """The settings, or one line on stderr naming the bad one and exit status 2."""
    try:
        return Settings.load(**{k: v for k, v in overrides.items() if v is not None})
    except SettingsError as exc:
        _fail(f"invalid settings: {exc}")


def load_tenants(settings: Settings) -> TenantDirectory:
    """The tenants file, or one line on stderr and exit status 2 (also when a tenant's access key
    is the admin's)."""
    try:
        tenants = TenantDirectory.load(settings.server.tenants_file)
    except TenantsFileError as exc:
        _fail(f"invalid tenants file: {exc}")
    try:
        check_not_a_tenant_key(settings.admin, (t.access_key for t in tenants.tenants))
    except AdminKeyIsTenantKey as exc:
        _fail(f"invalid settings: {exc} ({settings.server.tenants_file})")
    return tenants


def _banner(settings: Settings, tenants: TenantDirectory) -> str:
    endpoint = f"{settings.server.scheme}://{settings.server.listen}"
    lake = settings.lake.location if settings.lake.s3 is None else f"S3 {settings.lake.location}"
    workers = settings.server.workers
    lines = [f"lakegate serving S3 at {endpoint}  (lake: {lake}; {workers} worker process{'es' if workers > 1 else ''})"]
    demo = next((t for t in tenants.tenants if t.demo), None)
    if demo is not None:
        lines += [
            f"demo tenant '{demo.name}': access key {demo.access_key}  secret key {demo.secret_key}",
            "try:",
            f"  export AWS_ACCESS_KEY_ID={demo.access_key} AWS_SECRET_ACCESS_KEY={demo.secret_key} AWS_DEFAULT_REGION=us-east-1",
            f"  aws --endpoint-url {endpoint} s3 mb s3://demo-bucket",
            f"  aws --endpoint-url {endpoint} s3 cp README.md s3://demo-bucket/",
            f"  aws --endpoint-url {endpoint} s3 ls s3://demo-bucket/",
            f"  python3 -c \"import boto3; s3 = boto3.client('s3', endpoint_url='{endpoint}'); "
            "print([b['Name'] for b in s3.list_buckets()['Buckets']])\"",
        ]
    else:
        lines.append(f"tenants: {', '.join(t.name for t in tenants.tenants)} (keys in {settings.server.tenants_file})")
    lines.append(f"health: {endpoint}/_lakegate/health/live, {endpoint}/_lakegate/health/ready"
                 f"   metrics: {endpoint}/metrics"
                 + ("  (admin credential)" if settings.admin.metrics_auth else ""))
    lines.append(_fairness_line(settings))
    lines.append(_sizing_line(settings))
    return "\n".join([*lines, *_admin_lines(settings, endpoint)])


def _fairness_line(settings: Settings) -> str:
    """What tenants share on this node: the mode and each rate set (the send rate's default,
    the interface's speed, is read by the node at start)."""
    fair = settings.fairness
    rates = [f"requests {fair.request_rate:g}/s" if fair.request_rate else "requests not limited",
             f"send {format_rate(fair.send_rate)}" if fair.send_rate else "send at the interface's speed",
             f"lake {format_rate(fair.lake_bandwidth)} cluster-wide" if fair.lake_bandwidth else "lake not limited"]
    if fair.mode == "off":
        return f"fairness: off ({'one first-come queue: ' + ', '.join(rates) if limited(fair) else 'nothing scheduled'})"
    return f"fairness: {fair.mode} (tenants share by weight: {', '.join(rates)}; queue {fair.tenant_queue} per tenant)"


def _sizing_line(settings: Settings) -> str:
    """The cache's tiers and whether their split moves (the split the node starts from)."""
    if not settings.cache.enabled:
        return "cache: off"
    l1, l2 = initial_split(settings)
    tiers = f"L1 {format_bytes(l1)}" + (f" + L2 {format_bytes(l2)}" if settings.cluster is not None else "")
    sizing = settings.sizing
    if sizing.adaptive:
        return (f"cache: {tiers}, split adaptive (D3N) every {sizing.interval:g} s within "
                f"{sizing.min_l1:.0%}-{sizing.max_l1:.0%} L1; curves: lakegate cache curve")
    return f"cache: {tiers}, fixed; curves: lakegate cache curve"


def format_bytes(size: int) -> str:
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.4g} {unit}"
    return f"{size} B"


def _admin_lines(settings: Settings, endpoint: str) -> list[str]:
    """How to reach /_lakegate/admin/*: the access key and the ways to sign, never a secret."""
    admin = settings.admin
    if not admin.configured:
        return [f"admin endpoints: off (403); set {SETTINGS_HINT}"]
    ways = []
    if admin.access_key:
        ways.append(f"SigV4 (service s3) with access key {admin.access_key}")
    if admin.token:
        ways.append("Authorization: Bearer <the token in LAKEGATE_ADMIN_TOKEN_FILE>")
    lines = [f"admin endpoints: {endpoint}/_lakegate/admin/stats, /cluster, /locate, /tenants, /sizing, "
             f"/replicas, /replication, /warm, /drop, /cached; {' or '.join(ways)}"]
    if admin.access_key:
        lines.append(f"  e.g. curl --aws-sigv4 aws:amz:us-east-1:s3 --user {admin.access_key}:$ADMIN_SECRET "
                     f"-H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' {endpoint}/_lakegate/admin/stats")
    lines.append(f"  or: lakegate admin warm|drop|stats --endpoint {endpoint} --bucket B --prefix P "
                 "(credentials from LAKEGATE_ADMIN_*)")
    return lines


def configure_logging(settings: Settings) -> None:
    logging.basicConfig(level=settings.server.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("httpx2").setLevel(logging.WARNING)  # a line per peer and lake request otherwise


def serve(settings: Settings, overrides: Mapping[str, str] | None = None) -> None:
    """Run the node: in this process with one worker, else as a supervisor of
    ``settings.server.workers`` worker processes (gateway.workers), ``overrides`` (flags by
    settings field) passed on to them."""
    import uvicorn

    from gateway.process import raise_open_files_limit

    server = settings.server
    tenants = load_tenants(settings)
    configure_logging(settings)
    print(_banner(settings, tenants), flush=True)
    warning = open_files_warning(raise_open_files_limit(), server.http.max_connections)
    if warning:
        logging.getLogger("lakegate").warning(warning)
    if server.workers > 1:
        from gateway.workers import supervise, worker_share

        supervise(settings, overrides or {}, _uvicorn_options(worker_share(settings)))
        return
    from gateway.app import LakegateApp
    from gateway.drain import DrainingServer
    from gateway.workers import STARTUP_FAILURE

    app = LakegateApp(settings, tenants=tenants)
    config = uvicorn.Config(app, **_uvicorn_options(settings))  # type: ignore[arg-type]
    uvicorn_server = DrainingServer(config)  # SIGTERM: drained, then exit status 0 (gateway.drain)
    uvicorn_server.run()
    if not uvicorn_server.started:
        sys.exit(STARTUP_FAILURE)


def _uvicorn_options(settings: Settings) -> dict[str, object]:
    from gateway.httpserver import LakegateHttpProtocol

    server = settings.server
    return dict(
        host=server.host,
        port=server.port,
        # uvicorn's httptools protocol within the HTTP limits; a GET's head and first bytes in one write
        # (uvicorn calls http= with its own arguments; a partial adds the limits)
        http=functools.partial(LakegateHttpProtocol, limits=server.http, zero_copy=server.zero_copy),
        ws="none",  # no WebSocket: an Upgrade request would leave the protocol and its limits
        log_level=server.log_level,
        access_log=False,  # ours (lakegate.access) leaves out query strings, which may hold signatures
        ssl_certfile=str(server.tls_cert) if server.tls_cert else None,
        ssl_keyfile=str(server.tls_key) if server.tls_key else None,
        server_header=False,
        timeout_graceful_shutdown=server.shutdown_timeout,  # SIGTERM: in-flight requests' bound
    )


def open_files_warning(open_files: int, max_connections: int) -> str | None:
    """What to warn of when the open files limit leaves no room for LAKEGATE_MAX_CONNECTIONS."""
    wanted = max_connections + _OTHER_FILES
    if open_files >= wanted:
        return None
    return (f"open files limit {open_files} is below LAKEGATE_MAX_CONNECTIONS + {_OTHER_FILES} ({wanted}): "
            "connections past it fail to be accepted instead of getting 503 SlowDown; raise it (ulimit -n) "
            "or lower LAKEGATE_MAX_CONNECTIONS")


def _serve_command(args: argparse.Namespace) -> None:
    overrides = {field: value for field in _SERVE_FLAGS.values() if (value := getattr(args, field)) is not None}
    serve(load_settings(overrides), overrides)


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    args.run(args)


if __name__ == "__main__":
    main()
