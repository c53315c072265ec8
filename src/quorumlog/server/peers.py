"""Outbound links to the other nodes: one reconnecting connection per peer, shared by every group.

A node sends each peer its Raft messages on its own outbound connection (and receives theirs on the
connections they open to it). Frames queued during one loop iteration leave in one write
(Connection batches them). A message for a peer that is down is dropped: Raft resends what matters.
"""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import Callable, Iterator, Mapping
from ssl import SSLContext

from ..net.connection import Connection, Handler
from ..net.endpoint import Endpoint
from ..net.errors import ConnectionClosedError
from ..net.ops import Op
from ..net.outbox import Outbox
from .codec import PeerMessage, encode_message

log = logging.getLogger("quorumlog.server")


def split_address(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port)


def bind_listener(addr: str) -> socket.socket:
    """A listening TCP socket on `addr` (host:port); OSError when the address is taken or invalid."""
    host, port = split_address(addr)
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
    sock = socket.create_server((host, port), family=family, backlog=128)
    sock.setblocking(False)
    return sock


class HelloGroups(Mapping[str, str]):
    """What a node names at HELLO for the groups it hosts ({group: id}, net/hello.py), read afresh at each
    handshake from `current` (the node's): a Raft group's id changes when a node that joins learns it."""

    def __init__(self, current: Callable[[], dict[str, str]]) -> None:
        self._current = current

    def __getitem__(self, group: str) -> str:
        return self._current()[group]

    def __iter__(self) -> Iterator[str]:
        return iter(self._current())

    def __len__(self) -> int:
        return len(self._current())


class PeerLinks:
    """Endpoints to every peer of every hosted group. Each HELLO carries `groups` (a HelloGroups: the group
    id of every group this node hosts, as it is at that handshake), so that a peer that hosts a group of
    the same name with another id (another cluster's, or one configured from another member list)
    refuses the link."""

    def __init__(self, node_id: str, peers: dict[str, str], *, cluster: str, secret: str | None,
                 max_frame_bytes: int, groups: Mapping[str, str] | None = None,
                 outbox: Outbox | None = None, handler: Handler | None = None) -> None:
        self.node_id = node_id
        self.links: dict[str, Endpoint] = {}
        self.addresses: dict[str, str] = {}
        self.dropped = 0
        self.sent = 0
        self._args = dict(cluster=cluster, node_id=node_id, secret=secret, max_frame_bytes=max_frame_bytes,
                          connect_timeout=2.0, backoff_initial=0.02, backoff_max=0.5, outbox=outbox,
                          handler=handler)  # (a peer we have no address for answers on our connection)
        self._groups: Mapping[str, str] = groups if groups is not None else {}  # (read at each HELLO)
        self.inbound: dict[str, Connection] = {}  # the connections peers opened to this node (node.py)
        self._tls: SSLContext | None = None
        self._started = False
        for pid, addr in peers.items():
            if pid != node_id:
                self._add(pid, addr)

    def _add(self, pid: str, addr: str) -> Endpoint:
        host, port = split_address(addr)
        ep = Endpoint(host, port, groups=self._groups, name=pid, expect_node=pid, **self._args)  # type: ignore[arg-type]
        if self._tls is not None:
            ep.use_tls(self._tls, expect_identity=pid)
        self.links[pid] = ep
        self.addresses[pid] = addr
        return ep

    async def ensure(self, pid: str, addr: str) -> None:
        """Reach `pid` at `addr` from now on (a member added, or moved to a new address)."""
        if pid == self.node_id or self.addresses.get(pid) == addr:
            return
        old = self.links.get(pid)
        ep = self._add(pid, addr)
        if self._started:
            ep.start()
        if old is not None:
            await old.close()

    def use_tls(self, ctx: SSLContext) -> None:
        """Connect to every peer over TLS with this node's certificate; each peer's must name that peer."""
        self._tls = ctx
        for pid, ep in self.links.items():
            ep.use_tls(ctx, expect_identity=pid)

    def start(self) -> None:
        self._started = True
        for ep in self.links.values():
            ep.start()

    def send(self, m: PeerMessage) -> None:
        ep = self.links.get(m.target)
        op, direction, body = encode_message(m)
        try:
            if ep is not None:
                ep.send(op, body, direction)
            else:
                # A peer we have no address for yet (a leader that joined after this node was configured,
                # named by entries not yet received): answer it on the connection it opened to us.
                conn = self.inbound.get(m.target)
                if conn is None or not conn.is_established:
                    self.dropped += 1
                    return
                conn.send(op, body, direction)
        except ConnectionClosedError:
            self.dropped += 1
            return
        self.sent += 1

    def ping(self) -> None:
        """NODE_PING to every peer we are connected to: this node is alive, whatever its groups send
        (raft/quiesce.py: a quiet group's followers wait on it)."""
        for ep in self.links.values():
            if ep.connected:
                with contextlib.suppress(ConnectionClosedError):  # (closed meanwhile: its peer hears nothing)
                    ep.send(Op.NODE_PING)

    def connected(self) -> dict[str, bool]:
        return {pid: ep.connected for pid, ep in self.links.items()}

    def refusals(self) -> dict[str, int]:
        """Handshakes each peer refused (a wrong cluster or secret, or a group of another id, on one side)."""
        return {pid: ep.refusals for pid, ep in self.links.items()}

    async def close(self) -> None:
        for ep in self.links.values():
            await ep.close()
