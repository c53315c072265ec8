"""How AsyncClient treats an append whose outcome it cannot know. Without the idempotent producer and
with retry_uncertain=False it never sends it again (a lost connection with the request in flight,
TERM_CHANGED); a definite refusal (NOT_LEADER) is retried either way. With the idempotent producer (the
default) every retry carries the same producer and sequence, which is what makes it safe. The other
end is a socket server that answers as a node would."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import Any

import msgpack
import pytest

from quorumlog.client import AsyncClient
from quorumlog.errors import AppendUncertainError, QuorumLogError, ResponseCode
from quorumlog.net import schemas as sc
from quorumlog.net import serve
from quorumlog.net.bodies import encode_error
from quorumlog.net.connection import Connection
from quorumlog.net.frames import Frame
from quorumlog.net.ops import Op
from quorumlog.store.memory import MemoryStore

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


# -- a node whose answers are well-framed but wrong ---------------------------------------------------
def _serve_answers(answer: Callable[[int, random.Random], bytes], use: Callable[[AsyncClient], Awaitable[None]],
                   seed: int = 0, **client_kwargs: Any) -> None:
    """A node that leads g0 and answers every other request with `answer(op, rng)`."""
    rng = random.Random(seed)

    async def main() -> None:
        addr: list[str] = []

        def node(conn: Connection, f: Frame) -> bytes | None:
            if f.op == Op.METADATA:
                return sc.METADATA_RESPONSE.encode(200, "g0", "s0", 1, {"s0": addr[0]})
            return answer(f.op, rng)

        async with await serve(HOST, 0, node, cluster=CLUSTER, node_id="s0") as server:
            addr.append(f"{HOST}:{server.port}")
            async with AsyncClient(addr[0], cluster=CLUSTER, retry_timeout=0.5, **client_kwargs) as client:
                async with asyncio.timeout(60):
                    await use(client)

    asyncio.run(main())


@pytest.mark.parametrize("idempotent", [False, True])
def test_an_append_answered_for_other_entries_is_an_error_not_a_result(idempotent: bool) -> None:
    """A SUCCESS naming a negative index, no position, or (a plain append) fewer positions than entries
    sent would pair the caller's entries with wrong indexes: it is INCONSISTENT_STATE. append_many
    returned it as it came. (A producer's retry is answered with what its first attempt wrote, which may
    be another number of entries: a Spark task's attempts do that.)"""
    def answer(op: int, rng: random.Random) -> bytes:
        if op == Op.APPEND:
            return sc.APPEND_RESPONSE.encode(200, -1, 1, 0)
        # two positions for three entries (a plain append), then none at all (a producer's)
        return sc.APPEND_BATCH_RESPONSE.encode(200, 7, 1, [] if idempotent else [0, 60])

    async def use(c: AsyncClient) -> None:
        for call in (c.append_many([b"a", b"b", b"c"]), c.append_batch_raw([b"a", b"b", b"c"]), c.append(b"a")):
            with pytest.raises(QuorumLogError, match="positions from index") as ei:
                await call
            assert ei.value.code == ResponseCode.INCONSISTENT_STATE

    _serve_answers(answer, use, idempotent=idempotent)


def test_hostile_answers_raise_quorumlog_errors_only() -> None:
    """Well-framed answers with random bodies (wrong shapes, codes, values; entries cut or with a bit
    flipped): every call ends in a QuorumLogError or a plausible result, never another exception."""
    store = MemoryStore()
    for i in range(30):
        store.append([b"body-%d" % i], 1)
    raw = bytes(store.read_raw(0, 30, 1 << 20)[0])

    def weird(rng: random.Random) -> int:
        return rng.choice([-1, 0, 1, 5, 29, 30, 1 << 40, (1 << 63) - 1])

    def answer(op: int, rng: random.Random) -> bytes:
        roll = rng.random()
        if roll < 0.2:
            return msgpack.packb([200, *(rng.choice([None, 1, -5, b"x", "s", [1, 2], {"a": 1}])
                                         for _ in range(rng.randint(0, 5)))])
        if roll < 0.3:
            return msgpack.packb([rng.choice([200, 0, 999, 404, 501]), "reason", None])
        if op == Op.APPEND:
            return sc.APPEND_RESPONSE.encode(200, weird(rng), weird(rng), weird(rng))
        if op == Op.APPEND_BATCH:
            return sc.APPEND_BATCH_RESPONSE.encode(200, weird(rng), weird(rng),
                                                   [weird(rng) for _ in range(rng.randint(0, 6))])
        entries = raw[:rng.randint(0, len(raw))] if rng.random() < 0.6 else bytes(
            b ^ (rng.random() < 0.01) for b in raw)
        if op == Op.GET:
            return sc.GET_RESPONSE.encode(200, entries)
        return sc.READ_RESPONSE.encode(200, entries, weird(rng), weird(rng))

    async def use(c: AsyncClient) -> None:
        rng = random.Random(1)
        calls: list[Callable[[], Awaitable[object]]] = [
            lambda: c.append(b"x"), lambda: c.append_many([b"a", b"b", b"c"]),
            lambda: c.get(rng.randint(0, 40)), lambda: c.read_batch(rng.randint(0, 10), rng.randint(1, 40))]
        errors = 0
        for _ in range(400):
            try:
                await rng.choice(calls)()
            except QuorumLogError:
                errors += 1
        assert 100 < errors < 400  # (most answers are refused; some are plausible and taken)

    _serve_answers(answer, use, seed=7)
