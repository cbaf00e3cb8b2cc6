"""deploy/prometheus's rule files pass `promtool check rules`, and its unit tests
(lakegate-rules.test.yml: each alert fires on synthetic series of a node in trouble, and stays
quiet for a healthy one and before its `for:`) pass `promtool test rules`; deploy/grafana's
dashboards are Grafana JSON models whose panels query the Prometheus datasource variable.
Debian's prometheus package brings promtool (`make test` installs it)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
RULES = sorted((DEPLOY / "prometheus").glob("*rules*.yml"))
DASHBOARDS = sorted((DEPLOY / "grafana").glob("*.json"))
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool missing (Debian package prometheus; "
                                    "`make test` installs it)")


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], cwd=DEPLOY / "prometheus", capture_output=True, text=True,
                          timeout=60, check=False)


@needs_promtool
def test_the_rule_files_are_valid() -> None:
    rule_files = [p for p in RULES if not p.name.endswith(".test.yml")]
    assert rule_files, "no rule file in deploy/prometheus"
    done = promtool("check", "rules", *map(str, rule_files))
    assert done.returncode == 0, done.stdout + done.stderr


@needs_promtool
def test_each_alert_fires_on_trouble_and_stays_quiet_otherwise() -> None:
    tests = [p for p in RULES if p.name.endswith(".test.yml")]
    assert tests, "no promtool unit test in deploy/prometheus"
    done = promtool("test", "rules", *map(str, tests))
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_dashboards_query_the_prometheus_datasource_variable() -> None:
    assert DASHBOARDS, "no dashboard in deploy/grafana"
    for path in DASHBOARDS:
        dashboard = json.loads(path.read_text())
        variables = {v["name"]: v for v in dashboard["templating"]["list"]}
        assert variables["DS_PROMETHEUS"]["type"] == "datasource", path.name
        panels = [p for p in dashboard["panels"] if p["type"] != "row"]
        assert panels and len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"]), path.name
        for panel in panels:
            assert panel["datasource"]["uid"] == "${DS_PROMETHEUS}", panel["title"]
            assert panel["targets"] and all(t["expr"].strip() for t in panel["targets"]), panel["title"]
            assert len({t["refId"] for t in panel["targets"]}) == len(panel["targets"]), panel["title"]
