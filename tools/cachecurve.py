"""``lakegate cache curve``: each tier's miss-ratio curve from a node's live workload, with its
current size marked, as a PNG and as a few lines of text ("what would twice the SSD give me?").

The curves come from the node's sizing report (issue 13): ``/_lakegate/admin/sizing`` of a
running node (``--from URL``, signed with the admin credential, LAKEGATE_ADMIN_ACCESS_KEY and
LAKEGATE_ADMIN_SECRET_KEY, or a bearer token file), or the report file the node writes in its
cache directory (``--from PATH``; default ``$LAKEGATE_CACHE_DIR/sizing.json``, var/cache). The
admin endpoint draws the same picture with ``?format=png`` (``draw``).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

TIERS = ("l1", "l2")
_COLOURS = {"l1": "tab:blue", "l2": "tab:orange"}


def ratio_at(curve: Sequence[Sequence[float]], size: float) -> float | None:
    """The curve's miss ratio at ``size`` bytes (linear between points; None: no curve)."""
    points = [(float(s), float(r)) for s, r in curve]
    if not points:
        return None
    if size <= points[0][0]:
        return points[0][1]
    for (s0, r0), (s1, r1) in zip(points, points[1:]):
        if size <= s1:
            return r0 + (r1 - r0) * (size - s0) / (s1 - s0) if s1 > s0 else r1
    return points[-1][1]


def summary(report: Mapping[str, Any]) -> list[str]:
    """One line per tier: its size now, and the miss ratio at half, now, and twice that."""
    lines = [f"sizing: {report.get('mode')}  total {_gib(report.get('total_bytes', 0))}  "
             f"target L1 {_gib(report.get('target_l1_bytes', 0))}  ({report.get('reason', '-')}, "
             f"{report.get('epochs', 0)} epochs)"]
    curves = report.get("curves") or {}
    for tier in TIERS:
        curve = curves.get(tier) or []
        size = float(report.get(f"{tier}_capacity_bytes") or 0)
        if not curve:
            lines.append(f"{tier.upper()}: {_gib(size)}, no curve yet" if size else f"{tier.upper()}: none")
            continue
        at = [ratio_at(curve, size * factor) for factor in (0.5, 1.0, 2.0)]
        cost = report.get(f"{tier}_miss_cost_s")
        lines.append(f"{tier.upper()}: {_gib(size)}  miss ratio {_pct(at[1])}  (half: {_pct(at[0])}, twice: "
                     f"{_pct(at[2])})" + (f"  a miss costs {cost * 1000:.1f} ms" if isinstance(cost, (int, float)) else ""))
    return lines


def draw(report: Mapping[str, Any], tiers: Sequence[str] = TIERS) -> bytes:
    """The curves as a PNG (matplotlib, imported here: ImportError when it is not installed). The
    figure is matplotlib's object API, not pyplot's global state: safe from any thread."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.2))
    ax = fig.subplots()
    curves = report.get("curves") or {}
    for tier in tiers:
        curve = curves.get(tier) or []
        if not curve:
            continue
        xs = [s / 2**30 for s, _ in curve]
        ax.plot(xs, [r for _, r in curve], label=f"{tier.upper()} miss ratio", color=_COLOURS.get(tier))
        size = report.get(f"{tier}_capacity_bytes") or 0
        ratio = ratio_at(curve, size)
        if size and ratio is not None:
            ax.axvline(size / 2**30, color=_COLOURS.get(tier), linestyle=":", linewidth=1)
            ax.plot([size / 2**30], [ratio], "o", color=_COLOURS.get(tier))
            ax.annotate(f"{tier.upper()} now: {_gib(size)}, {_pct(ratio)}", (size / 2**30, ratio),
                        textcoords="offset points", xytext=(6, 6), fontsize=8)
    ax.set_xlabel("cache size (GiB)")
    ax.set_ylabel("miss ratio")
    ax.set_ylim(0, 1.02)
    ax.set_title(f"miss-ratio curves from the live workload (SHARDS, {report.get('mode', '?')} sizing)")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right")
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png", dpi=110)
    return buffer.getvalue()


def load(source: str, token_file: str | None = None) -> dict[str, Any]:
    """The report from a node's URL (``http(s)://host:port``) or a file."""
    if source.startswith(("http://", "https://")):
        url = source.rstrip("/") + "/_lakegate/admin/sizing"
        request = urllib.request.Request(url, headers=_auth_headers(url, token_file))
        with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310 - an operator's own URL
            doc = json.loads(answer.read())
    else:
        doc = json.loads(Path(source).read_text())
    if not isinstance(doc, dict):
        raise ValueError(f"{source}: not a sizing report")
    return doc


def _auth_headers(url: str, token_file: str | None) -> dict[str, str]:
    if token_file:
        return {"authorization": f"Bearer {Path(token_file).read_text().strip()}"}
    access, secret = os.environ.get("LAKEGATE_ADMIN_ACCESS_KEY"), os.environ.get("LAKEGATE_ADMIN_SECRET_KEY")
    if not (access and secret):
        raise ValueError("set LAKEGATE_ADMIN_ACCESS_KEY and LAKEGATE_ADMIN_SECRET_KEY, or give --token-file")
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    request = AWSRequest(method="GET", url=url)
    SigV4Auth(Credentials(access, secret), "s3", "us-east-1").add_auth(request)
    return dict(request.headers.items())


def _gib(size: object) -> str:
    return f"{float(size) / 2**30:.2f} GiB" if isinstance(size, (int, float)) else "?"


def _pct(ratio: float | None) -> str:
    return "?" if ratio is None else f"{100 * ratio:.1f}%"


def _curve(args: argparse.Namespace) -> None:
    code = curve_command(args)
    if code:
        sys.exit(code)


def curve_command(args: argparse.Namespace) -> int:
    source = args.source or str(Path(os.environ.get("LAKEGATE_CACHE_DIR", "var/cache")) / "sizing.json")
    try:
        report = load(source, args.token_file)
    except (OSError, ValueError) as exc:
        print(f"lakegate: cannot read the sizing report from {source}: {exc}", file=sys.stderr)
        return 1
    print("\n".join(summary(report)))
    if args.out:
        try:
            png = draw(report, TIERS if args.tier == "all" else (args.tier,))
        except ImportError:
            print("lakegate: drawing needs matplotlib (pip install matplotlib)", file=sys.stderr)
            return 1
        Path(args.out).write_bytes(png)
        print(f"wrote {args.out}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    cache = sub.add_parser("cache", help="the cache's miss-ratio curves (sizing)")
    commands = cache.add_subparsers(dest="cache_command", required=True)
    curve = commands.add_parser("curve", help="each tier's miss-ratio curve from the live workload")
    curve.add_argument("--from", dest="source", help="a node's URL, or a sizing.json (default: "
                       "$LAKEGATE_CACHE_DIR/sizing.json)")
    curve.add_argument("--out", help="write the curves as a PNG here")
    curve.add_argument("--tier", choices=("all", *TIERS), default="all")
    curve.add_argument("--token-file", help="the admin bearer token (else the admin key pair from the environment)")
    curve.set_defaults(run=_curve)
