"""`quorumlog local-cluster`: N `quorumlog serve` processes on 127.0.0.1, and the same as a library
(`LocalCluster`) for the benchmark and the tests.

Each node gets a TOML file in its data directory, so a node can be restarted by hand with the command
the cluster prints. Nothing is restarted automatically: a node that dies stays dead.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError

# What `serve` reads from the environment when its flags do not say it: never passed to a LocalCluster's nodes.
CREDENTIAL_VARIABLES = frozenset({"QUORUMLOG_SECRET", "QUORUMLOG_SECRET_FILE", "QUORUMLOG_ADMIN_TOKEN",
                                  "QUORUMLOG_ADMIN_TOKEN_FILE"})


def port_taken(port: int, host: str = "127.0.0.1") -> str | None:
    """Why a node could not listen on `port`, or None: judged as the node binds (SO_REUSEADDR, as
    asyncio's servers set it), so connections of a stopped run still in TIME-WAIT do not count."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as e:
            return e.strerror or str(e)
    return None


def free_ports(n: int) -> list[int]:
    """n distinct ports the OS considers free right now (bound to port 0, then released)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def write_private(path: Path, text: str) -> None:
    """Write `text` to a file only this user may read or write (0600): a new file is made so, and an
    existing one gets that mode too (opening it with 0600 would keep its old mode)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        os.fchmod(fd, 0o600)
        f.write(text)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, list | tuple | set | frozenset):
        return "[" + ", ".join(_toml_value(x) for x in (sorted(v) if isinstance(v, set | frozenset) else v)) + "]"
    if isinstance(v, Mapping):
        return "{ " + ", ".join(f"{_toml_value(k)} = {_toml_value(x)}" for k, x in v.items()) + " }"
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass
class LocalNode:
    node_id: str
    port: int
    admin_port: int
    data_dir: Path
    config_path: Path
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    host: str = "127.0.0.1"  # the address it binds, for both ports

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def admin_url(self) -> str:
        return f"http://{self.host}:{self.admin_port}"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@dataclass
class LocalCluster:
    """Nodes n0..n{N-1} hosting groups g0..g{G-1}; ports from `base_port` (or free ephemeral ports)."""

    root: Path
    nodes_count: int = 3
    groups: int = 1
    base_port: int | None = None
    flush: str = "sync"
    secret: str | None = field(default=None, repr=False)
    log_level: str = "WARNING"
    raft: Mapping[str, Any] = field(default_factory=dict)
    store: Mapping[str, Any] = field(default_factory=dict)
    nodes: list[LocalNode] = field(default_factory=list)
    # Primary/backup: the groups' replication and their other [[group]] keys (ack, min_in_sync, ...);
    # a "controller" key also adds that Raft group to every node.
    replication: str = "raft"
    ha: Mapping[str, Any] = field(default_factory=dict)
    node: Mapping[str, Any] = field(default_factory=dict)  # more top-level node settings (limits)
    # [[token]] tables: name, secret, permissions
    tokens: list[Mapping[str, Any]] = field(default_factory=list, repr=False)
    tls_dir: Path | None = None  # mutual TLS with the certificates of `quorumlog certs init` in this directory
    hosts: Sequence[str] = ()  # node i's address (default 127.0.0.1); beyond loopback it needs a secret or TLS
    # The last `spares` nodes are no members: each joins the Raft groups (join = true) once a membership
    # change names it (quorumlog members add).
    spares: int = 0

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        n = self.nodes_count
        if self.base_port is not None:
            ports = [self.base_port + i for i in range(n)]
            admin = [self.base_port + 100 + i for i in range(n)]
        else:
            got = free_ports(2 * n)
            ports, admin = got[:n], got[n:]
        for i in range(n):
            d = self.root / f"n{i}"
            host = self.hosts[i] if self.hosts else "127.0.0.1"
            self.nodes.append(LocalNode(f"n{i}", ports[i], admin[i], d, d / "node.toml", d / "node.log", host=host))
        self.write_configs()

    @property
    def group_names(self) -> list[str]:
        return [f"g{i}" for i in range(self.groups)]

    @property
    def endpoints(self) -> str:
        return ",".join(n.address for n in self.nodes)

    @property
    def secret_path(self) -> Path:
        """The file holding the cluster's shared secret (when it has one): clients pass it as --secret-file."""
        return self.root / "secret"

    @property
    def members(self) -> list[LocalNode]:
        """The groups' first members: every node but the spares."""
        return self.nodes[:len(self.nodes) - self.spares]

    def write_configs(self) -> None:
        members = self.members
        member_peers = ",".join(f"{n.node_id}={n.address}" for n in members)
        if self.secret:
            self.root.mkdir(parents=True, exist_ok=True)
            write_private(self.secret_path, self.secret + "\n")
        for node in self.nodes:
            spare = node not in members
            peers = f"{member_peers},{node.node_id}={node.address}" if spare else member_peers
            node.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # the log: this user's only
            lines = [f"id = {_toml_value(node.node_id)}", f"data_dir = {_toml_value(str(node.data_dir))}",
                     f"listen = {_toml_value(node.address)}", f"admin_listen = \"{node.host}:{node.admin_port}\""]
            if self.secret:  # in a file only this user reads, named by the config
                lines.append(f"secret_file = {_toml_value(str(self.secret_path))}")
            lines += [f"{k} = {_toml_value(v)}" for k, v in self.node.items()]
            if self.tls_dir is not None:
                d = Path(self.tls_dir)
                lines += [f"tls_cert = {_toml_value(str(d / f'{node.node_id}.pem'))}",
                          f"tls_key = {_toml_value(str(d / f'{node.node_id}.key'))}",
                          f"tls_ca = {_toml_value(str(d / 'ca.pem'))}"]
            lines.append("[raft]")
            lines += [f"{k} = {_toml_value(v)}" for k, v in self.raft.items()]
            lines.append("[store]")
            lines.append(f"flush = {_toml_value(self.flush)}")
            lines += [f"{k} = {_toml_value(v)}" for k, v in self.store.items()]
            for i, g in enumerate(self.group_names):
                lines += ["[[group]]", f"name = {_toml_value(g)}", f"peers = {_toml_value(peers)}"]
                if spare:
                    lines.append("join = true")
                if self.replication != "raft":
                    lines += [f"replication = {_toml_value(self.replication)}", 'primary = "n0"']
                    lines += [f"{k} = {_toml_value(v)}" for k, v in self.ha.items()]
                elif self.groups > 1 and "preferred_leader" not in self.raft:
                    # Leaders spread over the members (g0 on n0): else the member that opens every group's
                    # first election (the lowest id, raft/joining.py) leads them all, and does all their work.
                    lines += ["[group.raft]", f"preferred_leader = {_toml_value(members[i % len(members)].node_id)}"]
            for t in self.tokens:
                lines.append("[[token]]")
                lines += [f"{k} = {_toml_value(v)}" for k, v in t.items()]
            if self.replication != "raft" and "controller" in self.ha:
                lines += ["[[group]]", f"name = {_toml_value(self.ha['controller'])}", f"peers = {_toml_value(peers)}"]
                if spare:
                    lines.append("join = true")
            # Its [[token]] tables (and any other setting) may hold secrets: readable by this user only.
            write_private(node.config_path, "\n".join(lines) + "\n")

    def check_configs(self) -> None:
        """Load every node's config as `serve` will: a bad one raises ConfigError here, before a process
        starts only to exit with it in its log."""
        from ..config import load_node_config

        for node in self.nodes:
            load_node_config(node.config_path)

    def command(self, node: LocalNode) -> list[str]:
        return [sys.executable, "-m", "quorumlog", "serve", "--config", str(node.config_path),
                "--log-level", self.log_level]

    def start(self, i: int | None = None) -> None:
        """Start node i (or every node not running)."""
        # Each node's config says everything: a secret or admin token exported for the command line (the
        # README has users export QUORUMLOG_SECRET_FILE) would override it in `serve`.
        env = {k: v for k, v in os.environ.items() if k not in CREDENTIAL_VARIABLES}
        for node in self.nodes if i is None else [self.nodes[i]]:
            if node.alive:
                continue
            log = open(node.log_path, "ab")  # noqa: SIM115 - the child keeps it open
            try:
                node.proc = subprocess.Popen(self.command(node), stdout=log, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, start_new_session=True, env=env)
            finally:
                log.close()

    def kill(self, i: int, sig: int = signal.SIGKILL, timeout: float = 15.0) -> int | None:
        """Send `sig` to node i and wait (bounded) for it to exit; returns its exit status."""
        node = self.nodes[i]
        if node.proc is None:
            return None
        if node.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                node.proc.send_signal(sig)
        try:
            return node.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            node.proc.kill()
            return node.proc.wait(5)

    def stop(self, timeout: float = 15.0) -> dict[str, int | None]:
        """SIGTERM every node, wait for each (bounded), SIGKILL stragglers. Returns exit statuses."""
        for node in self.nodes:
            if node.alive:
                assert node.proc is not None
                with contextlib.suppress(ProcessLookupError):
                    node.proc.send_signal(signal.SIGTERM)
        out: dict[str, int | None] = {}
        deadline = time.monotonic() + timeout
        for node in self.nodes:
            if node.proc is None:
                out[node.node_id] = None
                continue
            try:
                out[node.node_id] = node.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                node.proc.kill()
                out[node.node_id] = node.proc.wait(5)
        return out

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def run_local_cluster(*, nodes: int, groups: int, data_dir: str, base_port: int, flush: str = "sync",
                      secret: str | None = None, log_level: str = "WARNING", segment_mb: int = 64,
                      replication: str = "raft", ha: Mapping[str, Any] | None = None, auth: bool = True,
                      spares: int = 0) -> int:
    """Start the cluster, print where it is, wait for Ctrl-C/SIGTERM, stop every node.

    Authentication is on unless `auth` is False: without a `secret`, a random one is made for the cluster
    and kept in DATA_DIR/secret (readable by this user only), which clients pass as --secret-file. `spares`
    more nodes run as members of no group, each joining the groups once added (quorumlog members add)."""
    from rich.console import Console

    # soft_wrap: lines as they are, never cut at 80 columns when the output is not a terminal (a file, a
    # pipe): a path or the endpoints split over two lines cannot be pasted or grepped.
    console, errors = Console(soft_wrap=True), Console(stderr=True, soft_wrap=True)
    if spares and replication != "raft" and not (ha or {}).get("controller"):
        errors.print("[red]quorumlog: error: --spares: a primary/backup group changes its members through its "
                     "controller: add --controller[/red]", soft_wrap=True)
        return 2
    if auth and not secret:
        secret = secrets.token_urlsafe(24)
    # Index segments sized to hold as many entries as a data segment of ~200-byte entries would.
    store = {"data_segment_bytes": segment_mb << 20, "index_segment_bytes": 32 * max(1, (segment_mb << 20) // 200)}
    try:
        cluster = LocalCluster(Path(data_dir), nodes + spares, groups, base_port, flush, secret, log_level,
                               store=store, replication=replication,
                               ha=dict(ha or {}) if replication != "raft" else {}, spares=spares)
    except OSError as e:
        errors.print(f"[red]quorumlog: error: cannot make the data directory {data_dir}: {e.strerror or e}[/red]",
                     soft_wrap=True)
        return 2
    try:
        cluster.check_configs()
    except ConfigError as e:
        errors.print(f"[red]quorumlog: error: {e}[/red]", soft_wrap=True)
        return 2
    for node in cluster.nodes:
        for port in (node.port, node.admin_port):
            taken = port_taken(port)
            if taken is not None:
                errors.print(f"[red]quorumlog: error: port {port} is not free: {taken}[/red]", soft_wrap=True)
                return 2
    stop = False

    def on_signal(_sig: int, _frame: object) -> None:
        nonlocal stop
        stop = True

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        cluster.start()
        # The banner once every node listens: a command run as soon as it shows finds the nodes there.
        wait_listening(cluster, lambda: stop)
        settings = ", ".join(f"{k} {v}" for k, v in cluster.ha.items())
        mode = "raft" if replication == "raft" else f"primary-backup ({settings})"
        spared = f" and {spares} spare{'s' if spares > 1 else ''}" if spares else ""
        console.print(f"[bold]quorumlog local cluster[/bold]: {nodes} nodes{spared}, groups "
                      f"{', '.join(cluster.group_names)}, {mode}, flush {flush}, data in {data_dir}")
        members = cluster.members
        for node in cluster.nodes:
            console.print(f"  {node.node_id}  {node.address}  admin {node.admin_url}/status  "
                          f"pid {node.proc.pid if node.proc else '-'}  log {node.log_path}"
                          + ("" if node in members else "  (spare)"))
        # The groups' members only: a spare answers for no group until it is added.
        endpoints = ",".join(n.address for n in members)
        console.print(f"endpoints: {endpoints}")
        if cluster.secret:
            console.print(f"authentication on: clients pass --secret-file {cluster.secret_path}")
        else:
            console.print("authentication off (--no-auth): any local process may connect")
        console.print("in another shell, the command line finds the cluster with:")
        console.print(f"  export QUORUMLOG_ENDPOINTS={endpoints}")
        if cluster.secret:
            console.print(f"  export QUORUMLOG_SECRET_FILE={cluster.secret_path}")
        if spares:
            each = f" (each group: --group {', '.join(cluster.group_names)})" if groups > 1 else ""
            console.print(f"a spare joins a group once added{each}, as a learner promoted once caught up:")
            for node in cluster.nodes[len(members):]:
                console.print(f"  quorumlog members add --group g0 --id {node.node_id} --address {node.address}")
        console.print("Ctrl-C stops every node.")
        _show_startup(cluster, lambda: stop)
        reported: set[str] = set()
        while not stop:
            time.sleep(0.2)
            for node in cluster.nodes:
                if node.proc is not None and node.proc.poll() is not None and node.node_id not in reported:
                    reported.add(node.node_id)
                    console.print(f"[yellow]{node.node_id} exited with status {node.proc.returncode} "
                                  f"(not restarted; see {node.log_path})[/yellow]")
    finally:
        console.print("stopping…")
        statuses = cluster.stop()
        for s, h in old.items():
            signal.signal(s, h)
    console.print("stopped: " + ", ".join(f"{k} exit {v}" for k, v in statuses.items()))
    return 0


def listening(node: LocalNode) -> bool:
    """Whether `node` accepts connections on its client port (a bare connect: the node logs nothing)."""
    try:
        with socket.create_connection((node.host, node.port), timeout=0.5):
            return True
    except OSError:
        return False


def wait_listening(cluster: LocalCluster, stopped: Callable[[], bool], timeout: float = 30.0) -> None:
    """Until every node listens on its client port, or has exited (the caller reports it), or `timeout`."""
    deadline = time.monotonic() + timeout
    waiting = list(cluster.nodes)
    while waiting and not stopped() and time.monotonic() < deadline:
        waiting = [n for n in waiting if n.alive and not listening(n)]
        if waiting:
            time.sleep(0.05)


def _show_startup(cluster: LocalCluster, stopped: Callable[[], bool]) -> None:
    """On a terminal, a spinner per node and group until each is up and led (startup_view.py), then one
    line saying so, on stderr."""
    from rich.console import Console

    from .startup_view import watch_startup

    err = Console(stderr=True)
    t0 = time.monotonic()
    leaders = watch_startup(cluster, err, stopped)
    if not err.is_terminal or stopped():
        return
    led = ", ".join(f"{g} {leaders[g]}" for g in cluster.group_names if g in leaders)
    missing = [g for g in cluster.group_names if g not in leaders]
    if not missing:
        err.print(f"[green]ready[/green] in {time.monotonic() - t0:.1f}s: leaders {led}")
    else:
        err.print(f"[yellow]no leader yet in {', '.join(missing)} after {time.monotonic() - t0:.0f}s[/yellow]"
                  + (f" (leaders {led})" if led else "") + "; see the nodes' logs")
