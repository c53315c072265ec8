"""Read-your-writes and monotonic reads (issue 32), AsyncClient's side (a mixin).

The client keeps, per group, the highest index it has seen committed: the last entry of each append it was
answered, the last index each read covered (READ, GET, TAIL), and the committed index of each `end()`. Its
READs, GETs and TAILs send that as `min_index`, on connections of protocol version 3 (a node of version 2 knows
no such field: the body then ends before it). A node that has not committed that far waits a moment, then
answers FALL_BEHIND_TOO_MUCH naming the leader, never less (server/waits.py); the client asks that leader, else
the next node, and goes round the nodes again until retry_timeout, then raises ReadBehindError. So a read sees
the client's own appends whichever node answers it, and no read returns less than an earlier one saw.

`read_your_writes=False` sends none (-1: any node answers with what it has committed). `read_view` (and
`read_raw` with a node), the path of bulk readers that plan their ranges from the nodes' committed indexes and
handle a node behind themselves (spark/fetch.py), sends none either; what it reads is noted all the same.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import QuorumLogError, ReadBehindError, ResponseCode, error_for
from ..net.bodies import decode_response

if TYPE_CHECKING:
    from ..net.bodies import Schema
    from ..net.connection import Connection
    from ..net.errors import ResponseError
    from ..net.ops import Op

T = TypeVar("T")

# The answers to a read at a min_index after which another node is asked: this one had not committed that far
# within its wait, or is shutting down.
PASSED_OVER = frozenset({ResponseCode.FALL_BEHIND_TOO_MUCH, ResponseCode.NETWORK_ERROR})
MIN_INDEX_VERSION = 3  # the protocol version that added min_index


class SeenIndexes:
    """AsyncClient's read-your-writes (see the module docstring)."""

    if TYPE_CHECKING:
        group: str
        request_timeout: float
        retry_timeout: float
        read_your_writes: bool
        _seen: dict[str, int]

        async def _conn(self, addr: str) -> Connection: ...
        async def _until_answered(self, call: Callable[[str], Awaitable[T]], prefer_leader: bool = True, *,
                                  passed_over: frozenset[int] = frozenset()) -> T: ...
        async def _hinted(self, name: str, leader: str | None, addr: str) -> str | None: ...

    def seen_index(self, group: str | None = None) -> int:
        """The highest index of `group` (default: the client's) this client has seen committed: appended, read,
        or learned through end(); -1 for none. With read_your_writes, its reads of the group never return less."""
        return self._seen.get(group or self.group, -1)

    def _saw(self, index: int, group: str | None = None) -> None:
        name = group or self.group
        if index > self._seen.get(name, -1):
            self._seen[name] = index

    def _read_up_to(self, start: int, next_index: int) -> None:
        """A read from `start` answered `next_index`: start..next_index-1 are committed (control entries left out
        of the answer too); nothing is learnt from an empty answer."""
        if next_index > start:
            self._saw(next_index - 1)

    def _min_index(self) -> int:
        return self._seen.get(self.group, -1) if self.read_your_writes else -1

    @staticmethod
    def _with_min_index(conn: Connection, request: Schema, values: tuple[Any, ...], min_index: int) -> bytes:
        """`request`'s body: `values`, then `min_index` on a connection that speaks it, else without it."""
        if min_index >= 0 and conn.version is not None and conn.version >= MIN_INDEX_VERSION:
            return request.encode(*values, min_index)
        return request.encode(*values)

    async def _read_call(self, op: Op, request: Schema, values: tuple[Any, ...], response: Schema) -> Any:
        """A READ or GET at the client's min_index, by `_until_answered`: the first node that answers (the leader
        first, when known); one that answers FALL_BEHIND_TOO_MUCH is passed over for the leader it names."""
        min_index = self._min_index()

        async def call(addr: str) -> Any:
            conn = await self._conn(addr)
            body = self._with_min_index(conn, request, values, min_index)
            f = await conn.request(op, body, timeout=self.request_timeout)
            return decode_response(response, f.body)

        return await self._until_answered(call, passed_over=PASSED_OVER if min_index >= 0 else frozenset())

    async def _ask_hinted_next(self, e: ResponseError, addr: str, pending: list[str]) -> None:
        """The node at `addr` answered a read at a min_index `e` (one of PASSED_OVER): the leader it names goes first
        among the nodes `pending` in this round (if asked already, it is in the next)."""
        hinted = await self._hinted(self.group, e.leader, addr)
        if hinted in pending:
            pending.remove(hinted)
            pending.insert(0, hinted)

    def _behind(self, e: ResponseError) -> QuorumLogError:
        """What a read raises once its retry deadline passed with `e` (one of PASSED_OVER) the last answer."""
        if e.code != ResponseCode.FALL_BEHIND_TOO_MUCH:
            return error_for(e.code, e.reason, e.leader)
        return ReadBehindError(f"FALL_BEHIND_TOO_MUCH: no node of group {self.group} served a read at index "
                               f"{self._min_index()} (what this client has seen) within {self.retry_timeout:g}s; "
                               f"last answer: {e.reason}", e.code, e.leader)

    async def _tail_passed_over(self, e: ResponseError, addr: str, passed: PassedOver) -> None:
        """A TAIL at the client's min_index was answered `e` (one of PASSED_OVER) by the node at `addr`: the next
        subscription goes to the leader it names, else to a node not passed over yet; raise once retry_timeout
        passed since the first such answer."""
        now = asyncio.get_running_loop().time()
        if passed.since is None:
            passed.since = now
        elif now - passed.since > self.retry_timeout:
            raise self._behind(e) from None
        passed.nodes.add(addr)
        hinted = await self._hinted(self.group, e.leader, addr)  # (it becomes the client's leader: asked first)
        if hinted is not None:
            passed.nodes.discard(hinted)
        await asyncio.sleep(0.05)


@dataclass(slots=True)
class PassedOver:
    """The nodes a tail's TAIL at a min_index passed over since it last subscribed, and since when."""

    nodes: set[str] = field(default_factory=set)
    since: float | None = None

    def order(self, addrs: list[str]) -> list[str]:
        """`addrs` in order, those passed over last."""
        return sorted(addrs, key=lambda a: a in self.nodes)
