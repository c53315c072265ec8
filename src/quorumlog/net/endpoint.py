"""A client-side endpoint that keeps one connection to an address open, reconnecting with back-off."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import ssl as ssl_module
from collections.abc import Callable, Mapping

from .connection import Connection, Handler
from .dial import connect
from .errors import (
    ConnectionClosedError,
    HandshakeError,
    MalformedAnswerError,
    NotANodeError,
    ProtocolError,
    RequestTimeoutError,
    UnverifiedPeerError,
)
from .frames import DEFAULT_MAX_FRAME_BYTES, Body, Frame
from .hello import CLIENT_ID
from .outbox import Outbox

log = logging.getLogger("quorumlog.net")


class Endpoint:
    """Keeps a connection to host:port: connects in the background, reconnects after a loss.

    Back-off doubles from `backoff_initial` to `backoff_max` (with jitter) after each failed attempt
    and starts over once a connection is up. Requests are not retried: a request in flight when the
    connection drops fails with ConnectionClosedError, and the caller decides (an append may not be
    safe to repeat). A HandshakeError (wrong cluster, version, secret or group id) is raised to
    waiters at once; the endpoint keeps retrying at `backoff_max` in case the other side is reconfigured,
    logging each distinct refusal once. A node's link to a peer passes `groups` (see hello.py: read at
    each connection attempt, so a node keeps it current), `name` (the peer's id, for log lines) and
    `expect_node` (that id: the node answering must be it).
    """

    def __init__(self, host: str, port: int, *, cluster: str, node_id: str = CLIENT_ID,
                 secret: str | bytes | None = None, handler: Handler | None = None,
                 ssl: ssl_module.SSLContext | None = None, server_hostname: str | None = None,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES, connect_timeout: float = 5.0,
                 backoff_initial: float = 0.05, backoff_max: float = 2.0,
                 on_connect: Callable[[Connection], None] | None = None,
                 rng: random.Random | None = None, groups: Mapping[str, str] | None = None,
                 name: str | None = None, outbox: Outbox | None = None,
                 expect_identity: str | None = None, expect_node: str | None = None) -> None:
        self.host, self.port = host, port
        self.name = f"peer {name} ({host}:{port})" if name else f"endpoint {host}:{port}"
        self._connect_args = dict(cluster=cluster, node_id=node_id, secret=secret, handler=handler, ssl=ssl,
                                  server_hostname=server_hostname, max_frame_bytes=max_frame_bytes,
                                  timeout=connect_timeout, groups=groups, outbox=outbox,
                                  expect_identity=expect_identity, expect_node=expect_node)
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._on_connect = on_connect
        self._rng = rng or random.Random()
        self._conn: Connection | None = None
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self.last_error: BaseException | None = None
        self.connects = 0  # successful connections so far
        self.refusals = 0  # handshakes the other side refused
        self._logged_refusal = ""  # the last refusal logged at WARNING (until a connection succeeds)

    def use_tls(self, ctx: ssl_module.SSLContext, expect_identity: str | None = None) -> None:
        """Connect over TLS from now on (before start()); the server's certificate must name `expect_identity`."""
        self._connect_args.update(ssl=ctx, expect_identity=expect_identity)

    def __repr__(self) -> str:
        return f"<Endpoint {self.host}:{self.port} {'up' if self.connected else 'down'}>"

    @property
    def connected(self) -> bool:
        return self._conn is not None and self._conn.is_established

    def start(self) -> None:
        """Begin connecting in the background (connection() starts it too)."""
        if self._task is None and not self._closed:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"endpoint {self.host}:{self.port}")

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _run(self) -> None:
        delay = self._backoff_initial
        while not self._closed:
            try:
                conn = await connect(self.host, self.port, **self._connect_args)  # type: ignore[arg-type]
            except HandshakeError as e:
                self.refusals += 1
                # UnverifiedPeerError: we refused the other end (not the node dialled, or no proof of it);
                # NotANodeError: what answers there is no node (an HTTP server: a wrong port).
                what = "failed the handshake" if isinstance(e, UnverifiedPeerError | NotANodeError) else "refused us"
                self._log_once(what, e)
                self.last_error = e
                delay = self._backoff_max
            except (ProtocolError, MalformedAnswerError) as e:  # garbage for an answer: a wrong address, said
                # once (not at every attempt)
                self._log_once("failed the handshake", e)
                self.last_error = e
            except (OSError, ConnectionClosedError, RequestTimeoutError) as e:
                log.debug("%s: connect failed: %s", self.name, e)
                self.last_error = e
            else:
                self._conn = conn
                self.connects += 1
                self.last_error = None
                self._logged_refusal = ""
                delay = self._backoff_initial
                if self._on_connect is not None:
                    self._on_connect(conn)
                self._notify()
                await conn.wait_closed()
                self._conn = None
                self.last_error = ConnectionClosedError(conn.close_reason)
                log.info("%s: connection lost (%s)", self.name, conn.close_reason)
                self._notify()
                continue  # the first retry after a loss is immediate
            self._notify()
            await asyncio.sleep(delay * (0.5 + self._rng.random()))
            delay = min(delay * 2, self._backoff_max)

    def _log_once(self, what: str, e: BaseException) -> None:
        """A refusal or a broken handshake at WARNING once, until it changes or a connection succeeds."""
        if str(e) != self._logged_refusal:
            self._logged_refusal = str(e)
            log.warning("%s %s: %s", self.name, what, e)
        else:
            log.debug("%s %s again: %s", self.name, what, e)

    async def connection(self, timeout: float | None = None) -> Connection:
        """The established connection, waiting up to `timeout` for one."""
        if self._closed:
            raise ConnectionClosedError(f"endpoint {self.host}:{self.port} is closed")
        self.start()
        try:
            async with asyncio.timeout(timeout):
                while True:
                    conn = self._conn
                    if conn is not None and conn.is_established:
                        return conn
                    if isinstance(self.last_error, HandshakeError):
                        raise self.last_error
                    if self._closed:
                        raise ConnectionClosedError(f"endpoint {self.host}:{self.port} is closed")
                    await self._changed.wait()
        except TimeoutError:
            raise ConnectionClosedError(f"not connected to {self.host}:{self.port} within {timeout}s"
                                        f" (last error: {self.last_error})") from None

    async def request(self, op: int, body: Body = b"", *, timeout: float | None = None) -> Frame:
        """Send a request on the current connection (waiting for one within the same timeout)."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        conn = await self.connection(timeout)
        left = None if deadline is None else max(0.0, deadline - loop.time())
        return await conn.request(op, body, timeout=left)

    def send(self, op: int, body: Body = b"", request_id: int = 0) -> None:
        """A one-way frame on the current connection; ConnectionClosedError when there is none."""
        conn = self._conn
        if conn is None or not conn.is_established:
            raise ConnectionClosedError(f"not connected to {self.host}:{self.port}")
        conn.send(op, body, request_id)

    async def close(self) -> None:
        """Stop reconnecting and close the connection."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close("endpoint closed")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(5.0):
                    await conn.wait_closed()
        self._notify()

    async def __aenter__(self) -> Endpoint:
        self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
