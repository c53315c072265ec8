"""Elections, heartbeats, check-quorum and leadership transfer (DLedger's DLedgerLeaderElector).

- A follower that hears no leader for `max_heartbeat_leak` heartbeat intervals plus a random back-off
  starts a pre-vote round: it asks for votes for term + 1 without raising its own term, and only after a
  majority would grant them does it campaign for real (DLedger raises its term only after
  WAIT_TO_VOTE_NEXT; the pre-vote keeps a partitioned node from inflating terms on its return).
- Voters grant a vote only to a log at least as up to date as theirs (Raft §5.4.1), and, with
  check-quorum, ignore candidates while they still hear from a leader (the leader lease) unless the
  campaign comes from a leadership transfer.
- A leader heartbeats every interval and steps down when it has heard from no majority for an election
  timeout (check-quorum), so a partitioned leader stops accepting appends.
- Leadership transfer: refused when the target lags more than `max_transfer_lag`; once the target has
  every entry the leader sends TimeoutNow and the target campaigns at once.

The elector keeps timers, tallies and transfer bookkeeping only. It never changes role, term, leader or
vote: it reports an `Outcome` (roles.py) and the node makes the transition.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable

from ..config import RaftConfig
from ..core.ready import TRANSFER, Completion, Ready
from ..core.role import Role
from ..errors import ResponseCode
from ..store.base import LogStore
from .member import MemberState
from .messages import HeartbeatRequest, TimeoutNow, VoteRequest, VoteResponse
from .roles import Event, Outcome

SUCCESS = int(ResponseCode.SUCCESS)
_TIMEOUT = Outcome(Event.ELECTION_TIMEOUT)
_PRE_VOTE_WON = Outcome(Event.PRE_VOTE_WON)
_ELECTED = Outcome(Event.ELECTED)
_QUORUM_LOST = Outcome(Event.QUORUM_LOST)


class Elector:
    """Timers and vote bookkeeping of one node. Role transitions themselves belong to the node."""

    __slots__ = ("member", "store", "config", "rng", "stats", "peer_match", "election_timeout", "deadline",
                 "last_leader_contact", "pre_candidate", "votes", "next_heartbeat", "leader_since",
                 "peer_seen", "heard", "started", "transfer_target", "transfer_deadline", "transfer_request",
                 "transfer_sent", "next_preferred_check", "jitter", "round", "next_ask", "deferred", "peer_full",
                 "heartbeat_round", "quiesced")

    def __init__(self, member: MemberState, store: LogStore, config: RaftConfig, rng: random.Random,
                 stats: Counter[str], peer_match: Callable[[str], int],
                 peer_full: Callable[[str], bool] = lambda peer: False,
                 heartbeat_round: Callable[[], int] = lambda: 0) -> None:
        self.member = member
        self.store = store
        self.config = config
        self.rng = rng
        self.stats = stats
        self.peer_match = peer_match  # the leader's watermark of a peer (-1 when not leading)
        self.peer_full = peer_full  # the peer refused the leader's last push for a full disk
        self.heartbeat_round = heartbeat_round  # the ReadIndex round a heartbeat broadcast carries (reads.py)
        self.election_timeout = config.election_timeout_ms
        self.deadline: int | None = None
        self.last_leader_contact: int | None = None
        self.pre_candidate = False
        self.votes: dict[str, bool] = {}
        self.next_heartbeat = 0
        self.leader_since = 0
        self.peer_seen: dict[str, int] = {}  # this leadership's check-quorum: since it began
        self.heard: dict[str, int] = {}  # any message from a peer, whatever our role: kept across terms
        self.started: int | None = None  # this node's first tick: a peer never heard is silent since then
        self.transfer_target: str | None = None
        self.transfer_deadline = 0
        self.transfer_request: int | None = None
        self.transfer_sent = False
        self.next_preferred_check = 0
        self.jitter = 0
        self.round: tuple[int, bool, bool] | None = None  # the running vote round: (term, pre-vote, transfer)
        self.next_ask = 0
        self.deferred = False  # this wait for a leader was lengthened once already (a full disk)
        # The group is quiet (quiesce.py): a leader sends no heartbeats and skips check-quorum, a follower
        # runs no election timer. The node sets and clears it; the peer_down input ends it.
        self.quiesced = False

    # -- timers --------------------------------------------------------------------------------
    def reset_timer(self, now: int) -> None:
        """Next campaign: one election timeout plus a random back-off, so rivals rarely collide."""
        self.jitter = self.rng.randint(0, self.config.election_backoff_ms)
        self.deadline = now + self.election_timeout + self.jitter
        self.deferred = False

    def on_leader_contact(self, now: int) -> None:
        """Every push and heartbeat lands here: push the deadline back with the back-off already drawn
        (a fresh one is drawn whenever an election round starts or ends)."""
        self.last_leader_contact = now
        self.deadline = now + self.election_timeout + self.jitter
        self.deferred = False

    def tick(self, now: int, out: Ready, can_lead: bool, disk_full: bool = False,
             wait_longer: bool = False) -> Outcome | None:
        if self.started is None:
            self.started = now
        m = self.member
        if m.role == Role.LEADER:
            return self._tick_leader(now, out)
        if self.quiesced:  # its leader's node is alive (the driver reports it otherwise: peer_down)
            return None
        if self.deadline is None:
            self.reset_timer(now)
            return None
        if now < self.deadline:
            if m.role == Role.CANDIDATE and now >= self.next_ask:
                self._ask_again(now, out)
            return None
        if not can_lead:
            # Protocol-aware recovery: a node that lost committed entries waits for a leader.
            self.reset_timer(now)
            self.stats["campaign_blocked_damaged"] += 1
            return None
        if (disk_full or wait_longer) and not self.deferred:
            # A leader needs space for its NOOP and the appends to come: wait one election timeout more,
            # so a member with space campaigns first (we still vote). If none does, we campaign then. So
            # does a learner (node.py's can_lead): a voter that can win should.
            self.deferred = True
            self.deadline = now + self.election_timeout
            self.stats["campaign_deferred_disk_full" if disk_full else "campaign_deferred_learner"] += 1
            return None
        return _TIMEOUT

    # -- candidate side --------------------------------------------------------------------------
    def start_pre_vote(self, now: int, out: Ready) -> Outcome | None:
        """The node became a pre-candidate: ask for votes for term + 1 without raising the term."""
        m = self.member
        self.pre_candidate = True
        self.votes = {m.node_id: True}
        self.reset_timer(now)
        self.stats["pre_votes_started"] += 1
        self._request_votes(m.term + 1, pre_vote=True, transfer=False, now=now, out=out)
        return self._count_votes()

    def start_campaign(self, now: int, out: Ready, transfer: bool) -> Outcome | None:
        """The node raised its term and voted for itself: ask the others."""
        m = self.member
        self.pre_candidate = False
        self.votes = {m.node_id: True}
        self.reset_timer(now)
        self.stats["campaigns"] += 1
        self._request_votes(m.term, pre_vote=False, transfer=transfer, now=now, out=out)
        return self._count_votes()

    def on_become_follower(self, now: int, leader_known: bool, restart_timer: bool) -> None:
        self.pre_candidate = False
        self.votes = {}
        if leader_known:
            self.on_leader_contact(now)
        elif restart_timer:
            self.reset_timer(now)

    def campaign_now(self, now: int) -> None:
        """Time out at the next tick (a new group's first member campaigns at once, node.py)."""
        self.deadline = now

    def _request_votes(self, term: int, pre_vote: bool, transfer: bool, now: int, out: Ready,
                       peers: list[str] | None = None) -> None:
        m = self.member
        last_index = self.store.end_index
        last_term = self.store.end_term
        self.round = (term, pre_vote, transfer)
        self.next_ask = now + self.config.heartbeat_interval_ms
        for peer in m.voter_others if peers is None else peers:  # (learners have no vote)
            out.messages.append(VoteRequest(m.group, m.node_id, peer, term, last_index, last_term,
                                            pre_vote, transfer))

    def _ask_again(self, now: int, out: Ready) -> None:
        """Ask the members that have not granted this round again, every heartbeat interval until the
        round times out. Vote requests are idempotent, and a member may have been unable to answer the
        first: not yet started, not yet connected, or still probing whether its group exists."""
        if self.round is None:
            return
        term, pre_vote, transfer = self.round
        peers = [p for p in self.member.voter_others if not self.votes.get(p)]
        self._request_votes(term, pre_vote, transfer, now, out, peers)

    def on_vote_response(self, resp: VoteResponse) -> Outcome | None:
        m = self.member
        if m.role != Role.CANDIDATE or resp.pre_vote != self.pre_candidate:
            return None  # a stale answer to an earlier round
        if not resp.granted and resp.term > m.term:
            return Outcome(Event.HIGHER_TERM, resp.term, None, resp.sender)
        expected = m.term + 1 if self.pre_candidate else m.term
        if resp.term != expected:
            return None
        self.votes[resp.sender] = resp.granted
        return self._count_votes()

    def _count_votes(self) -> Outcome | None:
        voters = self.member.voters  # of the configuration now: one appended meanwhile counts
        granted = sum(1 for p, v in self.votes.items() if v and p in voters)
        if granted < self.member.majority:
            return None
        return _PRE_VOTE_WON if self.pre_candidate else _ELECTED

    # -- voter side ------------------------------------------------------------------------------
    def _in_lease(self, now: int) -> bool:
        """True while this node believes a leader is alive (itself, or one heard within a timeout)."""
        if not self.config.check_quorum:
            return False
        m = self.member
        if m.role == Role.LEADER or self.quiesced:
            return True
        return (m.leader_id is not None and self.last_leader_contact is not None
                and now - self.last_leader_contact < self.election_timeout)

    def on_vote_request(self, req: VoteRequest, now: int, out: Ready, can_vote: bool) -> Outcome | None:
        """Answer `req`, except when it names a later term we may move to: then the outcome says so, and
        the node asks again once it follows in that term. A granted vote comes back as VOTED: the node
        writes it (durably) before the answer leaves."""
        m = self.member
        store = self.store
        log_ok = (req.last_term, req.last_index) >= (store.end_term, store.end_index)
        in_lease = not req.transfer and self._in_lease(now)
        if req.pre_vote:
            grant = req.term > m.term and log_ok and not in_lease and can_vote
            code = SUCCESS if grant else self._refusal(log_ok, in_lease, can_vote)
            out.messages.append(VoteResponse(m.group, m.node_id, req.sender, req.term if grant else m.term,
                                             grant, True, code))
            return None
        if req.term < m.term:
            out.messages.append(VoteResponse(m.group, m.node_id, req.sender, m.term, False, False,
                                             int(ResponseCode.EXPIRED_TERM)))
            return None
        if req.term > m.term:
            if in_lease:
                # Leader stickiness: a live leader's followers do not let a rejoining node depose it.
                self.stats["votes_ignored_in_lease"] += 1
                out.messages.append(VoteResponse(m.group, m.node_id, req.sender, m.term, False, False,
                                                 int(ResponseCode.INCONSISTENT_LEADER)))
                return None
            return Outcome(Event.HIGHER_TERM, req.term, None, req.sender)
        free = m.voted_for == req.sender or (m.voted_for is None and m.leader_id is None)
        grant = m.role == Role.FOLLOWER and free and log_ok and can_vote
        if grant:
            self.reset_timer(now)
            code = SUCCESS
        else:
            code = self._refusal(log_ok, False, can_vote) if free else int(ResponseCode.REPEATED_REQUEST)
        out.messages.append(VoteResponse(m.group, m.node_id, req.sender, m.term, grant, False, code))
        return Outcome(Event.VOTED, m.term, None, req.sender) if grant else None

    @staticmethod
    def _refusal(log_ok: bool, in_lease: bool, can_vote: bool) -> int:
        if not can_vote:
            return int(ResponseCode.ILLEGAL_MEMBER_STATE)
        if in_lease:
            return int(ResponseCode.INCONSISTENT_LEADER)
        if not log_ok:
            return int(ResponseCode.INCONSISTENT_INDEX)
        return int(ResponseCode.EXPIRED_TERM)

    # -- leader side -----------------------------------------------------------------------------
    def on_become_leader(self, now: int) -> None:
        self.pre_candidate = False
        self.votes = {}
        self.leader_since = now
        self.next_heartbeat = now
        self.peer_seen = {p: now for p in self.member.voter_others}
        self.next_preferred_check = now + self.election_timeout

    def last_heard(self, peer: str, now: int) -> int:
        """When a message from `peer` last arrived, in any role and term (since this node started)."""
        return self.heard.get(peer, now if self.started is None else self.started)

    def on_peer_seen(self, peer: str, now: int) -> None:
        self.peer_seen[peer] = now

    def _tick_leader(self, now: int, out: Ready) -> Outcome | None:
        m = self.member
        if self.quiesced:  # no heartbeats, no acks to count: anything that happens wakes the group first
            return None
        # Check quorum first: a leader about to step down must not heartbeat its followers once more.
        if self.config.check_quorum and now - self.leader_since >= self.election_timeout:
            window = self.election_timeout
            since = self.leader_since  # (a voter promoted meanwhile counts as heard from then on)
            alive = m.is_voter + sum(1 for p in m.voter_others if now - self.peer_seen.get(p, since) < window)
            if alive < m.majority:
                self.stats["check_quorum_step_downs"] += 1
                return _QUORUM_LOST
        if now >= self.next_heartbeat:
            self.send_heartbeats(now, out)
        if self.transfer_target is not None and now >= self.transfer_deadline:
            self.finish_transfer(int(ResponseCode.TAKE_LEADERSHIP_FAILED), out)
        self._maybe_hand_to_preferred(now, out)
        return None

    def send_heartbeats(self, now: int, out: Ready, quiet: int = 0) -> None:
        """A heartbeat to every other member, now (a read waiting for a round also sends one: reads.py);
        with `quiet` 1, the last one before the group goes quiet (quiesce.py)."""
        m = self.member
        commit = self.store.committed_index
        end = self.store.end_index
        round_ = self.heartbeat_round()
        for peer in m.others:
            out.messages.append(HeartbeatRequest(m.group, m.node_id, peer, m.term, commit, end, round_, quiet))
        self.next_heartbeat = now + self.config.heartbeat_interval_ms

    def wake(self, now: int) -> None:
        """A quiet leader has work again: heartbeat now, and count check-quorum from now (nobody answered
        while it was quiet)."""
        self.quiesced = False
        self.next_heartbeat = now
        self.peer_seen = {p: now for p in self.member.voter_others}

    def leader_silent(self, now: int) -> None:
        """A quiet follower's leader node fell silent for an election timeout: the timer runs again, and
        only the back-off is left of it (the silence was the timeout)."""
        self.quiesced = False
        self.jitter = self.rng.randint(0, self.config.election_backoff_ms)
        self.deadline = now + self.jitter
        self.last_leader_contact = None

    # -- leadership transfer ---------------------------------------------------------------------
    @property
    def transferring(self) -> bool:
        return self.transfer_target is not None

    def transfer(self, target: str, now: int, request_id: int | None, out: Ready) -> None:
        """Start a transfer; refusals complete at once with their code."""
        m = self.member
        code: int | None = None
        if target == m.node_id and m.role == Role.LEADER:
            code = SUCCESS
        elif target not in m.voter_others:  # (a learner cannot lead)
            code = int(ResponseCode.UNKNOWN_MEMBER)
        elif m.role != Role.LEADER:
            code = int(ResponseCode.NOT_LEADER)
        elif self.transfer_target is not None:
            code = int(ResponseCode.LEADER_TRANSFERRING)
        elif self.store.end_index - self.peer_match(target) > self.config.max_transfer_lag:
            code = int(ResponseCode.FALL_BEHIND_TOO_MUCH)
        elif self.peer_full(target):  # it could not write its NOOP, let alone the appends
            code = int(ResponseCode.DISK_FULL)
        if code is not None:
            if request_id is not None:
                reason = f"the disk of {target} is full" if code == int(ResponseCode.DISK_FULL) else None
                out.completions.append(Completion(request_id, code, TRANSFER, term=m.term,
                                                  leader_id=m.leader_id, reason=reason))
            return
        self.transfer_target = target
        self.transfer_deadline = now + self.config.transfer_timeout_ms
        self.transfer_request = request_id
        self.transfer_sent = False
        self.stats["transfers_started"] += 1
        self.transfer_progress(out)

    def hand_off_for_space(self, space_target: Callable[[Callable[[str], bool]], str | None], now: int,
                           out: Ready) -> str | None:
        """Our disk is full and refused a client append: hand leadership to a follower that has shown it
        has space (pusher.py, Leader.space_target), so the group stays writable; the target, or None."""
        if self.transfer_target is not None:
            return None
        target = space_target(lambda p: now - self.last_heard(p, now) < self.election_timeout)
        if target is None:
            return None
        self.transfer(target, now, None, out)
        if self.transfer_target != target:
            return None  # refused: it lags too far behind
        self.stats["disk_full_hand_offs"] += 1
        return target

    def transfer_progress(self, out: Ready) -> None:
        """Send TimeoutNow once the target holds every entry (appends are refused meanwhile)."""
        target = self.transfer_target
        if target is None or self.transfer_sent:
            return
        if self.peer_match(target) >= self.store.end_index:
            m = self.member
            out.messages.append(TimeoutNow(m.group, m.node_id, target, m.term))
            self.transfer_sent = True

    def finish_transfer(self, code: int, out: Ready, leader_id: str | None = None) -> None:
        """Answer the transfer request; `leader_id` names the new leader when the caller knows it
        before the member state does (stepping down to the target)."""
        if self.transfer_target is None:
            return
        if code == SUCCESS:
            self.stats["transfers_succeeded"] += 1
        else:
            self.stats["transfers_failed"] += 1
        if self.transfer_request is not None:
            out.completions.append(Completion(self.transfer_request, code, TRANSFER, term=self.member.term,
                                              leader_id=leader_id or self.member.leader_id))
        self.transfer_target = None
        self.transfer_request = None
        self.transfer_sent = False

    def _maybe_hand_to_preferred(self, now: int, out: Ready) -> None:
        preferred = self.config.preferred_leader
        m = self.member
        if (preferred is None or preferred == m.node_id or preferred not in m.voter_others
                or self.transfer_target is not None or now < self.next_preferred_check):
            return
        # Retry rarely: a preferred node that cannot take over must not keep the group unavailable.
        self.next_preferred_check = now + 4 * self.config.transfer_timeout_ms
        if self.store.end_index - self.peer_match(preferred) <= self.config.max_transfer_lag:
            self.stats["preferred_leader_transfers"] += 1
            self.transfer(preferred, now, None, out)
