"""The accepting side: serve() listens, admits each connection (admission.py), runs TLS and HELLO on it and
hands its frames to a handler."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import ssl as ssl_module
import time
from collections import Counter
from collections.abc import Callable, Mapping

from ..errors import ResponseCode
from ..untrusted import shown
from .admission import Admission
from .connection import Connection, Handler
from .frames import DEFAULT_MAX_FRAME_BYTES, ONEWAY, SUPPORTED_VERSIONS, encode_frame
from .hello import CLIENT_ID, Permissions, ServerHandshake
from .ops import Op
from .outbox import Outbox
from .schemas import GOODBYE

log = logging.getLogger("quorumlog.net")
# Distinct refusal reasons remembered for logging once; more than this (a stranger sending a new cluster
# name each time) starts over rather than grow without bound.
MAX_REMEMBERED_REFUSALS = 256
# WARNING lines about refusals in a minute; past it they go to DEBUG and one line counts them.
REFUSAL_WARNINGS_PER_MINUTE = 20


class RefusalLog:
    """Logs the refusals of connections before they are authenticated: a refused HELLO, no HELLO in
    time, bytes that are no frame. Each distinct (who, why) is logged once at WARNING, repeats at DEBUG:
    a misconfigured peer reconnects every half second and one line says all there is to say. A peer
    that later gets in is forgotten, so a new failure of it is logged again. Anyone who reaches the
    port can cause these lines, so at most REFUSAL_WARNINGS_PER_MINUTE of them are written a minute,
    and their text from the network is escaped (untrusted.py)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.count = 0
        self._seen: set[tuple[str | None, str]] = set()
        self._clock = clock
        self._window_start = clock()
        self._warned = 0  # WARNING lines in the current minute
        self._quieted = 0  # lines past the limit in the current minute
        # Told (peer id, remote host, reason) of every refusal: the node's recent events.
        self.listener: Callable[[str | None, str, str], None] | None = None

    def refused(self, conn: Connection, peer_id: str | None, reason: str) -> None:
        self.count += 1
        if self.listener is not None:
            p = conn.peername
            self.listener(peer_id, str(p[0]) if isinstance(p, tuple) and p else conn.remote, reason)
        key = (peer_id, reason)
        if key in self._seen:
            log.debug("refused %s again: %s", _who(conn, peer_id), shown(reason, 500))
            return
        if len(self._seen) >= MAX_REMEMBERED_REFUSALS:
            self._seen.clear()
        self._seen.add(key)
        self._warn(f"refused {_who(conn, peer_id)}: {shown(reason, 500)}")

    def _warn(self, line: str) -> None:
        now = self._clock()
        if now - self._window_start >= 60.0:
            if self._quieted:
                log.warning("%d more refusals in the last minute were logged at DEBUG only "
                            "(quorumlog_hello_refused_total counts them all)", self._quieted)
            self._window_start, self._warned, self._quieted = now, 0, 0
        if self._warned < REFUSAL_WARNINGS_PER_MINUTE:
            self._warned += 1
            log.warning("%s", line)
        else:
            self._quieted += 1
            log.debug("%s", line)

    def established(self, conn: Connection) -> None:
        if self._seen and conn.peer_id != CLIENT_ID:
            self._seen = {k for k in self._seen if k[0] != conn.peer_id}


def _who(conn: Connection, peer_id: str | None) -> str:
    if peer_id and peer_id != CLIENT_ID:
        return f"peer {shown(peer_id, 64)} ({conn.remote})"
    return f"connection {conn.remote} ({peer_id or 'no HELLO'})"


# Accept errors that mean "out of descriptors or memory for now": accepting pauses, then resumes.
_ACCEPT_PAUSE_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}
ACCEPT_PAUSE_S = 1.0


class Server:
    """A listening socket and its connections. `async with` closes it all.

    Connections are accepted here rather than by asyncio's server so that each is counted, and may be
    turned away, before its TLS handshake: a socket that never starts one holds a slot of `max_handshakes`
    for at most the handshake timeout."""

    def __init__(self, listener: socket.socket, open_connection: Callable[[socket.socket, str], None],
                 admission: Admission, connections: set[Connection], refusals: RefusalLog,
                 limits: Counter[str], turn_away: Callable[[socket.socket, str], None]) -> None:
        self._listener = listener
        self._open_connection = open_connection
        self._admission = admission
        self._turn_away = turn_away
        self.connections = connections  # established or still in HELLO
        self.opening: set[asyncio.Task[None]] = set()  # accepted, in their TLS handshake
        self.refusals = refusals
        self.limits = limits  # times each limit was hit: handshakes, connections (refused), requests, output
        self._accepting = asyncio.get_running_loop().create_task(self._accept_loop(), name="accept")

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        return int(self._listener.getsockname()[1])

    @property
    def sockets(self) -> tuple[object, ...]:
        return (self._listener,)

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, addr = await loop.sock_accept(self._listener)
            except OSError as e:
                if self._listener.fileno() < 0:
                    return
                if e.errno not in _ACCEPT_PAUSE_ERRNOS:  # (a connection reset before it was accepted)
                    log.debug("accept failed: %s", e)
                    continue
                self.limits["accept_errors"] += 1
                log.error("cannot accept connections: %s; trying again in %gs", e.strerror, ACCEPT_PAUSE_S)
                await asyncio.sleep(ACCEPT_PAUSE_S)
                continue
            host = str(addr[0])
            refusal = self._admission.accept(host)
            if refusal is not None:
                self._turn_away(sock, refusal)
            else:
                self._open_connection(sock, host)

    def stop_accepting(self) -> None:
        """Close the listening socket; open connections go on."""
        self._accepting.cancel()
        self._listener.close()

    async def close(self, reason: str = "server shutting down", timeout: float = 5.0) -> None:
        """Stop accepting, close every connection (flushing what is queued), wait for them, bounded."""
        self.stop_accepting()
        for t in list(self.opening):
            t.cancel()
        conns = list(self.connections)
        for c in conns:
            c.close(reason, goodbye=ResponseCode.SUCCESS)  # SUCCESS: an orderly close, nothing was wrong
        if conns:
            await asyncio.wait([asyncio.ensure_future(c.wait_closed()) for c in conns], timeout=timeout)
        for c in conns:
            if not c._closed.done():
                c.abort(reason)
        with contextlib.suppress(asyncio.CancelledError):
            await self._accepting

    async def __aenter__(self) -> Server:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def listen_socket(host: str, port: int, backlog: int) -> socket.socket:
    """A non-blocking listening TCP socket on host:port (OSError when taken or invalid)."""
    family = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
    sock = socket.create_server((host, port), family=family, backlog=backlog)
    sock.setblocking(False)
    return sock


async def serve(host: str, port: int, handler: Handler, *, cluster: str, node_id: str = "server",
                secret: str | bytes | None = None, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                ssl: ssl_module.SSLContext | None = None, hello_timeout: float = 5.0,
                max_inflight: int = 4096, versions: frozenset[int] = SUPPORTED_VERSIONS,
                groups: Mapping[str, str] | None = None,
                on_established: Callable[[Connection], None] | None = None,
                on_close: Callable[[Connection], None] | None = None, backlog: int = 1024,
                outbox: Outbox | None = None, after_frames: Callable[[], None] | None = None,
                max_connections: int | None = None, max_output_bytes: int = 32 * 1024 * 1024,
                tokens: Mapping[str, tuple[str | bytes, Permissions]] | None = None,
                cert_permissions: Mapping[str, Permissions] | None = None, max_handshakes: int = 64,
                max_handshakes_per_address: int = 16, peer_slots: int = 0) -> Server:
    """Listen on host:port; each connection must pass HELLO (and AUTH when `secret` is set), after TLS
    when `ssl` is given. The TLS handshake and HELLO each have `hello_timeout` seconds.

    `groups` ({group: members digest}) are this node's; a peer whose HELLO gives another digest for a
    group both host is refused (hello.py).

    Connections are admitted by admission.Admission: past `max_handshakes` unauthenticated ones (or
    `max_handshakes_per_address` from one address) a new one is closed at once, told why (a GOODBYE
    TOO_MANY_CONNECTIONS) when it speaks plain TCP; a HELLO that would pass `max_connections` (clients:
    `max_connections - peer_slots`) is refused with TOO_MANY_CONNECTIONS. Each connection stops reading
    while `max_inflight` of its requests are unanswered or `max_output_bytes` of its answers unsent
    (connection.py).

    `handler(conn, frame)` then gets every request and one-way frame (see connection.Handler), and
    `after_frames()` is called once the frames that arrived together were handled. Connections write
    through `outbox` (see connection.Outbox).
    A malformed, truncated, oversized or unknown frame closes only the connection that sent it.
    """
    loop = asyncio.get_running_loop()
    connections: set[Connection] = set()
    refusals = RefusalLog()
    limits: Counter[str] = Counter()
    admission = Admission(max_connections=max_connections, max_handshakes=max_handshakes,
                          max_handshakes_per_address=max_handshakes_per_address, peer_slots=peer_slots,
                          limits=limits)
    in_handshake: dict[Connection, str] = {}  # made, not yet established: the host whose slot each holds

    def established(conn: Connection) -> None:
        admission.release(in_handshake.pop(conn))
        admission.establish(conn)
        refusals.established(conn)
        if on_established is not None:
            on_established(conn)

    def closed(conn: Connection) -> None:
        connections.discard(conn)
        host = in_handshake.pop(conn, None)
        if host is not None:
            admission.release(host)
        admission.forget(conn)
        if on_close is not None:
            on_close(conn)

    def turn_away(sock: socket.socket, reason: str) -> None:
        if ssl is None:  # a client speaking plain TCP reads why; one speaking TLS could not
            with contextlib.suppress(OSError):
                sock.send(encode_frame(ONEWAY, Op.GOODBYE, 0,
                                       GOODBYE.encode(int(ResponseCode.TOO_MANY_CONNECTIONS), reason)))
        sock.close()

    def open_connection(sock: socket.socket, host: str) -> None:
        made: list[Connection] = []

        def on_made(conn: Connection) -> None:  # (under TLS: once its handshake is done)
            made.append(conn)
            connections.add(conn)
            in_handshake[conn] = host

        def factory() -> Connection:
            return Connection(handler=handler, max_frame_bytes=max_frame_bytes,
                              server_handshake=ServerHandshake(cluster, node_id, secret, versions=versions,
                                                               groups=groups, tokens=tokens,
                                                               cert_permissions=cert_permissions),
                              hello_timeout=hello_timeout, max_inflight=max_inflight,
                              max_output_bytes=max_output_bytes, limits=limits,
                              on_made=on_made, on_established=established, on_close=closed,
                              on_refused=refusals.refused, outbox=outbox, after_frames=after_frames,
                              admit=admission.admit)

        async def start() -> None:
            try:
                await loop.connect_accepted_socket(factory, sock, ssl=ssl,
                                                   ssl_handshake_timeout=hello_timeout if ssl else None)
            except (OSError, ssl_module.SSLError, asyncio.CancelledError) as e:
                if not made:  # (once made, the connection's close gives the slot back)
                    admission.release(host)
                    sock.close()
                if isinstance(e, asyncio.CancelledError):
                    raise
                log.debug("TLS handshake with %s failed: %s", host, e)

        task = loop.create_task(start())
        opening.add(task)
        task.add_done_callback(opening.discard)

    listener = listen_socket(host, port, backlog)
    server = Server(listener, open_connection, admission, connections, refusals, limits, turn_away)
    opening = server.opening
    log.info("listening on %s:%d%s", host, server.port, " (TLS)" if ssl else "")
    return server
