"""RaftNode: the façade of the pure core. Input is a tick, a message, a proposal or a transfer request,
each with the current time; output is a `Ready` (see core/ready.py for how a driver applies it).

The node routes messages after checking group, target, sender and term, and (with transitions.py) is the
only writer of role, term, leader and vote: every change goes through the transition table of roles.py.
Elections live in elector.py (which reports outcomes), the leader's replication in pusher.py, the
follower's in handler.py, linearizable read points in reads.py.
Nothing here performs I/O beyond the store API, reads a clock or uses global randomness.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Sequence

from ..config import RaftConfig
from ..core.appends import AppendRequest, RequestId
from ..core.producers import ProducerTable
from ..core.ready import APPEND, READ_INDEX, Completion, Ready, RoleChange
from ..core.replica import RAFT
from ..core.role import Role
from ..errors import (
    CorruptEntryError,
    IndexOutOfRangeError,
    InvalidArgumentError,
    QuorumLogError,
    ResponseCode,
)
from ..store.base import LogStore
from .elector import Elector
from .handler import EntryHandler
from .joining import BOOTSTRAP, JOIN, Joiner
from .member import MemberState
from .messages import (
    HeartbeatRequest,
    HeartbeatResponse,
    Message,
    ProbeRequest,
    ProbeResponse,
    PushRequest,
    PushResponse,
    ReadIndexRequest,
    ReadIndexResponse,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
    refusal,
)
from .pusher import Leader
from .quiesce import QUIET_END, QUIET_START, Quiescence
from .reads import NOT_LEADER, ReadIndex
from .reconfig import Reconfiguration
from .rejoin import Rejoining
from .roles import Event, Outcome
from .transitions import Transitions

SUCCESS = int(ResponseCode.SUCCESS)
INCONSISTENT_STATE = int(ResponseCode.INCONSISTENT_STATE)
_REQUESTS = (VoteRequest, HeartbeatRequest, PushRequest, TimeoutNow)
_INPUT_ERRORS = (IndexOutOfRangeError, InvalidArgumentError)


class RaftNode(Reconfiguration, Rejoining, Transitions, Quiescence):
    """One member of one Raft group (a core/replica.py ReplicaCore); its membership changes are
    reconfig.py's."""

    replication = RAFT

    def __init__(self, node_id: str, group: str, peers: list[str], store: LogStore, config: RaftConfig,
                 rng: random.Random, joining: bool = False) -> None:
        self.node_id = node_id
        self.group = group
        self.store = store
        self.config = config
        self.rng = rng
        self.stats: Counter[str] = Counter()
        self.member = MemberState(node_id, group, peers, store, joining)
        # None: a pristine store; "": one that holds a term, vote or log but no identity (a FileStore reads
        # so; a MemoryStore reads None, taken as "" here): written before identities existed, or that of a
        # node that joined a group and has yet to learn its id.
        # A store that holds only a term (no vote, no log, no recovery under way, no identity) was probing
        # when it stopped: it took a term from a message and then wrote it (FileStore: `currterm` alone) but
        # never voted nor decided, so it is pristine still and probes again. Taken for bootstrapped it would
        # vote with an empty log, a wiped node's forgotten promises unchecked (the primary/backup simulator's
        # controller group, seed 500936: a leader elected without a committed entry).
        recorded = store.identity
        held = store.load_vote()[1] is not None or store.recovering or store.end_index >= 0 or store.begin_index > 0
        if not recorded:
            recorded = "" if held else None
        # The group id (reconfig.py): a node that joins an existing group takes it from a CONFIG entry.
        self.joins = joining and any(p != node_id for p in peers)
        self.foreign_group_id: str | None = None  # the id of another group's CONFIG entry sent here
        self.group_id: str | None = self._initial_group_id(recorded)
        self.reads = ReadIndex(self.member, store, config, self.stats)
        self.elector = Elector(self.member, store, config, rng, self.stats, self.peer_match,
                               lambda p: self.leader is not None and self.leader.dispatchers[p].disk_full,
                               self.reads.next_round)
        # A pristine store (new, or wiped) probes the other members before it may vote (joining.py).
        self.joiner = Joiner.create(self.member, rng, config.heartbeat_interval_ms) if recorded is None else None
        if self.joiner is not None and not self.member.others:
            self._join(BOOTSTRAP)  # a group of one has nobody to ask
        # Every member keeps its log's producer table (producers.py); a damaged entry met is cut and re-fetched.
        self.producers = ProducerTable(config.producer_window, config.producer_idle_ms)
        if self.producers.rebuild(store, lambda index, why: store.mark_damaged(index, why),  # (only on damage)
                                  store.producer_snapshot()):
            self.stats["producers_from_snapshot"] += 1
        self.stats["partial_requests_cut"] += bool(self.producers.cut_partial_tail(store))
        self.handler = EntryHandler(self.member, store, config, self.stats, self.producers)
        self.leader: Leader | None = None
        self._next_request_id = 1
        # The configuration follows the log's last CONFIG entry (membership.py); _sync_config applies it.
        self._config_key: tuple[int, int] | None = None
        self._now = 0  # the time of the input being handled (a removed leader steps down at it)
        self._sync_config()
        self.pending_change: tuple[int, RequestId | None] | None = None  # (CONFIG index, request) to answer
        # Protocol-aware recovery: this node lost entries it may have acknowledged, so it neither votes
        # nor leads until it has committed up to the end of a leader elected without it (which holds
        # every committed entry). Persisted (set_recovering): a restart midway must not end it.
        damage = store.damage
        if damage is not None:
            self.member.set_recovering(True)
        self.recover_floor: int | None = None
        if self.member.recovering:
            self.recover_floor = damage.committed_index if damage is not None else -1
            self.stats["recovering_from_damage"] += 1
        self.recover_leader_end: int | None = None
        self.recover_leader_term = -1
        self.recover_owed: tuple[int, int] | None = None  # (term, index) a target of that term must reach
        # This node may have led its group, quiet, before it restarted (a restart quicker than an election
        # timeout leaves no silence for peer_down to see): if it voted for itself in its term, then until it
        # knows a leader it says it leads no more.
        if config.quiesce and self.member.voted_for == node_id:
            self._ended_quiet_term = self.member.term

    # -- state ---------------------------------------------------------------------------------
    @property
    def role(self) -> Role:
        return self.member.role

    @property
    def term(self) -> int:
        return self.member.term

    @property
    def leader_id(self) -> str | None:
        return self.member.leader_id

    @property
    def is_leader(self) -> bool:
        return self.member.role == Role.LEADER

    @property
    def recovering(self) -> bool:
        return self.recover_floor is not None

    @property
    def joining(self) -> bool:
        return self.joiner is not None

    def can_vote(self) -> bool:
        """Whether this node may grant votes: not while it recovers or probes, nor once another group's
        CONFIG entry reached its store (reconfig.py). Its own view of the configuration does not matter:
        a candidate counts only the votes of its configuration's voters, and a node that has not yet
        received the change promoting it may be one of them."""
        return self.recover_floor is None and self.joiner is None and self.foreign_group_id is None

    def can_lead(self) -> bool:
        """Whether this node may campaign: as for voting, and as a voter of its configuration, or while the
        change that removes it is not known committed, or as a learner its log names (reconfig.py: a
        non-voter elected counts only the voters' votes, commits, and hands over; a learner waits one
        election timeout longer, so a voter campaigns first). A member removed never starts an election."""
        return self.can_vote() and (self.member.is_voter or self._leaving() or self._named_learner())

    def expiry_safe_index(self, now_ms: int, member_timeout_ms: int) -> int:
        """Its commit index; on a leader no more than what every member holds (Leader.expiry_safe_index)."""
        if self.leader is None or self.member.role != Role.LEADER:
            return self.store.committed_index
        return self.leader.expiry_safe_index(self.elector.last_heard, now_ms, member_timeout_ms)

    def peer_match(self, peer: str) -> int:
        return self.leader.peer_match(peer) if self.leader is not None else -1

    def waiting_requests(self) -> list[RequestId]:
        return self.leader.appends.waiting() if self.leader is not None else []

    def peers_disk_full(self) -> list[str] | None:
        return self.leader.peers_disk_full() if self.leader is not None else None

    def status(self) -> dict[str, object]:
        return {}  # nothing beyond what the server reports of every core

    def promote(self, epoch: int, now_ms: int) -> Ready:
        raise QuorumLogError(f"group {self.group} is a Raft group: it elects its leader", ResponseCode.UNSUPPORTED)

    # -- inputs --------------------------------------------------------------------------------
    def tick(self, now_ms: int) -> Ready:
        out, before = self._begin(now_ms)
        if self.foreign_group_id is not None:  # (reconfig.py: this store is another group's)
            return self._finish(out, before)
        if self.joiner is not None:
            out.messages.extend(self.joiner.probes(now_ms))
        try:
            self._run(self.elector.tick(now_ms, out, self.can_lead(), self.handler.disk_full,
                                        wait_longer=not self.member.is_voter), now_ms, out)
            leader = self.leader
            self.reads.expire(now_ms, out)
            if leader is not None and self.member.role == Role.LEADER:
                if self.store.end_term != self.member.term and self.write_noop():
                    self.stats["noop_written_late"] += 1  # (its disk was full when it was elected)
                leader.expire_pending(now_ms, out)
                if not self.elector.quiesced:  # (quiet: every member holds the log and its commit index)
                    leader.dispatch_all(now_ms, out, tick=True)
                    if self.config.quiesce:
                        self._maybe_quiesce(now_ms, out)
            elif self.member.role == Role.FOLLOWER:
                self.handler.drain(now_ms, out)
                if self._ended_quiet_term == self.member.term and self.member.leader_id is None:
                    self._repeat_quiet_end(now_ms, out)
        except CorruptEntryError as e:
            self._on_corruption(e, now_ms, out)
        except IndexOutOfRangeError:
            # Never fatal: a read below the log's begin is a bug the simulator must see, not a crash.
            self.stats["bug_tick_index_out_of_range"] += 1
        return self._finish(out, before)

    def step(self, message: Message, now_ms: int) -> Ready:
        return self.step_batch((message,), now_ms)

    def step_batch(self, messages: Iterable[Message], now_ms: int) -> Ready:
        """Handle several messages, then the follower's queues once (queued control requests first, as DLedger)."""
        out, before = self._begin(now_ms)
        for m in messages:
            try:
                self._route(m, now_ms, out)
            except _INPUT_ERRORS as e:
                # Garbage from the network must not take the node down; count it and carry on.
                self.stats[f"rejected_{type(e).__name__}"] += 1
            except CorruptEntryError as e:
                self._on_corruption(e, now_ms, out)
        if self.member.role == Role.FOLLOWER:
            try:
                self.handler.drain(now_ms, out)
            except CorruptEntryError as e:
                self._on_corruption(e, now_ms, out)
        return self._finish(out, before)

    def propose(self, bodies: Sequence[bytes], now_ms: int, request_id: int | None = None,
                group: str | None = None, target: str | None = None, *, producer: int = 0, seq: int = -1,
                expected_end: int | None = None, wall_ms: int = 0) -> Ready:
        """Append a batch of bodies as one request with one wait. The outcome arrives as a Completion
        with the request id (given, or assigned and reported in `ready.request_id`)."""
        rid = self._request_id(request_id)
        request = AppendRequest(rid, bodies, producer, seq, expected_end)
        if group is not None and group != self.group:
            ready = self._refuse([request], ResponseCode.UNKNOWN_GROUP)
        elif target is not None and target != self.node_id:
            ready = self._refuse([request], ResponseCode.UNKNOWN_MEMBER)
        else:
            ready = self.propose_many([request], now_ms, wall_ms)
        ready.request_id = rid
        return ready

    def propose_many(self, requests: Sequence[AppendRequest], now_ms: int, wall_ms: int = 0) -> Ready:
        """Client requests, judged in order and written as one run (appends.py); each is answered by a
        Completion of its own. `wall_ms` is the wall clock, written with each idempotent request."""
        if self.member.role != Role.LEADER or self.leader is None:
            return self._refuse(requests, ResponseCode.NOT_LEADER)
        if self.elector.transferring:
            return self._refuse(requests, ResponseCode.LEADER_TRANSFERRING)
        out, before = self._begin(now_ms)
        self._wake(now_ms, out)
        self.leader.propose(requests, now_ms, wall_ms, out)
        return self._finish(out, before)

    def _refuse(self, requests: Sequence[AppendRequest], code: ResponseCode) -> Ready:
        out, before = self._begin()
        m = self.member
        self.stats[f"append_{code.name.lower()}"] += len(requests)
        out.completions.extend(Completion(r.request_id, int(code), APPEND, term=m.term, leader_id=m.leader_id)
                               for r in requests)
        return self._finish(out, before)

    def read_index(self, request_ids: Sequence[RequestId], now_ms: int) -> Ready:
        """Linearizable read points for these requests (reads.py): each is answered by a Completion of kind
        READ_INDEX once this node's commit index is one no read can have seen exceeded when it arrived."""
        out, before = self._begin(now_ms)
        self._wake(now_ms, out)
        if self.foreign_group_id is not None or self.joiner is not None or self.member.role == Role.CANDIDATE:
            m = self.member
            out.completions.extend(Completion(r, NOT_LEADER, READ_INDEX, term=m.term, leader_id=m.leader_id)
                                   for r in request_ids)
        elif self.reads.request(list(request_ids), now_ms, out):
            self.elector.send_heartbeats(now_ms, out)
        return self._finish(out, before)

    def transfer_leader(self, target: str, now_ms: int, request_id: int | None = None) -> Ready:
        """Hand leadership to `target`; the outcome arrives as a Completion of kind "transfer"."""
        out, before = self._begin(now_ms)
        self._wake(now_ms, out)
        rid = self._request_id(request_id)
        out.request_id = rid
        self.elector.transfer(target, now_ms, rid, out)
        return self._finish(out, before)

    def report_corruption(self, error: CorruptEntryError, now_ms: int) -> Ready:
        """A read outside the core (a client's READ or GET) met a corrupt stored entry: recover that range
        from the peers, as when the core meets it itself."""
        out, before = self._begin(now_ms)
        self._wake(now_ms, out)
        self._on_corruption(error, now_ms, out)
        return self._finish(out, before)

    def on_flushed(self, durable_index: int, now_ms: int) -> Ready:
        """The driver flushed the store: release what waited for durability, recount the leader's quorum."""
        out, before = self._begin(now_ms)
        if self.leader is not None and self.member.role == Role.LEADER:
            self.leader.advance_commit(out)
        self.handler.release_held(out)
        return self._finish(out, before)

    # -- plumbing ------------------------------------------------------------------------------
    def _request_id(self, request_id: RequestId | None) -> RequestId:
        if request_id is None:
            request_id, self._next_request_id = self._next_request_id, self._next_request_id + 1
        return request_id

    def _begin(self, now: int | None = None) -> tuple[Ready, tuple[Role, int, str | None]]:
        m = self.member
        if now is not None:
            self._now = now
        return Ready(), (m.role, m.term, m.leader_id)

    def _finish(self, out: Ready, before: tuple[Role, int, str | None]) -> Ready:
        m = self.member
        if self.handler.held:
            self.handler.release_held(out)
        if self.recover_floor is not None:
            self._check_recovered()
        self._sync_config()
        if self.pending_change is not None or (m.role == Role.LEADER and not m.is_voter):
            self._config_committed(out)
        changed = (m.role, m.term, m.leader_id) != before
        if changed:
            if before[0] == Role.LEADER and m.role != Role.LEADER and self.config.quiesce:
                self._leader_stepped_down(before[1], out)
            self.elector.quiesced = False
            out.changes.append(RoleChange(m.role, m.term, m.leader_id))
        leader = self.leader
        self.reads.after(changed, leader is not None and leader.commit >= leader.term_start, out)
        store = self.store
        out.must_flush = store.durable_index < store.end_index
        return out

    def _route(self, msg: Message, now: int, out: Ready) -> None:
        m = self.member
        # Any peer is heard, not only the members of our configuration (Raft dissertation §4.1): a leader
        # keeps leading until the change that removes it commits, a node that joins hears from the leader
        # before a CONFIG entry names it, and one that fell behind may not know yet that its leader was
        # added. (The server authenticates every peer.) Votes count only among the candidate's voters
        # (elector.py); a removed member that does not know it yet cannot win one: the change that removed
        # it committed on a majority of the rest, whose logs are then ahead of its own.
        if self.foreign_group_id is not None:  # this store is another group's: it takes no part (reconfig.py)
            self.stats["rejected_foreign_group"] += 1
            return
        if msg.group != self.group or msg.target != self.node_id or msg.sender == self.node_id:
            self.stats["rejected_misrouted"] += 1
            if isinstance(msg, _REQUESTS):
                code = ResponseCode.UNKNOWN_GROUP if msg.group != self.group else ResponseCode.UNKNOWN_MEMBER
                self._reject(msg, int(code), out)
            return
        self.elector.heard[msg.sender] = now  # across terms and roles: whom expiry still waits for
        cls = type(msg)  # exact types, most frequent first: this runs for every message
        if self.elector.quiesced and m.role == Role.LEADER and not (
                cls is HeartbeatResponse and msg.code == SUCCESS):  # type: ignore[union-attr]
            self._wake(now, out)  # (a member's plain ack of the quiet is all a quiet leader expects)
        if cls is HeartbeatRequest and msg.quiet == QUIET_END:  # type: ignore[union-attr]
            self._quiet_ended(msg, now)  # type: ignore[arg-type]
            return
        if cls is VoteRequest and self.elector.quiesced and msg.sender == m.leader_id:
            self._quiet_ended(msg, now)  # type: ignore[arg-type]  # (its leader restarted or stepped down)
        if cls is PushRequest or cls is HeartbeatRequest or cls is TimeoutNow:
            if self.joiner is not None:
                self._join(JOIN)  # a leader exists (or existed), so the group does
            if msg.term < m.term:
                self.stats["stale_term"] += 1
                if cls is not TimeoutNow:
                    self._reject(msg, int(ResponseCode.EXPIRED_TERM), out)
                return
            self._from_leader(msg, now, out)  # type: ignore[arg-type]
        elif cls is PushResponse or cls is HeartbeatResponse:
            if msg.term != m.term:
                if msg.term > m.term:
                    self._run(Outcome(Event.HIGHER_TERM, msg.term, None, msg.sender), now, out)
                else:
                    self.stats["stale_term"] += 1
                return
            leader = self.leader
            if leader is None or m.role != Role.LEADER:
                return
            self.elector.on_peer_seen(msg.sender, now)
            if cls is PushResponse:
                leader.on_response(msg, now, out)  # type: ignore[arg-type]
                if self.elector.transferring:
                    self.elector.transfer_progress(out)
            elif msg.code == SUCCESS:  # type: ignore[union-attr]
                leader.on_heartbeat_response(msg.sender, msg.end_index, now, out)  # type: ignore[union-attr]
                if self.reads.on_ack(msg.sender, msg.round, out):  # type: ignore[union-attr]
                    self.elector.send_heartbeats(now, out)  # requests wait for a round: the next one now
            elif msg.code == INCONSISTENT_STATE:  # type: ignore[union-attr]
                leader.on_quiet_refused(msg.sender, msg.end_index, now, out)  # type: ignore[union-attr]
        elif cls is ReadIndexRequest or cls is ReadIndexResponse:
            if self.reads.on_message(msg, now, out):  # type: ignore[arg-type]
                self.elector.send_heartbeats(now, out)
        elif cls is VoteRequest:
            outcome = self.elector.on_vote_request(msg, now, out, self.can_vote())  # type: ignore[arg-type]
            if outcome is not None and outcome.event is Event.HIGHER_TERM:
                self._run(outcome, now, out)  # follow in the later term, then judge the request there
                outcome = self.elector.on_vote_request(msg, now, out, self.can_vote())  # type: ignore[arg-type]
            self._run(outcome, now, out)
        elif cls is VoteResponse:
            self._run(self.elector.on_vote_response(msg), now, out)  # type: ignore[arg-type]
        elif cls is ProbeRequest:
            s = self.store
            out.messages.append(ProbeResponse(m.group, m.node_id, msg.sender, m.term, msg.nonce,  # type: ignore[union-attr]
                                              s.end_index, s.begin_index))
        elif cls is ProbeResponse:
            if self.joiner is not None:
                decision = self.joiner.on_response(msg)  # type: ignore[arg-type]
                if decision is not None:
                    self._join(decision, now)
        else:
            self.stats["rejected_unknown_message"] += 1

    def _from_leader(self, msg: HeartbeatRequest | PushRequest | TimeoutNow, now: int, out: Ready) -> None:
        m = self.member
        if msg.term > m.term:
            self._run(Outcome(Event.HIGHER_TERM, msg.term, msg.sender, msg.sender), now, out)
        elif m.role == Role.LEADER or (m.leader_id is not None and m.leader_id != msg.sender):
            # Two leaders in one term cannot happen in a correct cluster; refuse and make it visible.
            self.stats["bug_second_leader_in_term"] += 1
            self._reject(msg, int(ResponseCode.INCONSISTENT_LEADER), out)
            return
        elif m.role == Role.CANDIDATE or m.leader_id is None:
            self._run(Outcome(Event.LEADER_SEEN, msg.term, msg.sender, msg.sender), now, out)
        self.elector.on_leader_contact(now)
        quiet_flag = type(msg) is HeartbeatRequest and msg.quiet == QUIET_START
        if not quiet_flag and self.elector.quiesced:
            self._follower_heard(msg)
        handler = self.handler
        if isinstance(msg, PushRequest):
            handler.on_push(msg, out)
        elif isinstance(msg, HeartbeatRequest):
            if (self.recover_floor is not None and self.recover_leader_term != msg.term
                    and (self.recover_owed is None or msg.term != self.recover_owed[0]
                         or msg.last_index >= self.recover_owed[1])):
                # Any leader elected while we recover holds every committed entry (we did not vote), so
                # its end is a sufficient target; following the newest one keeps recovery live when the
                # first leader fell before committing its end. A heartbeat of the term in which this node
                # lost entries it had acknowledged counts only if it names them: one sent before the
                # acknowledgement reached its leader names a shorter end (rejoin.py, _on_corruption).
                self.recover_leader_end = msg.last_index
                self.recover_leader_term = msg.term
            handler.apply_commit(msg.commit_index)
            code = SUCCESS if not quiet_flag or self._follower_quiesce(msg) else INCONSISTENT_STATE
            out.messages.append(HeartbeatResponse(m.group, m.node_id, msg.sender, m.term, code,
                                                  self.store.end_index, msg.round))
        else:  # TimeoutNow: our leader hands over; campaign at once, past the voters' leader lease
            if self.can_lead():
                self.stats["timeout_now_campaigns"] += 1
                self._run(Outcome(Event.TIMEOUT_NOW), now, out)
            else:
                self.stats["timeout_now_refused_damaged"] += 1

    def _reject(self, msg: Message, code: int, out: Ready) -> None:
        answer = refusal(msg, self.node_id, self.member.term, code, self.store.end_index, self.store.begin_index)
        if answer is not None:
            out.messages.append(answer)
