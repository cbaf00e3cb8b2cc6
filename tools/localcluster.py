"""``lakegate cluster up|down|status|start-node``: a local cluster for development, benchmarks
and the cluster tests.

``up`` starts N ``lakegate serve`` processes on consecutive ports (node1..nodeN), each with its
own cache dir and log under DIR, each told the *other* nodes as ``--peers``; they run detached
and outlive the command. Everything needed to find, stop or restart them is in DIR/cluster.json
(mode 0600: it holds the cluster secret):

    DIR/cluster.json     state: nodes (id, port, url, pid, argv, log), cwd, secret, env
    DIR/nodeK.log        that node's output
    DIR/nodeK/cache      that node's cache dir

Secrets (the cluster secret, the lake keys) reach the nodes through their environment, never
their argv, which every local user can read in /proc. ``down`` signals only a pid whose
/proc/PID/cmdline is still exactly the argv it was started with, so a pid the kernel has since
given to another process is left alone.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from urllib.parse import urlsplit
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

STATE_FILE = "cluster.json"
HEALTH_PATH = "/_lakegate/health"
SECRET_ENV = "LAKEGATE_CLUSTER_SECRET"
LAKE_KEY_ENV = {"lake_access_key": "LAKEGATE_LAKE_ACCESS_KEY", "lake_secret_key": "LAKEGATE_LAKE_SECRET_KEY"}
START_TIMEOUT_S = 60.0
STOP_GRACE_S = 10.0
_WILDCARD_HOSTS = ("0.0.0.0", "::", "")


class ClusterError(Exception):
    """A refusal or a failure of a cluster command: printed as ``lakegate cluster: ...``, exit 1."""


@dataclass
class NodeState:
    id: str
    port: int
    url: str
    argv: list[str]
    log: str
    cache_dir: str
    pid: int = 0


@dataclass
class ClusterState:
    dir: str
    cwd: str
    secret: str
    # the LAKEGATE_* variables the nodes were started with, the secret aside (it is above)
    env: dict[str, str]
    standalone: bool
    nodes: list[NodeState] = field(default_factory=list)

    @property
    def path(self) -> Path:
        return Path(self.dir) / STATE_FILE

    def node(self, node_id: str) -> NodeState:
        for node in self.nodes:
            if node.id == node_id:
                return node
        raise ClusterError(f"no node {node_id!r} in {self.path} (nodes: {', '.join(n.id for n in self.nodes)})")

    def public(self) -> dict[str, Any]:
        """The state without the secrets, for printing."""
        out = asdict(self)
        del out["secret"], out["env"]
        out["state_file"] = str(self.path)
        return out

    def save(self) -> None:
        """Write cluster.json atomically, mode 0600 from its creation on."""
        tmp = self.path.with_name(STATE_FILE + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            os.fchmod(out.fileno(), 0o600)  # an older tmp file may have other bits
            json.dump(asdict(self), out, indent=2)
        os.replace(tmp, self.path)

    @classmethod
    def load(cls, directory: Path) -> ClusterState | None:
        path = directory / STATE_FILE
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise ClusterError(f"cannot read {path}: {exc}") from exc
        nodes = [NodeState(**n) for n in raw.pop("nodes")]
        return cls(**raw, nodes=nodes)


# -- planning (no processes, no sockets) ----------------------------------------------------------


def host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def plan(args: argparse.Namespace, environ: dict[str, str], secret: str) -> ClusterState:
    """The cluster ``up`` would start: node ids, ports, urls and each node's argv."""
    directory = Path(args.dir).resolve()
    advertise = args.advertise_host or ("127.0.0.1" if args.host in _WILDCARD_HOSTS else args.host)
    ports = [args.base_port + i for i in range(args.nodes)]
    ids = [f"node{i + 1}" for i in range(args.nodes)]
    urls = [f"http://{host_port(advertise, port)}" for port in ports]
    common = ["--lake", _absolute_lake(args.lake)]
    if args.tenants:
        common += ["--tenants", str(Path(args.tenants).resolve())]
    for flag, value in (("--cache-capacity", args.cache_capacity), ("--l2-capacity", args.l2_capacity)):
        if value:
            common += [flag, value]
    nodes = []
    for node_id, port, url in zip(ids, ports, urls, strict=True):
        argv = [sys.executable, "-m", "gateway.cli", "serve", "--node-id", node_id,
                "--listen", host_port(args.host, port), "--advertise-url", url,
                "--cache-dir", str(directory / node_id / "cache"), *common]
        if not args.standalone and args.nodes > 1:
            argv += ["--peers", ",".join(f"{i}={u}" for i, u in zip(ids, urls, strict=True) if i != node_id)]
        nodes.append(NodeState(id=node_id, port=port, url=url, argv=[*argv, *args.serve_args],
                               log=str(directory / f"{node_id}.log"), cache_dir=str(directory / node_id / "cache")))
    env = {k: v for k, v in environ.items() if k.startswith("LAKEGATE_") and k != SECRET_ENV}
    for option, variable in LAKE_KEY_ENV.items():
        if getattr(args, option):
            env[variable] = getattr(args, option)
    return ClusterState(dir=str(directory), cwd=os.getcwd(), secret=secret, env=env,
                        standalone=args.standalone, nodes=nodes)


def _absolute_lake(lake: str) -> str:
    """A folder lake's path made absolute, so a node restarted from elsewhere finds it."""
    return f"dir:{Path(lake[4:]).resolve()}" if lake.startswith("dir:") and lake[4:] else lake


def cluster_secret(environ: dict[str, str]) -> str:
    secret = environ.get(SECRET_ENV) or secrets.token_urlsafe(32)
    if len(secret) < 16:
        raise ClusterError(f"{SECRET_ENV} must be 16 characters or more")
    return secret


# -- processes ------------------------------------------------------------------------------------


def node_environment(state: ClusterState) -> dict[str, str]:
    """This process's environment, its LAKEGATE_* replaced by the cluster's own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKEGATE_")}
    env.update(state.env)
    env[SECRET_ENV] = state.secret
    env["PYTHONUNBUFFERED"] = "1"
    return env


def spawn(state: ClusterState, node: NodeState) -> subprocess.Popen[bytes]:
    Path(node.cache_dir).mkdir(parents=True, exist_ok=True)
    with open(node.log, "ab") as log:
        log.write(f"$ {' '.join(node.argv)}\n".encode())  # no secret in argv: safe to log
        log.flush()
        proc = subprocess.Popen(node.argv, cwd=state.cwd, env=node_environment(state), stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    node.pid = proc.pid
    return proc


def is_node_process(node: NodeState) -> bool:
    """True if ``node.pid`` is alive and still runs exactly ``node.argv`` (not a reused pid)."""
    if node.pid <= 0:
        return False
    _reap(node.pid)
    try:
        with open(f"/proc/{node.pid}/cmdline", "rb") as f:
            cmdline = f.read()
        with open(f"/proc/{node.pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    if stat[stat.rindex(b")") + 2:].startswith(b"Z"):  # exited, not yet reaped by its parent
        return False
    return cmdline.split(b"\0")[:-1] == [a.encode() for a in node.argv]


def _reap(pid: int) -> None:
    """Collect the exit of a node that is this process's own child (``up`` and ``down`` in one
    process, as tests may do), so it does not linger as a zombie."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def stop_nodes(nodes: list[NodeState], grace: float = STOP_GRACE_S) -> list[NodeState]:
    """SIGTERM each node that is still ours, SIGKILL those alive after ``grace``; the ones signalled."""
    ours = [n for n in nodes if is_node_process(n)]
    for node in ours:
        _signal(node.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while any(is_node_process(n) for n in ours) and time.monotonic() < deadline:
        time.sleep(0.1)
    for node in ours:
        if is_node_process(node):
            _signal(node.pid, signal.SIGKILL)
            with open(node.log, "a") as log:
                log.write(f"(lakegate cluster down: no exit {grace:.0f} s after SIGTERM, killed)\n")
    deadline = time.monotonic() + 10
    while any(is_node_process(n) for n in ours) and time.monotonic() < deadline:
        time.sleep(0.05)
    return ours


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def port_busy(host: str, port: int) -> bool:
    """Whether a server could not bind host:port (SO_REUSEADDR, as uvicorn binds)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def free_base_port(host: str, count: int, attempts: int = 50) -> int:
    """A port P with P..P+count-1 all free (``--base-port 0``)."""
    for _ in range(attempts):
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            base = int(sock.getsockname()[1])
        if base + count < 65536 and not any(port_busy(host, base + i) for i in range(count)):
            return base
    raise ClusterError(f"found no {count} consecutive free ports on {host}")


def listening(port: int) -> bool | None:
    """Whether a TCP socket of the calling thread's network namespace listens on ``port`` (Linux:
    /proc/thread-self/net/tcp and tcp6: a thread may have entered a namespace of its own, as
    benchmarks/netns.py's ``call`` does); None where /proc cannot tell."""
    tables = 0
    net = "/proc/thread-self/net" if os.path.isdir("/proc/thread-self/net") else "/proc/net"
    for table in (f"{net}/tcp", f"{net}/tcp6"):
        try:
            with open(table) as rows:
                next(rows, None)
                tables += 1
                for row in rows:
                    fields = row.split()
                    if len(fields) > 3 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                        return True
        except OSError:
            continue
    return False if tables else None


def health(node: NodeState, timeout: float = 2.0) -> str | None:
    """None if the node answers GET /_lakegate/health with 200, else what went wrong. No
    connection is tried before the port listens: a connection to a port of the ephemeral range
    that nothing listens on can connect to itself (TCP simultaneous open), and then reads back
    its own request and holds the node's port."""
    port = urlsplit(node.url).port
    if port is not None and listening(port) is False:
        return "not listening yet"
    try:
        with urllib.request.urlopen(node.url + HEALTH_PATH, timeout=timeout) as response:
            return None if response.status == 200 else f"HTTP {response.status}"
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code}"
    except (OSError, ValueError, http.client.HTTPException) as exc:
        return repr(exc)


def wait_healthy(procs: dict[str, subprocess.Popen[bytes]], state: ClusterState, timeout: float) -> None:
    """Until every node in ``procs`` is healthy; ClusterError (with the log tail) if one exits or
    is not healthy by ``timeout``."""
    waiting = dict(procs)
    deadline = time.monotonic() + timeout
    last: dict[str, str] = {}
    while waiting:
        for node_id, proc in list(waiting.items()):
            node = state.node(node_id)
            if proc.poll() is not None:
                raise ClusterError(f"{node_id} exited with code {proc.returncode} before it was healthy; "
                                   f"its log ({node.log}):\n{log_tail(node)}")
            problem = health(node)
            if problem is None:
                del waiting[node_id]
            else:
                last[node_id] = problem
        if waiting and time.monotonic() >= deadline:
            node = state.node(next(iter(waiting)))
            raise ClusterError(f"{node.id} did not answer GET {HEALTH_PATH} with 200 within {timeout:.0f} s "
                               f"(last: {last.get(node.id)}); its log ({node.log}):\n{log_tail(node)}")
        if waiting:
            time.sleep(0.1)


def log_tail(node: NodeState, lines: int = 30) -> str:
    try:
        return "\n".join(Path(node.log).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


# -- commands -------------------------------------------------------------------------------------


def _up(args: argparse.Namespace) -> None:
    if args.nodes < 1:
        raise ClusterError("--nodes must be 1 or more")
    directory = Path(args.dir).resolve()
    _refuse_if_up(directory)
    if args.base_port == 0:
        args.base_port = free_base_port(args.host, args.nodes)
    state = plan(args, dict(os.environ), cluster_secret(dict(os.environ)))
    if args.lake.startswith(("http:", "https:")) and not all(k in state.env for k in LAKE_KEY_ENV.values()):
        raise ClusterError("an S3 lake needs --lake-access-key and --lake-secret-key (or LAKEGATE_LAKE_*)")
    busy = [n.port for n in state.nodes if port_busy(args.host, n.port)]
    if busy:
        raise ClusterError(f"port(s) {', '.join(map(str, busy))} on {args.host} already in use")
    directory.mkdir(parents=True, exist_ok=True)
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for node in state.nodes:
            procs[node.id] = spawn(state, node)
        state.save()  # before waiting: an interrupted `up` still leaves the pids for `down`
        wait_healthy(procs, state, args.timeout)
    except BaseException:
        stop_nodes(state.nodes)
        state.path.unlink(missing_ok=True)
        raise
    _DETACHED.extend(procs.values())
    print(json.dumps(state.public(), indent=2) if args.json else _summary(state, args))


# The nodes outlive this command; keeping their Popen objects stops Python warning that they
# are "still running" when they would be collected while it runs (tests call main() in-process).
_DETACHED: list[subprocess.Popen[bytes]] = []


def _refuse_if_up(directory: Path) -> None:
    state = ClusterState.load(directory)
    if state is None:
        return
    live = [f"{n.id} (pid {n.pid})" for n in state.nodes if is_node_process(n)]
    if live:
        raise ClusterError(f"a cluster is already up in {directory}: {', '.join(live)}; "
                           f"`lakegate cluster down --dir {directory}` first")


def _summary(state: ClusterState, args: argparse.Namespace) -> str:
    mode = "standalone nodes (no peers, L1 only)" if state.standalone else "one cluster"
    lines = [f"lakegate cluster up: {len(state.nodes)} node(s), {mode}, lake {args.lake}"]
    lines += [f"  {n.id}  {n.url}  pid {n.pid}  log {n.log}" for n in state.nodes]
    tenants = args.tenants or "LAKEGATE_TENANTS_FILE or the default; see a node's log"
    lines += [
        f"S3 endpoints: any node above, with a tenant's keys ({tenants}), e.g.",
        f"  aws --endpoint-url {state.nodes[0].url} s3 ls",
        _admin_line(state),
        f"state (pids, cluster secret): {state.path} (mode 0600)",
        f"status: lakegate cluster status --dir {state.dir}",
        f"stop:   lakegate cluster down --dir {state.dir}",
    ]
    return "\n".join(lines)


def _admin_line(state: ClusterState) -> str:
    """How to read a node's /_lakegate/admin/* (the access key the nodes were given, no secret)."""
    access_key = state.env.get("LAKEGATE_ADMIN_ACCESS_KEY")
    if access_key:
        return f"admin endpoints: {state.nodes[0].url}/_lakegate/admin/stats, SigV4 (service s3) with access key {access_key}"
    if state.env.get("LAKEGATE_ADMIN_TOKEN_FILE"):
        return "admin endpoints: Authorization: Bearer <the token in LAKEGATE_ADMIN_TOKEN_FILE>"
    return "admin endpoints: off (403); export LAKEGATE_ADMIN_ACCESS_KEY and LAKEGATE_ADMIN_SECRET_KEY before `up`"


def _down(args: argparse.Namespace) -> None:
    directory = Path(args.dir).resolve()
    state = ClusterState.load(directory)
    if state is None:
        print(f"lakegate cluster down: no cluster in {directory}")
        return
    stopped = {n.id for n in stop_nodes(state.nodes, args.grace)}
    for node in state.nodes:
        if node.id in stopped:
            print(f"{node.id}: stopped (pid {node.pid})")
        else:
            print(f"{node.id}: pid {node.pid} is not running this node any more, left alone")
    state.path.unlink(missing_ok=True)


def _status(args: argparse.Namespace) -> None:
    directory = Path(args.dir).resolve()
    state = ClusterState.load(directory)
    if state is None:
        raise ClusterError(f"no cluster in {directory}")
    report = {}
    for node in state.nodes:
        running = is_node_process(node)
        problem = health(node) if running else "not running"
        report[node.id] = {"url": node.url, "pid": node.pid, "up": problem is None, "problem": problem}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for node_id, row in report.items():
            print(f"{node_id}  {row['url']}  pid {row['pid']}  {'up' if row['up'] else 'DOWN: ' + str(row['problem'])}")
    if not all(row["up"] for row in report.values()):
        sys.exit(1)


def _start_node(args: argparse.Namespace) -> None:
    """Start one node of the cluster again, with the argv and environment it was first given."""
    directory = Path(args.dir).resolve()
    state = ClusterState.load(directory)
    if state is None:
        raise ClusterError(f"no cluster in {directory}")
    node = state.node(args.node)
    if is_node_process(node):
        raise ClusterError(f"{node.id} is running (pid {node.pid})")
    proc = spawn(state, node)
    state.save()
    wait_healthy({node.id: proc}, state, args.timeout)
    _DETACHED.append(proc)
    print(f"{node.id}: started (pid {node.pid}) at {node.url}")


def _run(command: Callable[[argparse.Namespace], None]) -> Callable[[argparse.Namespace], None]:
    """The command, with its refusals printed as one line and exit status 1."""

    def run(args: argparse.Namespace) -> None:
        try:
            command(args)
        except ClusterError as exc:
            print(f"lakegate cluster: {exc}", file=sys.stderr)
            sys.exit(1)

    return run


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    cluster = sub.add_parser("cluster", help="start, stop or check a local cluster of nodes")
    commands = cluster.add_subparsers(dest="cluster_command", required=True)

    up = commands.add_parser("up", help="start N nodes on consecutive ports, detached")
    up.add_argument("--nodes", type=int, required=True)
    up.add_argument("--lake", required=True, help="dir:PATH or http(s)://host:port")
    # the keys reach the nodes by environment; LAKEGATE_LAKE_* keeps them out of this argv too
    up.add_argument("--lake-access-key", help="default: LAKEGATE_LAKE_ACCESS_KEY")
    up.add_argument("--lake-secret-key", help="default: LAKEGATE_LAKE_SECRET_KEY")
    up.add_argument("--tenants", help="tenants file for every node")
    up.add_argument("--host", default="127.0.0.1", help="the address the nodes listen on")
    up.add_argument("--base-port", type=int, default=9000, help="node K listens on BASE+K-1; 0: any free block")
    up.add_argument("--advertise-host", help="peers reach each other at HOST:port (default: --host)")
    up.add_argument("--cache-capacity", help="each node's L1 capacity, e.g. 2GiB")
    up.add_argument("--l2-capacity", help="each node's L2 capacity")
    up.add_argument("--standalone", action="store_true", help="no peers: every node alone, L1 only")
    up.add_argument("--timeout", type=float, default=START_TIMEOUT_S, help="seconds to wait for health")
    up.add_argument("--json", action="store_true", help="print the state as JSON (without secrets)")
    up.add_argument("serve_args", nargs="*", metavar="-- SERVE_ARGS", help="passed to every `lakegate serve`")
    up.set_defaults(run=_run(_up))

    down = commands.add_parser("down", help="stop the nodes listed in DIR/cluster.json")
    down.add_argument("--grace", type=float, default=STOP_GRACE_S, help="seconds between SIGTERM and SIGKILL")
    down.set_defaults(run=_run(_down))

    status = commands.add_parser("status", help="which nodes are up (health)")
    status.add_argument("--json", action="store_true")
    status.set_defaults(run=_run(_status))

    start_node = commands.add_parser("start-node", help="start one node again as it was first started")
    start_node.add_argument("node", help="node id, e.g. node2")
    start_node.add_argument("--timeout", type=float, default=START_TIMEOUT_S)
    start_node.set_defaults(run=_run(_start_node))

    for parser in (up, down, status, start_node):
        parser.add_argument("--dir", default="var/cluster", help="state, logs and cache dirs (default var/cluster)")
