"""Membership changes of a Raft node (membership.py says what a configuration is and which steps are
allowed). The configuration a node follows is the one of the last CONFIG entry in its log, applied as soon
as the entry is there (raft dissertation §4.1): `_sync_config` runs after every input, so an append, a
truncation that cuts an uncommitted change away, and a reset take effect at once. A leader proposes a change
through `change_members`, one at a time and only once an entry of its own term committed; a leader the
committed configuration leaves out hands over and steps down.

The group id. A group's stores record the id the group got at creation (its identity, named at HELLO), and
every CONFIG entry a leader appends carries it (membership.py), whatever the members become. A group
bootstrapped from its configured members has `members_digest(group, those members)`: every founding member
computes it alone. A node that joins an existing group (`join = true`, or a pristine store whose probe found
the group: joining.py) makes up none: it has no id until a CONFIG entry in its log (or the base
configuration a RESET gives it) brings the group's, which it then records (`_take_group_id`).

A mixin of RaftNode (node.py): it reads the node's member state, store, leader and elector.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..core.appends import RequestId
from ..core.ready import CONFIG, Completion, Ready
from ..core.role import Role
from ..entry import MAGIC_CONFIG
from ..errors import DiskFullError, ResponseCode
from .member import checked_identity, group_id_conflict, members_digest
from .membership import Membership, MembershipError, carried_group_id, single_server_step
from .messages import TimeoutNow
from .parts import NodeParts
from .roles import Event, Outcome

SUCCESS = int(ResponseCode.SUCCESS)


class Reconfiguration(NodeParts):
    """RaftNode's membership changes (see the module docstring)."""

    if TYPE_CHECKING:
        node_id: str
        _config_key: tuple[int, int] | None
        pending_change: tuple[int, RequestId | None] | None
        _now: int
        joins: bool
        group_id: str | None
        foreign_group_id: str | None

        def _request_id(self, request_id: RequestId | None) -> RequestId: ...
        def peer_match(self, peer: str) -> int: ...
        def _wake(self, now: int, out: Ready) -> None: ...

    def change_members(self, change: Callable[[Membership], Membership], now_ms: int,
                       request_id: RequestId | None = None) -> Ready:
        """Append a CONFIG entry holding `change(current configuration)`; the outcome arrives as a
        Completion of kind "config" once the entry committed (membership.py). Refused, at once: on a
        follower (NOT_LEADER), while a change is uncommitted (CHANGE_IN_PROGRESS), before the leader
        committed an entry of its own term (LEADER_NOT_READY: without that rule two leaders of different
        terms could each make a change and their majorities stop overlapping), for a change that is not
        one valid single-server step (UNEXPECTED_ARGUMENT), and for the promotion of a learner more than
        `learner_promote_lag` entries behind (FALL_BEHIND_TOO_MUCH)."""
        out, before = self._begin(now_ms)
        self._wake(now_ms, out)
        rid = self._request_id(request_id)
        out.request_id = rid
        m = self.member
        code, reason = self._change_refusal()
        new = m.config
        if code is None:
            try:
                new = change(m.config)
                reason = single_server_step(m.config, new)
            except MembershipError as e:
                reason = str(e)
            if reason is not None:
                code = ResponseCode.UNEXPECTED_ARGUMENT
        if code is None:
            for p in new.voters - m.config.voters:
                # Caught up: within the lag, and holding at least the change that made it a member (on a
                # short log the lag alone would pass a learner that holds nothing yet, which could not vote).
                match, since = self.peer_match(p), self._config_key[0] if self._config_key else -1
                behind = self.store.end_index - match
                if behind > self.config.learner_promote_lag or match < since:
                    code = ResponseCode.FALL_BEHIND_TOO_MUCH
                    reason = (f"{p} is {behind} entries behind the leader; it is promoted once it holds the "
                              f"change that added it (index {since}) and within learner_promote_lag "
                              f"({self.config.learner_promote_lag})")
        if code is not None:
            self.stats[f"change_{code.name.lower()}"] += 1
            out.completions.append(Completion(rid, int(code), CONFIG, term=m.term, leader_id=m.leader_id,
                                              reason=reason))
            return self._finish(out, before)
        assert self.leader is not None
        try:
            index = self.store.append([new.encode(self.group_id)], m.term, MAGIC_CONFIG).first_index
        except DiskFullError as e:
            out.completions.append(Completion(rid, int(e.code), CONFIG, term=m.term, leader_id=m.leader_id,
                                              reason=str(e)))
            return self._finish(out, before)
        self.stats["changes_proposed"] += 1
        self.pending_change = (index, rid)
        self._sync_config()
        self.leader.dispatch_all(now_ms, out)
        if self.store.durable_index >= self.store.end_index:  # flush=async: no flush will report it
            self.leader.advance_commit(out)
        return self._finish(out, before)

    def _change_refusal(self) -> tuple[ResponseCode | None, str | None]:
        m, leader = self.member, self.leader
        if m.role != Role.LEADER or leader is None:
            return ResponseCode.NOT_LEADER, None
        if self.elector.transferring:
            return ResponseCode.LEADER_TRANSFERRING, None
        if leader.commit < leader.term_start:
            return ResponseCode.LEADER_NOT_READY, (f"the leader of term {m.term} has not committed an entry of "
                                                    "its term yet: try again shortly")
        key = self._config_key
        if key is not None and key[0] > self.store.committed_index:
            return ResponseCode.CHANGE_IN_PROGRESS, (f"the change at index {key[0]} is not committed yet: one "
                                                      "change at a time")
        return None, None

    def _sync_config(self) -> None:
        """Follow the log's last CONFIG entry (or the configured members when it holds none): called after
        every input, so appends, truncations and resets take effect at once."""
        configs = self.store.configs
        key = (configs[-1][0], configs[-1][1]) if configs else None
        if key == self._config_key or self.foreign_group_id is not None:
            return
        try:
            config = Membership.decode(configs[-1][2]) if configs else self.member.bootstrap
        except MembershipError:
            self.stats["bug_unreadable_config"] += 1  # a CONFIG entry passed its CRCs: the leader wrote it so
            return
        self._take_group_id(configs)
        self._config_key = key
        self.member.apply(config)
        self.stats["configs_applied"] += 1
        if self.leader is not None:
            self.leader.on_config()

    def _initial_group_id(self, recorded: str | None) -> str | None:
        """The group id at start, from the store's identity (`recorded`: None for a pristine store, "" for
        one that holds a log but no identity) and its CONFIG entries. Stores written by the previous version
        are converted here: it recorded `members_digest` of the configured list, which is the group id for a
        founding member and nothing for a node that joined (its list names itself, not the group's first
        members): such a store takes the id of its next CONFIG entry that carries one."""
        store, group, listed = self.store, self.member.group, self.member.static_members
        if recorded is None:
            # Pristine. A founding member names, while it probes, the id it would bootstrap the group with
            # (so a node configured with another member list is refused at HELLO before it can count
            # another majority); it records it only if it bootstraps (rejoin.py).
            return None if self.joins else members_digest(group, listed)
        legacy = self.joins and recorded == members_digest(group, listed)  # a joined store of the previous version
        carried = carried_group_id(store.configs)
        if carried is not None:
            if recorded and recorded != carried and not legacy:
                raise group_id_conflict(group, recorded, carried, "a CONFIG entry of its log")
            store.set_identity(carried)  # (converted, or the node stopped between the entry and its recording)
            return carried
        if not self.joins and not store.configs:
            return checked_identity(store, group, listed)  # bootstrapped from its configured members
        return recorded if recorded and not legacy else None

    def _take_group_id(self, configs: tuple[tuple[int, int, bytes], ...]) -> None:
        """Record the group id the log's CONFIG entries carry, once there is one and this node has none.

        A node whose store recorded another id refuses it: its store holds one group's log, and a leader of
        another group of the same name (another cluster's, or one configured from another member list) is
        writing to it. Taking the new id silently would make the node a member of that other group with a
        log neither group agreed on, and vote and acknowledge there; overwriting nothing and going on would
        still apply the other group's configuration and entries. So the node stops taking part in the group
        (`foreign_group_id`: it neither votes, campaigns nor answers, and applies no more configuration) and
        raises ConfigError; started again, the store refuses to open (`_initial_group_id`) until an
        operator moves it aside. HELLO refuses such a pair of nodes first whenever both name an id: this is
        for a node that names none (one that joins) or a leader of the previous version."""
        carried = carried_group_id(configs)
        if carried is None or carried == self.group_id:
            return
        if self.group_id is not None:
            self.foreign_group_id = carried
            self.stats["refused_foreign_group_id"] += 1
            raise group_id_conflict(self.member.group, self.group_id, carried, f"its log (CONFIG entries up to "
                                    f"index {configs[-1][0]}, term {configs[-1][1]}, from a leader)")
        self.store.set_identity(carried)
        self.group_id = carried
        self.stats["group_id_learned"] += 1

    def _config_committed(self, out: Ready) -> None:
        """Answer the change once committed; a leader the committed configuration leaves out steps down."""
        m, store = self.member, self.store
        key = self._config_key
        committed = key is None or store.committed_index >= key[0]
        if self.pending_change is not None and committed:
            index, rid = self.pending_change
            self.pending_change = None
            out.completions.append(Completion(rid, SUCCESS, CONFIG, first_index=index, last_index=index,
                                              term=m.term, leader_id=m.leader_id))
            if self.leader is not None:
                self.leader.on_config(committed_at=index)  # (removed members: until they know)
        leader = self.leader
        if m.role == Role.LEADER and not m.is_voter and committed and leader is not None \
                and leader.commit >= leader.term_start:
            # Hand over to the most caught-up voter that holds everything, then follow (dissertation §4.2.2).
            # (A learner elected first commits an entry of its term: that commits the log it won with.)
            ready = [p for p in m.voter_others if leader.peer_match(p) >= store.end_index]
            if ready:
                target = max(ready, key=leader.peer_match)
                out.messages.append(TimeoutNow(m.group, m.node_id, target, m.term))
            self.stats["learner_leader_hand_overs" if m.node_id in m.config.learners else
                       "removed_leader_step_downs"] += 1
            self._run(Outcome(Event.REMOVED, m.term, None, m.node_id), self._now, out)

    def _named_learner(self) -> bool:
        """A learner by a CONFIG entry of its log (not a node that joins and is named by none yet). It may
        campaign, counting only the voters' votes: a learner can hold the longest log (a promotion of it
        cut away by a later leader, whose entries it then took), and the voters, refusing every candidate
        with a shorter log, could otherwise elect nobody (the simulator's seed 20996)."""
        return bool(self.store.configs) and self.node_id in self.member.config.learners

    def _leaving(self) -> bool:
        """This node's removal is the log's last change, and not known committed: it was a voter before.
        It may still campaign, counting only the new configuration's votes (not its own), so that a group
        whose leader lost leadership while removing itself is not left waiting for it: elected, it commits
        its removal and hands over (dissertation §4.2.2). Once the removal is committed it never does."""
        configs = self.store.configs
        if not configs or configs[-1][0] <= self.store.committed_index:
            return False
        try:
            before = Membership.decode(configs[-2][2]) if len(configs) > 1 else self.member.bootstrap
        except MembershipError:
            return False
        return self.node_id in before.voters and self.node_id not in self.member.config.voters

    def _abandon_change(self, leader_id: str | None, out: Ready) -> None:
        """Leadership lost with a change uncommitted: answer TERM_CHANGED (its entry may still commit)."""
        if self.pending_change is not None:
            rid = self.pending_change[1]
            self.pending_change = None
            out.completions.append(Completion(rid, int(ResponseCode.TERM_CHANGED), CONFIG, term=self.member.term,
                                              leader_id=leader_id))
