"""Linearizable read points: ReadIndex (Raft dissertation §6.4, etcd's read_only.go).

A client asks a node for the group's committed end and must never be answered with an end that was
already stale when it asked: a deposed leader that does not know it yet, or a follower behind its leader,
would do exactly that. So:

- **The leader** answers with its commit index only once (1) it has committed an entry of its own term
  (until then its commit index may lag entries an earlier leader committed) and (2) a majority of voters
  answered a heartbeat sent *after* the request arrived: no other leader can then have committed anything
  this one lacks before that moment. Heartbeats carry a round number, which followers echo; rounds only
  grow (across terms too), so an answer names the round it confirms. Requests share rounds: every request
  waiting when a round goes out is confirmed by it, and while one round is in flight the requests that
  arrive meanwhile wait for the next, sent as soon as it is confirmed (or with the next heartbeat).
- **A follower** asks its leader for a read index (`ReadIndexRequest`, one per batch of requests), and
  answers once its own commit index has reached it, so reads can be spread over the followers.

A request fails with NOT_LEADER (the known leader as a hint) when the node's term or leader changes while
it waits, and with TIMEOUT after `max_wait_ack_ms`. Completions are of kind READ_INDEX, `last_index` the
read index (at least the commit index when the request arrived, at most the one when it is answered).
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field

from ..config import RaftConfig
from ..core.appends import RequestId
from ..core.ready import READ_INDEX, Completion, Ready
from ..core.role import Role
from ..errors import ResponseCode
from ..store.base import LogStore
from .member import MemberState
from .messages import ReadIndexRequest, ReadIndexResponse

SUCCESS = int(ResponseCode.SUCCESS)
NOT_LEADER = int(ResponseCode.NOT_LEADER)
TIMEOUT = int(ResponseCode.TIMEOUT)


@dataclass(slots=True)
class _Batch:
    """Requests that arrived together: local ones (request ids) and those a follower forwarded (its id and
    the context it named)."""

    at: int
    local: list[RequestId] = field(default_factory=list)
    remote: list[tuple[str, int]] = field(default_factory=list)
    round: int = 0  # the heartbeat round that confirms it (0: none sent since it arrived)
    index: int = -1  # a follower's: the read index its leader answered


class ReadIndex:
    """The read requests one node holds, as leader or as follower."""

    __slots__ = ("member", "store", "config", "stats", "round", "acked", "unsent", "waiting", "ctx", "asked",
                 "applying", "leader_ready")

    def __init__(self, member: MemberState, store: LogStore, config: RaftConfig, stats: Counter[str]) -> None:
        self.member = member
        self.store = store
        self.config = config
        self.stats = stats
        self.round = 0  # the last heartbeat round this node sent
        self.acked: dict[str, int] = {}  # voter -> the highest round it answered, in this term
        self.unsent: list[_Batch] = []  # leader: no round sent since they arrived
        self.waiting: deque[_Batch] = deque()  # leader: a round sent, awaiting a majority's answers
        self.ctx = 0  # follower: the last context it asked its leader with
        self.asked: dict[int, _Batch] = {}  # follower: context -> requests asked of the leader
        self.applying: list[_Batch] = []  # follower: answered, waiting for its commit to reach the index
        self.leader_ready = False  # leader: it committed an entry of its own term

    @property
    def pending(self) -> int:
        """Requests held (a status figure)."""
        batches = [*self.unsent, *self.waiting, *self.asked.values(), *self.applying]
        return sum(len(b.local) + len(b.remote) for b in batches)

    # -- requests ------------------------------------------------------------------------------------
    def request(self, rids: list[RequestId], now: int, out: Ready) -> bool:
        """Local requests: True when a leader must send a round now (the caller sends heartbeats, which
        call `next_round`); a follower asks its leader here."""
        batch = _Batch(now, local=list(rids))
        return self._admit(batch, now, out)

    def on_message(self, msg: ReadIndexRequest | ReadIndexResponse, now: int, out: Ready) -> bool:
        """A follower's request (answered NOT_LEADER unless this node leads in its term), or a leader's
        answer: as `request`."""
        m = self.member
        if type(msg) is ReadIndexResponse:
            if msg.term == m.term and m.role == Role.FOLLOWER:
                self.on_response(msg, out)
            return False
        if msg.term == m.term and m.role == Role.LEADER:
            return self._admit(_Batch(now, remote=[(msg.sender, msg.ctx)]), now, out)
        # (another term: the follower asks again of the leader it learns of)
        out.messages.append(ReadIndexResponse(m.group, m.node_id, msg.sender, m.term, msg.ctx, NOT_LEADER, -1))
        return False

    def _admit(self, batch: _Batch, now: int, out: Ready) -> bool:
        m = self.member
        if m.role == Role.LEADER:
            self.unsent.append(batch)
            if int(m.is_voter) >= m.majority:  # its own vote is a majority: nobody to ask
                batch.round = self.round
                self.waiting.append(self.unsent.pop())
                self.confirm(out)
                return False
            return not self.waiting  # one round in flight at a time: later ones share the next
        leader = m.leader_id
        if leader is None or leader == m.node_id:
            self._finish(batch, NOT_LEADER, -1, out)
            return False
        self.ctx += 1
        self.asked[self.ctx] = batch
        out.messages.append(ReadIndexRequest(m.group, m.node_id, leader, m.term, self.ctx))
        self.stats["read_index_forwarded"] += 1
        return False

    # -- leader --------------------------------------------------------------------------------------
    def next_round(self) -> int:
        """The round of the heartbeats about to be sent: every request that has none takes it."""
        self.round += 1
        for b in self.unsent:
            b.round = self.round
            self.waiting.append(b)
        self.unsent.clear()
        return self.round

    def on_ack(self, peer: str, round_: int, out: Ready) -> bool:
        """A heartbeat answer of this term; True when requests wait for a round none is in flight for."""
        if round_ > self.acked.get(peer, 0):
            self.acked[peer] = round_
            self.confirm(out)
        return bool(self.unsent) and not self.waiting

    def confirm(self, out: Ready) -> None:
        """Answer every request whose round a majority of voters answered, once the term has committed."""
        if not self.leader_ready or not self.waiting:
            return
        m = self.member
        acked = self.acked
        while self.waiting:
            r = self.waiting[0].round
            votes = int(m.is_voter) + sum(1 for p in m.voter_others if acked.get(p, 0) >= r)
            if votes < m.majority:
                break
            self._finish(self.waiting.popleft(), SUCCESS, self.store.committed_index, out)

    def after(self, changed: bool, term_committed: bool, out: Ready) -> None:
        """At the end of every call into the node: `changed` its role, term or leader (every request fails);
        `term_committed` it leads and committed an entry of its term."""
        if changed:
            self.reset(out)
        if self.member.role == Role.FOLLOWER:
            self.applied(out)
        elif term_committed and not self.leader_ready:
            self.leader_ready = True
            self.confirm(out)

    # -- follower ------------------------------------------------------------------------------------
    def on_response(self, msg: ReadIndexResponse, out: Ready) -> None:
        batch = self.asked.pop(msg.ctx, None)
        if batch is None:
            return
        if msg.code != SUCCESS:
            self._finish(batch, msg.code, -1, out)
            return
        batch.index = msg.index
        self.applying.append(batch)
        self.applied(out)

    def applied(self, out: Ready) -> None:
        """Answer the requests whose read index this follower's commit has reached."""
        if not self.applying:
            return
        commit = self.store.committed_index
        ready = [b for b in self.applying if b.index <= commit]
        if ready:
            self.applying = [b for b in self.applying if b.index > commit]
            for b in ready:
                self._finish(b, SUCCESS, commit, out)

    # -- endings -------------------------------------------------------------------------------------
    def expire(self, now: int, out: Ready) -> None:
        limit = now - self.config.max_wait_ack_ms
        for queue in (self.unsent, self.applying):
            old = [b for b in queue if b.at <= limit]
            if old:
                queue[:] = [b for b in queue if b.at > limit]
                for b in old:
                    self._finish(b, TIMEOUT, -1, out)
        while self.waiting and self.waiting[0].at <= limit:  # (in arrival order)
            self._finish(self.waiting.popleft(), TIMEOUT, -1, out)
        for ctx in [c for c, b in self.asked.items() if b.at <= limit]:
            self._finish(self.asked.pop(ctx), TIMEOUT, -1, out)

    def reset(self, out: Ready) -> None:
        """The term, role or leader changed: every request fails with NOT_LEADER (a client asks again, of
        the leader named), and the answers counted are forgotten."""
        batches = [*self.unsent, *self.waiting, *self.asked.values(), *self.applying]
        self.unsent, self.applying = [], []
        self.waiting.clear()
        self.asked.clear()
        self.acked.clear()
        self.leader_ready = False
        for b in batches:
            self._finish(b, NOT_LEADER, -1, out)

    def _finish(self, b: _Batch, code: int, index: int, out: Ready) -> None:
        m = self.member
        leader = m.leader_id
        for rid in b.local:
            out.completions.append(Completion(rid, code, READ_INDEX, last_index=index, term=m.term,
                                              leader_id=leader))
        for peer, ctx in b.remote:
            out.messages.append(ReadIndexResponse(m.group, m.node_id, peer, m.term, ctx, code, index))
        self.stats["read_index_served" if code == SUCCESS else "read_index_failed"] += len(b.local) + len(b.remote)
