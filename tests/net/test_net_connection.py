"""Connections over real sockets on 127.0.0.1 (ephemeral ports): multiplexing, bad peers, timeouts, reconnects."""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Awaitable
from typing import Any

import msgpack
import pytest

from quorumlog.errors import InvalidArgumentError, QuorumLogError, ResponseCode
from quorumlog.net import (
    ConnectionClosedError,
    Endpoint,
    HandshakeError,
    RequestTimeoutError,
    ResponseError,
    connect,
    decode_response,
    serve,
)
from quorumlog.net import schemas as sc
from quorumlog.net.connection import Connection
from quorumlog.net.errors import MalformedAnswerError, NotANodeError, ProtocolError, UnverifiedPeerError
from quorumlog.net.frames import PROTOCOL_VERSION, RESPONSE, Frame, FrameDecoder, Kind, encode_frame
from quorumlog.net.hello import ClientHandshake
from quorumlog.net.ops import Op

CLUSTER = "test"
HOST = "127.0.0.1"


def arun(coro: Awaitable[Any], timeout: float = 20.0) -> Any:
    async def bounded() -> Any:
        async with asyncio.timeout(timeout):
            return await coro
    return asyncio.run(bounded())


def echo(conn: Connection, f: Frame) -> bytes | None:
    """GET answers [200, body] at once; the rest is not served."""
    if f.op == Op.GET:
        return bytes(f.body)
    if f.op == Op.STATUS:
        raise InvalidArgumentError("bad status request")
    if f.op == Op.METADATA:
        raise RuntimeError("boom")
    if f.op == Op.READ:
        raise ProtocolError("unreadable READ body")
    return None


async def read_to_eof(reader: asyncio.StreamReader) -> bytes:
    chunks = []
    while data := await reader.read(65536):
        chunks.append(data)
    return b"".join(chunks)


def goodbye_reason(data: bytes) -> str:
    dec = FrameDecoder(versions=None)
    dec.feed(data)
    for f in dec:
        if f.op == Op.GOODBYE and f.kind == Kind.ONEWAY:
            return str(sc.GOODBYE.decode(f.body).reason)
    return ""


async def raw_hello(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    _, body = ClientHandshake(CLUSTER, "raw").start()
    writer.write(encode_frame(Kind.REQUEST, Op.HELLO, 1, body))
    head = await reader.readexactly(16)
    (length,) = struct.unpack(">I", head[:4])
    await reader.readexactly(length - 12)


async def assert_serving(port: int, **kw: Any) -> None:
    conn = await connect(HOST, port, cluster=CLUSTER, **kw)
    try:
        f = await conn.request(Op.GET, b"still here", timeout=5)
        assert bytes(f.body) == b"still here"
    finally:
        conn.close()
        await conn.wait_closed()
        await conn.wait_closed()


def test_many_requests_in_flight_complete_out_of_order():
    async def main() -> None:
        gates: dict[int, asyncio.Event] = {}

        async def slow_echo(body: bytes) -> bytes:
            n = msgpack.unpackb(body)
            if n % 2 == 0:  # even requests wait for the odd ones after them
                await gates.setdefault(n + 1, asyncio.Event()).wait()
            else:
                gates.setdefault(n, asyncio.Event()).set()
            return body

        def handler(conn: Connection, f: Frame) -> Any:
            return slow_echo(bytes(f.body))

        async with await serve(HOST, 0, handler, cluster=CLUSTER) as server:
            conn = await connect(HOST, server.port, cluster=CLUSTER)
            futs = [conn.send_request(Op.GET, msgpack.packb(i), timeout=10) for i in range(2000)]
            assert conn.in_flight == 2000
            results = await asyncio.gather(*futs)
            assert [msgpack.unpackb(f.body) for f in results] == list(range(2000))
            assert conn.in_flight == 0
            conn.close()
            await conn.wait_closed()
            await conn.wait_closed()
    arun(main())


def count_writes(conn: Connection) -> list[int]:
    """The sizes of the connection's transport writes from now on."""
    transport = conn._transport
    assert transport is not None
    writes: list[int] = []
    real_write = transport.write

    def counting_write(data: Any) -> None:
        writes.append(len(data))
        real_write(data)

    transport.write = counting_write  # type: ignore[method-assign]
    return writes


def test_frames_of_one_iteration_leave_in_one_write():
    async def main() -> None:
        async with await serve(HOST, 0, echo, cluster=CLUSTER) as server:
            conn = await connect(HOST, server.port, cluster=CLUSTER)
            writes = count_writes(conn)
            futs = [conn.send_request(Op.GET, b"x" * 100) for _ in range(64)]
            await asyncio.gather(*futs)
            assert writes == [64 * (16 + 100)]
            conn.close()
            await conn.wait_closed()
    arun(main())


def test_an_eager_connection_writes_a_request_on_an_idle_connection_at_once():
    async def main() -> None:
        async with await serve(HOST, 0, echo, cluster=CLUSTER) as server:
            conn = await connect(HOST, server.port, cluster=CLUSTER, eager=True)
            writes = count_writes(conn)
            for _ in range(2):
                writes.clear()
                first = conn.send_request(Op.GET, b"x" * 100)
                assert writes == [16 + 100]  # before this turn ends
                rest = [conn.send_request(Op.GET, b"x" * 100) for _ in range(63)]
                assert writes == [16 + 100]  # others in flight: they wait for the turn's end, together
                await asyncio.gather(first, *rest)
                assert writes == [16 + 100, 63 * (16 + 100)]
            conn.close()
            await conn.wait_closed()
    arun(main())


def test_garbage_and_huge_prefix_close_only_their_connection(caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.WARNING, "quorumlog.net")

    async def main() -> None:
        async with await serve(HOST, 0, echo, cluster=CLUSTER) as server:
            good = await connect(HOST, server.port, cluster=CLUSTER)
            # Garbage before HELLO.
            r1, w1 = await asyncio.open_connection(HOST, server.port)
            w1.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert "exceeds max_frame_bytes" in goodbye_reason(await read_to_eof(r1))
            # A 2 GiB length prefix after a good HELLO.
            r2, w2 = await asyncio.open_connection(HOST, server.port)
            await raw_hello(r2, w2)
            w2.write(struct.pack(">I", 2**31) + b"\x00" * 12)
            assert "2147483648 exceeds max_frame_bytes" in goodbye_reason(await read_to_eof(r2))
            # An unknown operation and an unknown kind after HELLO.
            r3, w3 = await asyncio.open_connection(HOST, server.port)
            await raw_hello(r3, w3)
            w3.write(encode_frame(Kind.REQUEST, 200, 5, b"\x90"))
            assert "unknown operation 200" in goodbye_reason(await read_to_eof(r3))
            r4, w4 = await asyncio.open_connection(HOST, server.port)
            await raw_hello(r4, w4)
            w4.write(struct.pack(">IHBBQ", 12, 1, 9, Op.GET, 1))
            assert "unknown frame kind 9" in goodbye_reason(await read_to_eof(r4))
            # A truncated frame, then the peer leaves.
            r5, w5 = await asyncio.open_connection(HOST, server.port)
            await raw_hello(r5, w5)
            w5.write(encode_frame(Kind.REQUEST, Op.GET, 9, b"x" * 100)[:50])
            w5.write_eof()
            await read_to_eof(r5)
            for w in (w1, w2, w3, w4, w5):
                w.close()
                await w.wait_closed()
            # The established client and new clients are unharmed.
            f = await good.request(Op.GET, b"fine", timeout=5)
            assert bytes(f.body) == b"fine"
            await assert_serving(server.port)
            good.close()
            await good.wait_closed()
        text = caplog.text
        assert "exceeds max_frame_bytes" in text and "unknown operation 200" in text
        assert "truncated frame" in text

    arun(main())


def test_client_closes_on_a_malformed_server():
    async def main() -> None:
        done = asyncio.Event()

        async def evil(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                await reader.read(100)
                writer.write(b"\xff" * 32)
                await read_to_eof(reader)
            finally:
                writer.close()
                done.set()

        srv = await asyncio.start_server(evil, HOST, 0)
        port = srv.sockets[0].getsockname()[1]
        with pytest.raises(ConnectionClosedError, match="exceeds"):
            await connect(HOST, port, cluster=CLUSTER, timeout=5)
        await done.wait()
        srv.close()
        await srv.wait_closed()
    arun(main())


def test_handler_errors_become_codes_or_close():
    async def main() -> None:
        async with await serve(HOST, 0, echo, cluster=CLUSTER) as server:
            conn = await connect(HOST, server.port, cluster=CLUSTER)
            f = await conn.request(Op.STATUS, b"", timeout=5)
            with pytest.raises(ResponseError) as ei:
                decode_response(sc.STATUS_RESPONSE, f.body)
            assert ei.value.code == ResponseCode.UNEXPECTED_ARGUMENT
            f = await conn.request(Op.METADATA, b"", timeout=5)
            with pytest.raises(ResponseError, match="RuntimeError: boom") as ei:
                decode_response(sc.METADATA_RESPONSE, f.body)
            assert ei.value.code == ResponseCode.INTERNAL_ERROR
            with pytest.raises(ConnectionClosedError, match="unreadable READ body"):
                await conn.request(Op.READ, b"", timeout=5)
            assert conn.is_closing
            await assert_serving(server.port)
    arun(main())


def test_no_handler_answers_unsupported_and_one_way_push():
    async def main() -> None:
        pushed: asyncio.Queue[bytes] = asyncio.Queue()

        def server_handler(conn: Connection, f: Frame) -> bytes | None:
            if f.op == Op.TAIL:  # subscribe: answer, then push three one-way frames tied to the request
                conn.respond(f, sc.TAIL_RESPONSE.encode(200, 0))
                for i in range(3):
                    conn.send(Op.TAIL, sc.TAIL_PUSH.encode(b"e%d" % i, i + 1, i), f.request_id)
                return None
            return None

        def client_handler(conn: Connection, f: Frame) -> None:
            assert f.kind == Kind.ONEWAY
            pushed.put_nowait(sc.TAIL_PUSH.decode(f.body).entries)

        async with await serve(HOST, 0, server_handler, cluster=CLUSTER) as server:
            conn = await connect(HOST, server.port, cluster=CLUSTER, handler=client_handler)
            f = await conn.request(Op.TAIL, sc.TAIL_REQUEST.encode("g0", 0, False), timeout=5)
            assert decode_response(sc.TAIL_RESPONSE, f.body).committed_index == 0
            assert [await pushed.get() for _ in range(3)] == [b"e0", b"e1", b"e2"]
            # Requests the other way: a client without a handler answers UNSUPPORTED.
            bare = await connect(HOST, server.port, cluster=CLUSTER, node_id="bare")
            (sconn,) = [c for c in server.connections if c.peer_id == "bare"]
            g = await sconn.request(Op.GET, b"", timeout=5)
            assert g.kind == RESPONSE
            with pytest.raises(ResponseError) as ei:
                decode_response(sc.GET_RESPONSE, g.body)
            assert ei.value.code == ResponseCode.UNSUPPORTED
            conn.close()
            await conn.wait_closed()
            bare.close()
            await bare.wait_closed()
    arun(main())


def test_request_timeout_and_late_response_is_dropped():
    async def main() -> None:
        held: list[tuple[Connection, Frame]] = []
        got = asyncio.Event()

        def hold(conn: Connection, f: Frame) -> None:
            held.append((conn, f))
            got.set()

        async with await serve(HOST, 0, hold, cluster=CLUSTER) as server:
            conn = await connect(HOST, server.port, cluster=CLUSTER)
            with pytest.raises(RequestTimeoutError, match="GET request to server timed out after 0.1s"):
                await conn.request(Op.GET, b"", timeout=0.1)
            await got.wait()
            sconn, f = held[0]
            sconn.respond(f, b"late")
            sconn.respond(f, b"twice")  # a second answer is ignored
            got.clear()
            fut = conn.send_request(Op.GET, b"")
            await got.wait()
            held[1][0].respond(held[1][1], b"on time")
            assert bytes((await fut).body) == b"on time"
            assert conn.in_flight == 0
            conn.close()
            await conn.wait_closed()
    arun(main())


def test_closing_fails_pending_requests():
    async def main() -> None:
        got = asyncio.Event()

        def hold(conn: Connection, f: Frame) -> None:
            got.set()

        async with await serve(HOST, 0, hold, cluster=CLUSTER) as server:
            conn = await connect(HOST, server.port, cluster=CLUSTER)
            fut = conn.send_request(Op.GET, b"")
            await got.wait()
            await server.close("going away")
            with pytest.raises(ConnectionClosedError, match="going away"):
                await fut
            with pytest.raises(ConnectionClosedError):
                conn.send_request(Op.GET, b"")
    arun(main())


@pytest.mark.parametrize("server_secret,client_secret,cluster,match", [
    ("s", "s", CLUSTER, None),
    (None, None, CLUSTER, None),
    ("s", "wrong", CLUSTER, "wrong shared secret"),
    ("s", None, CLUSTER, "requires a shared secret"),
    (None, None, "other", "cluster name does not match"),
    (None, "s", CLUSTER, "node 'n0' does not authenticate"),  # a secret-holding client refuses an open node
])
def test_hello_over_sockets(server_secret, client_secret, cluster, match):
    async def main() -> None:
        established: list[str | None] = []
        async with await serve(HOST, 0, echo, cluster=CLUSTER, node_id="n0", secret=server_secret,
                               on_established=lambda c: established.append(c.peer_id)) as server:
            kw = dict(cluster=cluster, node_id="n7", secret=client_secret)
            if match is None:
                conn = await connect(HOST, server.port, **kw)
                assert conn.peer_id == "n0" and conn.version == PROTOCOL_VERSION == 4 and established == ["n7"]
                f = await conn.request(Op.GET, b"hi", timeout=5)
                assert bytes(f.body) == b"hi"
                conn.close()
                await conn.wait_closed()
            else:
                with pytest.raises(HandshakeError, match=match):
                    await connect(HOST, server.port, **kw)
                # (An open node has taken the connection by then; the client drops it unused.)
                assert established == ([] if server_secret or not client_secret else ["n7"])
            await assert_serving(server.port, secret=server_secret)
    arun(main())


def test_the_node_answering_must_be_the_one_dialled_and_not_claim_the_diallers_id():
    async def main() -> None:
        async with await serve(HOST, 0, echo, cluster=CLUSTER, node_id="n0", secret="s") as server:
            conn = await connect(HOST, server.port, cluster=CLUSTER, node_id="n7", secret="s", expect_node="n0")
            assert conn.peer_id == "n0"
            conn.close()
            with pytest.raises(UnverifiedPeerError, match="dialled n1 but the node answering is 'n0'"):
                await connect(HOST, server.port, cluster=CLUSTER, node_id="n7", secret="s", expect_node="n1")
            with pytest.raises(HandshakeError, match="HELLO claims this node's own id 'n0'"):
                await connect(HOST, server.port, cluster=CLUSTER, node_id="n0", secret="s")
            assert [c for c in server.connections if c.is_established] == []
            await assert_serving(server.port, secret="s")
    arun(main())


def test_a_client_checks_the_node_an_endpoint_names_or_metadata_gave():
    from quorumlog.client import AsyncClient
    from quorumlog.client.results import endpoint_ids, parse_endpoints

    assert parse_endpoints("n0=h:1, h:2") == ["h:1", "h:2"] and endpoint_ids("n0=h:1, h:2") == {"h:1": "n0"}
    with pytest.raises(QuorumLogError, match="bad endpoint"):
        parse_endpoints("=h:1")

    async def main() -> None:
        async with await serve(HOST, 0, echo, cluster=CLUSTER, node_id="n0", secret="s") as server:
            addr = f"{HOST}:{server.port}"
            async with AsyncClient(f"n0={addr}", cluster=CLUSTER, secret="s") as c:
                assert (await c._conn(addr)).peer_id == "n0"
            async with AsyncClient(f"n1={addr}", cluster=CLUSTER, secret="s") as c:
                with pytest.raises(UnverifiedPeerError, match="dialled n1 but the node answering is 'n0'"):
                    await c._conn(addr)
            async with AsyncClient(addr, cluster=CLUSTER, secret="s") as c:
                assert c.expected_node(addr) is None
                c.peers = {"n0": "elsewhere:1", "n2": addr}  # as METADATA would tell it
                assert c.expected_node(addr) == "n2"
                with pytest.raises(UnverifiedPeerError, match="dialled n2"):
                    await c._conn(addr)
    arun(main())


def test_silent_client_is_closed_after_hello_timeout():
    async def main() -> None:
        async with await serve(HOST, 0, echo, cluster=CLUSTER, hello_timeout=0.2) as server:
            reader, writer = await asyncio.open_connection(HOST, server.port)
            assert "no HELLO within 0.2s" in goodbye_reason(await read_to_eof(reader))
            writer.close()
            await writer.wait_closed()
            assert not server.connections or all(c.is_closing for c in server.connections)
    arun(main())


def test_endpoint_reconnects_after_server_restart():
    async def main() -> None:
        server = await serve(HOST, 0, echo, cluster=CLUSTER)
        port = server.port
        connected: list[Connection] = []
        ep = Endpoint(HOST, port, cluster=CLUSTER, backoff_initial=0.01, backoff_max=0.1,
                      on_connect=connected.append)
        async with ep:
            f = await ep.request(Op.GET, b"one", timeout=5)
            assert bytes(f.body) == b"one"
            first = await ep.connection(5)
            await server.close()
            await first.wait_closed()
            with pytest.raises(ConnectionClosedError):
                await ep.connection(timeout=0.05)  # nothing listens: the endpoint is down
            server = await serve(HOST, port, echo, cluster=CLUSTER)
            f = await ep.request(Op.GET, b"two", timeout=5)
            assert bytes(f.body) == b"two"
            assert ep.connects == 2 and len(connected) == 2 and connected[1] is not first
        with pytest.raises(ConnectionClosedError):
            await ep.connection(1)
        await server.close()
    arun(main())


def test_endpoint_surfaces_handshake_refusal_at_once():
    async def main() -> None:
        server = await serve(HOST, 0, echo, cluster=CLUSTER, secret="s")
        async with server, Endpoint(HOST, server.port, cluster=CLUSTER, secret="nope", backoff_max=0.05) as ep:
            with pytest.raises(HandshakeError, match="wrong shared secret"):
                await ep.connection(5)
    arun(main())


def test_connect_to_a_closed_port_fails_fast():
    async def main() -> None:
        server = await serve(HOST, 0, echo, cluster=CLUSTER)
        port = server.port
        await server.close()
        with pytest.raises(OSError):
            await connect(HOST, port, cluster=CLUSTER, timeout=5)
    arun(main())


def test_pipelined_reads_pause_at_max_inflight():
    async def main() -> None:
        held: list[tuple[Connection, Frame]] = []
        reached = asyncio.Event()

        def hold(conn: Connection, f: Frame) -> None:
            held.append((conn, f))
            if len(held) == 8:
                reached.set()

        async with await serve(HOST, 0, hold, cluster=CLUSTER, max_inflight=8) as server:
            conn = await connect(HOST, server.port, cluster=CLUSTER)
            futs = [conn.send_request(Op.GET, b"%d" % i) for i in range(40)]
            await reached.wait()
            sconn = held[0][0]
            assert sconn._reading_paused
            # Answering lets the rest in; every request is eventually answered.
            answered = 0
            while answered < 40:
                batch = held[answered:]
                for c, f in batch:
                    c.respond(f, bytes(f.body))
                answered += len(batch)
                await asyncio.wait([futs[answered - 1]], timeout=5)
                await asyncio.sleep(0)
            res = await asyncio.gather(*futs)
            assert [bytes(f.body) for f in res] == [b"%d" % i for i in range(40)]
            conn.close()
            await conn.wait_closed()
    arun(main())


def test_deadlines_of_mixed_timeouts_and_stale_entries_are_bounded():
    async def main() -> None:
        held: list[tuple[Connection, Frame]] = []

        def maybe_hold(conn: Connection, f: Frame) -> bytes | None:
            if bytes(f.body) == b"hold":
                held.append((conn, f))
                return None
            return bytes(f.body)

        async with await serve(HOST, 0, maybe_hold, cluster=CLUSTER) as server:
            conn = await connect(HOST, server.port, cluster=CLUSTER)
            slow = conn.send_request(Op.GET, b"hold", timeout=30)
            fast = conn.send_request(Op.GET, b"hold", timeout=0.05)
            with pytest.raises(RequestTimeoutError):
                await fast
            assert not slow.done()
            for _ in range(10):
                await asyncio.gather(*(conn.send_request(Op.GET, b"ok", timeout=60) for _i in range(500)))
            assert len(conn._deadlines) < 3000  # answered requests do not pile up
            c, f = held[0]
            c.respond(f, b"done")
            assert bytes((await slow).body) == b"done"
            conn.close()
            await conn.wait_closed()
    arun(main())


def test_oversized_response_becomes_an_error_not_a_dead_connection():
    async def main() -> None:
        def big(conn: Connection, f: Frame) -> bytes:
            return b"x" * 5000

        async with await serve(HOST, 0, big, cluster=CLUSTER, max_frame_bytes=4096) as server:
            conn = await connect(HOST, server.port, cluster=CLUSTER, max_frame_bytes=4096)
            f = await conn.request(Op.GET, b"", timeout=5)
            with pytest.raises(ResponseError, match="exceeds max_frame_bytes") as ei:
                decode_response(sc.GET_RESPONSE, f.body)
            assert ei.value.code == ResponseCode.INTERNAL_ERROR
            with pytest.raises(ValueError):
                conn.send_request(Op.GET, b"y" * 5000)
            assert conn.in_flight == 0
            conn.close()
            await conn.wait_closed()
    arun(main())


def test_member_list_refusal_is_logged_once_on_each_side_while_the_peer_retries(caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.DEBUG, "quorumlog.net")
    ours, theirs = {"g0": "a" * 16}, {"g0": "b" * 16}

    async def main() -> None:
        async with await serve(HOST, 0, echo, cluster=CLUSTER, node_id="n0", groups=ours) as server:
            async with Endpoint(HOST, server.port, cluster=CLUSTER, node_id="n2", groups=theirs,
                                backoff_max=0.02, name="n0") as ep:
                with pytest.raises(HandshakeError, match="member list differs") as ei:
                    await ep.connection(5)
                assert ei.value.code == ResponseCode.METADATA_ERROR
                while ep.refusals < 5:  # the endpoint keeps trying: the other side may be fixed
                    await asyncio.sleep(0.01)
            assert server.refusals.count >= 5
            # The same node id with the right member list gets in.
            async with Endpoint(HOST, server.port, cluster=CLUSTER, node_id="n2", groups=ours) as good:
                f = await good.request(Op.GET, b"in", timeout=5)
                assert bytes(f.body) == b"in" and good.refusals == 0
    arun(main())
    reason = f"group g0 member list differs (n2 has {'b' * 16}, n0 has {'a' * 16}); check the peers"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    server_side = [m for m in warnings if m.startswith("refused peer n2 (127.0.0.1:")]
    client_side = [m for m in warnings if m.startswith(f"peer n0 ({HOST}:") and "refused us" in m]
    assert len(server_side) == 1 and reason in server_side[0], warnings
    assert len(client_side) == 1 and reason in client_side[0], warnings
    repeats = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG and "again" in r.getMessage()]
    assert len(repeats) >= 8  # the later refusals, on both sides, went to DEBUG


def test_an_http_server_is_named_as_such_and_logged_once_while_an_endpoint_retries(
        caplog: pytest.LogCaptureFixture) -> None:
    """Dialling an HTTP port (a node's admin port, by mistake) used to read "HTTP" as a frame length of
    1213486160 and log that at every attempt. connect() now says what answers there, and an Endpoint that
    keeps retrying logs it once; garbage that is no HTTP is logged once too."""
    caplog.set_level(logging.DEBUG, "quorumlog.net")

    async def main() -> None:
        async def http(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read(100)
            writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            await writer.drain()
            writer.close()

        async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read(100)
            writer.write(b"\xff" * 32)
            await writer.drain()
            writer.close()

        for handler, kind in ((http, NotANodeError), (garbage, MalformedAnswerError)):
            srv = await asyncio.start_server(handler, HOST, 0)
            port = srv.sockets[0].getsockname()[1]
            if kind is NotANodeError:
                with pytest.raises(NotANodeError, match=f"{HOST}:{port} answers in HTTP.*admin port"):
                    await connect(HOST, port, cluster=CLUSTER, timeout=5)
            async with Endpoint(HOST, port, cluster=CLUSTER, node_id="n2", backoff_initial=0.01, backoff_max=0.02,
                                name="n1") as ep:
                loop = asyncio.get_running_loop()
                deadline = loop.time() + 10
                while ep.refusals < 5 if kind is NotANodeError else len(caplog.records) < 20:
                    assert loop.time() < deadline
                    await asyncio.sleep(0.01)
                assert isinstance(ep.last_error, kind)
            srv.close()
            await srv.wait_closed()

    arun(main())
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 2, warnings
    assert "answers in HTTP" in warnings[0] and "exceeds max_frame_bytes" in warnings[1], warnings
