"""The controller on a node (RocketMQ 5's controller mode): a Raft group of the same cluster records, for
every primary/backup group it controls, the epoch, its primary and its in-sync set (SyncStateSet), and
promotes an in-sync backup when the primary is gone.

The record is ha/record.py's state machine over the controller group's committed log; what each node does
with it is ha/controller_core.py's, pure, which the primary/backup simulator runs too. This module drives
that core on the node's event loop: it ticks it with the node's groups, applies the Readies it returns to
the groups, appends its commands (on the controller group's leader through the local group at once, else
through a client to the leader), logs its notes, and answers operators' promotions through the record.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

import msgpack

from ..errors import QuorumLogError, ResponseCode
from ..ha.controller_core import ControllerCore
from ..ha.record import Assignment, encode_election
from ..net.connection import Connection
from ..net.frames import Frame
from ..raft.node import RaftNode
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
        self._clients: dict[str, Any] = {}
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
        actions = self.core.tick(now_ms(), controllers, nodes)
        for name, ready in actions.readies:
            self.node.groups[name].apply(ready)
        for level, line in actions.notes:
            log.log(level, "%s", line)
        for ctl, body in actions.local:
            self.node.groups[ctl].propose_local(body)
        for ctl, body in actions.proposals:
            self._propose(ctl, body)

    def _propose(self, ctl: str, body: bytes) -> None:
        cg = self.node.groups.get(ctl)
        if cg is not None and cg.propose_local(body):  # this node leads the controller group
            return
        task = asyncio.create_task(self._append(ctl, body))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

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
        if not self.core.whole(g.name):
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
