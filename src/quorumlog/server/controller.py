"""The controller on a node (RocketMQ 5's controller mode): a Raft group of the same cluster records, for
every primary/backup group it controls, the epoch, its primary and its in-sync set (SyncStateSet), and
promotes an in-sync backup when the primary is gone.

The record is ha/record.py's state machine over the controller group's committed log; what each node does
with it is ha/controller_core.py's, pure, which the primary/backup simulator runs too. This module drives
that core on the node's event loop: it ticks it with the node's groups, applies the Readies it returns to
the groups, appends its commands (on the controller group's leader through the local group at once, else
over the peer link to the leader: no client, so no credential of its own), logs its notes, and answers
operators' promotions through the record.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import msgpack

from ..core.ready import Completion
from ..errors import ResponseCode
from ..ha.controller_core import ControllerCore, ControllerProposal
from ..ha.record import Assignment, encode_election
from ..net.connection import Connection
from ..net.frames import Frame
from ..raft.node import RaftNode
from .events import MEMBERS
from .group import Group, now_ms

if TYPE_CHECKING:
    from .node import NodeServer

log = logging.getLogger("quorumlog.controller")

PROMOTE_WAIT_S = 5.0


class Controller:
    """One node's part of the controller: the pure core, driven on the node's loop."""

    def __init__(self, node: NodeServer) -> None:
        self.node = node
        self.core = ControllerCore(node.node_id, {
            g.name: (g.ha.controller, list(g.peers), g.ha) for g in node.cfg.groups if g.ha.controller is not None})
        self.managed = self.core.managed  # primary/backup group -> its controller group
        self._tasks: set[asyncio.Task[None]] = set()

    def assignment(self, group: str) -> Assignment:
        return self.core.assignment(group)

    def tick(self) -> None:
        controllers: dict[str, RaftNode] = {}
        for ctl, state in self.core.states.items():
            cg = self.node.groups.get(ctl)
            if cg is not None and cg.raft_node is not None:  # (a controller group is a Raft group)
                controllers[ctl] = cg.raft_node
                cg.expiry_cap = state.expiry_cap  # the last snapshot is never expired (ha/record.py)
        nodes = {name: g.ha_node for name in self.managed
                 if (g := self.node.groups.get(name)) is not None and g.ha_node is not None}
        for name in nodes:  # a primary/backup group reaches its controller group's members at their addresses
            cg = self.node.groups.get(self.managed[name])
            g = self.node.groups[name]
            if cg is not None and g.peers != cg.peers:
                g.peers = dict(cg.peers)
                g.events.record(MEMBERS, f"members: {', '.join(sorted(g.peers))} (controller group {cg.name})",
                                g.name)
        actions = self.core.tick(now_ms(), controllers, nodes)
        for name, ready in actions.readies:
            self.node.groups[name].apply(ready)
        for level, line in actions.notes:
            log.log(level, "%s", line)
        for ctl, body in actions.local:
            self.node.groups[ctl].propose_local(body)
        for ctl, body in actions.proposals:
            self._propose(ctl, body)

    def _propose(self, ctl: str, body: bytes) -> bool:
        """Append `body` to the controller group here if this node leads it, else send it over the peer link
        to the member this node takes for the leader (authenticated as any peer message: the cluster's
        secret, or mutual TLS). False when no leader is known: the core proposes again later."""
        cg = self.node.groups.get(ctl)
        if cg is None:
            return False
        if cg.propose_local(body):
            return True
        leader = cg.leader_id
        if leader is None or leader == self.node.node_id:
            return False
        self.node.send_peer(ControllerProposal(ctl, self.node.node_id, leader, body))
        return True

    def on_proposal(self, cg: Group, p: ControllerProposal) -> None:
        """A member's command for controller group `cg`: appended if this node leads it, else dropped (its
        proposer's next tick proposes it again if it still applies)."""
        if cg.name in self.core.states:
            cg.propose_local(p.body)

    def change_members(self, conn: Connection, f: Frame, g: Group, action: str, target: str,
                       address: str | None) -> None:
        """A change of a primary/backup group's members is its controller group's (ha/record.py): answered as
        that change is. Its primary is not removed: another is elected first (`quorumlog promote`)."""
        ctl = self.managed.get(g.name)
        cg = self.node.groups.get(ctl) if ctl is not None else None
        if cg is None:
            conn.respond_error(f, ResponseCode.UNSUPPORTED, f"group {g.name} is a primary/backup group without a "
                               "controller: its members change through its configuration and a restart", g.leader_id)
            return
        if action != "remove":
            cg.members.request(conn, f, action, target, address)
            return
        task = asyncio.create_task(self._remove(conn, f, g.name, cg, target))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _remove(self, conn: Connection, f: Frame, group: str, cg: Group, target: str) -> None:
        """A removal, checked on a record brought up to a read index: a lagging replica may not know yet
        that `target` was elected primary."""
        why = await self._current(group, asyncio.get_running_loop().time() + PROMOTE_WAIT_S)
        if why is not None:
            conn.respond_error(f, ResponseCode.TIMEOUT, f"group {group}: {why}: ask again", None)
            return
        if target == self.assignment(group).primary:
            conn.respond_error(f, ResponseCode.UNEXPECTED_ARGUMENT, f"{target} is the primary of group {group}: "
                               f"elect another first (quorumlog promote --group {group} --to ID)", target)
            return
        cg.members.request(conn, f, "remove", target, None)

    def promote(self, conn: Connection, f: Frame, g: Group, target: str, force: bool) -> None:
        """An operator's promotion of `target`, through the record: answered once it is applied here.
        A target outside the recorded in-sync set may lack acknowledged entries: refused unless forced."""
        if not self.core.whole(g.name):
            conn.respond_error(f, ResponseCode.TIMEOUT, f"group {g.name}: the controller record on "
                               f"{self.node.node_id} waits for a snapshot (its log expired): try another node", None)
            return
        a = self.assignment(g.name)
        if target == a.primary:
            conn.respond(f, msgpack.packb((int(ResponseCode.SUCCESS), target, a.epoch)))
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

    async def _current(self, group: str, deadline: float) -> str | None:
        """Bring the record here up to a read index of the controller group (a point after this call), so
        that what it says of `group` is not a lagging replica's view: None once applied, else why not."""
        ctl = self.managed[group]
        cg = self.node.groups.get(ctl)
        if cg is None:
            return f"controller group {ctl} has no replica on {self.node.node_id}"
        loop = asyncio.get_running_loop()
        point: asyncio.Future[Completion] = loop.create_future()

        def answered(c: Completion) -> None:
            if not point.done():
                point.set_result(c)

        cg.ends.read_index(answered)
        try:
            c = await asyncio.wait_for(point, max(0.0, deadline - loop.time()))
        except TimeoutError:
            return f"controller group {ctl} confirmed no read point in time"
        if c.code != int(ResponseCode.SUCCESS):
            return f"controller group {ctl} confirmed no read point ({c.reason or c.code})"
        state = self.core.states[ctl]
        while state.applied < c.last_index:
            if loop.time() >= deadline:
                return f"the controller record on {self.node.node_id} did not apply its read index {c.last_index}"
            await asyncio.sleep(0.01)
        return None

    async def _promote(self, conn: Connection, f: Frame, group: str, prev: int, target: str, force: bool) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + PROMOTE_WAIT_S
        if not force and target not in self.assignment(group).isr:
            # Refused only on a record known current: this replica may not have applied the in-sync change yet.
            why = await self._current(group, deadline)
            if why is not None:
                conn.respond_error(f, ResponseCode.TIMEOUT, f"group {group}: {why}: ask again", None)
                return
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
            if not self._propose(self.managed[group], encode_election(group, a, target, set(a.isr))):
                await asyncio.sleep(0.05)  # no controller leader known yet
                continue
            again = min(deadline, loop.time() + 0.5)  # (a command sent to a leader that just lost its place is lost)
            while loop.time() < again and self.assignment(group).version == a.version:
                await asyncio.sleep(0.01)
        conn.respond_error(f, ResponseCode.TIMEOUT, f"group {group}: the controller did not record the promotion "
                           f"in {PROMOTE_WAIT_S:.0f}s", None)

    async def close(self) -> None:
        for t in list(self._tasks):
            t.cancel()
