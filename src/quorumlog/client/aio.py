"""AsyncClient: the asyncio client (the package docstring says what every client does)."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from ssl import SSLContext
from typing import Any, TypeVar

from ..config import MAX_BODY_BYTES
from ..entry import Entry
from ..errors import (
    AppendUncertainError,
    InvalidArgumentError,
    LeaderUnavailableError,
    NotLeaderError,
    QuorumLogError,
    ResponseCode,
    SequenceError,
    error_for,
)
from ..net.bodies import Schema, decode_response, decode_response_view
from ..net.connection import Connection, connect
from ..net.errors import (
    ConnectionClosedError,
    HandshakeError,
    NotANodeError,
    ProtocolError,
    RequestTimeoutError,
    ResponseError,
    UnverifiedPeerError,
)
from ..net.frames import ONEWAY, Frame
from ..net.hello import CLIENT_ID, token_client_id
from ..net.ops import Op
from ..net.schemas import (
    APPEND_BATCH_PRODUCER_REQUEST,
    APPEND_BATCH_REQUEST,
    APPEND_PRODUCER_REQUEST,
    APPEND_REQUEST,
    APPEND_RESPONSE,
    GET_REQUEST,
    GET_RESPONSE,
    METADATA_REQUEST,
    METADATA_RESPONSE,
    READ_REQUEST,
    READ_RESPONSE,
    STATUS_REQUEST,
    STATUS_RESPONSE,
    TAIL_PUSH,
    TAIL_REQUEST,
    TAIL_RESPONSE,
    UNTAIL_REQUEST,
)
from .checks import check_answer, check_bodies, check_index, decode
from .ends import EndQueries
from .leadership import LeadershipChanges
from .members import MemberChanges
from .producer import PRODUCER_WINDOW, Producer
from .results import _BATCH_ANSWER, AppendResult, EndInfo, Metadata, _split, endpoint_ids, parse_endpoints
from .seen import PASSED_OVER, PassedOver, SeenIndexes

T = TypeVar("T")

# Codes after which the same request may simply go again (to the leader, once known).
_RETRY = frozenset({ResponseCode.NOT_LEADER, ResponseCode.LEADER_TRANSFERRING, ResponseCode.LEADER_PENDING_FULL,
                    ResponseCode.LEADER_NOT_READY, ResponseCode.TIMEOUT, ResponseCode.NETWORK_ERROR,
                    ResponseCode.SLAVE_NOT_AVAILABLE})
# Codes after which an append's fate is open: it may have been committed anyway.
_UNCERTAIN = frozenset({ResponseCode.TERM_CHANGED, ResponseCode.WAIT_QUORUM_ACK_TIMEOUT,
                        ResponseCode.FLUSH_SLAVE_TIMEOUT})



class AsyncClient(SeenIndexes, MemberChanges, LeadershipChanges, EndQueries):
    """An asyncio client of one group. Use `async with AsyncClient(...) as c:` or call close().

    `read_your_writes` (default True): reads (read, read_batch, get, tail) never return less than the client has
    seen committed (its appends, its earlier reads, end()), whichever node answers; a node behind waits a
    moment, else the client asks the leader (client/seen.py). False: a node answers with what it has committed.
    """

    def __init__(self, endpoints: str | Sequence[str], group: str = "g0", *, cluster: str = "quorumlog",
                 secret: str | None = None, token: str | None = None, tls: SSLContext | None = None,
                 request_timeout: float = 5.0,
                 retry_timeout: float = 15.0,
                 retry_uncertain: bool = True, connect_timeout: float = 2.0, idempotent: bool = True,
                 producer_id: int | None = None, max_in_flight: int = PRODUCER_WINDOW,
                 read_your_writes: bool = True) -> None:
        self.endpoints = parse_endpoints(endpoints)
        # The node each address must be ("n1=host:port" endpoints); METADATA adds the members' addresses.
        self.node_ids: dict[str, str] = endpoint_ids(endpoints)
        self.group = group
        self.cluster = cluster
        self.secret = secret
        # With a token, `secret` is that token's: the client connects as "client:<token>" and may do what
        # the nodes' [[token]] table allows it (docs/security.md); without, the cluster's shared secret.
        self.node_id = CLIENT_ID if token is None else token_client_id(token)
        self.tls = tls  # nodes with mutual TLS: tls.client_context(ca, cert, key)
        self.request_timeout = request_timeout
        self.retry_timeout = retry_timeout
        self.retry_uncertain = retry_uncertain
        self.connect_timeout = connect_timeout
        self.peers: dict[str, str] = {}  # node id -> address, learnt from METADATA
        self.leader: str | None = None
        self.term = 0
        self._leader_addr: str | None = None
        self._conns: dict[str, Connection] = {}
        self._connecting: dict[str, asyncio.Future[Connection]] = {}
        self._tailqs: dict[tuple[int, int], asyncio.Queue[Any]] = {}
        self._rng = random.Random()
        self._closed = False
        self.retries = 0  # requests sent again after a redirect, error or lost connection
        # While a call retries: (what it waits for, since when, until when), times by time.monotonic(); None
        # once a call gets through. The CLI tells a terminal about it after a moment (commands/client_cmds.py).
        self.stalled: tuple[str, float, float] | None = None
        # The idempotent producer (producer.py): every append carries (producer id, sequence), so a retry
        # is recognised and answered with the original entries.
        self.idempotent = idempotent
        self.producer = Producer(producer_id, max_in_flight, self._rng)
        self.read_your_writes = read_your_writes
        self._seen: dict[str, int] = {}  # group -> the highest index seen committed (seen.py)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        self._closed = True
        conns = list(self._conns.values())
        self._conns.clear()
        for c in conns:
            c.close("client closed")
        if conns:  # together, within one bound: one at a time, a close took up to 2 s per node
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2.0):
                    await asyncio.gather(*(c.wait_closed() for c in conns), return_exceptions=True)

    # -- connections -------------------------------------------------------------------------------
    async def _conn(self, addr: str) -> Connection:
        conn = self._conns.get(addr)
        if conn is not None and conn.is_established:
            return conn
        pending = self._connecting.get(addr)
        if pending is None:
            pending = asyncio.ensure_future(self._open(addr))
            self._connecting[addr] = pending
            pending.add_done_callback(lambda _f: self._connecting.pop(addr, None))
        return await asyncio.shield(pending)

    def expected_node(self, addr: str) -> str | None:
        """The node id the node at `addr` must have: given with the endpoints ("n1=host:port"), or learnt
        from a node's METADATA (the group's members and their addresses); None when unknown."""
        node = self.node_ids.get(addr)
        if node is None:
            named = [nid for nid, a in self.peers.items() if a == addr]
            node = named[0] if len(named) == 1 else None
        return node

    async def _open(self, addr: str) -> Connection:
        if self._closed:
            raise ConnectionClosedError("client is closed")
        host, port = _split(addr)
        # The node answering must be the one this address belongs to, when the client knows it: else a
        # relay could pass the client's handshake on to another node.
        conn = await connect(host, port, cluster=self.cluster, node_id=self.node_id, secret=self.secret,
                             handler=self._on_frame, ssl=self.tls, expect_node=self.expected_node(addr),
                             timeout=self.connect_timeout, on_close=self._on_close, eager=True)
        self._conns[addr] = conn
        return conn

    def _on_frame(self, conn: Connection, f: Frame) -> None:
        if f.kind == ONEWAY and f.op == Op.TAIL:
            key = (id(conn), f.request_id)
            q = self._tailqs.get(key)
            if q is None:  # the push overtook our handling of the TAIL response
                q = self._tailqs[key] = asyncio.Queue()
            q.put_nowait(TAIL_PUSH.decode(f.body))
            return
        raise ProtocolError(f"unexpected frame op {f.op} kind {f.kind} from a node")

    def _on_close(self, conn: Connection) -> None:
        for (cid, _rid), q in self._tailqs.items():
            if cid == id(conn):
                q.put_nowait(None)
        for addr, c in list(self._conns.items()):
            if c is conn:
                del self._conns[addr]
                if addr == self._leader_addr:
                    self._leader_addr = None

    def _stall(self, what: str, deadline: float) -> None:
        """Note that a call waits for `what` until `deadline` (a loop time), keeping when the wait began."""
        now = time.monotonic()
        since = self.stalled[1] if self.stalled is not None else now
        self.stalled = (what, since, now + max(0.0, deadline - asyncio.get_running_loop().time()))

    def _addresses(self) -> list[str]:
        seen = dict.fromkeys(self.endpoints)
        for addr in self.peers.values():
            seen.setdefault(addr)
        return list(seen)

    async def _call(self, addr: str, op: Op, body: bytes, schema: Schema, timeout: float | None = None) -> Any:
        conn = await self._conn(addr)
        f = await conn.request(op, body, timeout=timeout or self.request_timeout)
        return decode_response(schema, f.body)

    # -- leader discovery --------------------------------------------------------------------------
    async def _metadata_from(self, addr: str) -> Any:
        r = await self._call(addr, Op.METADATA, METADATA_REQUEST.encode(self.group), METADATA_RESPONSE)
        self.peers = dict(r.peers)
        if r.term >= self.term:
            self.term = r.term
            self.leader = r.leader
        return r

    async def _find_leader(self, deadline: float) -> str:
        """The leader's address, asking the known nodes (in parallel) until one names a reachable leader."""
        loop = asyncio.get_running_loop()
        delay = 0.01
        last: BaseException | None = None
        while True:
            if self._leader_addr is not None:
                return self._leader_addr
            addrs = self._addresses()
            results = await asyncio.gather(*(self._metadata_from(a) for a in addrs), return_exceptions=True)
            best = None
            wrong: NotANodeError | None = None
            for r in results:
                if isinstance(r, BaseException):
                    if isinstance(r, ResponseError | HandshakeError) and r.code == ResponseCode.UNKNOWN_GROUP:
                        raise error_for(r.code, r.reason if isinstance(r, ResponseError) else str(r))
                    if isinstance(r, NotANodeError):
                        wrong = r  # a wrong address among the endpoints: the others may do
                    elif (isinstance(r, HandshakeError) and not isinstance(r, UnverifiedPeerError)
                            and r.code != ResponseCode.TOO_MANY_CONNECTIONS):
                        raise r  # refused by a node: retrying will not help (an impostor may be one address)
                    last = r
                elif r.leader is not None and (best is None or r.term > best.term):
                    best = r
            if best is not None and best.leader in self.peers:
                self.leader = best.leader
                self.term = best.term
                self._leader_addr = self.peers[best.leader]
                self.stalled = None
                return self._leader_addr
            answered = not all(isinstance(r, BaseException) for r in results)
            if wrong is not None and not answered:
                raise wrong  # no node answers anywhere, and one address is not a node's: say so at once
            if loop.time() + delay > deadline:
                raise LeaderUnavailableError(f"no leader of group {self.group} found among {', '.join(addrs)}"
                                             + (f" (last error: {last})" if last else ""))
            self._stall(f"no leader of group {self.group} yet" if answered else
                        f"no node answers at {', '.join(addrs)}", deadline)
            await asyncio.sleep(delay * (0.5 + self._rng.random()))
            # Asking every node for its leader is cheap, and an election takes tens of milliseconds: a
            # short cap finds the new leader (or a starting cluster's first) soon after it exists.
            delay = min(delay * 2, 0.05)

    def _redirect(self, leader: str | None) -> None:
        if leader is not None and leader in self.peers:
            self.leader = leader
            self._leader_addr = self.peers[leader]
        else:
            self._leader_addr = None

    async def _leader_call(self, op: Op, body: bytes, schema: Schema, *, uncertain_ok: bool,
                           deadline: float | None = None) -> Any:
        """Send to the leader, following redirects and retrying until retry_timeout (or `deadline`)."""
        loop = asyncio.get_running_loop()
        if deadline is None:
            deadline = loop.time() + self.retry_timeout
        delay = 0.01
        while True:
            addr = self._leader_addr
            conn = self._conns.get(addr) if addr is not None else None
            if addr is None or conn is None or not conn.is_established:  # (else both are known: go at once)
                addr = await self._find_leader(deadline)
                conn = None
            code: ResponseCode
            sent = False
            try:
                if conn is None:
                    conn = await self._conn(addr)
                sent = True
                f = await conn.request(op, body, timeout=self.request_timeout)
                return decode_response(schema, f.body)
            except ResponseError as e:
                code = e.code
                if code == ResponseCode.NOT_LEADER:
                    self._redirect(e.leader)
                    if e.leader is not None and e.leader in self.peers and loop.time() < deadline:
                        self.retries += 1
                        continue  # a named leader: go there at once
                elif code in _UNCERTAIN:
                    self._leader_addr = None
                    if not uncertain_ok:
                        raise AppendUncertainError(str(e), code, e.leader) from None
                elif code not in _RETRY:
                    raise error_for(code, e.reason, e.leader, e.detail) from None
                else:
                    self._stall(f"group {self.group}: {code.name}", deadline)
                err: QuorumLogError = e
            except (ConnectionClosedError, OSError, RequestTimeoutError, UnverifiedPeerError) as e:
                self._leader_addr = None
                if sent and not uncertain_ok:
                    raise AppendUncertainError(f"connection to {addr} lost with the request in flight: {e}",
                                               ResponseCode.NETWORK_ERROR) from None
                err = e if isinstance(e, QuorumLogError) else ConnectionClosedError(str(e))
            if loop.time() + delay > deadline:
                if isinstance(err, ResponseError):
                    raise error_for(err.code, err.reason, err.leader, err.detail) from None
                raise LeaderUnavailableError(f"group {self.group}: gave up after {self.retry_timeout}s: {err}",
                                             ResponseCode.LEADER_NOT_READY) from None
            self.retries += 1
            await asyncio.sleep(delay * (0.5 + self._rng.random()))
            delay = min(delay * 2, 0.2)

    # -- appends -----------------------------------------------------------------------------------
    async def append(self, body: bytes, *, expected_end: int | None = None) -> AppendResult:
        """Append one entry; returns once it is committed (durable on a majority). With `expected_end`
        it is written only if the group's last client entry is that index (-1: none), else
        ExpectedEndMismatchError tells the actual one."""
        r = await self._append_call(Op.APPEND, body, APPEND_RESPONSE, expected_end)
        check_answer(r.index, 1, (r.pos,), False)
        self._saw(r.index)
        return AppendResult(r.index, r.term, r.pos)

    async def append_many(self, bodies: Sequence[bytes], *, expected_end: int | None = None) -> list[AppendResult]:
        """Append entries as one request (one frame, one quorum wait); indexes are consecutive."""
        r = await self._append_call(Op.APPEND_BATCH, list(bodies), _BATCH_ANSWER, expected_end)
        check_answer(r.first_index, len(bodies), r.positions, self.idempotent)
        self._saw(r.first_index + len(r.positions) - 1)
        return [AppendResult(r.first_index + i, r.term, p) for i, p in enumerate(r.positions)]

    async def append_batch_raw(self, bodies: Sequence[bytes]) -> tuple[int, int]:
        """append_many without building per-entry results: (first index, count). For high-rate producers."""
        r = await self._append_call(Op.APPEND_BATCH, list(bodies), _BATCH_ANSWER, None)
        check_answer(r.first_index, len(bodies), r.positions, self.idempotent)
        self._saw(r.first_index + len(r.positions) - 1)
        return r.first_index, len(r.positions)

    async def _append_call(self, op: Op, bodies: bytes | list[bytes], schema: Schema,
                           expected_end: int | None) -> Any:
        single = op == Op.APPEND
        if expected_end is not None and expected_end < -1:  # -2 means "no condition" on the wire
            raise InvalidArgumentError(f"expected_end must be an index or -1 (no client entry yet), not "
                                       f"{expected_end}")
        end = -2 if expected_end is None else expected_end
        if not self.idempotent:
            if expected_end is None:
                plain = (APPEND_REQUEST if single else APPEND_BATCH_REQUEST).encode(self.group, bodies)
            else:
                plain = (APPEND_PRODUCER_REQUEST if single else APPEND_BATCH_PRODUCER_REQUEST).encode(
                    self.group, bodies, 0, -1, end)
            return await self._leader_call(op, plain, schema, uncertain_ok=self.retry_uncertain)
        layout = APPEND_PRODUCER_REQUEST if single else APPEND_BATCH_PRODUCER_REQUEST
        check_bodies(bodies)  # before a sequence is drawn: a refused call leaves the producer as it was
        loop = asyncio.get_running_loop()
        ids = self.producer
        producer, seq = await ids.take()
        try:
            deadline = loop.time() + self.retry_timeout
            delay = 0.01
            while True:
                body = layout.encode(self.group, bodies, producer, seq, end)
                try:
                    return await self._leader_call(op, body, schema, uncertain_ok=True, deadline=deadline)
                except SequenceError as e:
                    # An earlier sequence is not in the log yet (it is being retried, or overtook this one:
                    # a leader that has not seen sequence 0 does not know the producer), or was given up:
                    # this request was not written, so it may wait, or take a sequence of the current id.
                    out_of_order = e.code == ResponseCode.OUT_OF_ORDER_SEQUENCE or (
                        e.code == ResponseCode.UNKNOWN_PRODUCER and ids.earlier_outstanding(producer, seq))
                    if not out_of_order or loop.time() + delay > deadline:
                        ids.retire(producer)
                        raise
                    self.retries += 1
                    if producer != ids.id:
                        await ids.release(producer, seq)
                        producer, seq = await ids.take()
                        continue
                    ids.hold(producer, seq)
                    if not await ids.earlier_answered(producer, seq, deadline):
                        await asyncio.sleep(delay * (0.5 + self._rng.random()))
                        delay = min(delay * 2, 0.2)
                except BaseException:
                    ids.retire(producer)
                    raise
        finally:
            await ids.release(producer, seq)

    # -- reads -------------------------------------------------------------------------------------
    async def _until_answered(self, call: Callable[[str], Awaitable[T]], prefer_leader: bool = True, *,
                              passed_over: frozenset[int] = frozenset()) -> T:
        """`call(address)` on the first node that answers, the known ones in turn, again and again until
        retry_timeout while none does. A node's refusal ends it at once, but one of `passed_over` (a read at a
        min_index: seen.py), after which the leader it names is asked next, else the next node."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.retry_timeout
        delay = 0.01
        while True:
            order = self._addresses()
            if prefer_leader and self._leader_addr is not None:
                order = [self._leader_addr] + [a for a in order if a != self._leader_addr]
            last: BaseException | None = None
            wrong: NotANodeError | None = None
            behind: ResponseError | None = None
            pending = list(order)
            while pending:
                addr = pending.pop(0)
                try:
                    r = await call(addr)
                except ResponseError as e:
                    if e.code not in passed_over:
                        raise error_for(e.code, e.reason, e.leader) from None
                    behind = last = e
                    await self._ask_hinted_next(e, addr, pending)
                except NotANodeError as e:
                    wrong = last = e
                except (ConnectionClosedError, OSError, RequestTimeoutError, UnverifiedPeerError) as e:
                    last = e
                else:
                    self.stalled = None
                    return r
            if wrong is not None and behind is None:
                raise wrong  # no node answered, and one address is not a node's: say so at once
            if loop.time() + delay > deadline:
                if behind is not None:
                    raise self._behind(behind)
                raise LeaderUnavailableError(f"no node of {', '.join(order)} answered: {last}",
                                             ResponseCode.NETWORK_ERROR)
            self._stall(f"group {self.group}: no node has committed index {self._min_index()} yet" if behind else
                        f"no node answers at {', '.join(order)}", deadline)
            self.retries += 1
            await asyncio.sleep(delay * (0.5 + self._rng.random()))
            delay = min(delay * 2, 0.2)

    async def get(self, index: int) -> Entry:
        """The committed entry at `index` (IndexOutOfRangeError when it is not committed)."""
        check_index("index", index)
        r = await self._read_call(Op.GET, GET_REQUEST, (self.group, index), GET_RESPONSE)
        entries = decode(r.entry, MAX_BODY_BYTES)
        if len(entries) != 1 or entries[0].index != index:
            raise QuorumLogError(f"node answered GET {index} with something else", ResponseCode.INCONSISTENT_STATE)
        self._saw(index)
        return entries[0]

    async def read_batch(self, start: int, max_entries: int = 10000, max_bytes: int = 4 << 20,
                         include_control: bool = False) -> tuple[list[Entry], int, int]:
        """One READ: (committed entries from `start`, the next index to ask for, the committed index)."""
        check_index("start", start)
        r = await self._read_call(Op.READ, READ_REQUEST, (self.group, start, max_entries, max_bytes, include_control),
                                  READ_RESPONSE)
        entries = decode(r.entries, MAX_BODY_BYTES)
        self._read_up_to(start, r.next_index)
        return entries, r.next_index, r.committed_index

    async def read_raw(self, start: int, max_entries: int = 10000, max_bytes: int = 4 << 20, *,
                       node: str | None = None) -> tuple[bytes, int, int]:
        """One READ answered as the wire carries it: (encoded entries back to back, the next index to ask
        for, the responder's committed index). For bulk readers that decode a whole answer at once (the
        caller checks CRCs). `node` ("host:port") asks that node only; otherwise as read_batch."""
        if node is not None:
            data, nxt, committed = await self.read_view(start, max_entries, max_bytes, node)
            return bytes(data), nxt, committed
        r = await self._read_call(Op.READ, READ_REQUEST, (self.group, start, max_entries, max_bytes, False),
                                  READ_RESPONSE)
        self._read_up_to(start, r.next_index)
        return r.entries, r.next_index, r.committed_index

    async def read_view(self, start: int, max_entries: int, max_bytes: int, node: str) -> tuple[memoryview, int, int]:
        """read_raw from `node`, the entries a view of the answer's frame, not a copy (spark.fetch)."""
        conn = await self._conn(node)
        f = await conn.request(Op.READ, READ_REQUEST.encode(self.group, start, max_entries, max_bytes, False),
                               timeout=self.request_timeout)
        try:
            r = decode_response_view(READ_RESPONSE, f.body)
        except ResponseError as e:
            raise error_for(e.code, e.reason, e.leader) from None
        self._read_up_to(start, r.next_index)  # (noted, though no min_index was sent: seen.py)
        return r.entries, r.next_index, r.committed_index

    async def read(self, start: int, count: int, *, include_control: bool = False,
                   batch: int = 10000) -> AsyncIterator[Entry]:
        """Committed entries with indexes start..start+count-1 (fewer when the log ends first)."""
        check_index("start", start)
        check_index("count", count)
        end = start + count
        nxt = start
        while nxt < end:
            entries, after, _committed = await self.read_batch(nxt, min(batch, end - nxt), 4 << 20,
                                                               include_control)
            for e in entries:
                if e.index < end:
                    yield e
            if after <= nxt:
                return  # nothing more committed
            nxt = after

    async def tail(self, start: int, *, include_control: bool = False) -> AsyncIterator[Entry]:
        """Every committed entry from `start` on, as it commits; follows the cluster across node failures."""
        nxt = start
        passed = PassedOver()  # nodes that refused a TAIL at the client's min_index (seen.py)
        while not self._closed:
            conn: Connection | None = None
            rid = -1
            try:
                order = self._addresses()
                if self._leader_addr is not None:
                    order.insert(0, self._leader_addr)
                for addr in passed.order(order):
                    try:
                        conn = await self._conn(addr)
                        break
                    except (ConnectionClosedError, OSError, RequestTimeoutError):
                        continue
                if conn is None:
                    await asyncio.sleep(0.2)
                    continue
                body = self._with_min_index(conn, TAIL_REQUEST, (self.group, nxt, include_control), self._min_index())
                f = await conn.request(Op.TAIL, body, timeout=self.request_timeout)
                try:
                    decode_response(TAIL_RESPONSE, f.body)
                except ResponseError as refused:
                    if refused.code not in PASSED_OVER:
                        raise error_for(refused.code, refused.reason, refused.leader) from None
                    await self._tail_passed_over(refused, addr, passed)
                    continue
                passed = PassedOver()
                rid = f.request_id
                key = (id(conn), rid)
                q = self._tailqs.setdefault(key, asyncio.Queue())
                while True:
                    push = await q.get()
                    if push is None:
                        break  # the connection closed: resubscribe elsewhere from nxt
                    entries = decode(push.entries, MAX_BODY_BYTES)
                    self._read_up_to(nxt, push.next_index)
                    for entry in entries:
                        if entry.index >= nxt:
                            yield entry
                    nxt = max(nxt, push.next_index)
            except (ConnectionClosedError, RequestTimeoutError, OSError):
                await asyncio.sleep(0.05)
            finally:
                if conn is not None and rid >= 0:
                    self._tailqs.pop((id(conn), rid), None)
                    if conn.is_established:
                        with contextlib.suppress(Exception):
                            conn.send_request(Op.UNTAIL, UNTAIL_REQUEST.encode(rid), timeout=1.0)

    # -- cluster -----------------------------------------------------------------------------------
    async def metadata(self, *, with_nodes: bool = True) -> Metadata:
        """Leader, term and members; with_nodes adds each member's status (begin/end/committed index)."""
        r = await self._until_answered(self._metadata_from, prefer_leader=False)
        nodes: dict[str, dict[str, Any] | None] = {}
        if with_nodes:
            ids = list(r.peers)
            docs = await asyncio.gather(*(self.node_status(r.peers[i]) for i in ids), return_exceptions=True)
            for i, d in zip(ids, docs, strict=True):
                nodes[i] = None if isinstance(d, BaseException) else d.get("groups", {}).get(self.group)
        return Metadata(r.group, r.leader, r.term, dict(r.peers), nodes)

    async def node_status(self, addr: str, *, all_groups: bool = False) -> dict[str, Any]:
        """The STATUS document of the node at `addr` (this group's, or every group's)."""
        try:
            r = await self._call(addr, Op.STATUS, STATUS_REQUEST.encode(None if all_groups else self.group),
                                 STATUS_RESPONSE, timeout=2.0)
        except ResponseError as e:
            raise error_for(e.code, e.reason, e.leader) from None
        return dict(r.status)

    async def _group_doc(self, addr: str) -> dict[str, Any] | None:
        """This group's status document from the node at `addr`, None if it does not answer or host it."""
        try:
            return dict((await self.node_status(addr))["groups"][self.group])
        except (QuorumLogError, OSError, KeyError, TypeError):
            return None


__all__ = ["AppendResult", "AsyncClient", "EndInfo", "Metadata", "NotLeaderError", "parse_endpoints"]
