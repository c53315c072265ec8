"""`ReplicaCore`: what the server (server/group.py, node.py, exporter.py) uses of a group's core, whichever
replication the group runs: a RaftNode (raft/node.py) or a primary/backup HaNode (ha/node.py).

Both map onto one vocabulary (a primary is the LEADER, its epoch the term). Where the two differ for an
operator (the words of events, the elections counted, promotion) the server reads `replication`, never
the class; what only one kind has is a method both answer (`status` extras, `peers_disk_full`, `promote`).
Only the controller, which drives RaftNodes and HaNodes by their own APIs, and the primary/backup gauges
use the concrete class, typed as server/group.py made it. mypy checks there that both satisfy the protocol.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from ..errors import CorruptEntryError
from .appends import AppendRequest, RequestId
from .driver import Core
from .producers import ProducerTable
from .ready import Ready
from .role import Role

RAFT = "raft"
PRIMARY_BACKUP = "primary-backup"


class ReplicaCore(Core, Protocol):
    """One member of one group. Every input returns a `Ready` for the `Driver` (ready.py); `store` and
    `on_flushed` are the driver's (`Core`)."""

    @property
    def replication(self) -> str:
        """RAFT or PRIMARY_BACKUP."""

    # -- state the server reports (status, metrics, metadata) --------------------------------------
    @property
    def role(self) -> Role: ...

    @property
    def term(self) -> int:
        """The Raft term, or the primary/backup epoch."""

    @property
    def leader_id(self) -> str | None: ...

    @property
    def recovering(self) -> bool:
        """May lack entries it acknowledged: it neither votes nor leads until repaired from its peers."""

    @property
    def joining(self) -> bool:
        """A pristine store waiting to learn whether the group exists."""

    @property
    def producers(self) -> ProducerTable: ...

    @property
    def quiesced(self) -> bool:
        """An idle Raft group gone quiet (raft/quiesce.py); a primary/backup core never is."""

    @property
    def stats(self) -> Counter[str]:
        """Event counters, by event."""

    def status(self) -> dict[str, object]:
        """What the group's status document adds for this kind of replication (nothing for Raft)."""

    def peer_match(self, peer: str) -> int:
        """The highest index `peer` holds, as the leader knows it (-1 elsewhere)."""

    def peers_disk_full(self) -> list[str] | None:
        """The leader's followers refusing its entries for a full disk; None where it is not tracked (a
        Raft follower, any primary/backup member)."""

    def waiting_requests(self) -> list[RequestId]:
        """The ids of the client requests proposed and not answered yet."""

    def expiry_safe_index(self, now_ms: int, member_timeout_ms: int) -> int:
        """The highest index the store may expire up to."""

    # -- inputs ------------------------------------------------------------------------------------
    def tick(self, now_ms: int) -> Ready: ...

    def step(self, message: Any, now_ms: int) -> Ready:
        """One peer message (raft/messages.py's or ha/messages.py's: the core checks which)."""

    def step_batch(self, messages: Iterable[Any], now_ms: int) -> Ready: ...

    def propose(self, bodies: Sequence[bytes], now_ms: int, request_id: int | None = None) -> Ready: ...

    def propose_many(self, requests: Sequence[AppendRequest], now_ms: int, wall_ms: int = 0) -> Ready: ...

    def transfer_leader(self, target: str, now_ms: int, request_id: int | None = None) -> Ready:
        """Hand leadership to `target` (Raft); a primary/backup core answers UNSUPPORTED."""

    def promote(self, epoch: int, now_ms: int) -> Ready:
        """Become the primary of `epoch` (primary/backup); a RaftNode refuses (it elects its leader)."""

    def report_corruption(self, error: CorruptEntryError, now_ms: int) -> Ready:
        """A read outside the core met a damaged entry of this replica."""

    def peer_down(self, peer: str, now_ms: int) -> Ready:
        """`peer`'s node has been silent for an election timeout (a quiet Raft group wakes; raft/quiesce.py)."""
