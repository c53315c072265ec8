"""How AsyncClient treats an append whose outcome it cannot know. Without the idempotent producer and
with retry_uncertain=False it never sends it again (a lost connection with the request in flight,
TERM_CHANGED); a definite refusal (NOT_LEADER) is retried either way. With the idempotent producer (the
default) every retry carries the same producer and sequence, which is what makes it safe. The other
end is a socket server that answers as a node would."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from quorumlog.client import AsyncClient
from quorumlog.errors import AppendUncertainError, ResponseCode
from quorumlog.net import schemas as sc
from quorumlog.net import serve
from quorumlog.net.bodies import encode_error
from quorumlog.net.connection import Connection
from quorumlog.net.frames import Frame
from quorumlog.net.ops import Op

CLUSTER = "test"
HOST = "127.0.0.1"


Answer = Callable[[Connection, Frame], bytes | None]


def _with_node(on_append: Answer, use: Callable[[AsyncClient], Awaitable[None]], **client_kwargs: object) -> None:
    """Serve one node that leads group g0 and answers APPENDs with `on_append`; run `use` on a client."""
    async def main() -> None:
        addr: list[str] = []

        def node(conn: Connection, f: Frame) -> bytes | None:
            if f.op == Op.METADATA:
                return sc.METADATA_RESPONSE.encode(200, "g0", "s0", 1, {"s0": addr[0]})
            if f.op != Op.APPEND:
                return encode_error(ResponseCode.UNSUPPORTED)
            return on_append(conn, f)

        async with await serve(HOST, 0, node, cluster=CLUSTER, node_id="s0") as server:
            addr.append(f"{HOST}:{server.port}")
            async with AsyncClient(addr[0], cluster=CLUSTER, retry_timeout=10, **client_kwargs) as client:  # type: ignore[arg-type]
                async with asyncio.timeout(30):
                    await use(client)

    asyncio.run(main())


@pytest.mark.parametrize("first,retry_uncertain,uncertain", [
    ("drop", False, True),
    ("term_changed", False, True),
    ("drop", True, False),
    ("term_changed", True, False),
    ("not_leader", False, False),
])
def test_uncertain_appends_are_sent_once_unless_the_caller_allows_more(first: str, retry_uncertain: bool,
                                                                       uncertain: bool) -> None:
    appends: list[bytes] = []

    def answer(conn: Connection, f: Frame) -> bytes | None:
        appends.append(sc.APPEND_REQUEST.decode(f.body).body)  # the plain layout: no producer
        if len(appends) > 1:
            return sc.APPEND_RESPONSE.encode(200, 7, 1, 0)
        if first == "drop":  # as a node that dies with the append in flight
            conn.close("node shutting down", goodbye=ResponseCode.SUCCESS)
            return None
        if first == "term_changed":
            return encode_error(ResponseCode.TERM_CHANGED, "node s0 shut down before the append committed")
        return encode_error(ResponseCode.NOT_LEADER, "node s0 is shutting down")

    async def use(client: AsyncClient) -> None:
        if uncertain:
            with pytest.raises(AppendUncertainError):
                await client.append(b"once")
        else:
            assert (await client.append(b"once")).index == 7

    _with_node(answer, use, retry_uncertain=retry_uncertain, idempotent=False)
    assert appends == ([b"once"] if uncertain else [b"once", b"once"])


@pytest.mark.parametrize("first", ["drop", "term_changed", "not_leader"])
def test_idempotent_retries_carry_the_same_producer_and_sequence(first: str) -> None:
    seen: list[tuple[bytes, int, int]] = []

    def answer(conn: Connection, f: Frame) -> bytes | None:
        r = sc.APPEND_PRODUCER_REQUEST.decode(f.body)
        seen.append((r.body, r.producer, r.seq))
        if len(seen) % 2 == 0:
            return sc.APPEND_RESPONSE.encode(200, 7 + len(seen), 1, 0)
        if first == "drop":
            conn.close("node shutting down", goodbye=ResponseCode.SUCCESS)
            return None
        code = ResponseCode.TERM_CHANGED if first == "term_changed" else ResponseCode.NOT_LEADER
        return encode_error(code, "try again")

    async def use(client: AsyncClient) -> None:
        assert (await client.append(b"one")).index == 9
        assert (await client.append(b"two")).index == 11

    _with_node(answer, use, retry_uncertain=False)
    assert [b for b, _p, _s in seen] == [b"one", b"one", b"two", b"two"]
    assert len({p for _b, p, _s in seen}) == 1 and [s for _b, _p, s in seen] == [0, 0, 1, 1]


def test_a_request_that_overtook_sequence_0_waits_for_it_and_goes_again() -> None:
    """A leader that has not seen a producer's sequence 0 answers a later one UNKNOWN_PRODUCER; while
    sequence 0 is unanswered that only means it was overtaken (here its first copy was lost and is being
    sent again), so the client sends the later one again after it."""
    written: list[int] = []
    attempts = [0]

    def answer(conn: Connection, f: Frame) -> bytes | None:
        r = sc.APPEND_PRODUCER_REQUEST.decode(f.body)
        if r.seq == 0:
            attempts[0] += 1
            if attempts[0] == 1:  # the first copy is lost with a leader change: not written
                return encode_error(ResponseCode.TERM_CHANGED, "leader changed")
            written.append(0)
            return sc.APPEND_RESPONSE.encode(200, 0, 1, 0)
        if 0 not in written:
            return encode_error(ResponseCode.UNKNOWN_PRODUCER, "no sequence 0 yet")
        written.append(r.seq)
        return sc.APPEND_RESPONSE.encode(200, r.seq, 1, r.seq)

    async def use(client: AsyncClient) -> None:
        await client.metadata()  # the leader is known: both requests leave at once, in order
        results = await asyncio.gather(client.append(b"zero"), client.append(b"one"))
        assert [r.index for r in results] == [0, 1]
        assert client.producer.changes == 0

    _with_node(answer, use)
    assert written == [0, 1]
