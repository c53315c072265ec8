"""END queries of one group (issue 32, "reads you can trust"): the group's end, its committed index and its
term (a primary/backup group's epoch), as one node answers them.

- **local**: this replica's own, at once. A follower behind its leader, or a deposed leader that does not
  know it yet, answers an end older than entries acknowledged elsewhere: fine for monitoring, not for a
  reader that must see what was written before it asked.
- **linearizable**: never a committed index below that of an entry some client was told of before the
  request arrived.
  - A Raft group: a ReadIndex (raft/reads.py). The node (a follower asks its leader itself) answers once its
    commit index reached a read index a majority confirmed after the request arrived.
  - A primary/backup group with a controller: only its confirmed primary answers, once the controller's
    record proves it was not replaced (`_prove`, `_check_record`). A backup answers NOT_LEADER naming the
    primary.
  - A primary/backup group without a controller: refused UNSUPPORTED. Nothing records its epochs, so a
    primary cannot prove that an operator's promotion did not replace it while it was cut off.

Waiters are request ids of the group (`Group.next_request_id`) -> _Waiter: a client's request, answered on
its connection, or code of this node waiting for a read index of this group (`read_index`: a primary's
proof asks its controller group's replica here). READ_INDEX completions reach `complete` through
`Group._complete`; at shutdown `close` answers every waiter still there.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core.ready import READ_INDEX, Completion
from ..errors import QuorumLogError, ResponseCode
from ..net.connection import Connection
from ..net.frames import Frame
from ..net.schemas import CONSISTENCIES, END_RESPONSE

if TYPE_CHECKING:
    from .controller import Controller
    from .group import Group

SUCCESS = int(ResponseCode.SUCCESS)
LINEARIZABLE, LOCAL = CONSISTENCIES
# A primary's proof: how often, and how long, it waits for the controller's record here to apply the read
# index (the controller applies its log every tick, 10 ms), and for its own commit to reach its epoch's start.
RECORD_POLL_S = 0.01
RECORD_WAIT_S = 2.0


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


def _code_name(code: int) -> str:
    try:
        return ResponseCode(code).name
    except ValueError:
        return str(code)


@dataclass(slots=True)
class _Waiter:
    """One END waiting: a client's (conn and frame), or this node's own read index (done)."""

    conn: Connection | None = None
    frame: Frame | None = None
    done: Callable[[Completion], None] | None = None
    epoch: int = 0  # a primary's proof: the epoch it leads
    timer: asyncio.TimerHandle | None = None  # a primary's proof: the next look at the controller's record


class Ends:
    """The END queries of one group on this node (see the module docstring)."""

    def __init__(self, group: Group) -> None:
        self.group = group
        self.waiters: dict[int, _Waiter] = {}

    def __len__(self) -> int:
        return len(self.waiters)

    # -- requests ----------------------------------------------------------------------------------
    def request(self, conn: Connection, frame: Frame, consistency: str, controller: Controller | None) -> None:
        """A client's END: answered now (local, or a refusal) or once proven (linearizable). A consistency
        other than "linearizable" or "local" raises UNEXPECTED_ARGUMENT (the handler answers it)."""
        g = self.group
        if consistency not in CONSISTENCIES:
            raise QuorumLogError(f"consistency must be 'linearizable' or 'local', not {consistency!r} (END of "
                                 f"group {g.name})", ResponseCode.UNEXPECTED_ARGUMENT)
        if g.closed:
            conn.respond_error(frame, ResponseCode.NOT_LEADER, f"node {g.node_id} is shutting down (group {g.name})")
            return
        if consistency == LOCAL:
            s = g.store
            conn.respond(frame, END_RESPONSE.ok(s.end_index, s.committed_index, g.node.term))
            return
        if not g.accepting:  # shutting down: ask another node
            conn.respond_error(frame, ResponseCode.NOT_LEADER, f"node {g.node_id} is shutting down (group {g.name})")
            return
        if g.ha_node is not None:
            self._prove(conn, frame, controller)
            return
        rid = g.next_request_id()
        self.waiters[rid] = _Waiter(conn, frame)
        self._read_index(rid)

    def read_index(self, done: Callable[[Completion], None]) -> None:
        """A read index of this Raft group for this node's own use: `done(completion)` once it is answered
        (a READ_INDEX Completion; NETWORK_ERROR at shutdown)."""
        g = self.group
        if g.closed or g.raft_node is None:
            done(Completion(0, int(ResponseCode.NETWORK_ERROR), READ_INDEX,
                            reason=f"group {g.name} on {g.node_id} is closed or no Raft group"))
            return
        rid = g.next_request_id()
        self.waiters[rid] = _Waiter(done=done)
        self._read_index(rid)

    def _read_index(self, rid: int) -> None:
        g = self.group
        assert g.raft_node is not None
        try:
            g.apply(g.raft_node.read_index([rid], _now_ms()))
        except Exception as e:
            g.core_error("read_index", e)
            w = self.waiters.pop(rid, None)
            if w is not None:
                self._fail(w, rid, ResponseCode.INTERNAL_ERROR, f"group {g.name} on {g.node_id}: read index failed: "
                           f"{type(e).__name__}: {e}", None)

    # -- answers -----------------------------------------------------------------------------------
    def complete(self, c: Completion) -> None:
        """A READ_INDEX completion of this group's core."""
        w = self.waiters.pop(c.request_id, None)
        if w is None:
            return
        if w.done is not None:
            w.done(c)
            return
        g = self.group
        if c.code == SUCCESS:
            s = g.store
            self._answer(w, s.end_index, max(s.committed_index, c.last_index), c.term)
            return
        where = f"group {g.name} on {g.node_id}"
        if c.code == ResponseCode.TIMEOUT:
            text = (f"no majority confirmed a read point within {g.cfg.raft.max_wait_ack_ms} ms ({where}: it may be "
                    "cut off from its peers)")
        elif c.code == ResponseCode.NOT_LEADER:
            text = f"no leader known, or leadership changed, while a read point was sought ({where})"
        else:
            text = f"{c.reason} ({where})" if c.reason else where
        self._fail(w, c.request_id, c.code, text, c.leader_id if c.leader_id != g.node_id else None)

    def _answer(self, w: _Waiter, end: int, committed: int, term: int) -> None:
        if w.conn is not None and w.frame is not None:
            w.conn.respond(w.frame, END_RESPONSE.ok(end, committed, term))

    def _fail(self, w: _Waiter, rid: int, code: int, text: str, leader: str | None) -> None:
        if w.timer is not None:
            w.timer.cancel()
            w.timer = None
        if w.done is not None:
            w.done(Completion(rid, int(code), READ_INDEX, reason=text, leader_id=leader))
        elif w.conn is not None and w.frame is not None:
            w.conn.respond_error(w.frame, code, text, leader)

    def close(self) -> None:
        """Shutdown: answer every END still waiting (a client asks another node)."""
        g = self.group
        waiters, self.waiters = self.waiters, {}
        for rid, w in waiters.items():
            self._fail(w, rid, ResponseCode.NETWORK_ERROR, f"node {g.node_id} is shutting down (group {g.name})",
                       None)

    # -- a primary's proof -------------------------------------------------------------------------
    def _prove(self, conn: Connection, frame: Frame, controller: Controller | None) -> None:
        """A linearizable END of a primary/backup group: its confirmed primary proves by the controller's
        record that it was not replaced, as of a point after the request arrived.

        Why that is linearizable. Every election of a primary is a command of the controller group, which a
        primary acts on only once committed there. The controller group's read index (a Raft ReadIndex) is
        at least its commit index when this request arrived, so once the record here has applied it, every
        election made before the request arrived is in it. If the record then still names this node primary
        of the epoch it leads, no other primary was elected before that point, so an entry acknowledged
        before the request arrived was acknowledged either by this primary in this epoch (then it is at or
        below its commit index: a primary acknowledges only what it committed, and only once confirmed),
        or in an earlier epoch: then it is in the log this primary started its epoch with (the controller
        elects only an in-sync member, which holds every acknowledged entry), at or below
        `Primary.start_index`, and the answer waits for the commit index to reach that too.
        """
        g = self.group
        ha = g.ha_node
        assert ha is not None
        me = g.node_id
        if g.cfg.ha.controller is None or controller is None:
            conn.respond_error(frame, ResponseCode.UNSUPPORTED, f"group {g.name} is a primary/backup group without a "
                               "controller: a primary cannot prove it was not replaced without a controller (a "
                               "promotion elsewhere is recorded nowhere); ask with consistency local", ha.primary_id)
            return
        if ha.primary_id != me or ha.primary is None:
            conn.respond_error(frame, ResponseCode.NOT_LEADER, f"{me} is a backup of group {g.name} in epoch "
                               f"{ha.epoch}: only its primary answers a linearizable end", ha.primary_id)
            return
        if not ha.confirmed:
            conn.respond_error(frame, ResponseCode.LEADER_NOT_READY, f"{me} is the primary of group {g.name} in "
                               f"epoch {ha.epoch}, not yet confirmed by the controller", me)
            return
        ctl = controller.managed.get(g.name)
        cg = controller.node.groups.get(ctl) if ctl is not None else None
        if ctl is None or cg is None or cg.raft_node is None:
            conn.respond_error(frame, ResponseCode.UNSUPPORTED, f"group {g.name}: its controller group {ctl} has no "
                               f"Raft replica on {me} to prove the primary's epoch with", None)
            return
        rid = g.next_request_id()
        self.waiters[rid] = _Waiter(conn, frame, epoch=ha.epoch)
        cg.ends.read_index(lambda c: self._controller_read(rid, c, controller, ctl))

    def _controller_read(self, rid: int, c: Completion, controller: Controller, ctl: str) -> None:
        w = self.waiters.get(rid)
        if w is None:  # answered already (shutdown)
            return
        g = self.group
        if c.code != SUCCESS:
            self.waiters.pop(rid)
            # The controller group's leader is no hint for this group: tell the client to ask again.
            code = c.code if c.code in (ResponseCode.TIMEOUT, ResponseCode.NETWORK_ERROR) else \
                int(ResponseCode.LEADER_NOT_READY)
            why = f": {c.reason}" if c.reason else ""
            self._fail(w, rid, code, f"group {g.name} on {g.node_id}: its controller group {ctl} confirmed no read "
                       f"point ({_code_name(c.code)}{why})", None)
            return
        deadline = asyncio.get_running_loop().time() + RECORD_WAIT_S
        self._check_record(rid, controller, ctl, c.last_index, deadline)

    def _check_record(self, rid: int, controller: Controller, ctl: str, index: int, deadline: float) -> None:
        """Answer once the controller's record here has applied `index` and names this node primary of the
        epoch it leads, and this primary's commit reached its epoch's start; else NOT_LEADER naming the
        recorded primary, or TIMEOUT after RECORD_WAIT_S."""
        w = self.waiters.get(rid)
        if w is None:
            return
        w.timer = None
        g = self.group
        ha = g.ha_node
        assert ha is not None
        me = g.node_id
        where = f"group {g.name} on {me}"
        state = controller.core.states.get(ctl)
        applied = state is not None and state.applied >= index
        if state is not None and applied:
            a = state.groups.get(g.name)
            if not state.whole:
                self.waiters.pop(rid)
                self._fail(w, rid, ResponseCode.TIMEOUT, f"the controller record on {me} waits for a snapshot (its "
                           f"log expired): try another node ({where})", None)
                return
            if (a is None or a.primary != me or a.epoch != w.epoch or ha.epoch != w.epoch or not ha.confirmed
                    or ha.primary is None):
                self.waiters.pop(rid)
                named = f"{a.primary} primary of epoch {a.epoch}" if a is not None else "no primary"
                self._fail(w, rid, ResponseCode.NOT_LEADER, f"the controller's record names {named}; {me} led epoch "
                           f"{w.epoch} ({where})", a.primary if a is not None and a.primary != me else None)
                return
            if g.store.committed_index >= ha.primary.start_index:
                self.waiters.pop(rid)
                self._answer(w, g.store.end_index, g.store.committed_index, w.epoch)
                return
        loop = asyncio.get_running_loop()
        if loop.time() >= deadline:
            self.waiters.pop(rid)
            why = (f"the controller record did not apply its read index {index} within {RECORD_WAIT_S:g} s"
                   if not applied else f"the commit index did not reach the log epoch {w.epoch} started with "
                   f"within {RECORD_WAIT_S:g} s")
            self._fail(w, rid, ResponseCode.TIMEOUT, f"{why} ({where})", None)
            return
        w.timer = loop.call_later(RECORD_POLL_S, self._check_record, rid, controller, ctl, index, deadline)
