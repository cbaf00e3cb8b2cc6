"""``lakegate cache curve`` (issue 13): the curves of a node's sizing report as text and a PNG,
from the report file in the cache directory; one line on stderr and exit 1 without one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GiB = 1 << 30

REPORT = {
    "mode": "adaptive", "total_bytes": 8 * GiB, "target_l1_bytes": 5 * GiB, "reason": "move", "epochs": 12,
    "l1_capacity_bytes": 4 * GiB, "l2_capacity_bytes": 4 * GiB, "l1_miss_cost_s": 0.012, "l2_miss_cost_s": 0.08,
    "curves": {"l1": [[0, 1.0], [4 * GiB, 0.5], [8 * GiB, 0.25], [16 * GiB, 0.1]],
               "l2": [[0, 1.0], [2 * GiB, 0.2], [16 * GiB, 0.2]]},
}


def _curve(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway.cli", "cache", "curve", *args], capture_output=True,
                          text=True, timeout=120, cwd=cwd, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def test_the_curve_from_a_report_file_says_what_twice_the_ssd_gives(tmp_path: Path) -> None:
    report = tmp_path / "sizing.json"
    report.write_text(json.dumps(REPORT))
    done = _curve("--from", str(report), "--out", str(tmp_path / "curve.png"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("sizing: adaptive  total 8.00 GiB  target L1 5.00 GiB")
    assert "L1: 4.00 GiB  miss ratio 50.0%  (half: 75.0%, twice: 25.0%)  a miss costs 12.0 ms" in lines
    assert "L2: 4.00 GiB  miss ratio 20.0%  (half: 20.0%, twice: 20.0%)  a miss costs 80.0 ms" in lines
    assert (tmp_path / "curve.png").read_bytes().startswith(b"\x89PNG")


def test_the_default_is_the_cache_directorys_report_and_none_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "var" / "cache").mkdir(parents=True)
    done = _curve(cwd=tmp_path)
    assert done.returncode == 1 and done.stderr.count("\n") == 1 and "var/cache/sizing.json" in done.stderr
    (tmp_path / "var" / "cache" / "sizing.json").write_text(json.dumps(REPORT))
    done = _curve(cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("sizing: adaptive"), done.stderr
