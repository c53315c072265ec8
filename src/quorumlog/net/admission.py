"""Who may hold a connection to a node: the caps on unauthenticated and established connections.

A connection is counted from its accept. Until its handshake (TLS, then HELLO) completes it is
unauthenticated: those have a cap of their own (`max_handshakes`) and one per remote address
(`max_handshakes_per_address`), so sockets that never finish a handshake cannot lock anybody out of a
node, and one address cannot take all the handshake slots. Established connections are capped by
`max_connections`, of which clients may hold all but `peer_slots`: a node's peers always find room.
"""

from __future__ import annotations

from collections import Counter

from .connection import Connection
from .hello import is_client_id


class Admission:
    """The counts behind the caps; `limits` counts the refusals (handshakes, connections)."""

    def __init__(self, *, max_connections: int | None, max_handshakes: int, max_handshakes_per_address: int,
                 peer_slots: int, limits: Counter[str]) -> None:
        self.max_connections = max_connections
        self.max_handshakes = max_handshakes
        self.max_per_address = max_handshakes_per_address
        self.peer_slots = peer_slots
        self.limits = limits
        self.handshakes = 0
        self.per_address: Counter[str] = Counter()
        self.established: set[Connection] = set()
        self.clients: set[Connection] = set()

    def accept(self, host: str) -> str | None:
        """Take a handshake slot for a connection from `host`, or say why there is none."""
        if self.handshakes >= self.max_handshakes:
            reason = f"the node holds its limit of {self.max_handshakes} connections in their handshake " \
                     "(max_handshakes)"
        elif self.per_address[host] >= self.max_per_address:
            reason = f"{self.max_per_address} connections from {host} are in their handshake already " \
                     "(max_handshakes_per_address)"
        else:
            self.handshakes += 1
            self.per_address[host] += 1
            return None
        self.limits["handshakes"] += 1
        return f"{reason}: try later"

    def release(self, host: str) -> None:
        """Give back the handshake slot of a connection from `host` (established, refused or gone)."""
        self.handshakes -= 1
        self.per_address[host] -= 1
        if self.per_address[host] <= 0:
            del self.per_address[host]

    def admit(self, peer_id: str) -> str | None:
        """Whether a connection whose handshake names `peer_id` may be established: None, or the reason."""
        cap = self.max_connections
        if cap is None:
            return None
        if is_client_id(peer_id) and len(self.clients) >= cap - self.peer_slots:
            self.limits["connections"] += 1
            return (f"the node holds its limit of {cap - self.peer_slots} client connections (max_connections, "
                    f"less {self.peer_slots} kept for peers): try another node, or later")
        if len(self.established) >= cap:
            self.limits["connections"] += 1
            return f"the node holds its limit of {cap} connections (max_connections): try later"
        return None

    def establish(self, conn: Connection) -> None:
        self.established.add(conn)
        if is_client_id(conn.peer_id):
            self.clients.add(conn)

    def forget(self, conn: Connection) -> None:
        self.established.discard(conn)
        self.clients.discard(conn)
