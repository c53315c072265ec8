"""A Raft group's membership on a node: CHANGE_MEMBERS requests and their answers, and the node following
the configuration its log holds (the peers it reaches, the events it records).

The core (raft/reconfig.py) decides: a change is a CONFIG entry, in force once appended, answered once
committed. Here a request becomes that change, its answer a CHANGE_MEMBERS response, and every new
configuration updates the group's peers (addresses come with it) and tells the node (`on_change`), which
reaches new members. From the first change on, the group's log says who its members are; the group id
named at HELLO stays the one it was created with (raft/reconfig.py). A primary/backup group with a
controller changes members through its controller group (server/controller.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..core.ready import Completion
from ..errors import ResponseCode
from ..net.connection import Connection
from ..net.frames import Frame
from ..net.schemas import CHANGE_MEMBERS_RESPONSE
from ..raft.membership import Membership
from .events import MEMBERS

if TYPE_CHECKING:
    from .group import Group

SUCCESS = int(ResponseCode.SUCCESS)

CHANGES: dict[str, Callable[[str, str | None], Callable[[Membership], Membership]]] = {
    "add": lambda node, address: lambda m: m.with_learner(node, address),
    "promote": lambda node, _address: lambda m: m.promoted(node),
    "remove": lambda node, _address: lambda m: m.without(node),
    "set-address": lambda node, address: lambda m: m.with_address(node, address or ""),
}


def config_doc(config: Membership) -> dict[str, Any]:
    return {"voters": sorted(config.voters), "learners": sorted(config.learners),
            "addresses": dict(config.addresses)}


class GroupMembers:
    """One Raft group's membership requests and configuration, for its Group."""

    def __init__(self, group: Group, on_change: Callable[[Group], None] | None = None) -> None:
        self.group = group
        self.on_change = on_change  # the node: reach the new members, stop naming the digest
        self._waiting: dict[int, tuple[Connection, Frame, str]] = {}  # request id -> asker, request, what
        self._config: Membership | None = None
        # Every id of every configuration followed (and the configured peers): whose peer messages are
        # taken. A leader removed by the last change leads until it commits.
        self.known: set[str] = set(group.cfg.peers)

    def request(self, conn: Connection, frame: Frame, action: str, target: str, address: str | None) -> None:
        g = self.group
        node = g.raft_node
        if node is None:
            conn.respond_error(frame, ResponseCode.UNSUPPORTED, f"group {g.name} is a primary/backup group without "
                               "a controller: its members change through its configuration and a restart",
                               g.leader_id)
            return
        make = CHANGES.get(action)
        if make is None:
            conn.respond_error(frame, ResponseCode.UNEXPECTED_ARGUMENT, f"unknown change {action!r}: use add, "
                               "promote, remove or set-address")
            return
        if action in ("add", "set-address") and not address and not (action == "add" and target in g.peers):
            conn.respond_error(frame, ResponseCode.UNEXPECTED_ARGUMENT, f"{action} {target} needs the address "
                               "(host:port) the members reach it at")
            return
        what = f"{action} {target}" + (f" at {address}" if address else "")
        rid = g.next_request_id()
        self._waiting[rid] = (conn, frame, what)
        g.events.record(MEMBERS, f"members: {what} asked", g.name)
        from .group import now_ms  # (group.py imports this module)

        g.apply(node.change_members(make(target, address), now_ms(), request_id=rid))

    def complete(self, c: Completion) -> None:
        waiter = self._waiting.pop(c.request_id, None)
        if waiter is None:
            return
        conn, frame, what = waiter
        g = self.group
        if c.code == SUCCESS:
            node = g.raft_node
            assert node is not None
            cfg = node.member.config
            g.events.record(MEMBERS, f"members: {what} committed at {c.first_index}", g.name)
            conn.respond(frame, CHANGE_MEMBERS_RESPONSE.ok(c.first_index, sorted(cfg.voters), sorted(cfg.learners),
                                                           dict(cfg.addresses)))
            return
        name = _code_name(c.code)
        g.events.record(MEMBERS, f"members: {what} refused: {name}{': ' + c.reason if c.reason else ''}", g.name)
        conn.respond_error(frame, c.code, f"{c.reason or name} ({what} in group {g.name})", c.leader_id)

    def follow(self) -> None:
        """After each input: when the configuration changed, update the group's peers and tell the node."""
        node = self.group.raft_node
        if node is None or node.member.config is self._config:
            return
        cfg = self._config = node.member.config
        g = self.group
        if not g.store.configs:
            return  # the configured members: nothing changed
        self.known.update(cfg.members)
        peers = {m: cfg.address(m) or g.peers.get(m) or g.cfg.peers.get(m) for m in cfg.members}
        peers.setdefault(g.node_id, g.peers.get(g.node_id) or g.cfg.peers.get(g.node_id))
        g.peers = {m: a for m, a in peers.items() if a}
        g.events.record(MEMBERS, f"configuration: voters {', '.join(sorted(cfg.voters))}"
                                 + (f"; learners {', '.join(sorted(cfg.learners))}" if cfg.learners else ""), g.name)
        if self.on_change is not None:
            self.on_change(g)

    def takes(self, sender: str) -> bool:
        """Whether peer messages of `sender` (an authenticated peer) are this group's to take: a member of
        a configuration it followed or was configured with; a peer the group reaches now (a primary/backup
        group's follow its controller group's: server/controller.py); any peer once the group joined or
        changed members, since its leader may be one this node has no record of yet (raft/node.py's `_route`)."""
        g = self.group
        return sender in self.known or sender in g.peers or g.cfg.join or bool(g.store.configs)

    def status(self) -> dict[str, Any]:
        node = self.group.raft_node
        if node is None:
            return {}
        pending = node.pending_change
        key = node._config_key
        return {"config": config_doc(node.member.config),
                "change_pending": key is not None and key[0] > self.group.store.committed_index,
                "change_asked": pending[0] if pending is not None else None}


def _code_name(code: int) -> str:
    try:
        return ResponseCode(code).name
    except ValueError:
        return str(code)
