"""The controller (RocketMQ 5's controller mode): a Raft group of the same cluster records, for every
primary/backup group it controls, the epoch, its primary and its in-sync set (SyncStateSet), and
promotes an in-sync backup when the primary is gone.

The record is a state machine over the controller group's committed log. Every command is conditional
(an election names the epoch it replaces, an in-sync change the version of the record it was made
from, so a late duplicate of an old change cannot undo a newer one) and is
applied by every node in log order, so nodes that proposed concurrently, twice, or from a stale view
cannot disagree: a command whose condition fails is a no-op. Commands are entry bodies of the
controller group: PREFIX + msgpack [kind, group, prev, epoch, primary, in-sync set(, version)], `prev`
being the epoch an election replaces or the record version an in-sync change was made from. An election
also names the record version it was made from, and applies only to it: its in-sync set comes from the
proposer's view, and a stale view put back a member that had left the set for lacking entries (a
record written before elections named a version applies on the epoch alone). A hand-off request names
the asking primary's epoch and the backup it asks for (or none, withdrawn) in place of the set. An election
also carries flags: TAKES, its primary records its takeover (a take command, naming epoch and primary)
before it commits anything, so an epoch never taken acknowledged nothing, and the primary of the last
epoch taken (`holder`) holds every acknowledged entry. A primary whose store was replaced before it took
its epoch hands it back to that holder (`_vouched`). An election without the flag (written before it
existed) counts as taken.

On each node, `Controller.tick` applies what the controller group committed, then:
- makes each hosted primary/backup group follow the record (a new epoch: promote or follow);
- confirms a primary only by an election committed after this process started, and once its takeover
  is recorded; a primary that restarts asks to be elected again, in a new epoch, so a stale one is never
  confirmed;
- records its primaries' in-sync changes (a backup leaves the set only once recorded: primary.py);
- records a hand-off request when a primary's own disk is full (withdrawn when appends fit again) or its
  log is damaged (for good: it cuts once it follows) (primary.py, `hand_off_to`);
- on the controller group's leader, promotes the first live member of the recorded in-sync set when
  the primary has not been heard (by the controller group's Raft heartbeats) for failover_timeout_ms,
  or when it asked for a hand-off (the backup it named, if live). Only the leader knows who is live:
  a primary that elected its choice itself could pick a member the controller has not heard lately.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

import msgpack

from ..errors import QuorumLogError, ResponseCode
from ..ha.epochs import hand_back_to
from ..ha.node import HaNode
from ..ha.record import ELECT, HAND_OFF, ISR, SYNC, TAKE, Assignment, ControllerState, encode_command, encode_election
from ..net.connection import Connection
from ..net.frames import Frame
from ..raft.messages import Role
from ..raft.node import RaftNode
from .group import Group, now_ms

if TYPE_CHECKING:
    from .node import NodeServer

log = logging.getLogger("quorumlog.controller")

RETRY_MS = 500
PROMOTE_WAIT_S = 5.0
# The controller group's leader writes a snapshot of the record after this many entries (ha/record.py):
# expiry keeps the last one, so this bounds what a replica replays, and what its log must keep.
SNAPSHOT_EVERY = 64


class Controller:
    """One node's part of the controller: applying the record, acting on it, proposing to it."""

    def __init__(self, node: NodeServer) -> None:
        self.node = node
        self.states: dict[str, ControllerState] = {}
        self.managed: dict[str, str] = {}  # primary/backup group -> its controller group
        self._busy: dict[tuple[str, str], int] = {}  # (group, kind) -> when a proposal may go again
        self._leader_since: dict[str, int] = {}
        self._clients: dict[str, Any] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        for g in node.cfg.groups:
            c = g.ha.controller
            if c is None:
                continue
            self.managed[g.name] = c
            assert g.ha.primary is not None
            state = self.states.setdefault(c, ControllerState({}))
            state.add_default(g.name, Assignment(1, g.ha.primary, frozenset(g.peers) - {g.ha.primary}))

    # -- applying the record -----------------------------------------------------------------------
    def _catch_up(self, ctl: str) -> None:
        cg, state = self.node.groups[ctl], self.states[ctl]
        cg.expiry_cap = state.expiry_cap  # the last snapshot is never expired (ha/record.py)
        whole = state.whole
        state.catch_up(cg.store)
        if state.whole != whole:
            if state.whole:
                log.info("controller %s: the record is whole again from the snapshot at %d", ctl,
                         state.snapshot_index)
            else:
                log.warning("controller %s: the log here starts at %d, after the record applied: waiting for "
                            "the next snapshot before acting on the record", ctl, cg.store.begin_index)

    def assignment(self, group: str) -> Assignment:
        return self.states[self.managed[group]].groups[group]

    def _whole(self, group: str) -> bool:
        return self.states[self.managed[group]].whole

    def tick(self) -> None:
        now = now_ms()
        for ctl in self.states:
            if ctl not in self.node.groups:
                continue
            self._catch_up(ctl)
        for name in self.managed:
            g = self.node.groups.get(name)
            if g is not None and isinstance(g.node, HaNode) and self._whole(name):
                self._follow_record(g, g.node, self.assignment(name), now)
        for ctl in self.states:
            self._watch(ctl, now)

    def _follow_record(self, g: Group, node: HaNode, a: Assignment, now: int) -> None:
        me = self.node.node_id
        if node.recovering and not self._vouched(g, node, a, now):
            if a.primary != me and node.behind(a.epoch, a.primary):
                g.apply(node.follow(a.epoch, a.primary, now))
            return
        if node.behind(a.epoch, a.primary):
            if a.primary != me:
                g.apply(node.follow(a.epoch, a.primary, now))
                return
            # Confirmed once its takeover is recorded, proposed below in this same tick.
            g.apply(node.promote(a.epoch, now, set(a.isr), confirmed=False))
            if node.recovering:  # (HaNode.tail_unverified) another member is elected, or the epoch goes back
                log.warning("group %s: %s declines epoch %d: its recovery cut a tail that may have held entries "
                            "it acknowledged", g.name, me, a.epoch)
                return
            log.warning("group %s: %s is the primary of epoch %d (controller)", g.name, me, a.epoch)
        if node.primary_id != me or node.primary is None:
            return
        # Only an election above the epoch a primary leads by its own word confirms it (HaNode.own_epoch): one
        # that restarts, or leads again on a replaced disk, is elected again (a stale view never confirms it).
        if a.epoch == node.epoch and a.primary == me and a.epoch > node.own_epoch:
            if not a.taken:  # recorded before it commits anything: until then the epoch may go back (_vouched)
                self._propose(g.name, TAKE, encode_command(TAKE, g.name, a.epoch, a.epoch, me, set()), now)
                return
            if not node.confirmed:
                node.confirm(set(a.isr))
            elif set(a.isr) != node.primary.isr:
                node.primary.isr_recorded(set(a.isr))
            # Our disk is full or our log damaged (or the disk has room again): ask for (or withdraw) a hand-off;
            # the controller's leader elects.
            target = node.primary.hand_off_to or ""
            if target != a.hand_off and self._propose(g.name, HAND_OFF, encode_command(
                    HAND_OFF, g.name, a.epoch, a.epoch, me, {target} - {""}), now) and target:
                what, state = ("log", "damaged") if node.primary.damaged else ("disk", "full")
                log.warning("group %s: the %s of %s is %s: asking the controller to elect %s", g.name, what, me, state,
                            target)
            want = node.primary.wanted_isr()
            if want is not None:
                self._propose(g.name, ISR, encode_command(ISR, g.name, a.version, a.epoch, me, want), now)
        elif not node.confirmed and a.epoch == node.epoch and a.primary == me:
            # Primary by its own store (a restart): be elected again, in a new epoch, or learn otherwise.
            self._propose(g.name, ELECT, encode_election(g.name, a, me, set(a.isr)), now)

    def _vouched(self, g: Group, node: HaNode, a: Assignment, now: int) -> bool:
        """A node that started on a pristine store (new, or a replaced disk) and the record: True once the
        group proves new, or the node follows the record's primary and holds what that primary had
        acknowledged when it began streaming to it (HaNode.caught_up). Until then it asks to be left out
        (another member elected in its place, or itself taken out of the in-sync set): a record from before
        a wipe counts on entries this store no longer holds."""
        cg = self.node.groups.get(self.managed[g.name])
        if cg is None or cg.node.joining or cg.node.recovering:
            return False  # the record is not whole here yet (the controller's store may be new too)
        me = self.node.node_id
        if not self._record_current(cg):
            # An idle controller group appends nothing, and a follower's commit stays where its checkpoint
            # put it until its leader pushes an entry: append one that is no command.
            self._propose(g.name, SYNC, encode_command(SYNC, g.name, 0, 0, me, set()), now)
            return False
        state = self.states[self.managed[g.name]]
        # The controller's own store started pristine too and found every member's empty (raft/joining.py):
        # no election was ever recorded, so no append was ever acknowledged: the whole cluster is new.
        new = bool(cg.node.stats["bootstrapped_group"]) or g.name in state.untouched
        if new or (a.primary != me and node.caught_up(a.epoch, a.primary)):
            g.apply(node.recovered(now))
            return True
        others = set(a.isr) - {me}
        # Whom to elect in our place: another in-sync member, else the one the record says holds every entry.
        back = hand_back_to(a.taken, a.holder, a.previous, a.isr_seen)
        if a.primary == me and others:
            if self._propose(g.name, ELECT, encode_election(g.name, a, min(others), others), now):
                log.warning("group %s: %s may lack acknowledged entries but is the recorded primary: electing "
                            "%s (epoch %d)", g.name, me, min(others), a.epoch + 1)
        elif a.primary == me and back not in ("", me):
            if self._propose(g.name, ELECT, encode_election(g.name, a, back, set()), now):
                why = "never took epoch" if not a.taken else "nobody was in sync in epoch"
                log.warning("group %s: %s may lack acknowledged entries but is the recorded primary, and %s %d: "
                            "electing %s, which holds every entry acknowledged before (epoch %d)", g.name, me, why,
                            a.epoch, back, a.epoch + 1)
        elif a.primary == me:
            if self._busy.get((g.name, "lost"), 0) <= now:  # (paces the message: every 10 s)
                self._busy[(g.name, "lost")] = now + 10_000
                log.error("group %s: %s may lack acknowledged entries but is the recorded primary, with no other "
                          "in-sync member: acknowledged entries may be lost; promote the backup with the "
                          "longest log with --force", g.name, me)
        elif me in a.isr:
            self._propose(g.name, ISR, encode_command(ISR, g.name, a.version, a.epoch, a.primary, others), now)
        return False

    @staticmethod
    def _record_current(cg: Group) -> bool:
        """Whether this replica of the controller group has applied the whole record: a follower heard its
        leader's commit this term and holds up to it; a leader committed an entry of its own term. Before
        that its commit index is what its checkpoint named at start, which can predate every election: the
        record then looks untouched, and a node whose log may lack acknowledged entries took itself for a
        member of a new group and led with that log (a test with a SIGKILLed primary found it)."""
        node, store = cg.node, cg.store
        commit = store.committed_index
        if not isinstance(node, RaftNode):
            return False
        if node.role == Role.LEADER:
            return commit >= store.begin_index and store.term_at(commit) == node.term
        return node.leader_id is not None and 0 <= node.handler.leader_commit <= commit

    # -- failover, on the controller group's leader ---------------------------------------------------
    def _watch(self, ctl: str, now: int) -> None:
        cg = self.node.groups.get(ctl)
        if cg is None or cg.node.role != Role.LEADER or not hasattr(cg.node, "elector"):
            self._leader_since.pop(ctl, None)
            return
        since = self._leader_since.setdefault(ctl, now)
        state = self.states[ctl]
        if not state.whole:
            return  # a leader whose log starts after its record: it waits for a snapshot like any replica
        self._snapshot(cg, state)
        me = self.node.node_id
        elector = cg.node.elector
        for name, c in self.managed.items():
            if c != ctl:
                continue
            gcfg = self.node.groups[name].cfg.ha if name in self.node.groups else None
            if gcfg is None or not gcfg.failover:
                continue
            timeout = gcfg.failover_timeout_ms
            if now - since < timeout:
                continue  # a new controller leader first hears from everyone

            def alive(member: str, timeout: int = timeout) -> bool:
                return member == me or now - elector.last_heard(member, now) <= timeout

            a = self.states[ctl].groups[name]
            if alive(a.primary) and not a.hand_off:
                continue
            candidates = [m for m in sorted(a.isr) if alive(m)]
            if not candidates:
                continue  # no in-sync backup is up: promoting another could lose acknowledged appends
            new = a.hand_off if a.hand_off in candidates else candidates[0]
            isr = set(candidates)  # the dead stay out: the new primary would wait for them
            if self._propose(name, ELECT, encode_election(name, a, new, isr), now):
                why = f"primary {a.primary} asked for a hand-off (a full disk or a damaged log)" if a.hand_off else \
                    f"primary {a.primary} unheard for {timeout} ms"
                log.warning("group %s: %s: electing %s (epoch %d)", name, why, new, a.epoch + 1)

    def _snapshot(self, cg: Group, state: ControllerState) -> None:
        """On the controller group's leader: append the whole record once SNAPSHOT_EVERY entries followed the
        last snapshot (or none exists yet), right after the last entry applied. Only with nothing in flight
        (the record then sums up the whole log) and once this term committed an entry (the record is whole)."""
        due = SNAPSHOT_EVERY if state.snapshot_index >= 0 else 1
        if (state.since_snapshot >= due and cg.store.end_index == state.applied
                and self._record_current(cg)):
            cg.propose_local(state.snapshot())

    # -- proposing -----------------------------------------------------------------------------------
    def _propose(self, group: str, kind: str, body: bytes, now: int) -> bool:
        key = (group, kind)
        if self._busy.get(key, 0) > now:
            return False
        self._busy[key] = now + RETRY_MS
        cg = self.node.groups.get(self.managed[group])
        if cg is not None and cg.propose_local(body):  # this node leads the controller group
            return True
        task = asyncio.create_task(self._append(self.managed[group], body))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    async def _append(self, ctl: str, body: bytes) -> None:
        client = self._clients.get(ctl)
        if client is None:
            from ..client import AsyncClient

            cfg = self.node.cfg
            peers = next(g.peers for g in cfg.groups if g.name == ctl)
            client = AsyncClient(",".join(peers.values()), group=ctl, cluster=cfg.cluster, secret=cfg.secret,
                                 idempotent=False, retry_timeout=2.0, request_timeout=2.0)
            self._clients[ctl] = client
        try:
            await client.append(body)
        except (QuorumLogError, OSError) as e:
            log.info("controller %s: proposal not recorded (will retry): %s", ctl, e)

    def promote(self, conn: Connection, f: Frame, g: Group, target: str, force: bool) -> None:
        """An operator's promotion of `target`, through the record: answered once it is applied here.
        A target outside the recorded in-sync set may lack acknowledged entries: refused unless forced."""
        if not self._whole(g.name):
            conn.respond_error(f, ResponseCode.TIMEOUT, f"group {g.name}: the controller record on "
                               f"{self.node.node_id} waits for a snapshot (its log expired): try another node", None)
            return
        a = self.assignment(g.name)
        if target == a.primary:
            conn.respond(f, msgpack.packb((int(ResponseCode.SUCCESS), target, a.epoch)))
            return
        if self._outside(conn, f, g.name, a, target, force):
            return
        task = asyncio.create_task(self._promote(conn, f, g.name, a.epoch, target, force))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _outside(self, conn: Connection, f: Frame, group: str, a: Assignment, target: str, force: bool) -> bool:
        """Refuse (answering) a promotion of a target outside the recorded in-sync set, unless forced."""
        if target in a.isr or force:
            return False
        conn.respond_error(f, ResponseCode.EXPIRED_TERM, f"group {group}: {target} is not in the in-sync set "
                           f"{sorted(a.isr)} the controller recorded; pass --force to accept losing what it lacks",
                           a.primary)
        return True

    async def _promote(self, conn: Connection, f: Frame, group: str, prev: int, target: str, force: bool) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + PROMOTE_WAIT_S
        while loop.time() < deadline:
            a = self.assignment(group)
            if a.epoch > prev:
                if a.primary == target:
                    conn.respond(f, msgpack.packb((int(ResponseCode.SUCCESS), target, a.epoch)))
                else:
                    conn.respond_error(f, ResponseCode.EXPIRED_TERM, f"group {group}: epoch {a.epoch} went to "
                                       f"{a.primary} first", a.primary)
                return
            if self._outside(conn, f, group, a, target, force):
                return
            # Made from this version of the record: a change to it meanwhile (an in-sync change) voids the
            # election, and it is made again from the new one.
            await self._append(self.managed[group], encode_election(group, a, target, set(a.isr)))
            while loop.time() < deadline and self.assignment(group).version == a.version:
                await asyncio.sleep(0.01)
        conn.respond_error(f, ResponseCode.TIMEOUT, f"group {group}: the controller did not record the promotion "
                           f"in {PROMOTE_WAIT_S:.0f}s", None)

    async def close(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        for c in self._clients.values():
            await c.close()
