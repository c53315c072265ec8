"""The controller's decisions (RocketMQ 5's controller mode), pure: no I/O, no clock, no sockets. From the
record (record.py) its node's replica of the controller group applied, that replica's Raft state, and
the node's primary/backup cores, `ControllerCore.tick` returns what to do: Readies of the HaNodes to apply,
commands to append to the controller group, and lines to log. server/controller.py drives it on a node;
the primary/backup simulator (sim/pb.py) drives the same code over a simulated controller group of real
RaftNodes, so what the simulator checks is what nodes run.

On each node, every tick:
- applies what the controller group committed (a replica whose log starts after its record acts on
  nothing until a snapshot: record.py);
- makes each hosted primary/backup group follow the record (a new epoch: promote or follow);
- confirms a primary only by an election committed after this process started, and once its takeover
  is recorded; a primary that restarts asks to be elected again, in a new epoch, so a stale one is never
  confirmed;
- records its primaries' in-sync changes (a backup leaves the set only once recorded: primary.py);
- records a hand-off request when a primary's own disk is full (withdrawn when appends fit again) or its
  log is damaged (for good: it cuts once it follows) (primary.py, `hand_off_to`);
- on the controller group's leader, promotes the first live member of the recorded in-sync set when
  the primary has not been heard (by the controller group's Raft heartbeats) for failover_timeout_ms,
  or when it asked for a hand-off (the backup it named, if live), and writes a snapshot of the record
  every SNAPSHOT_EVERY entries. Only the leader knows who is live: a primary that elected its choice
  itself could pick a member the controller has not heard lately.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from ..config import HaConfig
from ..core.ready import Ready
from ..core.role import Role
from ..raft.node import RaftNode
from .epochs import hand_back_to
from .node import HaNode
from .record import (
    ELECT,
    HAND_OFF,
    ISR,
    SYNC,
    TAKE,
    Assignment,
    ControllerState,
    encode_command,
    encode_election,
)

RETRY_MS = 500  # a proposal of one kind for one group goes again after this long (it may have been lost)
LOST_LOG_EVERY_MS = 10_000
# The controller group's leader writes a snapshot of the record after this many entries (record.py):
# expiry keeps the last one, so this bounds what a replica replays, and what its log must keep.
SNAPSHOT_EVERY = 64


@dataclass(frozen=True, slots=True)
class ControllerProposal:
    """A command for the controller group, sent over the peer link to the member this node takes for that
    group's leader (server/controller.py); a member that no longer leads drops it, and the proposer's next
    tick proposes again if it still applies."""

    group: str
    sender: str
    target: str
    body: bytes


@dataclass(slots=True)
class Actions:
    """What one tick decided, for the driver to carry out in this order."""

    readies: list[tuple[str, Ready]] = field(default_factory=list)  # (primary/backup group, its node's Ready)
    proposals: list[tuple[str, bytes]] = field(default_factory=list)  # (controller group, command)
    local: list[tuple[str, bytes]] = field(default_factory=list)  # appended only by this leader, at once
    notes: list[tuple[int, str]] = field(default_factory=list)  # (logging level, line)
    events: list[str] = field(default_factory=list)  # what was decided, one word each (counted as figures)


def ranked(members: list[str], priority: dict[str, int]) -> list[str]:
    """`members` in the order the controller elects them: higher priority first, then by id."""
    return sorted(members, key=lambda m: (-priority.get(m, 0), m))


def record_current(node: RaftNode) -> bool:
    """Whether this replica of the controller group has applied the whole record: a follower heard its
    leader's commit this term and holds up to it; a leader committed an entry of its own term. Before
    that its commit index is what its checkpoint named at start, which can predate every election: the
    record then looks untouched, and a node whose log may lack acknowledged entries took itself for a
    member of a new group and led with that log (a test with a SIGKILLed primary found it)."""
    store = node.store
    commit = store.committed_index
    if node.role == Role.LEADER:
        return commit >= store.begin_index and store.term_at(commit) == node.term
    return node.leader_id is not None and 0 <= node.handler.leader_commit <= commit


class ControllerCore:
    """One node's part of the controller: its replicas of the records, and what it decides from them."""

    def __init__(self, node_id: str, groups: dict[str, tuple[str, list[str], HaConfig]],
                 snapshot_every: int = SNAPSHOT_EVERY) -> None:
        """`groups`: each primary/backup group with a controller -> (its controller group, its members, its
        settings)."""
        self.node_id = node_id
        self.snapshot_every = snapshot_every
        self.managed = {g: c for g, (c, _, _) in groups.items()}
        self.configs = {g: cfg for g, (_, _, cfg) in groups.items()}
        self.states: dict[str, ControllerState] = {}
        self._busy: dict[tuple[str, str], int] = {}  # (group, kind) -> when a proposal may go again
        self._leader_since: dict[str, int] = {}
        self._stale_since: dict[str, int] = {}  # controller group -> since when its replica here lags its leader
        for g, (c, members, cfg) in groups.items():
            assert cfg.primary is not None
            self.states.setdefault(c, ControllerState({})).add_default(
                g, Assignment(1, cfg.primary, frozenset(members) - {cfg.primary}))

    def assignment(self, group: str) -> Assignment:
        return self.states[self.managed[group]].groups[group]

    def whole(self, group: str) -> bool:
        return self.states[self.managed[group]].whole

    def tick(self, now: int, controllers: dict[str, RaftNode], nodes: dict[str, HaNode]) -> Actions:
        """`controllers`: this node's replica of each controller group it hosts; `nodes`: its primary/backup
        cores. The Readies returned were taken from the nodes already, in order: apply every one."""
        out = Actions()
        for ctl, cnode in controllers.items():
            if ctl in self.states:
                self._catch_up(ctl, cnode, out)
                self._nudge(ctl, cnode, now, out)
        for name, node in nodes.items():
            c = self.managed.get(name)
            if c is not None and self.whole(name):
                self._follow_record(name, node, self.assignment(name), controllers.get(c), now, out)
        for ctl in self.states:
            self._watch(ctl, controllers.get(ctl), now, out)
        return out

    # -- applying the record -----------------------------------------------------------------------
    def _catch_up(self, ctl: str, cnode: RaftNode, out: Actions) -> None:
        state = self.states[ctl]
        whole = state.whole
        state.catch_up(cnode.store)
        if state.whole != whole:
            out.notes.append((logging.INFO, f"controller {ctl}: the record is whole again from the snapshot at "
                                            f"{state.snapshot_index}") if state.whole else
                             (logging.WARNING, f"controller {ctl}: the log here starts at {cnode.store.begin_index}, "
                                               "after the record applied: waiting for the next snapshot before "
                                               "acting on the record"))

    def _nudge(self, ctl: str, cnode: RaftNode, now: int, out: Actions) -> None:
        """A replica that has not applied its leader's commit for RETRY_MS asks for an entry that is no
        command: a follower's commit moves only with an entry pushed to it, so one restarted on an old
        checkpoint into an idle controller group would act on a stale record for good (the simulator found
        a restarted primary that never learnt it had been elected again)."""
        if record_current(cnode):
            self._stale_since.pop(ctl, None)
            return
        since = self._stale_since.setdefault(ctl, now)
        key = (ctl, SYNC)
        if now - since >= RETRY_MS and self._busy.get(key, 0) <= now:
            self._busy[key] = now + RETRY_MS
            out.proposals.append((ctl, encode_command(SYNC, "", 0, 0, self.node_id, set())))
            out.events.append("stale_record_syncs")

    def _follow_record(self, group: str, node: HaNode, a: Assignment, cnode: RaftNode | None, now: int,
                       out: Actions) -> None:
        me = self.node_id
        members = self.states[self.managed[group]].members[group]
        if set(node.members) != members:
            node.set_members(sorted(members), now)
            out.notes.append((logging.INFO, f"group {group}: members {', '.join(sorted(members))}"))
        if node.recovering and not self._vouched(group, node, a, cnode, now, out):
            if a.primary != me and node.behind(a.epoch, a.primary):
                out.readies.append((group, node.follow(a.epoch, a.primary, now)))
            return
        if node.behind(a.epoch, a.primary):
            if a.primary != me:
                out.readies.append((group, node.follow(a.epoch, a.primary, now)))
                return
            # Confirmed once its takeover is recorded, proposed below in this same tick.
            out.readies.append((group, node.promote(a.epoch, now, set(a.isr), confirmed=False)))
            if node.recovering:  # (HaNode.tail_unverified) another member is elected, or the epoch goes back
                out.notes.append((logging.WARNING, f"group {group}: {me} declines epoch {a.epoch}: its recovery "
                                                   "cut a tail that may have held entries it acknowledged"))
                return
            out.notes.append((logging.WARNING, f"group {group}: {me} is the primary of epoch {a.epoch} (controller)"))
        if node.primary_id != me or node.primary is None:
            return
        # Only an election above the epoch a primary leads by its own word confirms it (HaNode.own_epoch): one
        # that restarts, or leads again on a replaced disk, is elected again (a stale view never confirms it).
        if a.epoch == node.epoch and a.primary == me and a.epoch > node.own_epoch:
            if not a.taken:  # recorded before it commits anything: until then the epoch may go back (_vouched)
                self._propose(group, TAKE, encode_command(TAKE, group, a.epoch, a.epoch, me, set()), now, out)
                return
            if not node.confirmed:
                node.confirm(set(a.isr))
            elif set(a.isr) != node.primary.isr:
                node.primary.isr_recorded(set(a.isr))
            # Our disk is full or our log damaged (or the disk has room again): ask for (or withdraw) a hand-off;
            # the controller's leader elects.
            target = node.primary.hand_off_to or ""
            if target != a.hand_off and self._propose(group, HAND_OFF, encode_command(
                    HAND_OFF, group, a.epoch, a.epoch, me, {target} - {""}), now, out) and target:
                what, state = ("log", "damaged") if node.primary.damaged else ("disk", "full")
                out.notes.append((logging.WARNING, f"group {group}: the {what} of {me} is {state}: asking the "
                                                   f"controller to elect {target}"))
            want = node.primary.wanted_isr()
            if want is not None:
                self._propose(group, ISR, encode_command(ISR, group, a.version, a.epoch, me, want), now, out)
        elif not node.confirmed and a.epoch == node.epoch and a.primary == me:
            # Primary by its own store (a restart): be elected again, in a new epoch, or learn otherwise.
            self._propose(group, ELECT, encode_election(group, a, me, set(a.isr)), now, out)

    def _vouched(self, group: str, node: HaNode, a: Assignment, cnode: RaftNode | None, now: int,
                 out: Actions) -> bool:
        """A node that started on a pristine store (new, or a replaced disk) and the record: True once the
        group proves new, or the node follows the record's primary and holds what that primary had
        acknowledged when it began streaming to it (HaNode.caught_up). Until then it asks to be left out
        (another member elected in its place, or itself taken out of the in-sync set): a record from before
        a wipe counts on entries this store no longer holds."""
        if cnode is None or cnode.joining or cnode.recovering:
            return False  # the record is not whole here yet (the controller's store may be new too)
        me = self.node_id
        if not record_current(cnode):
            # An idle controller group appends nothing, and a follower's commit stays where its checkpoint
            # put it until its leader pushes an entry: append one that is no command.
            self._propose(group, SYNC, encode_command(SYNC, group, 0, 0, me, set()), now, out)
            return False
        state = self.states[self.managed[group]]
        # The controller's own store started pristine too and found every member's empty (raft/joining.py):
        # no election was ever recorded, so no append was ever acknowledged: the whole cluster is new. Only
        # for a node recovering because its store started pristine: one that cut entries for damage since
        # lacks what it may have acknowledged, whatever the record says (the simulator found it leaving its
        # recovery at once, still recorded in sync, on a cluster its process had bootstrapped).
        new = node.started_pristine and (bool(cnode.stats["bootstrapped_group"]) or group in state.untouched)
        if new or (a.primary != me and node.caught_up(a.epoch, a.primary)):
            out.readies.append((group, node.recovered(now)))
            return True
        others = set(a.isr) - {me}
        # Whom to elect in our place: another in-sync member, else the one the record says holds every entry.
        back = hand_back_to(a.taken, a.holder, a.isr_seen)
        warn = f"group {group}: {me} may lack acknowledged entries but is the recorded primary"
        if a.primary == me and others:
            if self._propose(group, ELECT, encode_election(group, a, min(others), others), now, out):
                out.notes.append((logging.WARNING, f"{warn}: electing {min(others)} (epoch {a.epoch + 1})"))
                out.events.append("lost_store_elections")
        elif a.primary == me and back not in ("", me):
            if self._propose(group, ELECT, encode_election(group, a, back, set()), now, out):
                why = "never took epoch" if not a.taken else "nobody was in sync in epoch"
                out.events.append("lost_store_back_to_holder" if not a.taken else "lost_store_back_past_takeover")
                out.notes.append((logging.WARNING, f"{warn}, and {why} {a.epoch}: electing {back}, which holds "
                                                   f"every entry acknowledged before (epoch {a.epoch + 1})"))
        elif a.primary == me and back == me and (heirs := set(a.holder_isr) - {me}):
            # The epoch came back to us (the holder of an epoch never taken, or of one in which nobody has been
            # in sync since its takeover), and our store is lost: those in sync as the epoch before ended hold
            # every acknowledged entry as well (the simulator's seed 916914 waited for an operator here).
            if self._propose(group, ELECT, encode_election(group, a, min(heirs), heirs), now, out):
                out.events.append("lost_store_to_holders")
                out.notes.append((logging.WARNING, f"{warn}, and the last primary to take an epoch: electing "
                                                   f"{min(heirs)}, in sync as that epoch ended (epoch {a.epoch + 1})"))
        elif a.primary == me:
            if self._busy.get((group, "lost"), 0) <= now:  # (paces the message)
                self._busy[(group, "lost")] = now + LOST_LOG_EVERY_MS
                out.notes.append((logging.ERROR, f"{warn}, with no other in-sync member: acknowledged entries may "
                                                 "be lost; promote the backup with the longest log with --force"))
        elif me in a.isr:
            self._propose(group, ISR, encode_command(ISR, group, a.version, a.epoch, a.primary, others), now, out)
        return False

    # -- failover, on the controller group's leader ---------------------------------------------------
    def _watch(self, ctl: str, cnode: RaftNode | None, now: int, out: Actions) -> None:
        if cnode is None or cnode.role != Role.LEADER:
            self._leader_since.pop(ctl, None)
            return
        since = self._leader_since.setdefault(ctl, now)
        state = self.states[ctl]
        if not state.whole:
            return  # a leader whose log starts after its record: it waits for a snapshot like any replica
        self._snapshot(ctl, cnode, state, out)
        me = self.node_id
        elector = cnode.elector
        for name, c in self.managed.items():
            cfg = self.configs[name]
            if c != ctl or not cfg.failover:
                continue
            timeout = cfg.failover_timeout_ms
            if now - since < timeout:
                continue  # a new controller leader first hears from everyone

            def alive(member: str, timeout: int = timeout) -> bool:
                return member == me or now - elector.last_heard(member, now) <= timeout

            a = state.groups[name]
            pref = cfg.preferred_primary
            if alive(a.primary) and not a.hand_off:
                if pref is not None and pref != a.primary and pref in a.isr and alive(pref) and a.taken:
                    self._switch_back(name, a, pref, now, out)
                continue
            candidates = ranked([m for m in a.isr if alive(m)], cfg.priority)
            if not candidates:
                continue  # no in-sync backup is up: promoting another could lose acknowledged appends
            new = a.hand_off if a.hand_off in candidates else candidates[0]
            isr = set(candidates)  # the dead stay out: the new primary would wait for them
            if self._propose(name, ELECT, encode_election(name, a, new, isr), now, out):
                why = f"primary {a.primary} asked for a hand-off (a full disk or a damaged log)" if a.hand_off else \
                    f"primary {a.primary} unheard for {timeout} ms"
                out.notes.append((logging.WARNING, f"group {name}: {why}: electing {new} (epoch {a.epoch + 1})"))
                out.events.append("hand_offs" if a.hand_off else "failovers_proposed")

    def _switch_back(self, group: str, a: Assignment, pref: str, now: int, out: Actions) -> None:
        """Elect the preferred member, in sync again (it holds every acknowledged entry), as a switchover."""
        if self._propose(group, ELECT, encode_election(group, a, pref, set(a.isr | {a.primary})), now, out):
            out.notes.append((logging.WARNING, f"group {group}: {pref}, the preferred primary, is in sync again: "
                                               f"electing it (epoch {a.epoch + 1})"))
            out.events.append("switch_backs")

    def _snapshot(self, ctl: str, cnode: RaftNode, state: ControllerState, out: Actions) -> None:
        """Append the whole record once SNAPSHOT_EVERY entries followed the last snapshot (or none exists
        yet), right after the last entry applied: only with nothing in flight (the record then sums up the
        whole log) and once this term committed an entry (the record is whole)."""
        due = self.snapshot_every if state.snapshot_index >= 0 else 1
        if state.since_snapshot >= due and cnode.store.end_index == state.applied and record_current(cnode):
            out.local.append((ctl, state.snapshot()))
            out.events.append("snapshots_proposed")

    # -- proposing -----------------------------------------------------------------------------------
    def _propose(self, group: str, kind: str, body: bytes, now: int, out: Actions) -> bool:
        """Ask for `body` to be appended to `group`'s controller group, at most once per RETRY_MS per kind."""
        key = (group, kind)
        if self._busy.get(key, 0) > now:
            return False
        self._busy[key] = now + RETRY_MS
        out.proposals.append((self.managed[group], body))
        return True
