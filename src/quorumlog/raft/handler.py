"""Follower side of replication: DLedger's EntryHandler.

- APPEND pushes wait in a map keyed by their first index and are written strictly in order, at ledger
  end + 1. A second push with a key already waiting answers REPEATED_PUSH (the leader resent it).
- COMPARE, TRUNCATE and COMMIT go through their own bounded queue, handled before any append
  (PUSH_REQUEST_IS_FULL when it is full); COMPARE and TRUNCATE drop the waiting appends, as the leader
  starts over from their answer.
- A waiting push whose entries this node already holds answers SUCCESS when they are equal (the leader
  missed an ack: the fall-behind check) and INCONSISTENT_STATE when they differ.
- When the next index has been missing for `max_push_timeout_ms`, the smallest waiting push answers
  INCONSISTENT_STATE so the leader falls back to COMPARE (fast-forward) instead of waiting for its own
  resend timer.
- The commit index is min(leader's commit, the last index known to match this leader): entries beyond
  that may be a stale tail from an older term, which must never be marked committed.
- An acknowledgement that claims entries (append, compare, truncate) is held until the store's durable
  index covers them, and dropped if a truncation removes them first.
"""

from __future__ import annotations

import struct
from collections import Counter, deque

from ..config import RaftConfig
from ..core.producers import ProducerTable
from ..core.ready import Ready
from ..entry import HEADER_SIZE
from ..errors import (
    CorruptEntryError,
    DiskFullError,
    IndexOutOfRangeError,
    InvalidArgumentError,
    ResponseCode,
    StoreError,
)
from ..store.base import LogStore
from .member import MemberState
from .membership import Membership, MembershipError
from .messages import NO_ACK, PushKind, PushRequest, PushResponse, parse_reset
from .quorum import first_index_of_term

SUCCESS = int(ResponseCode.SUCCESS)
INCONSISTENT_STATE = int(ResponseCode.INCONSISTENT_STATE)
_SIZE_INDEX_TERM = struct.Struct(">iiqq")  # magic, size, index, term: the start of an entry header


class EntryHandler:
    """Receives a leader's pushes while this node follows it."""

    __slots__ = ("member", "store", "config", "stats", "producers", "appends", "control", "waiting_since",
                 "held", "matched_upto", "leader_commit", "control_limit", "append_limit", "disk_full",
                 "acked_in_term")

    def __init__(self, member: MemberState, store: LogStore, config: RaftConfig, stats: Counter[str],
                 producers: ProducerTable) -> None:
        self.member = member
        self.store = store
        self.config = config
        self.stats = stats
        self.producers = producers  # kept in step with every change this handler makes to the log
        self.appends: dict[int, PushRequest] = {}
        self.control: deque[PushRequest] = deque()
        self.waiting_since: int | None = None
        self.held: list[tuple[int, PushResponse]] = []
        # Committed entries are in every later leader's log, so they match whoever leads.
        self.matched_upto = store.committed_index
        self.disk_full = False  # our store refused the last push it was given for a full disk
        # (term, index): the highest index acknowledged to that term's leader, whose log holds it (rejoin.py)
        self.acked_in_term = (-1, -1)
        self.leader_commit = -1
        # Bounded like DLedger's queues; both scale with the leader's pipelining window.
        self.control_limit = max(4, config.max_inflight_pushes)
        self.append_limit = 2 * config.max_inflight_pushes

    def reset(self) -> None:
        """A new term or role: forget everything from the previous leader."""
        self.appends.clear()
        self.control.clear()
        self.held.clear()
        self.waiting_since = None
        self.matched_upto = self.store.committed_index
        self.leader_commit = -1

    # -- intake --------------------------------------------------------------------------------
    def on_push(self, req: PushRequest, out: Ready) -> None:
        kind = req.kind
        if kind == PushKind.APPEND:
            if req.count <= 0 or not req.data or req.index < 0:
                self._respond(req, int(ResponseCode.UNEXPECTED_ARGUMENT), out)
            elif req.index in self.appends:
                self.stats["repeated_push"] += 1
                self._respond(req, int(ResponseCode.REPEATED_PUSH), out)
            elif len(self.appends) >= self.append_limit:
                self._respond(req, int(ResponseCode.PUSH_REQUEST_IS_FULL), out)
            else:
                self.appends[req.index] = req
            return
        if kind not in (PushKind.COMMIT, PushKind.COMPARE, PushKind.TRUNCATE, PushKind.RESET):
            self._respond(req, int(ResponseCode.UNEXPECTED_ARGUMENT), out)
            return
        if len(self.control) >= self.control_limit:
            self.stats["push_request_is_full"] += 1
            self._respond(req, int(ResponseCode.PUSH_REQUEST_IS_FULL), out)
            return
        if kind != PushKind.COMMIT:
            self.appends.clear()
            self.waiting_since = None
        self.control.append(req)

    def drain(self, now: int, out: Ready) -> None:
        """Handle the control queue first, then write waiting appends in index order."""
        control = self.control
        while control:
            req = control.popleft()
            if req.kind == PushKind.COMPARE:
                self._compare(req, out)
            elif req.kind == PushKind.TRUNCATE:
                self._truncate(req, out)
            elif req.kind == PushKind.RESET:
                self._reset(req, out)
            else:
                self.apply_commit(req.commit_index)
                self._respond(req, SUCCESS, out)
        while True:
            self._write_in_order(out)
            if not self._check_held_already(out):
                break
        self._check_missing(now, out)

    # -- appends -------------------------------------------------------------------------------
    def _write_in_order(self, out: Ready) -> None:
        appends = self.appends
        store = self.store
        while appends:
            req = appends.pop(store.end_index + 1, None)
            if req is None:
                return
            self.waiting_since = None
            self._append(req, req.data, out)

    def _local_term(self, index: int) -> int | None:
        """Our term at `index` (0 before the first entry), None when outside what we hold. The store
        names the term of the entry just before its first one (begin_index - 1), so a log that expired
        entries or was reset still matches the leader there."""
        store = self.store
        if index < store.begin_index - 1 or index > store.end_index:
            return None
        return store.term_at(index)

    def _append(self, req: PushRequest, data: bytes | memoryview, out: Ready) -> None:
        store = self.store
        prev = store.end_index
        local_prev = self._local_term(prev)
        if local_prev is None:
            self._respond(req, int(ResponseCode.INDEX_LESS_THAN_LOCAL_BEGIN), out)
            return
        expected_prev = req.prev_term if prev == req.index - 1 else self._pushed_term_at(req, prev)
        if local_prev != expected_prev:
            self.stats["append_prev_term_mismatch"] += 1
            self._respond(req, INCONSISTENT_STATE, out)
            return
        try:
            metas = store.append_encoded_metas(data)[1]
        except CorruptEntryError:
            self.stats["append_rejected_corrupt"] += 1
            self._respond(req, INCONSISTENT_STATE, out)
            return
        except DiskFullError as e:  # or out of descriptors: nothing written, the leader sends it again
            self.disk_full = True
            self._respond(req, int(e.code), out)
            return
        self.disk_full = False
        if metas:
            self.producers.record_metas(metas)
        last = store.end_index
        self.matched_upto = last
        self.apply_commit(req.commit_index)
        self._ack(req, last, last, out)

    def _check_held_already(self, out: Ready) -> bool:
        """Answer waiting pushes that start at or below our end; True when one of them extended the log."""
        store = self.store
        end = store.end_index
        wrote = False
        for index in sorted(k for k in self.appends if k <= end):
            req = self.appends.pop(index)
            last = index + req.count - 1
            if last <= end:
                # Fall-behind: we hold it all. Same index and term means the same entries (log matching).
                if self._local_term(last) == req.last_term:
                    self.stats["push_already_held"] += 1
                    if last > self.matched_upto:
                        self.matched_upto = last
                    self.apply_commit(req.commit_index)
                    self._ack(req, last, end, out)
                else:
                    self._respond(req, INCONSISTENT_STATE, out)
                continue
            # Overlap: keep our entries up to `end` if they are the leader's, append the rest.
            off = self._offset_of(req, end + 1)
            if off is None or self._pushed_term_at(req, end) != self._local_term(end):
                self._respond(req, INCONSISTENT_STATE, out)
                continue
            self._append(req, memoryview(req.data)[off:], out)
            wrote = True
            end = store.end_index
        return wrote

    @staticmethod
    def _offset_of(req: PushRequest, index: int) -> int | None:
        """Byte offset in req.data of the pushed entry `index` (walking headers; only on overlaps); None
        when the data does not reach it, or a header's size is impossible (the CRCs are checked later)."""
        data = req.data
        off = 0
        for _ in range(index - req.index):
            if off + HEADER_SIZE > len(data):
                return None
            size = _SIZE_INDEX_TERM.unpack_from(data, off)[1]
            if size < HEADER_SIZE:
                return None
            off += size
        return off if off + HEADER_SIZE <= len(data) else None

    def _pushed_term_at(self, req: PushRequest, index: int) -> int | None:
        if index == req.index - 1:
            return req.prev_term
        off = self._offset_of(req, index)
        if off is None:
            return None
        return int(_SIZE_INDEX_TERM.unpack_from(req.data, off)[3])

    def _check_missing(self, now: int, out: Ready) -> None:
        if not self.appends:
            self.waiting_since = None
            return
        if self.waiting_since is None:
            self.waiting_since = now
            return
        if now - self.waiting_since >= self.config.max_push_timeout_ms:
            # Fast-forward: the next index is not coming; make the leader compare again.
            index = min(self.appends)
            req = self.appends.pop(index)
            self.stats["fast_forward"] += 1
            self._respond(req, INCONSISTENT_STATE, out)
            self.waiting_since = now

    # -- compare / truncate / commit -------------------------------------------------------------
    def _compare(self, req: PushRequest, out: Ready) -> None:
        store = self.store
        ci = req.index
        end = store.end_index
        if ci > end:
            self._respond(req, int(ResponseCode.INCONSISTENT_INDEX), out)
            return
        local = self._local_term(ci)
        if local is None:
            self._respond(req, int(ResponseCode.INDEX_LESS_THAN_LOCAL_BEGIN), out)
            return
        if local == req.prev_term:
            if ci > self.matched_upto:
                self.matched_upto = ci
            self.apply_commit(req.commit_index)
            self._ack(req, ci, end, out)
            return
        first = first_index_of_term(store.term_at, store.begin_index, ci, local)
        m = self.member
        out.messages.append(PushResponse(m.group, m.node_id, req.sender, m.term, req.kind,
                                         int(ResponseCode.INCONSISTENT_TERM), ci, NO_ACK, end,
                                         store.begin_index, first, local))

    def _truncate(self, req: PushRequest, out: Ready) -> None:
        store = self.store
        ti = req.index
        local = self._local_term(ti)
        if local is None or local != req.prev_term:
            self._respond(req, INCONSISTENT_STATE, out)
            return
        if ti < self.matched_upto:
            # Entries up to matched_upto are this leader's own, so a truncation below them can only be
            # a duplicated or delayed TRUNCATE of this term: obeying it would drop acknowledged (even
            # committed) entries. Confirm the match at ti instead, which is true, and keep the log.
            self.stats["stale_truncate_ignored"] += 1
            self.apply_commit(req.commit_index)
            self._ack(req, ti, store.end_index, out)
            return
        if ti < store.committed_index:
            # Committed entries are in every leader's log; being asked to drop them is a protocol bug.
            self.stats["bug_truncate_committed"] += 1
            self._respond(req, INCONSISTENT_STATE, out)
            return
        try:
            store.truncate_after(ti)
        except (StoreError, IndexOutOfRangeError):
            self._respond(req, INCONSISTENT_STATE, out)
            return
        self.producers.truncate_after(ti)
        self.held = [h for h in self.held if h[0] <= ti]
        self.matched_upto = ti
        self.apply_commit(req.commit_index)
        self._ack(req, ti, ti, out)

    def _take_base(self, base: tuple[int, int, bytes] | None) -> bool:
        """Record the configuration in force at the log's begin: the leader's (none: the configured members)."""
        try:
            if base is None:
                self.store.clear_base_config()
            else:
                self.store.set_base_config(*base)
        except (StoreError, InvalidArgumentError):
            return False
        return True

    def _reset(self, req: PushRequest, out: Ready) -> None:
        """The leader cannot name the entries we need: start our log at its begin (no snapshots)."""
        store = self.store
        begin = req.index
        parsed = parse_reset(req.data)
        if parsed is None or begin < 0 or not _valid_base(parsed[2], begin):
            self.stats["reset_refused"] += 1
            self._respond(req, INCONSISTENT_STATE, out)
            return
        pos, chain, base = parsed
        if self._local_term(begin - 1) == req.prev_term:
            # We already hold the leader's entry before its begin (a duplicated or late RESET): keep the
            # log; the leader compares from our end next. Reset to that very begin before, we take its
            # configuration there again (recording it may have failed then).
            if store.begin_index == begin and not self._take_base(base):
                self._respond(req, INCONSISTENT_STATE, out)
                return
            self.apply_commit(req.commit_index)
            self._ack(req, begin - 1, store.end_index, out)
            return
        if store.committed_index >= begin:
            self.stats["reset_refused"] += 1
            self._respond(req, INCONSISTENT_STATE, out)
            return
        try:
            store.reset(begin, pos, chain, req.prev_term)
        except (StoreError, IndexOutOfRangeError):
            self._respond(req, INCONSISTENT_STATE, out)
            return
        if not self._take_base(base):
            self._respond(req, INCONSISTENT_STATE, out)  # (the leader resends the RESET, which retries it)
            return
        self.stats["log_resets"] += 1
        # The log restarts at the leader's begin; the table follows it as entries arrive. Producers
        # idle for longer than retention are forgotten with them (docs/protocol.md).
        self.producers.clear()
        self.held.clear()
        self.appends.clear()
        self.matched_upto = begin - 1
        self.apply_commit(req.commit_index)
        self._ack(req, begin - 1, begin - 1, out)

    def apply_commit(self, leader_commit: int) -> None:
        if leader_commit > self.leader_commit:
            self.leader_commit = leader_commit
        target = min(leader_commit, self.matched_upto)
        store = self.store
        if target > store.committed_index:
            store.set_committed(target)
            self.producers.forget_spans(target)

    # -- responses -----------------------------------------------------------------------------
    def _respond(self, req: PushRequest, code: int, out: Ready) -> None:
        m = self.member
        store = self.store
        out.messages.append(PushResponse(m.group, m.node_id, req.sender, m.term, req.kind, code, req.index,
                                         NO_ACK, store.end_index, store.begin_index))

    def _ack(self, req: PushRequest, acked: int, end: int, out: Ready) -> None:
        """SUCCESS claiming entries up to `acked`: sent once they are durable, held until then."""
        m = self.member
        resp = PushResponse(m.group, m.node_id, req.sender, m.term, req.kind, SUCCESS, req.index, acked, end,
                            self.store.begin_index)
        t, i = self.acked_in_term
        if t != m.term or acked > i:
            self.acked_in_term = (m.term, acked if t != m.term else max(i, acked))
        if self.store.durable_index >= acked:
            out.messages.append(resp)
        else:
            self.held.append((acked, resp))

    def release_held(self, out: Ready) -> None:
        if not self.held:
            return
        durable = self.store.durable_index
        keep = []
        for need, resp in self.held:
            if need <= durable:
                out.messages.append(resp)
            else:
                keep.append((need, resp))
        self.held = keep


def _valid_base(base: tuple[int, int, bytes] | None, begin: int) -> bool:
    """Whether a RESET's base configuration (the one in force at the leader's begin) can be kept."""
    if base is None:
        return True
    index, term, body = base
    if not 0 <= index < begin or term < 0:
        return False
    try:
        Membership.decode(body)
    except MembershipError:
        return False
    return True
