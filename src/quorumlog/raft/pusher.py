"""Leader side of replication: one EntryDispatcher per follower, the QuorumAckChecker, pending appends.

Dispatcher states (DLedger's EntryDispatcher), kept in each follower's Progress (progress.py): COMPARE finds
the last index where the follower's log matches the leader's (the follower answers with its end index, or on
a term conflict with the first index of its conflicting term, so one round trip skips a whole term);
TRUNCATE cuts the follower's divergent tail; APPEND pushes batches of encoded entries, bounded by bytes and
count, up to `max_inflight_pushes` in flight, resent from the watermark after `max_push_timeout_ms`; RESET
restarts the log of a follower that needs entries we expired. An idle follower gets COMMIT at the next tick.

The QuorumAckChecker keeps a watermark per peer for the current term (the highest index it acknowledged
as durable and matching; the leader's own is its store's durable index) and commits the largest index a
majority reaches, but only if that entry has the current term (Raft §5.4.2, the Figure 8 rule).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

from ..config import RaftConfig
from ..core.appends import AppendRequest, Appends
from ..core.producers import ProducerTable
from ..core.ready import Ready
from ..errors import ResponseCode
from ..store.base import LogStore
from .member import MemberState
from .messages import PushKind, PushRequest, PushResponse, reset_data
from .progress import Progress
from .quorum import next_compare_index, quorum_index

SUCCESS = int(ResponseCode.SUCCESS)
DISK_FULL = int(ResponseCode.DISK_FULL)
_APPEND = PushKind.APPEND
_COMMIT = PushKind.COMMIT
_COMPARE = PushKind.COMPARE
_TRUNCATE = PushKind.TRUNCATE
_RESET = PushKind.RESET
# Hands leadership to a member with space (Elector.hand_off_for_space): given how to pick it, the target.
HandOff = Callable[[Callable[[Callable[[str], bool]], str | None], int, Ready], str | None]


class Dispatcher:
    """Replication towards one follower, for one leader term: its log's progress, and what we know of
    its disk and of the commit index it was sent."""

    __slots__ = ("peer", "progress", "commit_sent", "disk_full", "stored")

    def __init__(self, peer: str, compare_index: int) -> None:
        self.peer = peer
        self.progress = Progress(compare_index)
        self.commit_sent = -1
        # The follower refused the last push with DISK_FULL (until it acknowledges an append again).
        self.disk_full = False
        # The follower acknowledged an append of this term and refused none since: its disk had space.
        self.stored = False


class Leader:
    """Everything a leader holds for its term; discarded when it steps down."""

    __slots__ = ("member", "store", "config", "stats", "term", "group", "node_id", "dispatchers", "peers",
                 "producers", "appends", "commit", "term_start", "leaving")

    def __init__(self, member: MemberState, store: LogStore, config: RaftConfig, stats: Counter[str],
                 producers: ProducerTable, hand_off: HandOff | None = None) -> None:
        self.member = member
        self.store = store
        self.config = config
        self.stats = stats
        self.term = member.term
        self.group = member.group
        self.node_id = member.node_id
        end = store.end_index
        self.dispatchers = {p: Dispatcher(p, end) for p in member.others}
        self.peers = list(self.dispatchers.values())
        self.producers = producers
        self.appends = Appends(store, config, stats, producers, self.term, self.node_id, self._storage_refusal,
                               hand_off=None if hand_off is None else lambda now, out: hand_off(self.space_target,
                                                                                                now, out))
        self.commit = store.committed_index
        # The index of this term's first entry (its NOOP): until it commits, no membership change (node.py).
        self.term_start = store.end_index + 1
        self.leaving: dict[str, int] = {}  # removed member -> the committed change that removed it

    def _storage_refusal(self) -> str | None:
        """Why new entries cannot commit, when too few members can store them (followers whose disk
        is full): they are refused at once with DISK_FULL, where they would wait out max_wait_ack_ms."""
        m = self.member
        full = [d.peer for d in self.peers if d.disk_full and d.peer in m.voters]
        if not full or len(m.voters) - len(full) >= m.majority:
            return None
        return (f"the disks of {', '.join(full)} are full: too few members of group {self.group} can store new "
                f"entries; nothing was written")

    def space_target(self, heard_within: Callable[[str], bool]) -> str | None:
        """The member to take over from a leader whose disk is full: a follower that stored an append of
        this term and refused none since, still heard from, the most caught up; None when no follower has
        shown it has space (then nothing moves: two full nodes never hand leadership back and forth)."""
        able = [d for d in self.peers if d.stored and not d.disk_full and heard_within(d.peer)]
        return max(able, key=lambda d: d.progress.match).peer if able else None

    @property
    def floor(self) -> int:
        """The lowest index whose term this leader can name (begin_index - 1): it follows expiry live."""
        return self.store.begin_index - 1

    # -- client appends ------------------------------------------------------------------------
    def propose(self, requests: Sequence[AppendRequest], now: int, wall_ms: int, out: Ready) -> None:
        if self.appends.propose(requests, now, wall_ms, self.commit, out):
            self.dispatch_all(now, out)
            store = self.store
            if store.durable_index >= store.end_index:  # flush=async: no flush will report this write
                self.advance_commit(out)

    # -- QuorumAckChecker ------------------------------------------------------------------------
    def on_config(self, committed_at: int | None = None) -> None:
        """The configuration changed, or (`committed_at`: its index) the last change committed: push to
        every member of it, keeping the progress of those that stay (a new member starts at the end, found
        by COMPARE). A removed member is pushed to until it was sent a commit index covering its removal,
        so that it knows it is out (and never campaigns)."""
        end = self.store.end_index
        old = self.dispatchers
        self.dispatchers = {**old, **{p: old.get(p) or Dispatcher(p, end) for p in self.member.others}}
        if committed_at is not None:
            for p in set(self.dispatchers) - set(self.member.others):
                self.leaving[p] = committed_at
        for p in self.member.others:  # (a member removed and added back stays)
            self.leaving.pop(p, None)
        self.peers = list(self.dispatchers.values())

    def _drop_left(self) -> None:
        """Stop pushing to removed members that were told their removal committed."""
        gone = [p for p, at in self.leaving.items() if self.dispatchers[p].commit_sent >= at]
        for p in gone:
            del self.dispatchers[p], self.leaving[p]
        self.peers = list(self.dispatchers.values())

    def advance_commit(self, out: Ready) -> None:
        store = self.store
        m = self.member
        voters = m.voters  # the configuration in the log counts, even uncommitted (membership.py)
        marks = [min(store.durable_index, store.end_index)] if m.is_voter else []
        marks.extend(d.progress.match for d in self.peers if d.peer in voters)
        idx = quorum_index(marks, m.majority)
        if idx <= self.commit:
            return
        # Only an entry of the current term commits by counting (Figure 8); earlier ones follow it.
        if store.term_at(idx) != self.term:
            return
        self.commit = idx
        store.set_committed(idx)
        self.producers.forget_spans(idx)
        self.appends.on_commit(idx, out)

    def expire_pending(self, now: int, out: Ready) -> None:
        self.appends.expire(now, out)

    def step_down(self, leader_id: str | None, out: Ready) -> None:
        """Leadership lost: every wait of this term ends with TERM_CHANGED (its entries may still commit)."""
        self.appends.step_down(leader_id, out)

    def expiry_safe_index(self, last_heard: Callable[[str, int], int], now: int, member_timeout_ms: int) -> int:
        """The commit index, but no more than what every member heard from within the timeout holds (one
        silent for longer is reset when it returns, so a long-dead member does not fill the disk)."""
        safe = self.store.committed_index
        for d in self.peers:
            if now - last_heard(d.peer, now) < member_timeout_ms:
                safe = min(safe, d.progress.match)
        return safe

    def peers_disk_full(self) -> list[str]:
        """Followers that refused entries for a full disk."""
        return sorted(p for p, d in self.dispatchers.items() if d.disk_full)

    # -- EntryDispatcher -------------------------------------------------------------------------
    def peer_match(self, peer: str) -> int:
        d = self.dispatchers.get(peer)
        return d.progress.match if d is not None else -1

    def dispatch_all(self, now: int, out: Ready, tick: bool = False) -> None:
        for d in self.peers:
            self.dispatch(d, now, out, tick)
        if self.leaving:
            self._drop_left()

    def _term(self, index: int) -> int | None:
        """Our term at `index`, or None when we cannot name it (below our log's beginning)."""
        store = self.store
        if index < store.begin_index - 1 or index > store.end_index:
            return None
        return store.term_at(index)

    def dispatch(self, d: Dispatcher, now: int, out: Ready, tick: bool = False) -> None:
        cfg = self.config
        pr = d.progress
        if not pr.is_appending:
            if not pr.control_due(now, cfg.max_push_timeout_ms):
                return
            if pr.is_resetting:
                self._send_reset(d, now, out)  # unanswered for a push timeout: again
                return
            if pr.is_comparing:
                kind, index = _COMPARE, pr.compare_index
            else:
                kind, index = _TRUNCATE, pr.truncate_index
            term = self._term(index)
            if term is None:
                # The follower needs entries older than our log's beginning: its log restarts at ours.
                self._send_reset(d, now, out)
                return
            pr.wait_control(now)
            out.messages.append(PushRequest(self.group, self.node_id, d.peer, self.term, kind, index, term,
                                            self.commit))
            return
        if pr.push_timed_out(now, cfg.max_push_timeout_ms):
            self.stats["push_resend_from_watermark"] += 1
            pr.rewind()
        inflight = pr.inflight
        store = self.store
        end = store.end_index
        limit = cfg.max_inflight_pushes
        commit = self.commit
        while len(inflight) < limit and pr.next_index <= end:
            first = pr.next_index
            prev_term = self._term(first - 1)
            if prev_term is None:
                # The follower needs entries we expired: compare below our floor, which resets it now.
                self.stats["index_less_than_local_begin"] += 1
                pr.become_compare(first - 1)
                self.dispatch(d, now, out)
                return
            data, count = store.read_raw(first, cfg.push_batch_entries, cfg.push_batch_bytes)
            if count == 0:
                break
            last = first + count - 1
            span = self.producers.span_at(last)
            if span is not None and last < span[1] <= end:
                # Never end a push inside a request: followers hold and acknowledge whole requests, so
                # commits fall between requests (producers.py). One over the limits goes alone, whole.
                count = span[0] - first if span[0] > first else span[1] - first + 1
                data, count = store.read_raw(first, count, cfg.push_batch_bytes if span[0] > first else 1 << 31)
                last = first + count - 1
            out.messages.append(PushRequest(self.group, self.node_id, d.peer, self.term, _APPEND, first,
                                            prev_term, commit, count, store.term_at(last), data))
            pr.sent_push(last, now)
            if last >= commit:
                d.commit_sent = commit
        if tick and not inflight and commit > d.commit_sent:
            # An idle follower learns the commit index at the next tick, not after every commit: one
            # append at a time would otherwise cost each follower a COMMIT push and its answer per entry.
            out.messages.append(PushRequest(self.group, self.node_id, d.peer, self.term, _COMMIT, commit,
                                            0, commit))
            d.commit_sent = commit

    def _send_reset(self, d: Dispatcher, now: int, out: Ready) -> None:
        store = self.store
        d.progress.become_reset(now)
        self.stats["follower_resets_sent"] += 1
        begin = store.begin_index
        configs = store.configs  # the one in force at our begin goes with it: the follower cannot read it
        base = configs[0] if configs and configs[0][0] < begin else None
        out.messages.append(PushRequest(self.group, self.node_id, d.peer, self.term, _RESET, begin,
                                        store.term_at(begin - 1), self.commit, 0, 0,
                                        reset_data(store.begin_pos, store.begin_chain, base)))

    def on_heartbeat_response(self, peer: str, end_index: int, now: int, out: Ready) -> None:
        d = self.dispatchers.get(peer)
        if d is not None:
            self._check_shorter(d, end_index, now, out)

    def on_quiet_refused(self, peer: str, end_index: int, now: int, out: Ready) -> None:
        """A follower could not go quiet (raft/quiesce.py): its log or commit index is not ours, though its
        watermark says it holds every entry; typically it lost its leader for a moment, and with it the proof
        that its entries are ours, so heartbeats alone no longer advance its commit index. Compare again
        at its end: the answer proves the entries and carries the commit index."""
        d = self.dispatchers.get(peer)
        if d is None or not d.progress.is_appending:  # (a compare or reset under way repairs it already)
            return
        if self._check_shorter(d, end_index, now, out):
            return
        self.stats["quiet_refused_compare"] += 1
        d.progress.become_compare(min(end_index, self.store.end_index))  # at its end, as any probe
        self.dispatch(d, now, out)

    def _check_shorter(self, d: Dispatcher, end_index: int, now: int, out: Ready) -> bool:
        """A follower whose log ends below its watermark lost entries it acknowledged (a wiped data
        directory, a corrupt entry cut away): stop counting them at once, on every response, and find the
        match point again. An answer merely overtaken by later acks looks the same; it costs one compare
        round, never safety (the commit index never goes back)."""
        pr = d.progress
        if end_index >= pr.match:
            return False
        self.stats["follower_lost_entries"] += 1
        pr.lower_match(end_index)
        pr.become_compare(max(-1, min(end_index, self.store.end_index)))
        self.dispatch(d, now, out)
        return True

    def on_response(self, resp: PushResponse, now: int, out: Ready) -> None:
        d = self.dispatchers.get(resp.sender)
        if d is None:
            return
        pr = d.progress
        kind = resp.kind
        code = resp.code
        if kind == _RESET:
            if pr.is_resetting and resp.index == self.store.begin_index:
                pr.control_answered()
                if code == SUCCESS:
                    pr.on_reset_acked(resp.acked)
                    if resp.end_index == resp.acked:
                        # The follower's log now ends at our begin - 1 and matches there: append.
                        pr.become_append(resp.acked + 1)
                    else:
                        # It already held our entry there and more: compare at its end, as after a repair.
                        pr.become_compare(max(self.floor, min(resp.end_index, self.store.end_index)))
                    self.dispatch(d, now, out)
            return
        if self._check_shorter(d, resp.end_index, now, out):
            return
        if kind == _APPEND:
            if code == SUCCESS:
                d.disk_full = False
                d.stored = True
                if pr.on_append_acked(resp.index, resp.acked):
                    self.advance_commit(out)
                if pr.is_appending:
                    self.dispatch(d, now, out)
            elif code == int(ResponseCode.REPEATED_PUSH) or code == int(ResponseCode.PUSH_REQUEST_IS_FULL):
                return  # the original is queued, or the follower is busy: the push timeout covers both
            elif code == DISK_FULL:
                # Nothing written there: the push timeout sends it again (once a push timeout, not in a
                # compare-and-push loop), and until then the follower counts as unable to store.
                if not d.disk_full:
                    self.stats["peer_disk_full"] += 1
                d.disk_full = True
                d.stored = False
            elif pr.is_appending and resp.index in pr.inflight:
                # INCONSISTENT_STATE (fast-forward) or a failed write: find the match point again.
                self.stats["push_fallback_to_compare"] += 1
                pr.become_compare(min(self.store.end_index, max(resp.end_index, pr.match)))
                self.dispatch(d, now, out)
        elif kind == _COMPARE:
            if not pr.is_comparing or resp.index != pr.compare_index:
                return
            pr.control_answered()
            self._on_compare(pr, resp, now)
            # A compare may raise the watermark (after a repair, with no append to follow): commit now.
            self.advance_commit(out)
            self.dispatch(d, now, out)
        elif kind == _TRUNCATE:
            if not pr.is_truncating or resp.index != pr.truncate_index:
                return
            pr.control_answered()
            if code == SUCCESS:
                if resp.acked < pr.match:
                    self.stats["bug_truncate_below_watermark"] += 1
                pr.on_match(resp.acked)
                pr.become_append(pr.truncate_index + 1)
                self.advance_commit(out)
            else:
                pr.become_compare(self.store.end_index)
            self.dispatch(d, now, out)

    def _on_compare(self, pr: Progress, resp: PushResponse, now: int) -> None:
        code = resp.code
        ci = pr.compare_index
        if code == SUCCESS:
            pr.on_match(resp.acked)
            if resp.end_index > ci and (pr.mismatch_at is not None or ci >= self.store.end_index):
                # Everything the follower holds after ci is known not to be ours: cut it.
                pr.become_truncate()
            elif resp.end_index > ci:
                # The follower grew since the round began (late pushes of ours were written): its
                # entries after ci may well be ours, and some may be committed. Compare at its end.
                pr.compare_at(min(resp.end_index, self.store.end_index))
            else:
                pr.become_append(ci + 1)
            return
        if code == int(ResponseCode.INCONSISTENT_INDEX) and -1 <= resp.end_index < ci:
            pr.compare_at(resp.end_index)  # the follower's log is shorter: compare at its end
        elif code == int(ResponseCode.INCONSISTENT_TERM) and -1 <= resp.conflict_index <= ci:
            pr.on_mismatch()  # noted before the search below reads our log (which may fail, corrupt)
            if ci <= self.floor:
                pr.compare_at(ci - 1)  # it differs even at our first nameable entry: reset it
            else:
                pr.compare_at(next_compare_index(self.store.term_at, self.floor, ci, resp.conflict_index,
                                                 resp.conflict_term))
        elif code == int(ResponseCode.INDEX_LESS_THAN_LOCAL_BEGIN):
            # The follower expired entries we still compare: its log begins at resp.begin_index, and the
            # entry before it is committed, so ours. Compare there.
            self.stats["follower_index_less_than_begin"] += 1
            if ci < resp.begin_index - 1 <= self.store.end_index:
                pr.compare_at(resp.begin_index - 1)
            else:
                pr.wait_control(now)  # retry after a push timeout, not at once
        else:
            self.stats["compare_unexpected_code"] += 1
            pr.wait_control(now)
        # A compare index below our floor makes the next dispatch reset the follower.
