"""`lakegate cluster up|down|status|start-node` (tools/localcluster.py).

Planning is checked without processes; the rest starts 2-node clusters over a folder lake
(no Ceph), running the CLI as a subprocess the way a developer or a benchmark does.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.endpoints import ALICE
from harness.processes import gateway_environment

from tools import localcluster

CLI_TIMEOUT_S = 120


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="lakegate")
    localcluster.register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["cluster", *argv])


def plan(*argv: str, environ: dict[str, str] | None = None) -> localcluster.ClusterState:
    return localcluster.plan(parse("up", *argv), environ or {}, secret="s" * 32)


def flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


# -- planning -------------------------------------------------------------------------------------


def test_plan_nodes_on_consecutive_ports_each_with_the_others_as_peers(tmp_path: Path) -> None:
    state = plan("--nodes", "3", "--lake", "dir:lake", "--base-port", "9100", "--dir", str(tmp_path))
    assert [(n.id, n.port, n.url) for n in state.nodes] == [
        ("node1", 9100, "http://127.0.0.1:9100"),
        ("node2", 9101, "http://127.0.0.1:9101"),
        ("node3", 9102, "http://127.0.0.1:9102"),
    ]
    node2 = state.nodes[1]
    assert node2.argv[1:4] == ["-m", "gateway.cli", "serve"]
    assert flag(node2.argv, "--node-id") == "node2"
    assert flag(node2.argv, "--listen") == "127.0.0.1:9101"
    assert flag(node2.argv, "--peers") == "node1=http://127.0.0.1:9100,node3=http://127.0.0.1:9102"
    assert flag(node2.argv, "--cache-dir") == str(tmp_path / "node2" / "cache")
    assert node2.log == str(tmp_path / "node2.log")
    assert flag(node2.argv, "--lake") == f"dir:{Path('lake').resolve()}"  # restartable from elsewhere


def test_plan_advertise_host_sizes_and_serve_args() -> None:
    state = plan("--nodes", "2", "--lake", "http://127.0.0.1:7480", "--host", "0.0.0.0", "--advertise-host",
                 "localhost", "--base-port", "9200", "--cache-capacity", "1GiB", "--l2-capacity", "2GiB",
                 "--", "--log-level", "debug")
    node1 = state.nodes[0]
    assert flag(node1.argv, "--listen") == "0.0.0.0:9200"
    assert flag(node1.argv, "--advertise-url") == "http://localhost:9200"
    assert flag(node1.argv, "--peers") == "node2=http://localhost:9201"
    assert flag(node1.argv, "--cache-capacity") == "1GiB"
    assert flag(node1.argv, "--l2-capacity") == "2GiB"
    assert node1.argv[-2:] == ["--log-level", "debug"]


def test_plan_wildcard_host_advertises_loopback() -> None:
    state = plan("--nodes", "2", "--lake", "dir:x", "--host", "0.0.0.0", "--base-port", "9300")
    assert state.nodes[0].url == "http://127.0.0.1:9300"


def test_plan_standalone_nodes_have_no_peers() -> None:
    state = plan("--nodes", "3", "--lake", "dir:x", "--standalone")
    assert all("--peers" not in n.argv for n in state.nodes)
    assert state.standalone


def test_plan_keeps_secrets_out_of_argv() -> None:
    state = plan("--nodes", "2", "--lake", "http://127.0.0.1:7480", "--lake-access-key", "AKID",
                 "--lake-secret-key", "lake-secret", environ={"LAKEGATE_META_TTL": "1", "HOME": "/root"})
    for node in state.nodes:
        assert not {"AKID", "lake-secret", "s" * 32} & set(node.argv)
        assert not any("secret" in a.lower() and a.startswith("--") for a in node.argv)
    assert state.env == {"LAKEGATE_META_TTL": "1", "LAKEGATE_LAKE_ACCESS_KEY": "AKID",
                         "LAKEGATE_LAKE_SECRET_KEY": "lake-secret"}


def test_cluster_secret_from_environment_or_generated() -> None:
    assert localcluster.cluster_secret({"LAKEGATE_CLUSTER_SECRET": "x" * 20}) == "x" * 20
    generated = localcluster.cluster_secret({})
    assert len(generated) >= 32 and generated != localcluster.cluster_secret({})
    with pytest.raises(localcluster.ClusterError):
        localcluster.cluster_secret({"LAKEGATE_CLUSTER_SECRET": "short"})


def test_up_needs_nodes_and_lake() -> None:
    with pytest.raises(SystemExit):
        parse("up", "--lake", "dir:x")
    with pytest.raises(SystemExit):
        parse("up", "--nodes", "2")


# -- processes ------------------------------------------------------------------------------------


class ClusterCli:
    """Runs `lakegate cluster ...` as a subprocess in a temp dir over a folder lake."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.dir = root / "cluster"
        self.tenants = root / "tenants.toml"
        self.tenants.write_text(ALICE.to_toml())

    def run(self, command: str, *argv: str, check: bool = True,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        # --dir first: after a `--` it would go to `lakegate serve`
        cmd = [sys.executable, "-m", "gateway.cli", "cluster", command, "--dir", str(self.dir), *argv]
        done = subprocess.run(cmd,
                              cwd=self.root, env=gateway_environment(env), capture_output=True, text=True,
                              timeout=CLI_TIMEOUT_S, stdin=subprocess.DEVNULL, check=False)
        if check and done.returncode != 0:
            pytest.fail(f"lakegate cluster {command} {' '.join(argv)} exited {done.returncode}:\n"
                        f"{done.stdout}\n{done.stderr}")
        return done

    def up(self, *argv: str, nodes: int = 2, check: bool = True,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return self.run("up", "--nodes", str(nodes), "--lake", "dir:lake", "--tenants", str(self.tenants),
                        "--base-port", "0", *argv, check=check, env=env)

    def state(self) -> dict[str, Any]:
        result: dict[str, Any] = json.loads((self.dir / "cluster.json").read_text())
        return result

    def pids(self) -> list[int]:
        return [n["pid"] for n in self.state()["nodes"]]


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat_line = f.read()
    except OSError:
        return False
    return not stat_line[stat_line.rindex(b")") + 2:].startswith(b"Z")


def wait_gone(pid: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pid), f"pid {pid} still running"


def node_pids_under(directory: Path) -> list[int]:
    """Every running process whose argv mentions ``directory`` (the nodes of that cluster)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and alive(int(entry.name)):
            try:
                if str(directory).encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.fixture
def cli(tmp_path: Path) -> Iterator[ClusterCli]:
    cli = ClusterCli(tmp_path)
    yield cli
    if (cli.dir / "cluster.json").exists():
        cli.run("down", "--grace", "2", check=False)
    for pid in node_pids_under(cli.dir):  # whatever a failed test left behind
        os.kill(pid, signal.SIGKILL)


def test_up_writes_private_state_and_passes_the_secret_by_environment(cli: ClusterCli) -> None:
    up = cli.up("--json", env={"LAKEGATE_CLUSTER_SECRET": "a-secret-of-20-chars"})
    printed = json.loads(up.stdout)
    assert "secret" not in printed and "env" not in printed
    state_file = cli.dir / "cluster.json"
    assert stat.S_IMODE(state_file.stat().st_mode) == 0o600
    state = cli.state()
    assert state["secret"] == "a-secret-of-20-chars"
    assert [n["id"] for n in state["nodes"]] == ["node1", "node2"]
    assert state["nodes"][1]["port"] == state["nodes"][0]["port"] + 1
    for node in state["nodes"]:
        cmdline = Path(f"/proc/{node['pid']}/cmdline").read_bytes()
        assert b"a-secret-of-20-chars" not in cmdline
        assert cmdline.split(b"\0")[:-1] == [a.encode() for a in node["argv"]]
        assert b"LAKEGATE_CLUSTER_SECRET=a-secret-of-20-chars\0" in Path(f"/proc/{node['pid']}/environ").read_bytes()
        assert Path(node["log"]).is_file() and Path(node["cache_dir"]).is_dir()
    status = json.loads(cli.run("status", "--json").stdout)
    assert all(row["up"] for row in status.values())


def test_up_generates_a_secret(cli: ClusterCli) -> None:
    cli.up(nodes=1)
    assert len(cli.state()["secret"]) >= 32


def test_up_refuses_when_already_up(cli: ClusterCli) -> None:
    cli.up()
    pids = cli.pids()
    again = cli.up(check=False)
    assert again.returncode != 0 and "already up" in again.stderr
    assert cli.pids() == pids and all(alive(p) for p in pids)


def test_up_refuses_a_busy_port(cli: ClusterCli) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        done = cli.run("up", "--nodes", "2", "--lake", "dir:lake", "--tenants", str(cli.tenants),
                       "--base-port", str(port - 1), check=False)
    assert done.returncode != 0 and f"{port}" in done.stderr and "in use" in done.stderr
    assert not (cli.dir / "cluster.json").exists()


def test_up_that_fails_shows_the_log_and_leaves_nothing_running(cli: ClusterCli) -> None:
    done = cli.up("--timeout", "20", "--", "--log-level", "nonsense", check=False)
    assert done.returncode != 0
    assert "log_level" in done.stderr  # the node's own complaint, from its log tail
    assert not (cli.dir / "cluster.json").exists()
    assert node_pids_under(cli.dir) == []


def test_down_stops_exactly_the_listed_pids_not_a_reused_one(cli: ClusterCli) -> None:
    cli.up()
    node1, node2 = cli.pids()
    os.kill(node1, signal.SIGKILL)
    wait_gone(node1)
    # node1's pid now belongs to an unrelated process, as after a pid reuse
    stranger = subprocess.Popen(["sleep", "60"])
    try:
        state = cli.state()
        state["nodes"][0]["pid"] = stranger.pid
        (cli.dir / "cluster.json").write_text(json.dumps(state))
        down = cli.run("down")
        assert stranger.poll() is None, "down killed a process that is not a lakegate node"
        assert "node1: pid" in down.stdout and "left alone" in down.stdout
        assert f"node2: stopped (pid {node2})" in down.stdout
        wait_gone(node2)
        assert not (cli.dir / "cluster.json").exists()
    finally:
        stranger.kill()
        stranger.wait()


def test_start_node_restarts_one_node_as_it_was(cli: ClusterCli) -> None:
    cli.up(env={"LAKEGATE_META_TTL": "7"})
    before = cli.state()["nodes"][1]
    os.kill(before["pid"], signal.SIGKILL)
    wait_gone(before["pid"])
    assert cli.run("status", check=False).returncode == 1
    cli.run("start-node", "node2")
    after = cli.state()["nodes"][1]
    assert after["pid"] != before["pid"] and after["argv"] == before["argv"]
    assert b"LAKEGATE_META_TTL=7\0" in Path(f"/proc/{after['pid']}/environ").read_bytes()
    refused = cli.run("start-node", "node2", check=False)
    assert refused.returncode != 0 and "is running" in refused.stderr
    cli.run("status")


def test_down_without_a_cluster_is_a_no_op(cli: ClusterCli) -> None:
    done = cli.run("down")
    assert "no cluster" in done.stdout
