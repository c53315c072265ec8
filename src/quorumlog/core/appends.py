"""A leader's client appends: judge each request, write the accepted ones as one run, answer on commit.

A request may name its producer and sequence (the idempotent producer, producers.py) and the group's
last client entry it expects (a conditional append). Requests are judged in arrival order against the
producer table and the log as it will be once the earlier ones of the same call are written, so a
producer's retry queued behind its original is recognised as a duplicate. A duplicate writes nothing:
it is answered with the original range once that is committed.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..config import RaftConfig
from ..entry import HEADER, MAGIC_NORMAL, pack_meta
from ..errors import DiskFullError, InvalidArgumentError, ResponseCode
from ..store.base import LogStore
from .producers import DUPLICATE, GAP, NEW, TOO_OLD, UNKNOWN, ProducerTable
from .ready import APPEND, Completion, Ready

SUCCESS = int(ResponseCode.SUCCESS)
_REFUSALS = {GAP: ResponseCode.OUT_OF_ORDER_SEQUENCE, UNKNOWN: ResponseCode.UNKNOWN_PRODUCER,
             TOO_OLD: ResponseCode.SEQUENCE_TOO_OLD}


# The caller's handle of a request, carried to its Completion untouched: an int the node assigns (the
# simulator), or the server's own record of the request (its connection and frame), so that the core's
# pending appends are the only table of requests waiting for their answer.
RequestId = Any


@dataclass(slots=True)
class AppendRequest:
    """One client request: its bodies, and optionally its producer (> 0) and sequence, and the index of
    the group's last client entry it expects (-1: an empty group)."""

    request_id: RequestId
    bodies: Sequence[bytes]
    producer: int = 0
    seq: int = -1
    expected_end: int | None = None


@dataclass(slots=True)
class PendingAppend:
    request_id: RequestId
    first_index: int
    last_index: int
    positions: Sequence[int]
    deadline: int


class Appends:
    """The client appends of one leader term."""

    __slots__ = ("store", "config", "stats", "producers", "term", "node_id", "timeout_code", "refusal", "hand_off",
                 "pending", "duplicates", "_last_client", "_last_client_at")

    def __init__(self, store: LogStore, config: RaftConfig, stats: Counter[str], producers: ProducerTable,
                 term: int, node_id: str, refusal: Callable[[], str | None] | None = None,
                 timeout_code: ResponseCode = ResponseCode.WAIT_QUORUM_ACK_TIMEOUT,
                 hand_off: Callable[[int, Ready], str | None] | None = None) -> None:
        self.store = store
        self.config = config
        self.stats = stats
        self.producers = producers
        self.term = term
        self.node_id = node_id
        # The answer to a wait that ran out (a primary/backup SYNC primary says FLUSH_SLAVE_TIMEOUT).
        self.timeout_code = timeout_code
        # Why new entries could not commit now (too few members can store them), or None.
        self.refusal = refusal
        # Called when this node's own disk is full: hands leadership to a member with space and names
        # it, or None when no member is known to have space.
        self.hand_off = hand_off
        self.pending: deque[PendingAppend] = deque()  # written by this leader, in index order
        self.duplicates: list[PendingAppend] = []  # retries of requests not committed yet
        self._last_client = -1
        self._last_client_at = -2  # the end_index _last_client was computed for

    def propose(self, requests: Sequence[AppendRequest], now: int, wall_ms: int, commit: int, out: Ready) -> bool:
        """Judge and write `requests`; True when anything was written (the caller pushes it)."""
        completions = out.completions
        if len(self.pending) >= self.config.max_pending_requests:
            for r in requests:
                completions.append(self._fail(r.request_id, ResponseCode.LEADER_PENDING_FULL))
            return False
        store = self.store
        end = store.end_index
        producers = self.producers
        bodies: list[bytes] = []
        metas: dict[int, bytes] = {}
        accepted: list[AppendRequest] = []
        last_client = -1
        for r in requests:
            n = len(r.bodies)
            if n == 0:
                completions.append(self._fail(r.request_id, ResponseCode.REQUEST_WITH_EMPTY_BODYS))
                continue
            if r.producer:
                verdict, first, count = producers.judge(r.producer, r.seq)
                if verdict == DUPLICATE:
                    self._duplicate(r.request_id, first, count, now, commit, out)
                    continue
                if verdict != NEW:
                    completions.append(self._fail(r.request_id, _REFUSALS[verdict]))
                    continue
            if r.expected_end is not None:
                if not bodies:
                    last_client = self.last_client_index()
                if r.expected_end != last_client:
                    self.stats["append_expected_end_mismatch"] += 1
                    completions.append(Completion(r.request_id, int(ResponseCode.EXPECTED_END_MISMATCH), APPEND,
                                                  term=self.term, leader_id=self.node_id, detail=last_client))
                    continue
            offset = len(bodies)
            if r.producer:
                metas[offset] = pack_meta(r.producer, r.seq, n, wall_ms)
                producers.record(r.producer, r.seq, end + 1 + offset, n, wall_ms)
            bodies.extend(r.bodies)
            accepted.append(r)
            last_client = end + len(bodies)
        if not bodies:
            return False
        try:
            refused = self.refusal() if self.refusal is not None else None
            if refused is not None:
                raise DiskFullError(refused)
            appended = store.append(bodies, self.term, MAGIC_NORMAL, metas or None)
        except (InvalidArgumentError, DiskFullError) as e:
            producers.truncate_after(end)  # nothing was written: forget what was recorded for it
            code = e.code if isinstance(e, DiskFullError) else ResponseCode.UNEXPECTED_ARGUMENT
            reason = str(e)
            if isinstance(e, DiskFullError) and refused is None and self.hand_off is not None:
                # Our own disk is full: a member with space takes over, and the clients retry there.
                target = self.hand_off(now, out)
                if target is not None:
                    code = ResponseCode.LEADER_TRANSFERRING
                    reason = (f"the disk of {self.node_id} is full: leadership goes to {target}, which has space; "
                              "nothing was written")
            for r in accepted:
                completions.append(self._fail(r.request_id, code, reason))
            return False
        self._last_client, self._last_client_at = appended.last_index, appended.last_index
        positions = appended.positions
        first = appended.first_index
        deadline = now + self.config.max_wait_ack_ms
        off = 0
        for r in accepted:
            n = len(r.bodies)
            self.pending.append(PendingAppend(r.request_id, first + off, first + off + n - 1,
                                              positions[off:off + n] if len(accepted) > 1 else positions, deadline))
            off += n
        return True

    def last_client_index(self) -> int:
        """The index of the log's last client entry (control entries such as a leader's NOOP skipped);
        begin_index - 1 when every entry left is a control entry."""
        store = self.store
        end = store.end_index
        if self._last_client_at != end:
            index = end
            while index >= store.begin_index and store.read(index, 1, 0)[0].magic != MAGIC_NORMAL:
                index -= 1
            self._last_client, self._last_client_at = index, end
        return self._last_client

    def _duplicate(self, request_id: RequestId, first: int, count: int, now: int, commit: int, out: Ready) -> None:
        self.stats["append_duplicates"] += 1
        last = first + count - 1
        if first < self.store.begin_index:
            out.completions.append(self._fail(request_id, ResponseCode.SEQUENCE_TOO_OLD))
        elif last <= commit:
            out.completions.append(self._answer(PendingAppend(request_id, first, last, (), 0)))
        else:
            self.duplicates.append(PendingAppend(request_id, first, last, (), now + self.config.max_wait_ack_ms))

    def _answer(self, p: PendingAppend) -> Completion:
        """SUCCESS for a duplicate: the original's index range, term and positions, read from the log."""
        raw, n = self.store.read_raw(p.first_index, p.last_index - p.first_index + 1, 1 << 30)
        unpack = HEADER.unpack_from
        positions = []
        off = 0
        term = self.term
        for i in range(n):
            h = unpack(raw, off)
            if i == 0:
                term = h[3]
            positions.append(h[4])
            off += h[1]
        return Completion(p.request_id, SUCCESS, APPEND, p.first_index, p.last_index, term, positions, self.node_id)

    def _fail(self, request_id: RequestId, code: ResponseCode, reason: str | None = None) -> Completion:
        self.stats[f"append_{code.name.lower()}"] += 1
        return Completion(request_id, int(code), term=self.term, leader_id=self.node_id, reason=reason)

    def on_commit(self, commit: int, out: Ready) -> None:
        pending = self.pending
        completions = out.completions
        term = self.term
        me = self.node_id
        while pending and pending[0].last_index <= commit:
            p = pending.popleft()
            completions.append(Completion(p.request_id, SUCCESS, APPEND, p.first_index, p.last_index, term,
                                          p.positions, me))
        if self.duplicates:
            done = [p for p in self.duplicates if p.last_index <= commit]
            if done:
                self.duplicates = [p for p in self.duplicates if p.last_index > commit]
                completions.extend(self._answer(p) for p in done)

    def expire(self, now: int, out: Ready) -> None:
        pending = self.pending
        code = int(self.timeout_code)
        while pending and pending[0].deadline <= now:
            p = pending.popleft()
            self.stats[f"append_{self.timeout_code.name.lower()}"] += 1
            out.completions.append(Completion(p.request_id, code, APPEND, p.first_index, p.last_index, self.term,
                                              p.positions, self.node_id))
        if self.duplicates and any(p.deadline <= now for p in self.duplicates):
            late = [p for p in self.duplicates if p.deadline <= now]
            self.duplicates = [p for p in self.duplicates if p.deadline > now]
            for p in late:
                out.completions.append(Completion(p.request_id, code, APPEND, term=self.term, leader_id=self.node_id))

    def step_down(self, leader_id: str | None, out: Ready) -> None:
        """Leadership lost: every wait of this term ends with TERM_CHANGED (its entries may still commit)."""
        waits = [*self.pending, *self.duplicates]
        for p in waits:
            out.completions.append(Completion(p.request_id, int(ResponseCode.TERM_CHANGED), APPEND,
                                              p.first_index, p.last_index, self.term, p.positions, leader_id))
        self.stats["append_term_changed"] += len(waits)
        self.pending.clear()
        self.duplicates = []

    def waiting(self) -> list[RequestId]:
        """The requests written or recognised and not answered yet, oldest first."""
        return [p.request_id for p in self.pending] + [p.request_id for p in self.duplicates]
