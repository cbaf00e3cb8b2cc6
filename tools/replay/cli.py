"""``lakegate replay`` and ``lakegate trace synth``: argument parsing and the two commands'
flow. Exit codes: 0 done, 1 the replay saw errors or byte count mismatches, 2 bad input
(a trace line, credentials, parameters) or a failed upload.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import sys
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, NoReturn

from pydantic import ByteSize, TypeAdapter, ValidationError

from tools.replay import report
from tools.replay.credentials import Credentials, CredentialsError
from tools.replay.runner import Progress, Replay, ReplayOptions
from tools.replay.synth import DataObject, SynthParams, synthesize
from tools.replay.trace import TraceFormatError, read_trace, write_trace
from tools.replay.upload import UploadError, upload

_DEFAULTS = SynthParams()
_SIZE_FLAGS = ("size_median", "size_min", "size_max", "split_size")


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    replay = sub.add_parser("replay", help="replay a trace of GETs with curl mappers",
                            description="Replay a trace (JSON Lines or CSV, docs/replay.md) with "
                                        "concurrent curl mappers on presigned URLs.")
    replay.add_argument("trace", type=Path, help="trace file (.jsonl, or .csv)")
    _add_endpoint_flags(replay, required=True,
                        help="S3 endpoint URL (lakegate or the lake); several cache nodes comma-separated: "
                             "mappers are spread over them round robin")
    replay.add_argument("--mappers", type=_positive(int), default=ReplayOptions.mappers,
                        help="concurrent curl mappers (default %(default)s)")
    replay.add_argument("--speed", type=_positive(float), default=1.0,
                        help="arrival speed-up factor: 2 replays a 60 s trace's arrivals in 30 s")
    replay.add_argument("--no-wait", dest="wait", action="store_false",
                        help="ignore arrival offsets: every mapper goes as fast as it can")
    replay.add_argument("--timeout", type=_positive(float), default=ReplayOptions.timeout,
                        help="seconds one request may take (default %(default)s)")
    replay.add_argument("--json", type=Path, help="also write the JSON result here")
    replay.add_argument("--plot", type=Path, help="draw cumulative bytes over time (PNG; needs matplotlib)")
    replay.add_argument("--no-progress", dest="progress", action="store_false", help="no progress line")
    replay.set_defaults(run=run_replay)

    trace = sub.add_parser("trace", help="trace tools (synth)")
    trace_sub = trace.add_subparsers(dest="trace_command", required=True)
    trace.set_defaults(run=lambda args: trace.error("a trace command is needed: synth"))
    _add_synth_parser(trace_sub)


def _add_synth_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    synth = sub.add_parser("synth", help="generate a Facebook-like trace (and upload its data set)",
                           description="Generate a seeded, Facebook-like read trace and the "
                                       "data set it reads (model: docs/replay.md).")
    flags: dict[str, tuple[Any, str]] = {
        "files": (_positive(int), "files in the population"),
        "requests": (_positive(int), "requests in the trace"),
        "jobs": (_positive(int), "stop after this many jobs (or at --requests, whichever comes first)"),
        "seed": (int, "random seed: same parameters and seed, same trace"),
        "reuse": (float, "fraction of requested bytes that re-read earlier requests' bytes"),
        "zipf": (float, "Zipf exponent of re-read popularity over recency rank"),
        "tenants": (_positive(int), "tenants (one bucket each, files round robin)"),
        "size_median": (_byte_size, "median file size (lognormal)"),
        "size_sigma": (float, "lognormal shape: larger, heavier tail"),
        "size_min": (_byte_size, "smallest file"),
        "size_max": (_byte_size, "largest file"),
        "split_size": (_byte_size, "bytes per mapper request (a ranged GET)"),
        "job_interval": (float, "mean seconds between job arrivals (Poisson)"),
        "bucket_prefix": (str, "buckets are PREFIX-tenant-N"),
    }
    for name, (kind, text) in flags.items():
        default = getattr(_DEFAULTS, name)
        synth.add_argument("--" + name.replace("_", "-"), dest=name, type=kind, default=default,
                           help=f"{text} (default {default})")
    synth.add_argument("--out", type=Path, default=Path("trace.jsonl"),
                       help="trace file; .csv for CSV, else JSON Lines (default %(default)s)")
    synth.add_argument("--manifest", type=Path, help="data set manifest (default: OUT with .manifest.json)")
    synth.add_argument("--upload", action="store_true", help="create the buckets and upload the data set")
    _add_endpoint_flags(synth, required=False)
    synth.set_defaults(run=run_synth)


def _add_endpoint_flags(parser: argparse.ArgumentParser, required: bool,
                        help: str = "S3 endpoint URL (lakegate or the lake)") -> None:
    parser.add_argument("--endpoint", required=required, help=help)
    parser.add_argument("--access-key", default=os.environ.get("AWS_ACCESS_KEY_ID"),
                        help="access key for every tenant without its own (default: $AWS_ACCESS_KEY_ID)")
    parser.add_argument("--secret-key", default=os.environ.get("AWS_SECRET_ACCESS_KEY"),
                        help="its secret key (default: $AWS_SECRET_ACCESS_KEY; flags show in ps)")
    parser.add_argument("--credentials", type=Path,
                        help="TOML of [[tenant]] name, access_key, secret_key (a lakegate tenants file works)")
    parser.add_argument("--region", default="us-east-1", help="region to sign with (default %(default)s)")
    parser.add_argument("--cacert", help="CA bundle for an https endpoint")


def _positive(kind: type) -> Any:
    def parse(text: str) -> Any:
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, not {text}")
        return value
    parse.__name__ = kind.__name__  # argparse names the type in its error message
    return parse


def _byte_size(text: str) -> int:
    """``8MiB``, ``64KB``, ``1048576``: pydantic's ByteSize reads all of them."""
    try:
        return int(TypeAdapter(ByteSize).validate_python(text))
    except ValidationError as exc:
        raise argparse.ArgumentTypeError(f"not a byte size: {text!r}") from exc


def _fail(message: str) -> NoReturn:
    print(f"lakegate: {message}", file=sys.stderr)
    sys.exit(2)


def _credentials(args: argparse.Namespace) -> Credentials:
    try:
        return Credentials.load(args.credentials, args.access_key, args.secret_key)
    except CredentialsError as exc:
        _fail(str(exc))


def run_replay(args: argparse.Namespace) -> None:
    try:
        records = read_trace(args.trace)
    except TraceFormatError as exc:
        _fail(f"bad trace: {exc}")
    credentials = _credentials(args)
    try:
        credentials.check_covers(r.tenant for r in records)
        if args.plot:
            report.require_matplotlib()
    except (CredentialsError, report.PlotUnavailable) as exc:
        _fail(str(exc))
    if shutil.which("curl") is None:
        _fail("replay needs the curl binary on PATH (Debian: apt-get install curl)")
    options = ReplayOptions(endpoint=args.endpoint, region=args.region, mappers=args.mappers,
                            speed=args.speed, wait=args.wait, timeout=args.timeout, ca_bundle=args.cacert)
    outcomes = Replay(records, credentials, options).run(_progress_printer() if args.progress else None)
    settings = {k: v for k, v in asdict(options).items() if k != "curl"} | {"trace": str(args.trace)}
    res = report.result(outcomes, settings)
    print(report.summary(res), file=sys.stderr)
    _write_outputs(res, args)
    sys.exit(1 if res["errors"] or res["byte_mismatches"] else 0)


def _write_outputs(res: dict[str, Any], args: argparse.Namespace) -> None:
    text = json.dumps(res, indent=2)
    if args.json:
        args.json.write_text(text + "\n")
    if args.plot:
        report.plot(res, args.plot, title=args.trace.name)
    print(text)


def _progress_printer() -> Any:
    """A progress line on stderr: redrawn in place on a terminal, else one line every 10 s
    (a log file gets a readable record, not a wall of carriage returns)."""
    tty = sys.stderr.isatty()
    last = [-10.0]

    def show(progress: Progress) -> None:
        finished = progress.done == progress.total
        if tty:
            print("\r" + report.progress_line(progress), end="\n" if finished else "", file=sys.stderr, flush=True)
        elif finished or progress.elapsed - last[0] >= 10:
            last[0] = progress.elapsed
            print(report.progress_line(progress), file=sys.stderr, flush=True)
    return show


def run_synth(args: argparse.Namespace) -> None:
    try:
        params = SynthParams(**{f.name: getattr(args, f.name) for f in fields(SynthParams)})
    except ValueError as exc:
        _fail(f"invalid parameters: {exc}")
    credentials = _credentials(args) if args.upload else None
    if args.upload and not args.endpoint:
        _fail("--upload needs --endpoint")
    trace = synthesize(params)
    write_trace(args.out, trace.records)
    manifest_path = args.manifest or args.out.with_suffix(".manifest.json")
    manifest = trace.manifest()
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")
    stats = trace.stats
    print(f"trace: {args.out} ({stats.requests} requests, {stats.jobs} jobs, "
          f"{stats.requested_bytes / report.MiB:.1f} MiB requested, reuse {stats.reuse:.3f}); "
          f"data set: {manifest_path} ({len(manifest['objects'])} objects, "
          f"{manifest['total_bytes'] / report.MiB:.1f} MiB)", file=sys.stderr)
    if stats.population_exhausted:
        print(f"lakegate: every file was read before the trace ended, so reuse is {stats.reuse:.3f} "
              f"rather than {params.reuse}: give more --files", file=sys.stderr)
    if credentials is not None:
        _upload(trace.data_set(), args, credentials)


def _upload(objects: list[DataObject], args: argparse.Namespace, credentials: Credentials) -> None:
    counter = itertools.count(1)  # next() on it is atomic: the upload threads share it

    def done(obj: DataObject, uploaded: bool) -> None:
        count = next(counter)
        if count % 50 == 0 or count == len(objects):
            print(f"upload: {count}/{len(objects)} objects", file=sys.stderr, flush=True)
    try:
        credentials.check_covers(o.tenant for o in objects)
        sent = upload(objects, args.endpoint, credentials, args.region, args.cacert, done)
    except (CredentialsError, UploadError) as exc:
        _fail(str(exc))
    print(f"upload: {sent / report.MiB:.1f} MiB uploaded to {args.endpoint}", file=sys.stderr)
