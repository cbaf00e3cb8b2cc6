"""What a benchmark reports: statistics over samples, facts about the machine and the
revision, and the one JSON result (stdout + benchmarks/results/<name>.json). Progress goes to
stderr (processes.log); stdout is kept for the result.
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import subprocess
from pathlib import Path
from typing import Any

from harness.processes import REPO_ROOT, log

RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100), linear interpolation between closest ranks."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def rounded(value: float, digits: int = 3) -> float:
    return value if math.isnan(value) else round(value, digits)


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
    }
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.partition(":")[2].strip()
                break
        mem = Path("/proc/meminfo").read_text().split("\n", 1)[0].split()
        info["mem_GiB"] = round(int(mem[1]) / 1024**2, 1)
    except OSError:
        pass
    return info


def filesystem_of(path: Path) -> dict[str, str]:
    """The mount holding ``path`` (device, mount point, type) from /proc/mounts: e.g. to show a
    cache directory is on a local disk, not tmpfs."""
    path = path.resolve()
    best = ("?", "/", "?")
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            device, mount, fstype = line.split()[:3]
            if (path == Path(mount) or Path(mount) in path.parents) and len(mount) >= len(best[1]):
                best = (device, mount, fstype)
    except OSError:
        pass
    return {"device": best[0], "mount": best[1], "type": best[2]}


def git_revision() -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=10, check=False)
        return out.stdout.strip() or None
    except OSError:
        return None


def emit_result(name: str, result: dict[str, Any], path: Path | None = None) -> Path:
    """Print ``result`` as one JSON object on stdout and write it to ``path`` (default
    benchmarks/results/<name>.json; that folder is git-ignored)."""
    path = path or RESULTS_DIR / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(result, indent=2)
    path.write_text(text + "\n")
    print(text, flush=True)
    log(f"result written to {path}")
    return path


def save_figure(fig: Any, path: Path, dpi: int = 110) -> None:
    """Lay out a matplotlib figure, write it to ``path`` (folders made) and close it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    log(f"plot written to {path}")
