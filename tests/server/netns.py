"""Linux network namespaces for tests: a node per namespace on its own address, linked by veths to a bridge
in a "switch" namespace, and a veth from the test's own namespace into the switch. Taking a node's link
down, or a blackhole route on a node to a peer, is a real partition: connections go silent instead of
being closed, as when a cable, a switch port or a route dies. Needs root and iproute2 (`ip`).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path

from quorumlog.server.cluster import LocalCluster, LocalNode

NODES = 3
_runs = count()


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


class Network:
    """Namespaces <tag>-sw (a bridge) and <tag>-n0..n2 (a node each, eth0 at <subnet>.1..3), and a veth from
    the root namespace (<subnet>.254) into the switch. `<tag>` holds the pid and a run number, and the
    /24 is one of 10.213.1-250.0/24 no interface of the root namespace uses yet."""

    def __init__(self, nodes: int = NODES) -> None:
        _reap_stale()
        run = next(_runs)
        self.tag = f"qlt{os.getpid()}-{run}"
        self.switch = f"{self.tag}-sw"
        self.nodes = [f"{self.tag}-n{i}" for i in range(nodes)]
        self.uplink = f"qlr{os.getpid()}x{run}"[:15]  # the root namespace's end; interface names have 15 chars
        self.subnet = _free_subnet(os.getpid() + run)
        self.made: list[str] = []

    def host(self, i: int) -> str:
        return f"{self.subnet}.{i + 1}"

    def create(self) -> None:
        """Build the topology; CalledProcessError when the kernel or the user may not."""
        for ns in (self.switch, *self.nodes):
            _ip("netns", "add", ns)
            self.made.append(ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        sw = ("-n", self.switch)
        _ip(*sw, "link", "add", "br0", "type", "bridge")
        _ip(*sw, "link", "set", "br0", "up")
        for i, ns in enumerate(self.nodes):
            _ip(*sw, "link", "add", f"port{i}", "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip(*sw, "link", "set", f"port{i}", "master", "br0", "up")
            _ip("-n", ns, "addr", "add", f"{self.host(i)}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
        _ip("link", "add", self.uplink, "type", "veth", "peer", "name", "uplink", "netns", self.switch)
        _ip(*sw, "link", "set", "uplink", "master", "br0", "up")
        _ip("addr", "add", f"{self.subnet}.254/24", "dev", self.uplink)
        _ip("link", "set", self.uplink, "up")

    def set_link(self, i: int, up: bool) -> None:
        """Node i's eth0 up or down, from inside its namespace."""
        _ip("-n", self.nodes[i], "link", "set", "eth0", "up" if up else "down")

    def set_route(self, i: int, j: int, blocked: bool) -> None:
        """Drop (or stop dropping) what node i sends to node j: a blackhole route in i's namespace. One way
        only; both ways is a cut between the two."""
        _ip("-n", self.nodes[i], "route", "add" if blocked else "del", "blackhole", f"{self.host(j)}/32")

    def destroy(self) -> None:
        """Remove the uplink and every namespace made (their veths and the bridge go with them)."""
        with contextlib.suppress(subprocess.SubprocessError):
            _ip("link", "del", self.uplink)
        for ns in reversed(self.made):
            with contextlib.suppress(subprocess.SubprocessError):
                _ip("netns", "del", ns)
        self.made.clear()


def _reap_stale() -> None:
    """Delete the namespaces and uplinks of earlier runs whose test process is gone (killed before its
    fixture could clean up)."""
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30).stdout.split()
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, timeout=30).stdout
    stale = [(m.group(0), m.group(1)) for m in map(re.compile(r"^qlt(\d+)-\d+-(?:sw|n\d+)$").match, names) if m]
    stale_links = re.findall(r"^\d+: (qlr(\d+)x\d+)[@:]", links, re.M)
    for name, pid in stale + stale_links:
        if not Path(f"/proc/{pid}").exists():
            with contextlib.suppress(subprocess.SubprocessError):
                _ip(*(("netns", "del") if name.startswith("qlt") else ("link", "del")), name)


def _free_subnet(seed: int) -> str:
    used = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True, timeout=30).stdout
    for k in range(250):
        subnet = f"10.213.{(seed + k) % 250 + 1}"
        if f" {subnet}." not in used:
            return subnet
    raise RuntimeError("every 10.213.x.0/24 is taken")


@dataclass
class NetnsCluster(LocalCluster):
    """A LocalCluster whose node i runs in namespace `namespaces[i]` (via `ip netns exec`, which execs the
    node: its pid is the node's own, so stop() and kill() signal the node itself)."""

    namespaces: Sequence[str] = ()
    # Its admin ports are beyond loopback too, so they need a token: requests send it as a bearer header.
    admin_token: str = field(default_factory=lambda: os.urandom(18).hex())

    def __post_init__(self) -> None:
        self.node = {**self.node, "admin_token": self.admin_token}
        super().__post_init__()

    def command(self, node: LocalNode) -> list[str]:
        return ["ip", "netns", "exec", self.namespaces[self.nodes.index(node)], *super().command(node)]


def unavailable() -> str | None:
    if not sys.platform.startswith("linux"):
        return "network namespaces are Linux only"
    if os.geteuid() != 0:
        return "creating network namespaces needs root"
    if shutil.which("ip") is None:
        return "iproute2's ip command is missing (make install adds it)"
    return None
