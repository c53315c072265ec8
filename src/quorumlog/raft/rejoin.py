"""How a Raft node that lost state comes back without contradicting its former self (a RaftNode mixin):
protocol-aware recovery after damage (it neither votes nor leads until it has committed up to the end of
a leader elected without it, which holds every committed entry) and the decision of a pristine node
whether its group exists (joining.py), and the group id that follows from it (reconfig.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.ready import Ready
from ..core.role import Role
from ..errors import CorruptEntryError
from .joining import JOIN, Joiner, opens_first_election
from .member import ABSTAINED, members_digest
from .parts import NodeParts
from .roles import Event, Outcome


class Rejoining(NodeParts):
    """RaftNode's recovery and joining (see the module docstring)."""

    if TYPE_CHECKING:
        joiner: Joiner | None
        joins: bool
        group_id: str | None
        recover_floor: int | None
        recover_leader_end: int | None
        recover_leader_term: int
        recover_owed: tuple[int, int] | None

        def _tell_leader_of_damage(self, now: int, out: Ready) -> None: ...

    def _check_recovered(self) -> None:
        floor = self.recover_floor
        lc = self.recover_leader_end
        if floor is None or lc is None:
            return
        # The leader's end covers `floor`: that leader holds every committed entry, and any entry this node
        # acknowledged and lost is in its log, durable (not just written), or was never committed.
        if min(self.store.committed_index, self.store.durable_index) >= lc:
            self.store.clear_damage()
            m = self.member
            # A vote this node cast in the current term before it lost its state is unknown: count it cast.
            if m.voted_for is None:
                m.set_term(m.term, ABSTAINED)
            self.recover_floor = None
            m.set_recovering(False)
            self.stats["recovered_from_damage"] += 1
            if self.group_id is None and not self.joins and not self.store.configs:
                # A founding member that found its group existing (a wiped store) holds the log up to a
                # leader's end, and no change is in it: the group's members are still its first ones,
                # this node's list, whose digest its HELLO named while it probed (a member naming another
                # id refused it). That is the group id (reconfig.py).
                self.group_id = members_digest(m.group, m.static_members)
                self.store.set_identity(self.group_id)

    def _enter_recovery(self, floor: int) -> None:
        """Stop voting and leading until this node has committed up to `floor` and up to the end of the
        next leader it hears from (that leader holds every committed entry)."""
        self.member.set_recovering(True)
        self.recover_floor = max(floor, self.recover_floor if self.recover_floor is not None else -1)
        self.recover_leader_end = None
        self.recover_leader_term = -1
        self.stats["recovering_from_damage"] += 1

    def _on_corruption(self, e: CorruptEntryError, now: int, out: Ready) -> None:
        """A stored entry failed its checks while running: cut the log there and re-fetch from peers."""
        index = e.index
        if index is None:
            self.stats["rejected_CorruptEntryError"] += 1
            return
        self.stats["corrupt_entries_found"] += 1
        acked = self.handler.acked_in_term  # (before the cut; a leader's log holds what we acknowledged it)
        self.store.mark_damaged(index, str(e))
        self.producers.after_cut(self.store)
        damage = self.store.damage
        self._enter_recovery(damage.committed_index if damage is not None else index)
        # The recovery target is the end a leader names in a heartbeat; one of this term sent before our last
        # acknowledgement reached the leader names less than we acknowledged, and the leader may count that
        # acknowledgement towards a commit: take only a heartbeat that names it (the simulator's seed 59935:
        # recovered to a stale end, the node held one copy less of a committed entry than the majority).
        self.recover_owed = acked if acked[0] == self.member.term else None
        if self.member.role != Role.FOLLOWER:
            self._run(Outcome(Event.CORRUPTION), now, out)
        else:
            self.handler.reset()  # not a role change: forget pushes that assumed the cut entries
            self._tell_leader_of_damage(now, out)

    def _join(self, decision: str, now: int = 0) -> None:
        """A pristine node learned whether its group exists (joining.py)."""
        joiner = self.joiner
        assert joiner is not None
        m = self.member
        term = max(m.term, joiner.highest_term)
        if term > 0 and (term > m.term or m.voted_for is None):
            m.set_term(term, ABSTAINED)
        if decision == JOIN:
            self._enter_recovery(-1)
            self.stats["joined_existing_group"] += 1
            # The group exists: its id is the one it was created with, which a CONFIG entry brings (or,
            # for a founding member, the log once it shows no change: _check_recovered), not one made from
            # this node's list (reconfig.py). Until then the node names none at HELLO.
            self.group_id = None
        else:
            self.stats["bootstrapped_group"] += 1
            if opens_first_election(m, self.config.preferred_leader):
                self.elector.campaign_now(now)
            if self.group_id is not None:  # a founding member creates the group: its members' digest
                self.store.set_identity(self.group_id)
        if self.group_id is None:
            # No identity to record: the term, counted as voted in, marks the store as no longer pristine,
            # durably now, so that a restart does not probe again (joining.py), as a recorded id would.
            if m.voted_for is None:
                m.set_term(m.term, ABSTAINED)
            self.store.persist_stable()
        self.joiner = None
