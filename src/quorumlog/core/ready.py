"""What one call into the core produced (`Ready`), and the one place that says how a driver applies it.

The contract, persist → flush → send → complete:

1. **Persist.** The core has already written to the store through its API (appends, truncations, the
   term and vote, the recovery flag); those calls are cheap (memory or page cache). The stable state
   (term, vote, recovery flag: etcd's HardState) must be durable before any message leaves: while the
   store reports `stable_unsaved` after a call, the driver holds every message, runs `persist_stable()`
   (the server in its worker thread, the simulator after a disk latency during which a crash loses it)
   and sends what it held once that returned. A store without `defer_stable` is durable at once.
2. **Flush.** When `ready.must_flush` is set the driver calls `store.flush()` once for everything written
   so far (group commit: many Readies may share one flush), then `node.on_flushed(durable, now_ms)` and
   applies the Ready that returns the same way.
3. **Send.** `ready.messages` may be sent as soon as the Ready is returned: the core never puts a message
   in a Ready that claims more than is durable. Acknowledgements that depend on durability (a follower's
   append, truncate or compare ack) are held inside the core and released by `on_flushed`, and only while
   the entries they cover are still in the log. So a driver may run its fsync in a worker thread and keep
   stepping the node meanwhile.
4. **Complete.** `ready.completions` answer clients. An append is completed with SUCCESS only once its
   entries are committed, which counts the leader's own entries only up to its durable index.

`driver.Driver` implements this once, for every driver: the server (flushes in a worker thread), the
simulator (flushes after a simulated disk latency; a crash in between loses the unflushed tail), the
scripted tests and the benchmarks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .role import Role

APPEND = "append"
TRANSFER = "transfer"
CONFIG = "config"  # a membership change (raft/membership.py): answered once its CONFIG entry committed
READ_INDEX = "read_index"  # a linearizable read point (raft/reads.py): last_index is the read index


@dataclass(frozen=True, slots=True)
class Completion:
    """The answer to one client request (a whole batch append, a leadership transfer or a membership
    change; a change's first_index and last_index are its CONFIG entry's index).

    For a successful append: entries first_index..last_index of `term`, at byte `positions`.
    `leader_id` is the known leader, a hint for NOT_LEADER redirects. `detail` is the group's actual last
    entry for EXPECTED_END_MISMATCH. `reason` says why a refusal was made, where the code alone does not
    (whose disks are full).
    """

    request_id: Any  # the caller's handle of the request (see appends.RequestId)
    code: int
    kind: str = APPEND
    first_index: int = -1
    last_index: int = -1
    term: int = 0
    positions: Sequence[int] = ()
    leader_id: str | None = None
    detail: int | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class RoleChange:
    """The node's role, term or known leader changed."""

    role: Role
    term: int
    leader_id: str | None


@dataclass(slots=True)
class Ready:
    """Output of one tick/step/propose/transfer/on_flushed call. See the module docstring for the order."""

    messages: list[Any] = field(default_factory=list)  # raft/messages.py's (or ha/messages.py's) to send
    completions: list[Completion] = field(default_factory=list)
    must_flush: bool = False
    changes: list[RoleChange] = field(default_factory=list)
    request_id: Any = None  # the id a propose/transfer_leader call was given or assigned

    @property
    def empty(self) -> bool:
        return not (self.messages or self.completions or self.must_flush or self.changes)
