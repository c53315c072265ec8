"""Role transitions of a RaftNode (a mixin): the only writer of role, term, leader and vote. Every change
goes through the transition table of roles.py; the elector reports outcomes, and these methods make them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.ready import Ready
from ..core.role import Role
from ..entry import MAGIC_NOOP
from ..errors import DiskFullError, ResponseCode
from .parts import NodeParts
from .pusher import Leader
from .roles import Event, Outcome, next_role

SUCCESS = int(ResponseCode.SUCCESS)


class Transitions(NodeParts):
    """RaftNode's role transitions (see the module docstring)."""

    if TYPE_CHECKING:
        def _abandon_change(self, leader: str | None, out: Ready) -> None: ...

    def _run(self, outcome: Outcome | None, now: int, out: Ready) -> None:
        """Make the transition `outcome` calls for and those it leads to (a won pre-vote campaigns)."""
        while outcome is not None:
            outcome = self._transition(outcome, now, out)

    def _transition(self, o: Outcome, now: int, out: Ready) -> Outcome | None:
        m = self.member
        event = o.event
        role = next_role(m.role, event)
        if role is None:
            self.stats[f"bug_transition_{m.role.name}_{event.name}"] += 1
            return None
        if event is Event.VOTED:
            m.set_term(m.term, o.by)  # durable before the granting answer leaves
            return None
        if role is Role.FOLLOWER:
            if event is Event.LEADER_SEEN and m.role is Role.FOLLOWER:
                m.leader_id = o.leader  # our term's leader, first heard of
            else:
                self._become_follower(max(o.term, m.term), o.leader, now, out, o.by)
            return None
        if role is Role.CANDIDATE:
            if event is Event.ELECTION_TIMEOUT and self.config.pre_vote:
                m.role = Role.CANDIDATE
                m.leader_id = None
                return self.elector.start_pre_vote(now, out)
            m.set_term(m.term + 1, m.node_id)
            m.role = Role.CANDIDATE
            m.leader_id = None
            self.handler.reset()  # the previous leader's pushes no longer apply
            return self.elector.start_campaign(now, out, transfer=event is Event.TIMEOUT_NOW)
        self._become_leader(now, out)
        return None

    def _become_follower(self, term: int, leader: str | None, now: int, out: Ready, by: str | None) -> None:
        m = self.member
        was_leader = m.role == Role.LEADER
        new_term = term > m.term
        if new_term:
            m.set_term(term, None)
        if was_leader:
            self._leave_leadership(leader, by, out)
        if new_term or m.role != Role.FOLLOWER or m.leader_id != leader:
            self.handler.reset()
        m.role = Role.FOLLOWER
        m.leader_id = leader
        self.elector.on_become_follower(now, leader is not None, was_leader or new_term)

    def _leave_leadership(self, leader: str | None, by: str | None, out: Ready) -> None:
        el = self.elector
        if el.transferring:
            won = by is not None and by == el.transfer_target
            el.finish_transfer(SUCCESS if won else int(ResponseCode.TAKE_LEADERSHIP_FAILED), out,
                               leader_id=by if won else leader)
        if self.leader is not None:
            self.leader.step_down(leader, out)
        self._abandon_change(leader, out)
        self.leader = None
        self.stats["step_downs"] += 1

    def write_noop(self) -> bool:
        """The NOOP of our term lets earlier entries commit without waiting for a client write (§5.4.2). On
        a full disk it waits: the leader's tick writes it once there is space (node.py)."""
        try:
            self.store.append([b""], self.member.term, MAGIC_NOOP)
        except DiskFullError:
            self.stats["noop_disk_full"] += 1
            return False
        return True

    def _become_leader(self, now: int, out: Ready) -> None:
        m = self.member
        m.role = Role.LEADER
        m.leader_id = m.node_id
        self.handler.reset()
        self.stats["became_leader"] += 1
        self.stats["partial_requests_cut"] += bool(self.producers.cut_partial_tail(self.store))
        self.elector.on_become_leader(now)
        self.write_noop()
        self.leader = Leader(m, self.store, self.config, self.stats, self.producers, self.elector.hand_off_for_space)
        self.leader.term_start = self.store.end_index if self.store.end_term == m.term else self.store.end_index + 1
        self.elector.tick(now, out, True)  # heartbeat at once: followers learn the new leader
        self.leader.dispatch_all(now, out)
        self.leader.advance_commit(out)
