"""Every panel of deploy/grafana's dashboards shows data from real nodes: two lakegate nodes
over the real RGW, with tenants of weights 1 and 3 and write-back on for one bucket
(LAKEGATE_WRITE_MODE_BUCKETS), are loaded by a thread of bounded boto3 GETs and PUTs (a few of
them of keys that do not exist: clients' 404s, which the S3 error panel shows); a real
Prometheus (Debian's /usr/bin/prometheus, on a free loopback port in 18500-18599, its storage in
tmp) scrapes every node each second as job "lakegate" and loads deploy/prometheus's rules. Then
each target's query of each panel, and each template variable's label_values query, is
evaluated through /api/v1/query and must return a non-empty result, once with the variables at
"All" and once at one node and the weight-3 tenant. The rule files' own checks (promtool check
rules / test rules) are tests/component/test_prometheus_rules.py.

Grafana's variables, substituted as Grafana would: ``$__rate_interval`` -> 30s (15 scrape
intervals: a rate needs two samples, and a node under load on this 2-core machine misses
scrapes now and then), ``$__range`` -> 1m, ``$node`` -> ``.*``
(the All value) or one node's ``host:port``, ``$tenant`` -> ``.*`` or ``bravo``. A query left
with a ``$`` after that fails the test (a variable the test does not know). /metrics is open
(LAKEGATE_METRICS_AUTH off, the default), so the scrape carries no token.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from harness.cluster import LocalCluster
from harness.endpoints import ALICE, Target, Tenant, empty_and_delete_bucket, unique_bucket_name
from harness.ports import port_busy
from harness.processes import terminate
from harness.units import KiB

pytestmark = pytest.mark.integration

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
PROMETHEUS = shutil.which("prometheus")
BRAVO = Tenant("bravo", "AKIDBRAVO00000000001", "bravo-secret-0123456789", weight=3.0)
PORTS = range(18500, 18600)
LOAD_S = 25.0  # the load runs this long at most, the queries are evaluated during its last seconds
OBJECT = 192 * KiB
KEYS = [f"hot/{i:02d}" for i in range(12)]
SUBSTITUTIONS = {"$__rate_interval": "30s", "$__range": "1m"}


def wait_until(condition: Callable[[], bool], timeout: float, what: str, interval: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout:.0f} s")
        time.sleep(interval)


@dataclass
class Prometheus:
    url: str
    process: subprocess.Popen[bytes]

    def query(self, expr: str) -> list[dict[str, Any]]:
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
        with urllib.request.urlopen(url, timeout=10) as response:
            answer = json.load(response)
        assert answer["status"] == "success", answer
        result = answer["data"]["result"]
        return result if isinstance(result, list) else [result]


def free_prometheus_port() -> int:
    for port in PORTS:
        if not port_busy(port):
            return port
    pytest.fail(f"no free port in {PORTS.start}-{PORTS.stop - 1} for Prometheus")


def start_prometheus(tmp: Path, targets: list[str]) -> Prometheus:
    assert PROMETHEUS is not None
    rules = [str(p) for p in sorted((DEPLOY / "prometheus").glob("*rules*.yml")) if not p.name.endswith(".test.yml")]
    config = {  # JSON is YAML
        # a 2 s timeout: a node's /metrics under the test's load can take over a second here
        "global": {"scrape_interval": "2s", "scrape_timeout": "2s", "evaluation_interval": "1s"},
        "rule_files": rules,
        "scrape_configs": [{"job_name": "lakegate", "static_configs": [{"targets": targets}]}],
    }
    (tmp / "prometheus.yml").write_text(json.dumps(config))
    port = free_prometheus_port()
    log = (tmp / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [PROMETHEUS, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    log.close()
    prometheus = Prometheus(f"http://127.0.0.1:{port}", process)

    def ready() -> bool:
        if process.poll() is not None:
            pytest.fail(f"prometheus exited {process.returncode}:\n{(tmp / 'prometheus.log').read_text()}")
        try:
            with urllib.request.urlopen(f"{prometheus.url}/-/ready", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    wait_until(ready, 30, "prometheus ready")
    return prometheus


@pytest.fixture
def buckets(rgw_target: Target) -> Iterator[tuple[str, str]]:
    """A bucket of objects to read (made in the lake) and a bucket written back."""
    lake = rgw_target.client()
    read, written = unique_bucket_name("dash-read"), unique_bucket_name("dash-wb")
    for bucket in (read, written):
        lake.create_bucket(Bucket=bucket)
    for key in KEYS:
        lake.put_object(Bucket=read, Key=key, Body=os.urandom(OBJECT))
    yield read, written
    for bucket in (read, written):
        empty_and_delete_bucket(lake, bucket)
    lake.close()


@pytest.fixture
def nodes(rgw_target: Target, buckets: tuple[str, str], tmp_path: Path) -> Iterator[LocalCluster]:
    env = {"LAKEGATE_ACCESS_LOG": "false", "LAKEGATE_WRITE_MODE_BUCKETS": f"{buckets[1]}=write-back",
           "LAKEGATE_BLOCK_SIZE": str(64 * KiB)}
    cluster = LocalCluster(rgw_target.endpoint, nodes=2, tenants=(ALICE, BRAVO), env=env, workdir=tmp_path / "nodes")
    cluster.workdir.mkdir()  # type: ignore[union-attr]
    try:
        yield cluster.up()
    finally:
        cluster.down()


@pytest.fixture
def prometheus(nodes: LocalCluster, tmp_path: Path) -> Iterator[Prometheus]:
    targets = [url.split("//", 1)[1] for url in nodes.urls.values()]
    (tmp_path / "prom").mkdir()
    prometheus = start_prometheus(tmp_path / "prom", targets)
    yield prometheus
    terminate(prometheus.process, signal.SIGTERM, 20.0)


class Load(threading.Thread):
    """Bounded boto3 GETs (hot keys, and a missing one now and then) and PUTs (to the written-back
    bucket) for both tenants through every node, until stopped or LOAD_S has passed; bravo
    (weight 3) reads three times as often as alice."""

    def __init__(self, nodes: LocalCluster, read: str, written: str) -> None:
        super().__init__(daemon=True)
        self.read, self.written = read, written
        self.clients = [(tenant, Target(node, url, tenant.access_key, tenant.secret_key, "rgw", True).client())
                        for node, url in nodes.urls.items() for tenant in (ALICE, BRAVO)]
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.requests = 0

    def run(self) -> None:
        deadline = time.monotonic() + LOAD_S
        body = os.urandom(32 * KiB)
        try:
            for step in itertools.count():
                if self.stop.is_set() or time.monotonic() > deadline:
                    return
                tenant, s3 = self.clients[step % len(self.clients)]
                for key in KEYS[step % 4::4][: 3 if tenant is BRAVO else 1]:
                    s3.get_object(Bucket=self.read, Key=key)["Body"].read()
                if step % 3 == 0:
                    s3.put_object(Bucket=self.written, Key=f"{tenant.name}/{step % 10}", Body=body)
                if step % 10 == 0:
                    try:
                        s3.head_object(Bucket=self.read, Key="absent")
                    except ClientError:
                        pass  # a 404, counted by the node as NoSuchKey
                    try:
                        s3.get_object(Bucket=self.read, Key="absent")
                    except s3.exceptions.NoSuchKey:
                        pass
                self.requests += 1
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.errors.append(exc)
        finally:
            for _, s3 in self.clients:
                s3.close()


def dashboard_queries() -> list[tuple[str, str, str]]:
    """(dashboard, panel title, expr) of every target, and of every label_values variable."""
    found = []
    for path in sorted((DEPLOY / "grafana").glob("*.json")):
        dashboard = json.loads(path.read_text())
        for variable in dashboard["templating"]["list"]:
            if variable["type"] == "query":
                match = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", variable["definition"])
                assert match, f"{path.name}: variable {variable['name']} is not label_values(expr, label)"
                found.append((path.name, f"variable {variable['name']}", match[1]))
        for panel in dashboard["panels"]:
            for target in panel.get("targets", []):
                found.append((path.name, panel["title"], target["expr"]))
    assert found
    return found


def substitute(expr: str, node: str, tenant: str) -> str:
    for name, value in {**SUBSTITUTIONS, "$node": node, "$tenant": tenant}.items():
        expr = expr.replace("${" + name[1:] + "}", value).replace(name, value)
    assert "$" not in expr, f"a variable the test does not substitute: {expr}"
    return expr


def assert_rules_evaluate(prometheus: Prometheus) -> None:
    """Prometheus loaded every rule of the rule files and evaluates each on the nodes' real
    series without an error (a wrong label match or type would show here)."""
    def rules() -> list[dict[str, Any]]:
        with urllib.request.urlopen(f"{prometheus.url}/api/v1/rules", timeout=10) as response:
            groups = json.load(response)["data"]["groups"]
        return [rule for group in groups for rule in group["rules"]]

    wait_until(lambda: bool(rules()) and all(r["health"] != "unknown" for r in rules()), 30, "rules evaluated")
    loaded = rules()
    assert all(rule["health"] == "ok" for rule in loaded), loaded
    # a healthy cluster: nothing beyond pending (every alert has a `for:` of a minute or more)
    assert not [rule["name"] for rule in loaded if rule.get("state") == "firing"]


def test_every_dashboard_panel_shows_data_from_nodes_under_load(
        nodes: LocalCluster, prometheus: Prometheus, buckets: tuple[str, str]) -> None:
    started = time.monotonic()
    load = Load(nodes, *buckets)
    load.start()
    try:
        # every node scraped, and a write-back replication under way
        # every node scraped a few times in the rate window (two samples at the least)
        wait_until(lambda: len(prometheus.query('sum_over_time(up{job="lakegate"}[30s]) >= 4')) == 2, 60,
                   "both nodes scraped four times")
        wait_until(lambda: bool(prometheus.query("sum(lakegate_writeback_accepted_total) > 0")), 30,
                   "write-back PUTs counted")
        wait_until(lambda: bool(prometheus.query("sum(rate(lakegate_l1_hits_total[30s])) > 0")), 30,
                   "L1 hits under load")
        node = next(iter(nodes.urls.values())).split("//", 1)[1]
        empty: list[str] = []
        for values in ((".*", ".*"), (node, BRAVO.name)):
            for dashboard, title, expr in dashboard_queries():
                query = substitute(expr, *values)
                if not prometheus.query(query):
                    empty.append(f"{dashboard} / {title} (node={values[0]}, tenant={values[1]}): {query}")
    finally:
        load.stop.set()
        load.join(timeout=60)
    assert not load.errors, load.errors
    assert load.requests > 0
    assert not empty, "panels without data:\n" + "\n".join(empty)
    assert_rules_evaluate(prometheus)
    print(f"dashboards checked in {time.monotonic() - started:.1f} s after start-up, {load.requests} load steps")
