"""What one call into the core produced (`Ready`), and the one place that says how a driver applies it.

The contract, persist → flush → send → complete:

1. **Persist.** The core has already written to the store through its API (appends, truncations, the
   vote); those calls are cheap (memory or page cache). `store.save_vote` is durable when it returns, so a
   vote response may go out at once.
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

`ReadyApplier` implements this for a synchronous driver (flush at once) and for one that defers flushes
(the simulator schedules them after a simulated disk latency; a crash in between loses the unflushed tail).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .messages import Message, Role

if TYPE_CHECKING:
    from .node import RaftNode

APPEND = "append"
TRANSFER = "transfer"


@dataclass(frozen=True, slots=True)
class Completion:
    """The answer to one client request (a whole batch append, or a leadership transfer).

    For a successful append: entries first_index..last_index of `term`, at byte `positions`.
    `leader_id` is the known leader, a hint for NOT_LEADER redirects.
    """

    request_id: int
    code: int
    kind: str = APPEND
    first_index: int = -1
    last_index: int = -1
    term: int = 0
    positions: Sequence[int] = ()
    leader_id: str | None = None


@dataclass(frozen=True, slots=True)
class RoleChange:
    """The node's role, term or known leader changed."""

    role: Role
    term: int
    leader_id: str | None


@dataclass(slots=True)
class Ready:
    """Output of one tick/step/propose/transfer/on_flushed call. See the module docstring for the order."""

    messages: list[Message] = field(default_factory=list)
    completions: list[Completion] = field(default_factory=list)
    must_flush: bool = False
    changes: list[RoleChange] = field(default_factory=list)
    request_id: int | None = None  # the id a propose/transfer_leader call was given or assigned

    @property
    def empty(self) -> bool:
        return not (self.messages or self.completions or self.must_flush or self.changes)


class ReadyApplier:
    """Applies Readies in the contract's order. `send` and `complete` are the driver's transport hooks."""

    __slots__ = ("send", "complete", "on_change")

    def __init__(self, send: Callable[[Message], None], complete: Callable[[Completion], None],
                 on_change: Callable[[RoleChange], None] | None = None) -> None:
        self.send = send
        self.complete = complete
        self.on_change = on_change

    def apply(self, node: RaftNode, ready: Ready, now_ms: int, flush: bool = True) -> bool:
        """Apply `ready`. With `flush`, a required flush happens here, before anything is sent.

        Returns True when a flush is still owed (flush=False and the Ready asked for one): the driver must
        call `flush_node` later, and until then the node's unflushed writes may be lost by a crash.
        """
        owed = False
        follow: Ready | None = None
        if ready.must_flush:
            if flush:
                follow = node.on_flushed(node.store.flush(), now_ms)
            else:
                owed = True
        self._emit(ready)
        if follow is not None and not follow.empty:
            owed = self.apply(node, follow, now_ms, flush) or owed
        return owed

    def flush_node(self, node: RaftNode, now_ms: int) -> None:
        """A deferred flush: make everything written durable, then release what waited for it."""
        follow = node.on_flushed(node.store.flush(), now_ms)
        self.apply(node, follow, now_ms, True)

    def _emit(self, ready: Ready) -> None:
        if self.on_change is not None:
            for change in ready.changes:
                self.on_change(change)
        send = self.send
        for m in ready.messages:
            send(m)
        complete = self.complete
        for c in ready.completions:
            complete(c)
