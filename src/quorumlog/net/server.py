"""The accepting side: serve() listens, runs HELLO on each connection and hands frames to a handler."""

from __future__ import annotations

import asyncio
import logging
import ssl as ssl_module
from collections import Counter
from collections.abc import Callable, Mapping

from ..errors import ResponseCode
from .connection import Connection, Handler
from .frames import DEFAULT_MAX_FRAME_BYTES, SUPPORTED_VERSIONS
from .hello import CLIENT_ID, Permissions, ServerHandshake
from .outbox import Outbox

log = logging.getLogger("quorumlog.net")
# Distinct refusal reasons remembered for logging once; more than this (a stranger sending a new cluster
# name each time) starts over rather than grow without bound.
MAX_REMEMBERED_REFUSALS = 256


class RefusalLog:
    """Logs each distinct handshake refusal (who, why) once at WARNING, repeats at DEBUG: a
    misconfigured peer reconnects every half second and one line says all there is to say. A peer
    that later gets in is forgotten, so a new failure of it is logged again."""

    def __init__(self) -> None:
        self.count = 0
        self._seen: set[tuple[str | None, str]] = set()
        # Told (peer id, remote host, reason) of every refusal: the node's recent events.
        self.listener: Callable[[str | None, str, str], None] | None = None

    def refused(self, conn: Connection, peer_id: str | None, reason: str) -> None:
        self.count += 1
        if self.listener is not None:
            p = conn.peername
            self.listener(peer_id, str(p[0]) if isinstance(p, tuple) and p else conn.remote, reason)
        key = (peer_id, reason)
        if key in self._seen:
            log.debug("refused %s again: %s", _who(conn, peer_id), reason)
            return
        if len(self._seen) >= MAX_REMEMBERED_REFUSALS:
            self._seen.clear()
        self._seen.add(key)
        log.warning("refused %s: %s", _who(conn, peer_id), reason)

    def established(self, conn: Connection) -> None:
        if self._seen and conn.peer_id != CLIENT_ID:
            self._seen = {k for k in self._seen if k[0] != conn.peer_id}


def _who(conn: Connection, peer_id: str | None) -> str:
    if peer_id and peer_id != CLIENT_ID:
        return f"peer {peer_id} ({conn.remote})"
    return f"connection {conn.remote} ({peer_id or 'no HELLO'})"


class Server:
    """A listening socket and its connections. `async with` closes it all."""

    def __init__(self, server: asyncio.Server, connections: set[Connection], refusals: RefusalLog,
                 limits: Counter[str]) -> None:
        self._server = server
        self.connections = connections  # established or still in HELLO
        self.refusals = refusals
        self.limits = limits  # times each limit was hit: connections (refused), requests, output (held)

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def sockets(self) -> tuple[object, ...]:
        return tuple(self._server.sockets)

    def stop_accepting(self) -> None:
        """Close the listening socket; open connections go on."""
        self._server.close()

    async def close(self, reason: str = "server shutting down", timeout: float = 5.0) -> None:
        """Stop accepting, close every connection (flushing what is queued), wait for them, bounded."""
        self._server.close()
        conns = list(self.connections)
        for c in conns:
            c.close(reason, goodbye=ResponseCode.SUCCESS)  # SUCCESS: an orderly close, nothing was wrong
        if conns:
            await asyncio.wait([asyncio.ensure_future(c.wait_closed()) for c in conns], timeout=timeout)
        for c in conns:
            if not c._closed.done():
                c.abort(reason)
        await self._server.wait_closed()

    async def __aenter__(self) -> Server:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def serve(host: str, port: int, handler: Handler, *, cluster: str, node_id: str = "server",
                secret: str | bytes | None = None, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                ssl: ssl_module.SSLContext | None = None, hello_timeout: float = 5.0,
                max_inflight: int = 4096, versions: frozenset[int] = SUPPORTED_VERSIONS,
                groups: Mapping[str, str] | None = None,
                on_established: Callable[[Connection], None] | None = None,
                on_close: Callable[[Connection], None] | None = None, backlog: int = 1024,
                outbox: Outbox | None = None, after_frames: Callable[[], None] | None = None,
                max_connections: int | None = None, max_output_bytes: int = 32 * 1024 * 1024,
                tokens: Mapping[str, tuple[str | bytes, Permissions]] | None = None) -> Server:
    """Listen on host:port; each connection must pass HELLO (and AUTH when `secret` is set).

    `groups` ({group: members digest}) are this node's; a peer whose HELLO gives another digest for a
    group both host is refused (hello.py).

    Past `max_connections` open connections a new one is told so (GOODBYE TOO_MANY_CONNECTIONS) and
    closed at once. Each connection stops reading while `max_inflight` of its requests are unanswered
    or `max_output_bytes` of its answers unsent (connection.py).

    `handler(conn, frame)` then gets every request and one-way frame (see connection.Handler), and
    `after_frames()` is called once the frames that arrived together were handled. Connections write
    through `outbox` (see connection.Outbox).
    A malformed, truncated, oversized or unknown frame closes only the connection that sent it.
    """
    connections: set[Connection] = set()
    refusals = RefusalLog()
    limits: Counter[str] = Counter()

    def made(conn: Connection) -> None:
        if max_connections is not None and len(connections) >= max_connections:
            limits["connections"] += 1
            conn.close(f"the node holds its limit of {max_connections} connections (max_connections): "
                       "try another node, or later", goodbye=ResponseCode.TOO_MANY_CONNECTIONS)
            return
        connections.add(conn)

    def established(conn: Connection) -> None:
        refusals.established(conn)
        if on_established is not None:
            on_established(conn)

    def closed(conn: Connection) -> None:
        connections.discard(conn)
        if on_close is not None:
            on_close(conn)

    def factory() -> Connection:
        conn = Connection(handler=handler, max_frame_bytes=max_frame_bytes,
                          server_handshake=ServerHandshake(cluster, node_id, secret, versions=versions,
                                                           groups=groups, tokens=tokens),
                          hello_timeout=hello_timeout, max_inflight=max_inflight,
                          max_output_bytes=max_output_bytes, limits=limits,
                          on_made=made, on_established=established, on_close=closed,
                          on_refused=refusals.refused, outbox=outbox, after_frames=after_frames)
        # Registered in connection_made: a TLS handshake that fails never makes (nor loses) the connection.
        return conn

    server = await asyncio.get_running_loop().create_server(factory, host, port, ssl=ssl, backlog=backlog)
    log.info("listening on %s:%d%s", host, int(server.sockets[0].getsockname()[1]), " (TLS)" if ssl else "")
    return Server(server, connections, refusals, limits)
