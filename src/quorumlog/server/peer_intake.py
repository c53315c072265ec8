"""What other nodes send a node one-way (a NodeServer mixin): each group's peer messages, checked against the
connection's authenticated peer and the group's members before they reach its core, and NODE_PINGs. Every
such frame is word that its sender lives (liveness.py: quiet groups)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ..errors import ResponseCode
from ..ha.controller_core import ControllerProposal
from ..net.hello import is_client_id
from .codec import HA_MESSAGES, decode_message
from .group import now_ms

if TYPE_CHECKING:
    from ..net.connection import Connection
    from ..net.frames import Frame
    from .group import Group
    from .liveness import PeerLiveness

log = logging.getLogger("quorumlog.server")


class PeerIntake:
    """NodeServer's one-way peer frames (see the module docstring)."""

    if TYPE_CHECKING:
        node_id: str
        groups: dict[str, Group]
        controller: Any
        liveness: PeerLiveness

        def _kick(self, group: Group) -> None: ...

    def _node_ping(self, conn: Connection) -> bool:
        """A NODE_PING: taken from a node's connection only (a client's HELLO never makes a peer of one)."""
        if conn.peer_id is None or is_client_id(conn.peer_id):
            return False
        self.liveness.heard_from(conn.peer_id, now_ms())
        return True

    def _peer_frame(self, conn: Connection, f: Frame) -> None:
        msg = decode_message(f)
        if conn.peer_id is not None:
            self.liveness.heard_from(conn.peer_id, now_ms())
        g = self.groups.get(msg.group)
        if g is None:
            log.debug("peer %s sent a message for group %r, not hosted here", conn.peer_id, msg.group)
            return
        if conn.peer_id != msg.sender or not g.members.takes(msg.sender) or msg.sender == self.node_id:
            reason = f"{conn.peer_id!r} is not a member of group {g.name} (message from {msg.sender!r})"
            log.warning("closing connection %r: %s", conn, reason)
            conn.close(reason, goodbye=ResponseCode.UNKNOWN_MEMBER)
            return
        if type(msg) is ControllerProposal:  # from a member of the controller group: its leader appends it
            if self.controller is not None and msg.target == self.node_id:
                self.controller.on_proposal(g, msg)
            return
        if isinstance(msg, HA_MESSAGES) != g.cfg.ha.primary_backup:
            kind = "primary/backup" if g.cfg.ha.primary_backup else "Raft"
            conn.close(f"{type(msg).__name__} for {kind} group {g.name}: the peers' group settings differ",
                       goodbye=ResponseCode.UNEXPECTED_MEMBER)
            return
        g.inbox.append(msg)
        self._kick(g)
