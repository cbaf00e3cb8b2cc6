"""What a replay reports: the progress line, the JSON result, the human summary and the
cumulative-bytes plot. Pure functions of the outcomes, except :func:`plot`, which writes
a PNG with matplotlib (the ``bench`` extra, imported only when a plot is asked for).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tools.replay.runner import Outcome, Progress

MiB = 1024 * 1024
_PERCENTILES = (50, 90, 99)
_CURVE_POINTS = 500  # the cumulative-bytes curve in the JSON result, at most this many points
_MISMATCH_EXAMPLES = 10


class PlotUnavailable(RuntimeError):
    """--plot was asked for without matplotlib installed."""


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (a value that was measured, never an interpolation)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(pct / 100 * len(ordered)) - 1)]


def progress_line(progress: Progress) -> str:
    rate = progress.bytes / MiB / progress.elapsed if progress.elapsed > 0 else 0.0
    mismatches = f", {progress.mismatches} byte count mismatches" if progress.mismatches else ""
    return (f"replay: {progress.done}/{progress.total} requests, {progress.bytes / MiB:.1f} MiB "
            f"({rate:.1f} MiB/s), {progress.errors} errors{mismatches}, {progress.elapsed:.1f} s")


def result(outcomes: Sequence[Outcome], settings: dict[str, Any]) -> dict[str, Any]:
    """The JSON result of a replay. ``completion_s`` is when the last request finished,
    counted from the start of the replay; latencies are curl's, in milliseconds."""
    latencies = [o.latency * 1000 for o in outcomes if o.ok]
    first_bytes = [o.first_byte * 1000 for o in outcomes if o.ok]
    mismatches = [o for o in outcomes if o.mismatch]
    expected = [o.record.expected_bytes for o in outcomes]
    return {
        "settings": settings,
        "requests": len(outcomes),
        "ok": sum(o.ok for o in outcomes),
        "errors": sum(not o.ok for o in outcomes),
        "errors_by_status": dict(sorted(Counter(o.status for o in outcomes if not o.ok).items())),
        "byte_mismatches": len(mismatches),
        "mismatch_examples": [_mismatch(o) for o in mismatches[:_MISMATCH_EXAMPLES]],
        "completion_s": round(max((o.finished for o in outcomes), default=0.0), 3),
        "bytes": sum(o.bytes for o in outcomes),
        "expected_bytes": sum(e for e in expected if e is not None),
        "unchecked_requests": sum(e is None for e in expected),
        "latency_ms": {f"p{p}": round(percentile(latencies, p), 2) for p in _PERCENTILES},
        "first_byte_ms": {f"p{p}": round(percentile(first_bytes, p), 2) for p in _PERCENTILES},
        "cumulative_bytes": cumulative_bytes(outcomes),
    }


def _mismatch(outcome: Outcome) -> dict[str, Any]:
    record = outcome.record
    return {"bucket": record.bucket, "key": record.key, "range": record.range_header,
            "expected": record.expected_bytes, "received": outcome.bytes}


def cumulative_bytes(outcomes: Sequence[Outcome]) -> list[list[float]]:
    """[seconds, bytes received by then] at each completion, thinned to a few hundred
    points (always keeping the last)."""
    points: list[list[float]] = []
    total = 0
    for outcome in sorted(outcomes, key=lambda o: o.finished):
        total += outcome.bytes
        points.append([round(outcome.finished, 3), total])
    step = max(1, math.ceil(len(points) / _CURVE_POINTS))
    thinned = points[step - 1::step]
    if points and thinned[-1:] != points[-1:]:
        thinned.append(points[-1])
    return thinned


def summary(res: dict[str, Any]) -> str:
    """The human summary of a :func:`result`."""
    lat, ttfb = res["latency_ms"], res["first_byte_ms"]
    rate = res["bytes"] / MiB / res["completion_s"] if res["completion_s"] else 0.0
    lines = [
        (f"completed in {res['completion_s']:.2f} s: {res['requests']} requests, {res['ok']} ok, "
         f"{res['errors']} errors"),
        (f"bytes: {res['bytes'] / MiB:.1f} MiB received ({rate:.1f} MiB/s), "
         f"{res['expected_bytes'] / MiB:.1f} MiB expected by the trace"),
        (f"latency ms: p50 {lat['p50']}  p90 {lat['p90']}  p99 {lat['p99']}   "
         f"(first byte: p50 {ttfb['p50']}  p90 {ttfb['p90']}  p99 {ttfb['p99']})"),
    ]
    if res["errors_by_status"]:
        lines.append("errors by status: " + ", ".join(f"{k} x{v}" for k, v in res["errors_by_status"].items()))
    if res["byte_mismatches"]:
        lines.append(f"byte count mismatches: {res['byte_mismatches']} (examples in the JSON result)")
    if res["unchecked_requests"]:
        lines.append(f"{res['unchecked_requests']} whole-object requests not checked (no size in the trace)")
    return "\n".join(lines)


def require_matplotlib() -> None:
    """Fail before the replay, not after it, when a plot cannot be drawn."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise PlotUnavailable("--plot needs matplotlib: pip install 'lakegate[bench]'") from exc


def plot(res: dict[str, Any], path: Path, title: str = "lakegate replay") -> None:
    """Cumulative bytes received over time, as a PNG."""
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    unit, scale = ("GiB", 1024**3) if res["bytes"] >= 1024**3 else ("MiB", MiB)
    seconds = [0.0] + [p[0] for p in res["cumulative_bytes"]]
    received = [0.0] + [p[1] / scale for p in res["cumulative_bytes"]]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.step(seconds, received, where="post")
    ax.set_xlabel("seconds since start")
    ax.set_ylabel(f"{unit} received")
    ax.set_title(f"{title}: {res['requests']} requests, {res['errors']} errors")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
