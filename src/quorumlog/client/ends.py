"""A group's end from a client (AsyncClient's `end`, a mixin): its last index, committed index and term, as
one node answers an END (server/ends.py).

- "linearizable": no committed index below that of an entry any client was told of before the call. Any
  member of a Raft group answers (a follower asks its leader itself); of a primary/backup group only its
  primary, and only with a controller. The call goes to `node` if given, else to the known leader (else to
  the first node that answers); a NOT_LEADER answer naming a node is followed at once, and the other
  passing refusals (a timeout, an election) are asked again, until retry_timeout.
- "local": the answering node's own view, at once (`node`'s if given): possibly behind the group's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import (
    InvalidArgumentError,
    LeaderUnavailableError,
    QuorumLogError,
    ResponseCode,
    UnknownMemberError,
    error_for,
)
from ..net.bodies import decode_response
from ..net.errors import ConnectionClosedError, RequestTimeoutError, ResponseError, UnverifiedPeerError
from ..net.ops import Op
from ..net.schemas import CONSISTENCIES, END_REQUEST, END_RESPONSE, METADATA_REQUEST, METADATA_RESPONSE
from .results import EndInfo

if TYPE_CHECKING:
    import random

    from ..net.bodies import Schema
    from ..net.connection import Connection

T = TypeVar("T")

# Refusals of a linearizable END that pass: asked again (the same node, or the one a NOT_LEADER names).
_AGAIN = frozenset({ResponseCode.NOT_LEADER, ResponseCode.LEADER_TRANSFERRING, ResponseCode.LEADER_NOT_READY,
                    ResponseCode.TIMEOUT, ResponseCode.NETWORK_ERROR})
_LOST = (ConnectionClosedError, OSError, RequestTimeoutError, UnverifiedPeerError)


class EndQueries:
    """AsyncClient's `end` (see the module docstring)."""

    if TYPE_CHECKING:
        group: str
        endpoints: list[str]
        retry_timeout: float
        request_timeout: float
        retries: int
        stalled: tuple[str, float, float] | None
        peers: dict[str, str]
        node_ids: dict[str, str]
        _leader_addr: str | None
        _rng: random.Random

        async def _conn(self, addr: str) -> Connection: ...
        async def _call(self, addr: str, op: Op, body: bytes, schema: Schema, timeout: float | None = None) -> Any: ...
        async def _metadata_from(self, addr: str) -> Any: ...
        async def _until_answered(self, call: Callable[[str], Awaitable[T]], prefer_leader: bool = True) -> T: ...
        def _addresses(self) -> list[str]: ...
        def _redirect(self, leader: str | None) -> None: ...
        def _stall(self, what: str, deadline: float) -> None: ...
        def _saw(self, index: int, group: str | None = None) -> None: ...

    async def end(self, group: str | None = None, consistency: str = "linearizable", *,
                  node: str | None = None) -> EndInfo:
        """The end, committed index and term of `group` (default: the client's) as one node answers:
        "linearizable" (never behind what was acknowledged before the call) or "local" (that node's own
        view). `node`: the node to ask, by id or "host:port". The committed index counts as seen (seen.py): the
        client's later reads of the group never return less."""
        if consistency not in CONSISTENCIES:
            raise InvalidArgumentError(f"consistency must be 'linearizable' or 'local', not {consistency!r}")
        name = group or self.group
        info = await self._end(name, consistency, node)
        self._saw(info.committed, name)
        return info

    async def _end(self, name: str, consistency: str, node: str | None) -> EndInfo:
        body = END_REQUEST.encode(name, consistency)
        addr = await self._node_address(name, node) if node is not None else None
        if consistency == "local":
            if addr is None:
                return await self._until_answered(lambda a: self._end_at(a, body), prefer_leader=name == self.group)
            try:
                return await self._end_at(addr, body)
            except ResponseError as e:
                raise error_for(e.code, e.reason, e.leader) from None
            except OSError as e:
                raise ConnectionClosedError(f"cannot reach {addr}: {e}") from None
        return await self._linearizable_end(name, body, addr)

    async def _linearizable_end(self, name: str, body: bytes, pinned: str | None) -> EndInfo:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.retry_timeout
        delay = 0.01
        first = pinned  # asked first (only, when pinned): the node given, or the one a NOT_LEADER named
        while True:
            order = [first] if pinned is not None and first is not None else self._end_order(name, first)
            err: BaseException | None = None
            redirected = False
            for addr in order:
                try:
                    info = await self._end_at(addr, body)
                    self.stalled = None
                    return info
                except ResponseError as e:
                    if e.code not in _AGAIN:
                        raise error_for(e.code, e.reason, e.leader) from None
                    err = e
                    if e.code == ResponseCode.NOT_LEADER:
                        hinted = await self._hinted(name, e.leader, addr)
                        if hinted is not None and hinted != addr and loop.time() < deadline:
                            first, redirected = hinted, True
                            break
                except _LOST as e:
                    err = e
                    if addr == first and pinned is None:
                        first = None  # (the known leader's address is dropped by the client on a closed connection)
            self.retries += 1
            if redirected:
                continue  # a named node: ask it at once
            if loop.time() + delay > deadline:
                if isinstance(err, ResponseError):
                    raise error_for(err.code, err.reason, err.leader) from None
                raise LeaderUnavailableError(f"group {name}: no linearizable end within {self.retry_timeout:g}s: "
                                             f"{err}", ResponseCode.NETWORK_ERROR)
            what = f"{ResponseCode(err.code).name}" if isinstance(err, ResponseError) else "no node answers"
            self._stall(f"group {name}: a linearizable end: {what}", deadline)
            await asyncio.sleep(delay * (0.5 + self._rng.random()))
            delay = min(delay * 2, 0.2)

    def _end_order(self, name: str, first: str | None) -> list[str]:
        """Whom to ask, in order: `first`, the known leader (of the client's group), then every known node."""
        order = self._addresses() if name == self.group else list(self.endpoints)  # (self.peers: the client's group)
        for lead in (self._leader_addr if name == self.group else None, first):
            if lead is not None:
                order = [lead] + [a for a in order if a != lead]
        return order

    async def _end_at(self, addr: str, body: bytes) -> EndInfo:
        conn = await self._conn(addr)
        f = await conn.request(Op.END, body, timeout=self.request_timeout)
        r = decode_response(END_RESPONSE, f.body)
        return EndInfo(r.end_index, r.committed, r.term, conn.peer_id or addr)

    async def _members_of(self, name: str, addr: str | None = None) -> dict[str, str]:
        """Group `name`'s members and their addresses, by METADATA (of `addr`, else the first that answers)."""
        async def ask(a: str) -> dict[str, str]:
            if name == self.group:
                return dict((await self._metadata_from(a)).peers)  # (it keeps them, and the leader)
            return dict((await self._call(a, Op.METADATA, METADATA_REQUEST.encode(name), METADATA_RESPONSE)).peers)

        if addr is not None:
            return await ask(addr)
        return await self._until_answered(ask, prefer_leader=False)

    async def _hinted(self, name: str, leader: str | None, addr: str) -> str | None:
        """The address of the node a NOT_LEADER named, None when it named none (or it cannot be found)."""
        if leader is None:
            return None
        peers = self.peers if name == self.group else {}
        if leader not in peers:
            try:
                peers = await self._members_of(name, addr)
            except (QuorumLogError, OSError):
                return None
        if name == self.group:
            self._redirect(leader)
        return peers.get(leader)

    async def _node_address(self, name: str, node: str) -> str:
        """The address of `node`: "host:port" as given, else the member of that id."""
        if ":" in node:
            return node
        for addr, nid in self.node_ids.items():
            if nid == node:
                return addr
        peers = self.peers if name == self.group else {}
        if node not in peers:
            peers = await self._members_of(name)
        if node not in peers:
            raise UnknownMemberError(f"node {node!r} is not a member of group {name} (its members: "
                                     f"{', '.join(sorted(peers)) or 'none known'})")
        return peers[node]
