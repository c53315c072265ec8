"""The dialling side: connect() opens a connection, checks the server's certificate (with TLS) and runs
HELLO, and AUTH both ways when the server wants a proof, as requests it awaits in turn; the accepting side
(server.py) answers them frame by frame in its Connection (connection.py)."""

from __future__ import annotations

import asyncio
import ssl as ssl_module
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import ResponseCode
from ..tls import cert_identity
from .connection import Connection, Handler
from .errors import (
    ConnectionClosedError,
    HandshakeError,
    MalformedAnswerError,
    NotANodeError,
    ProtocolError,
    RequestTimeoutError,
    UnverifiedPeerError,
)
from .frames import DEFAULT_MAX_FRAME_BYTES, SUPPORTED_VERSIONS
from .hello import CLIENT_ID, ClientHandshake, is_client_id
from .ops import Op
from .outbox import Outbox


async def connect(host: str, port: int, *, cluster: str, node_id: str = CLIENT_ID,
                  secret: str | bytes | None = None, handler: Handler | None = None,
                  ssl: ssl_module.SSLContext | None = None, server_hostname: str | None = None,
                  max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES, timeout: float | None = 5.0,
                  max_inflight: int = 4096, on_close: Callable[[Connection], None] | None = None,
                  groups: Mapping[str, str] | None = None, outbox: Outbox | None = None,
                  expect_identity: str | None = None, expect_node: str | None = None,
                  eager: bool = False) -> Connection:
    """Open a connection and complete HELLO (and AUTH, both ways, when the server wants a proof).

    A node connecting to a peer passes `groups` ({group: group id}, see hello.py; read when the handshake starts).
    With TLS and `expect_identity`, the server's certificate must name that id (tls.py). With
    `expect_node`, the node answering must name that id in HELLO (and prove it, with a secret).
    Raises OSError or ConnectionClosedError when the server cannot be reached, HandshakeError when it
    refuses us (wrong version, cluster, secret or member list), UnverifiedPeerError (a HandshakeError)
    when it is not the node it should be (another id, no authentication while we hold a secret, no or
    a wrong proof), RequestTimeoutError when it does not answer in time.
    """
    loop = asyncio.get_running_loop()
    hs = ClientHandshake(cluster, node_id, secret, version=max(SUPPORTED_VERSIONS), groups=groups,
                         expect_node=expect_node)

    def factory() -> Connection:
        return Connection(handler=handler, max_frame_bytes=max_frame_bytes, max_inflight=max_inflight,
                          on_close=on_close, outbox=outbox, eager=eager)

    kwargs: dict[str, Any] = {}
    if ssl is not None:
        kwargs = {"ssl": ssl, "server_hostname": server_hostname or host}
    try:
        async with asyncio.timeout(timeout):
            transport, conn = await loop.create_connection(factory, host, port, **kwargs)
    except TimeoutError:
        raise ConnectionClosedError(f"connect to {host}:{port} timed out after {timeout}s") from None
    named = None
    if ssl is not None:  # a node's certificate, and the one expected: a client's could pose as a node
        named = cert_identity(transport.get_extra_info("peercert"))
        want = expect_identity or expect_node
        if named is None or is_client_id(named) or (want is not None and named != want):
            conn.abort("wrong certificate")
            what = repr(want) if want is not None else "a node's"
            raise UnverifiedPeerError(f"{host}:{port} presented a certificate for {named!r}, not {what}",
                                      ResponseCode.UNEXPECTED_MEMBER)
    try:
        await _client_handshake(conn, hs, timeout)
    except ConnectionClosedError as e:
        if conn.http_answer:
            raise NotANodeError(f"{host}:{port} answers in HTTP: an HTTP port (a node's admin port?), not a "
                                "node's client port", ResponseCode.UNEXPECTED_ARGUMENT) from None
        kind = MalformedAnswerError if conn.malformed else ConnectionClosedError
        raise kind(f"handshake with {host}:{port} failed: {e}") from None
    except (HandshakeError, ProtocolError, RequestTimeoutError, asyncio.CancelledError):
        conn.abort("handshake failed")
        raise
    if named is not None and conn.peer_id != named:
        conn.abort("wrong certificate")
        raise UnverifiedPeerError(f"{host}:{port} names itself {conn.peer_id!r} in HELLO but its certificate "
                                  f"names {named!r}", ResponseCode.UNEXPECTED_MEMBER)
    return conn


async def _client_handshake(conn: Connection, hs: ClientHandshake, timeout: float | None) -> None:
    """HELLO, and AUTH when asked, from the dialler's end: each step a request and its answer; then `conn`
    is established."""
    step: tuple[Op, bytes] | None = hs.start()
    while step is not None:
        op, body = step
        f = await conn.request(op, body, timeout=timeout)
        step = hs.receive(f.op, f.body)
    assert hs.version is not None and hs.peer_id is not None
    conn._establish(hs.version, hs.peer_id)
