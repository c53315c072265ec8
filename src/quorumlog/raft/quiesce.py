"""Quiet groups: an idle group stops heartbeating (CockroachDB's quiescence, TiKV's hibernating regions).

A node hosting hundreds of idle groups spent its CPU on their heartbeats: each group's leader sends one to
every follower every interval, and each is answered, though nothing changes. So a leader whose group has
been quiet for an election timeout (nothing appended or committed, no read, transfer or membership change
waiting), with every member holding its whole log and heard from within two heartbeat intervals, sends one
last heartbeat flagged (`quiet` = QUIET_START) and stops: no heartbeats, no check-quorum, nothing sent at
its ticks. A follower that receives it in its leader's term, holding exactly the leader's log and commit
index, stops its election timer; one that does not answers INCONSISTENT_STATE, and the leader wakes and
compares its log at its end.

Liveness moves to the nodes: each node pings every peer node once a heartbeat interval (NODE_PING, one
message per pair of nodes, however many groups), and the driver tells the core when a peer node has been
silent for an election timeout (`peer_down`). A quiet follower whose leader's node fell silent runs its
election timer again, with only the back-off left of it; a quiet leader wakes when any member's node does
(check-quorum counts from then on, so a leader cut off from a majority still steps down).

Anything else ends the quiet at once: on a leader, any input but a tick or a follower's plain heartbeat
ack (a proposal, a read, a transfer, a membership change, a vote request from a member that restarted
and never heard the flag, any push answer); on a follower, any message from its leader without the flag
(but a heartbeat older than the flag), a vote request from its leader, QUIET_END, damage it finds in its own
log (it tells its leader at once), and any change of role, term or leader. A leader that steps down sends
QUIET_END, and so does a node restarted after voting for itself, each election timeout until it knows a
leader: its node never fell silent. Safety does not depend on any of this: a quiet follower refuses
votes as one in a leader's lease does, which Raft permits at any time; what quiescence risks is only
liveness, and the simulator (sim/cluster.py: node pings through the simulated network, partitions and
pauses included) checks that every fault still ends with a leader that commits.

A controller group (server/controller.py) never goes quiet: the node turns `quiesce` off for it. It is one
group per cluster, polled by its leader and read (ReadIndex) by every promotion and membership check, and
every primary/backup failover starts from its leader's view; a quiet controller group would gain nothing
and add a step to each of those.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.ready import Ready
from ..core.role import Role
from ..errors import ResponseCode
from .messages import HeartbeatRequest, HeartbeatResponse, VoteRequest
from .parts import NodeParts

INCONSISTENT_STATE = int(ResponseCode.INCONSISTENT_STATE)

QUIET_START = 1  # HeartbeatRequest.quiet: the group goes quiet
QUIET_END = 2  # its leader stopped leading

if TYPE_CHECKING:
    from .joining import Joiner
    from .reads import ReadIndex


class Quiescence(NodeParts):
    """RaftNode's quiet-group rules (mixed into the node; the flag itself is the elector's)."""

    if TYPE_CHECKING:
        reads: ReadIndex
        joiner: Joiner | None
        recover_floor: int | None
        pending_change: object | None

    _quiet_key: tuple[int, int, int] = (-2, -2, -1)
    _quiet_since = 0
    _quiet_round = 0  # a quiet follower: the round of the flagged heartbeat
    _ended_quiet_term = -1  # a former (or restarted) leader: the term it led, while no new leader is known
    _next_quiet_end = 0

    @property
    def quiesced(self) -> bool:
        return self.elector.quiesced

    def peer_down(self, peer: str, now_ms: int) -> Ready:
        """The driver's word that `peer`'s node has been silent for an election timeout (no message, no
        NODE_PING). Ends the quiet of a follower led from there and of a leader it follows."""
        out, before = self._begin(now_ms)
        e, m = self.elector, self.member
        if e.quiesced:
            if m.role == Role.LEADER:
                if peer in m.others:
                    self._wake(now_ms, out)
            elif peer == m.leader_id:
                self.stats["quiet_ended_leader_silent"] += 1
                e.leader_silent(now_ms)
        return self._finish(out, before)

    def _wake(self, now: int, out: Ready) -> None:
        """A quiet leader has something to do: heartbeat at once, so its followers run their timers again."""
        e = self.elector
        if e.quiesced and self.member.role == Role.LEADER:
            self.stats["quiet_ended"] += 1
            e.wake(now)
            e.send_heartbeats(now, out)
        self._quiet_since = now

    def _maybe_quiesce(self, now: int, out: Ready) -> None:
        """On a leader's tick: go quiet once nothing has changed for an election timeout and every member
        holds the whole log (one last heartbeat, flagged, carries the commit index to them)."""
        s = self.store
        key = (s.end_index, s.committed_index, self.member.term)
        if key != self._quiet_key:
            self._quiet_key, self._quiet_since = key, now
            return
        e = self.elector
        leader = self.leader
        if now - self._quiet_since < e.election_timeout or leader is None or not self._leader_quiet(now):
            return
        self.stats["quiesced"] += 1
        e.send_heartbeats(now, out, QUIET_START)
        e.quiesced = True
        for d in leader.peers:  # the flagged heartbeat carries the commit index: no COMMIT push owed
            d.commit_sent = max(d.commit_sent, s.committed_index)

    def _leader_quiet(self, now: int) -> bool:
        m, s, leader, e = self.member, self.store, self.leader, self.elector
        if (leader is None or not m.is_voter or not m.others or e.transferring or self.pending_change is not None
                or leader.leaving or leader.commit < leader.term_start or self.reads.pending
                or leader.appends.waiting()):
            return False
        end = s.end_index
        if s.committed_index != end or s.durable_index != end:
            return False
        preferred = self.config.preferred_leader
        if preferred is not None and preferred != m.node_id and preferred in m.voter_others:
            return False  # (its tick hands leadership over when it can)
        recent = now - 2 * self.config.heartbeat_interval_ms
        heard = e.heard
        return all(d.progress.match == end and not d.disk_full and heard.get(d.peer, -1) >= recent
                   for d in leader.peers)

    def _follower_quiesce(self, msg: HeartbeatRequest) -> bool:
        """A flagged heartbeat (after its commit index was applied): go quiet if this node holds exactly
        the leader's log, fully committed, and owes nothing (not recovering, not probing). False: it
        cannot, and says so (the leader wakes, and compares its log again: pusher.py, on_quiet_refused)."""
        m, s = self.member, self.store
        if not (m.role == Role.FOLLOWER and m.leader_id == msg.sender and self.recover_floor is None
                and self.joiner is None and s.end_index == msg.last_index == msg.commit_index
                and s.committed_index == msg.commit_index):
            self.stats["quiet_refused"] += 1
            return False
        if not self.elector.quiesced:
            self.stats["quiesced"] += 1
        self.elector.quiesced = True
        self._quiet_round = msg.round
        return True

    def _leader_stepped_down(self, term: int, out: Ready) -> None:
        """A leader stopped leading (it found its log damaged, or heard of a later term): followers it left
        quiet, now or a moment ago, would wait for its node to fall silent, which it will not. Tell them
        (QUIET_END; a follower that is not quiet ignores it), and again every election timeout until a
        leader is known (tick: the message may be lost)."""
        self.stats["quiet_end_sent"] += 1
        self._ended_quiet_term = term
        self._next_quiet_end = 0
        self._send_quiet_end(term, out)

    def _repeat_quiet_end(self, now: int, out: Ready) -> None:
        if now >= self._next_quiet_end:
            self._next_quiet_end = now + self.elector.election_timeout
            self._send_quiet_end(self._ended_quiet_term, out)

    def _send_quiet_end(self, term: int, out: Ready) -> None:
        m, s = self.member, self.store
        for peer in m.others:
            out.messages.append(HeartbeatRequest(m.group, m.node_id, peer, term, s.committed_index, s.end_index,
                                                 0, QUIET_END))

    def _quiet_ended(self, msg: HeartbeatRequest | VoteRequest, now: int) -> None:
        """Its leader says it leads no more (QUIET_END, or it asks for votes): a quiet follower runs its
        election timer again, with only the back-off left (as when the leader's node falls silent)."""
        m, e = self.member, self.elector
        if e.quiesced and m.role == Role.FOLLOWER and msg.sender == m.leader_id and msg.term >= m.term:
            self.stats["quiet_ended_leader_stepped_down"] += 1
            e.leader_silent(now)

    def _tell_leader_of_damage(self, now: int, out: Ready) -> None:
        """A follower cut its log for damage (rejoin.py): its leader repairs it once it sees the shorter end,
        which a quiet leader would never ask for. Say it at once, as a refused quiet would (the leader wakes
        and compares; pusher.py, on_quiet_refused), and run the election timer again."""
        m, e = self.member, self.elector
        if m.role != Role.FOLLOWER or m.leader_id is None:
            return
        if e.quiesced:
            e.quiesced = False
            e.on_leader_contact(now)
        out.messages.append(HeartbeatResponse(m.group, m.node_id, m.leader_id, m.term, INCONSISTENT_STATE,
                                              self.store.end_index, 0))

    def _follower_heard(self, msg: object) -> None:
        """A quiet follower got a message from its leader without the flag: the group has work again,
        unless it is a heartbeat sent before the flagged one and overtaken by it (rounds only grow)."""
        if type(msg) is HeartbeatRequest and msg.round < self._quiet_round:
            self.stats["quiet_kept_stale_heartbeat"] += 1
            return
        self.elector.quiesced = False
