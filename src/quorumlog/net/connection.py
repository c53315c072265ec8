"""One framed connection on asyncio: request ids mapped to futures, batched writes, HELLO gating.

`Connection` is an asyncio.Protocol used on both ends. Either side may send requests (each side numbers
its own; responses carry the number back), one-way frames, and answer the other side's requests.
Frames written during one loop iteration leave in one transport.write (a client's request on an idle
connection at once). Bytes that are not a valid frame close this connection only, with a logged reason and
a best-effort GOODBYE frame first. connect() (dial.py) opens one and runs HELLO from the dialler's end;
serve() (server.py) accepts them.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, cast

from ..errors import QuorumLogError, ResponseCode
from ..tls import cert_identity
from ..untrusted import shown
from .bodies import encode_error
from .errors import ConnectionClosedError, ProtocolError, RequestTimeoutError
from .frames import (
    DEFAULT_MAX_FRAME_BYTES,
    MAX_REQUEST_ID,
    ONEWAY,
    REQUEST,
    RESPONSE,
    Body,
    Frame,
    FrameDecoder,
    FrameWriter,
)
from .hello import Permissions, ServerHandshake, State
from .ops import VALID_OPS, Op, op_name
from .outbox import Outbox
from .schemas import GOODBYE

log = logging.getLogger("quorumlog.net")

# Until HELLO completes a peer is unauthenticated: it may only send small frames (a node's HELLO names
# every group it hosts, about 30 bytes each).
HANDSHAKE_MAX_FRAME_BYTES = 64 * 1024
# How long close() waits for buffered bytes to drain before aborting (a peer that never reads).
CLOSE_GRACE_S = 2.0

HandlerResult = Body | None
Handler = Callable[["Connection", Frame], HandlerResult | Awaitable[HandlerResult]]
"""Called for each request and one-way frame. For a request it may return the response body (sent at
once), an awaitable of it (run as a task), or None and call conn.respond() later itself.
Raising ProtocolError closes the connection; a QuorumLogError becomes an error response with its code;
any other exception is logged and answered with INTERNAL_ERROR."""


class Connection(asyncio.Protocol):
    """A framed, multiplexed connection. Build it with connect() or serve(), not directly."""

    def __init__(self, *, handler: Handler | None = None, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                 server_handshake: ServerHandshake | None = None, hello_timeout: float = 5.0,
                 max_inflight: int = 4096, max_output_bytes: int = 32 * 1024 * 1024,
                 limits: Counter[str] | None = None,
                 on_made: Callable[[Connection], None] | None = None,
                 on_established: Callable[[Connection], None] | None = None,
                 on_close: Callable[[Connection], None] | None = None,
                 on_refused: Callable[[Connection, str | None, str], None] | None = None,
                 outbox: Outbox | None = None, after_frames: Callable[[], None] | None = None,
                 eager: bool = False, admit: Callable[[str], str | None] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        self._outbox = outbox or Outbox()
        self._eager = eager  # a client's: a request with none in flight is written at once, not next turn
        self._after_frames = after_frames
        self._handler = handler
        self._max_frame_bytes = max_frame_bytes
        self._hs = server_handshake
        self._hello_timeout = hello_timeout
        self._max_inflight = max_inflight
        self._max_output = max_output_bytes
        self._limits = limits if limits is not None else Counter()  # times each limit held a connection
        self._on_made = on_made
        self._on_established = on_established
        self._on_close = on_close
        self._on_refused = on_refused
        self._admit = admit  # told the peer id HELLO would establish: None, or the reason it may not
        self._transport: asyncio.Transport | None = None
        # Versions are pinned once HELLO settles; until then any version is parsed so a refusal can be sent.
        limit = HANDSHAKE_MAX_FRAME_BYTES if server_handshake is not None else max_frame_bytes
        self._decoder = FrameDecoder(limit, versions=None)
        self._writer = FrameWriter(max_frame_bytes)
        self._flush_scheduled = False
        self._ready = False
        self._closing = False
        self._closed: asyncio.Future[None] = self._loop.create_future()
        self._close_reason = ""
        self._peer_goodbye = ""
        self.http_answer = False  # a dialled server answered in HTTP (connect raises NotANodeError)
        self.malformed = False  # the peer sent bytes that are no frame (connect raises MalformedAnswerError)
        self._next_id = 1
        self._pending: dict[int, asyncio.Future[Frame]] = {}
        # Request deadlines: one heap and one loop timer per connection, not a TimerHandle per request
        # (that costs ~20% of a round trip). Answered requests leave stale entries, skipped when swept.
        self._deadlines: list[tuple[float, int, int, float]] = []  # (deadline, rid, op, timeout)
        self._sweep_at = 0.0
        self._sweep_handle: asyncio.TimerHandle | None = None
        self._open: set[int] = set()  # the peer's requests we have not answered yet
        self._tasks: set[asyncio.Task[None]] = set()
        self._reading_paused = False
        self._held = False  # a limit stopped reading and handling frames (see _handle_frames)
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._timer: asyncio.TimerHandle | None = None
        self.peer_id: str | None = None
        self.permissions: Permissions | None = None  # what the other side may do (hello.py); None: all
        self.version: int | None = None
        self.peername: Any = None

    # -- state ------------------------------------------------------------------------------------
    def __repr__(self) -> str:
        return f"<Connection {self.peer_id or '?'}@{self._peer_text()}{' closing' if self._closing else ''}>"

    @property
    def remote(self) -> str:
        """The other end's host:port, for log lines."""
        return self._peer_text()

    def _peer_text(self) -> str:
        p = self.peername
        return f"{p[0]}:{p[1]}" if isinstance(p, tuple) and len(p) >= 2 else str(p)

    @property
    def is_established(self) -> bool:
        """HELLO completed and the connection is open."""
        return self._ready and not self._closing

    @property
    def is_closing(self) -> bool:
        return self._closing

    @property
    def close_reason(self) -> str:
        return self._close_reason

    @property
    def in_flight(self) -> int:
        """Our requests still waiting for a response."""
        return len(self._pending)

    # -- asyncio.Protocol -------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses but offer the same methods.
        self._transport = cast(asyncio.Transport, transport)
        self._transport.set_write_buffer_limits(high=self._max_output)
        self.peername = transport.get_extra_info("peername")
        if self._hs is not None and transport.get_extra_info("sslcontext") is not None:
            self._hs.identity = cert_identity(transport.get_extra_info("peercert"))
        if self._hs is not None:
            self._timer = self._loop.call_later(self._hello_timeout, self._hello_expired)
        if self._on_made is not None:
            self._on_made(self)

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        if not self._ready and self._hs is None and data[:5] == b"HTTP/":
            # We dialled an HTTP server (a node's admin port?): its answer read as a frame is only a
            # baffling length ("HTTP" is 1213486160), so say what it is (connect raises it).
            self.http_answer = True
            self.close(f"{self._peer_text()} answers in HTTP, not the quorumlog protocol")
            return
        try:
            self._decoder.feed(data)
        except ProtocolError as e:
            self._protocol_error(e.reason)
            return
        self._handle_frames()

    def _handle_frames(self) -> None:
        """Handle the buffered frames, stopping (the rest stays in the decoder, and the connection is
        not read) while the peer has too many requests unanswered or too many answers unsent: a client
        that never reads its answers cannot make the node hold more than the limits."""
        if self._held or self._closing:  # (a later turn may find the connection closed meanwhile)
            return
        next_frame = self._decoder.next_frame
        try:
            while (f := next_frame()) is not None:
                self._on_frame(f)
                if self._closing:
                    return
                if f.kind == REQUEST and self._over_limits():
                    self._hold()
                    break
        except ProtocolError as e:
            self._protocol_error(e.reason)
            return
        if self._after_frames is not None:
            self._after_frames()

    def _over_limits(self) -> bool:
        if len(self._open) >= self._max_inflight:
            self._limits["requests"] += 1
            return True
        if self.output_bytes > self._max_output:
            self._limits["output"] += 1
            return True
        return False

    def _hold(self) -> None:
        self._held = True
        if self._transport is not None and not self._reading_paused:
            self._reading_paused = True
            self._transport.pause_reading()

    def _release(self) -> None:
        """Read and handle frames again once both limits are at half (so a connection does not flap)."""
        if (not self._held or self._closing or len(self._open) > self._max_inflight // 2
                or self.output_bytes > self._max_output // 2):
            return
        self._held = False
        if self._reading_paused and self._transport is not None:
            self._reading_paused = False
            self._transport.resume_reading()
        self._loop.call_soon(self._handle_frames)  # frames already buffered, in a turn of their own

    @property
    def output_bytes(self) -> int:
        """Answers and other frames queued or buffered for sending, not yet taken by the kernel."""
        t = self._transport
        return self._writer.nbytes + (t.get_write_buffer_size() if t is not None else 0)

    def eof_received(self) -> bool | None:
        if not self._closing:
            try:
                self._decoder.eof()
            except ProtocolError as e:
                log.warning("connection %s: %s", self._peer_text(), e.reason)
                self._close_reason = e.reason
        return None  # let the transport close

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._close_reason:
            self._close_reason = self._peer_goodbye or (f"connection lost: {exc}" if exc else "closed by peer")
        self._closing = True
        self._transport = None
        if self._timer is not None:
            self._timer.cancel()
        self._fail_pending()
        for t in self._tasks:
            t.cancel()
        for w in self._drain_waiters:
            if not w.done():
                w.set_exception(ConnectionClosedError(self._close_reason))
        self._drain_waiters.clear()
        if not self._closed.done():
            self._closed.set_result(None)
        if self._on_close is not None:
            self._on_close(self)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        waiters, self._drain_waiters = self._drain_waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)
        self._release()

    # -- sending ----------------------------------------------------------------------------------
    def _write(self, kind: int, op: int, rid: int, body: Body) -> None:
        self._writer.add(kind, op, rid, body)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._outbox.add(self)

    def flush(self) -> None:
        """Write every queued frame now, in one transport write (normally once per loop turn, through
        the Outbox)."""
        self._flush_scheduled = False
        w = self._writer
        if len(w) and self._transport is not None:
            if w.gathers:  # a large body part (a view of the store): writev, no copy here
                self._transport.writelines(w.take_parts())
            else:
                self._transport.write(w.take())
            if self._held:
                self._release()

    async def drain(self) -> None:
        """Wait until this connection's unsent bytes are within its output limit (backpressure).

        Frames queued this turn are handed to the transport first when they alone pass the limit, so the
        transport's own accounting (pause_writing) sees them; the wait ends once the kernel took enough
        for the transport to resume. A writer that loops on send + drain without a pause (a TAIL) thus
        holds at most the limit plus one frame, and yields to the loop every time."""
        if self._closing:
            raise ConnectionClosedError(self._close_reason)
        if self._writer.nbytes and self.output_bytes > self._max_output:
            self.flush()
        if self._write_paused:
            self._limits["output"] += 1
            w = self._loop.create_future()
            self._drain_waiters.append(w)
            await w

    def send_request(self, op: int, body: Body = b"", *, timeout: float | None = None) -> asyncio.Future[Frame]:
        """Send a request; the future gets the response frame, RequestTimeoutError or ConnectionClosedError."""
        return self._send_request(op, body, timeout)[1]

    def _send_request(self, op: int, body: Body, timeout: float | None) -> tuple[int, asyncio.Future[Frame]]:
        if self._closing:
            raise ConnectionClosedError(self._closed_text())
        rid = self._next_id
        self._next_id = 1 if rid == MAX_REQUEST_ID else rid + 1
        fut: asyncio.Future[Frame] = self._loop.create_future()
        eager = self._eager and not self._pending and not self._flush_scheduled
        self._writer.add(REQUEST, op, rid, body) if eager else self._write(REQUEST, op, rid, body)
        if eager:
            self.flush()
        self._pending[rid] = fut
        if timeout is not None:
            self._add_deadline(rid, op, timeout)
        return rid, fut

    async def request(self, op: int, body: Body = b"", *, timeout: float | None = None) -> Frame:
        """Send a request and wait for its response frame."""
        rid, fut = self._send_request(op, body, timeout)
        try:
            return await fut
        finally:
            if not fut.done() or fut.cancelled():  # the caller gave up: forget the request
                self._pending.pop(rid, None)

    def send(self, op: int, body: Body = b"", request_id: int = 0) -> None:
        """Send a one-way frame (request_id ties it to an earlier request, e.g. a TAIL subscription)."""
        if self._closing:
            raise ConnectionClosedError(self._closed_text())
        self._write(ONEWAY, op, request_id, body)

    def respond(self, request: Frame, body: Body) -> None:
        """Answer one of the peer's requests (at most once; a second answer is ignored)."""
        rid = request.request_id
        try:
            self._open.remove(rid)
        except KeyError:
            log.debug("%r: request %d already answered", self, rid)
            return
        if self._closing:
            return
        try:
            self._write(RESPONSE, request.op, rid, body)
        except ValueError as e:  # a response over max_frame_bytes: tell the requester, keep the connection
            log.error("%r: cannot send %s response: %s", self, op_name(request.op), e)
            self._write(RESPONSE, request.op, rid, encode_error(ResponseCode.INTERNAL_ERROR, str(e)))
        if self._held:
            self._release()

    def respond_error(self, request: Frame, code: ResponseCode | int, reason: str = "",
                      leader: str | None = None) -> None:
        """Answer with the generic error body [code, reason, leader]."""
        self.respond(request, encode_error(code, reason, leader))

    # -- closing ----------------------------------------------------------------------------------
    def close(self, reason: str = "closed", *, goodbye: ResponseCode | None = None) -> None:
        """Flush what is queued (with a GOODBYE frame if `goodbye` is given) and close."""
        if self._closing:
            return
        self._closing = True
        self._close_reason = reason
        if self._timer is not None:
            self._timer.cancel()
        t = self._transport
        if t is not None:
            if goodbye is not None:
                self._writer.add(ONEWAY, Op.GOODBYE, 0, GOODBYE.encode(int(goodbye), reason[:1000]))
            self.flush()
            t.close()
            # A peer that never reads would keep the close waiting on a full buffer for ever.
            self._timer = self._loop.call_later(CLOSE_GRACE_S, t.abort)
        self._fail_pending()

    def abort(self, reason: str = "aborted") -> None:
        """Close at once, dropping anything unsent."""
        if not self._close_reason:
            self._close_reason = reason
        self._closing = True
        if self._transport is not None:
            self._transport.abort()
        self._fail_pending()

    async def wait_closed(self) -> None:
        """Wait until the transport is gone."""
        await asyncio.shield(self._closed)

    def _closed_text(self) -> str:
        return f"connection to {self.peer_id or self._peer_text()} closed: {self._close_reason}"

    def _fail_pending(self) -> None:
        if not self._pending:
            return
        exc_text = self._closed_text()
        pending, self._pending = self._pending, {}
        self._deadlines.clear()
        if self._sweep_handle is not None:
            self._sweep_handle.cancel()
            self._sweep_handle = None
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(ConnectionClosedError(exc_text))

    def _protocol_error(self, reason: str) -> None:
        self.malformed = True
        if not self._ready and self._on_refused is not None:  # anyone's: logged within the refusals' limit
            self._on_refused(self, None, f"protocol error before HELLO completed: {reason}")
        elif not self._ready and self._hs is None:
            # A connection we dialled, in its handshake: connect() raises the error to the caller, who
            # reports it (an Endpoint logs each distinct one once; a client says it): a line per attempt
            # here flooded the log of anything that retries.
            log.debug("closing connection %s (no HELLO): %s", self._peer_text(), reason)
        else:
            log.warning("closing connection %s (%s): %s", self._peer_text(), self.peer_id or "no HELLO", reason)
        if self._transport is not None and not self._reading_paused:
            self._transport.pause_reading()
            self._reading_paused = True
        self.close(f"protocol error: {reason}", goodbye=ResponseCode.UNEXPECTED_ARGUMENT)

    def _hello_expired(self) -> None:
        self._timer = None
        if not self._ready and not self._closing:
            reason = f"no HELLO within {self._hello_timeout}s"
            if self._on_refused is not None:
                self._on_refused(self, None, reason)
            else:
                log.warning("closing connection %s: %s", self._peer_text(), reason)
            self.close(reason, goodbye=ResponseCode.TIMEOUT)

    def _add_deadline(self, rid: int, op: int, timeout: float) -> None:
        deadline = self._loop.time() + timeout
        heap = self._deadlines
        if len(heap) > 1024 and len(heap) > 4 * len(self._pending):
            # Mostly answered requests: drop the stale entries so the heap stays near the live count.
            heap[:] = [d for d in heap if d[1] in self._pending]
            heapq.heapify(heap)
        heapq.heappush(heap, (deadline, rid, op, timeout))
        if self._sweep_handle is None or deadline < self._sweep_at:
            if self._sweep_handle is not None:
                self._sweep_handle.cancel()
            self._sweep_at = deadline
            self._sweep_handle = self._loop.call_at(deadline, self._sweep)

    def _sweep(self) -> None:
        self._sweep_handle = None
        heap = self._deadlines
        now = self._loop.time()
        while heap and heap[0][0] <= now:
            _, rid, op, timeout = heapq.heappop(heap)
            fut = self._pending.pop(rid, None)
            if fut is not None and not fut.done():
                fut.set_exception(RequestTimeoutError(
                    f"{op_name(op)} request to {self.peer_id or self._peer_text()} timed out after {timeout:g}s"))
        if heap and not self._closing:
            self._sweep_at = heap[0][0]
            self._sweep_handle = self._loop.call_at(self._sweep_at, self._sweep)

    # -- receiving --------------------------------------------------------------------------------
    def _on_frame(self, f: Frame) -> None:
        kind = f.kind
        if kind == RESPONSE:
            fut = self._pending.pop(f.request_id, None)
            if fut is None:
                return  # answered after its timeout, or a request we gave up on
            if not fut.done():
                fut.set_result(f)
            return
        if f.op == Op.GOODBYE and kind == ONEWAY:
            self._on_goodbye(f)
            return
        if not self._ready:
            self._handshake_frame(f)
            return
        if f.op not in VALID_OPS:
            raise ProtocolError(f"unknown operation {f.op}")
        if kind == REQUEST:
            rid = f.request_id
            if rid in self._open:
                raise ProtocolError(f"request id {rid} reused while still in flight")
            self._open.add(rid)
        handler = self._handler
        if handler is None:
            if kind == REQUEST:
                self.respond_error(f, ResponseCode.UNSUPPORTED, f"{op_name(f.op)} is not served here")
            return
        try:
            result = handler(self, f)
        except ProtocolError:
            raise
        except Exception as e:
            self._handler_failed(f, e)
            return
        if result is None:
            return
        if isinstance(result, bytes | bytearray | memoryview | list):
            if kind == REQUEST:
                self.respond(f, result)
            return
        task = self._loop.create_task(self._finish(f, result))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _finish(self, f: Frame, result: Awaitable[HandlerResult]) -> None:
        try:
            body = await result
        except ProtocolError as e:
            self._protocol_error(e.reason)
            return
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self._handler_failed(f, e)
            return
        if body is not None and f.kind == REQUEST:
            self.respond(f, body)

    def _handler_failed(self, f: Frame, e: Exception) -> None:
        if isinstance(e, QuorumLogError):
            code, reason = e.code, str(e)
        else:
            log.exception("handler failed on %s from %s", op_name(f.op), self._peer_text(), exc_info=e)
            code, reason = ResponseCode.INTERNAL_ERROR, f"{type(e).__name__}: {e}"
        if f.kind == REQUEST:
            self.respond_error(f, code, reason)

    def _on_goodbye(self, f: Frame) -> None:
        try:
            g = GOODBYE.decode(f.body)
            self._peer_goodbye = f"closed by peer: {shown(g.reason, 1000)}"
        except ProtocolError:
            self._peer_goodbye = "closed by peer"
        log.info("connection %s: %s", self._peer_text(), self._peer_goodbye)

    def _handshake_frame(self, f: Frame) -> None:
        hs = self._hs
        if hs is None:
            raise ProtocolError(f"{op_name(f.op)} frame before the handshake completed")
        if f.kind != REQUEST:
            raise ProtocolError(f"one-way {op_name(f.op)} frame before the handshake completed")
        reply = hs.receive(f.op, f.body)
        if hs.version is not None:
            self._writer.version = hs.version
        if hs.state is State.ESTABLISHED and self._admit is not None:
            assert hs.peer_id is not None
            refusal = self._admit(hs.peer_id)
            if refusal is not None:
                reply = hs.refuse_established(reply.op, ResponseCode.TOO_MANY_CONNECTIONS, refusal)
        self._write(RESPONSE, reply.op, f.request_id, reply.body)
        if reply.close:
            if self._on_refused is not None:
                self._on_refused(self, hs.peer_id, reply.reason)
            else:
                log.warning("refused connection %s (%s): %s", self._peer_text(), hs.peer_id, reply.reason)
            self.close(f"handshake refused: {reply.reason}")
        elif hs.state is State.ESTABLISHED:
            assert hs.version is not None and hs.peer_id is not None
            self.permissions = hs.permissions
            self._establish(hs.version, hs.peer_id)

    def _establish(self, version: int, peer_id: str) -> None:
        self._ready = True
        self.version = version
        self.peer_id = peer_id
        self._decoder.versions = frozenset({version})
        self._decoder.max_frame_bytes = self._max_frame_bytes
        self._writer.version = version
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._on_established is not None:
            self._on_established(self)


# connect() lives in dial.py and stays importable from here, where it was first; imported last, as dial.py
# imports Connection from this module.
from .dial import connect as connect  # noqa: E402
