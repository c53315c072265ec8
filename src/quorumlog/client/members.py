"""Membership changes of a Raft group from a client (AsyncClient's methods, a mixin): add a member (a
learner, promoted once it caught up unless asked to stay one), promote, remove, move to a new address,
and list the members. Each change is answered once its CONFIG entry committed (raft/membership.py).

A change that reaches a leader which then loses its leadership may commit or not: the client asks again,
and a repeated change that finds the configuration already as asked counts as done.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ResponseCode, error_for
from ..net.errors import ConnectionClosedError, RequestTimeoutError, ResponseError
from ..net.ops import Op
from ..net.schemas import CHANGE_MEMBERS_REQUEST, CHANGE_MEMBERS_RESPONSE

if TYPE_CHECKING:
    from ..net.bodies import Schema

# Refusals that pass: another change is committing, a new leader has not committed its first entry, a
# learner is still catching up (promotion), or leadership moves.
_WAIT = frozenset({ResponseCode.CHANGE_IN_PROGRESS, ResponseCode.LEADER_NOT_READY, ResponseCode.FALL_BEHIND_TOO_MUCH,
                   ResponseCode.NOT_LEADER, ResponseCode.LEADER_TRANSFERRING, ResponseCode.TERM_CHANGED})


@dataclass(frozen=True, slots=True)
class Members:
    """A group's configuration: its voters, learners and their addresses; `index` is the CONFIG entry
    that made it (-1: the configured members, never changed)."""

    voters: list[str]
    learners: list[str]
    addresses: dict[str, str]
    index: int = -1


class MemberChanges:
    """AsyncClient's membership methods (see the module docstring)."""

    if TYPE_CHECKING:
        group: str
        retry_timeout: float
        _leader_addr: str | None

        async def _find_leader(self, deadline: float) -> str: ...
        async def _call(self, addr: str, op: Op, body: bytes, schema: Schema, timeout: float | None = None) -> Any: ...
        def _redirect(self, leader: str | None) -> None: ...
        async def node_status(self, addr: str, *, all_groups: bool = False) -> dict[str, Any]: ...

    async def add_member(self, node: str, address: str, *, learner: bool = False,
                         timeout: float | None = None) -> Members:
        """Add `node` (reached at `address`) as a learner; unless `learner`, promote it to voter once it has
        caught up (within the group's learner_promote_lag), waiting up to `timeout` (default: 4 x
        retry_timeout) for that."""
        m = await self.change_members("add", node, address)
        if learner:
            return m
        return await self.change_members("promote", node, timeout=timeout or 4 * self.retry_timeout)

    async def promote_member(self, node: str, *, timeout: float | None = None) -> Members:
        """Make learner `node` a voter, once it has caught up."""
        return await self.change_members("promote", node, timeout=timeout or 4 * self.retry_timeout)

    async def remove_member(self, node: str) -> Members:
        """Remove `node` (a voter, the leader too, or a learner) from the group."""
        return await self.change_members("remove", node)

    async def set_member_address(self, node: str, address: str) -> Members:
        """Reach member `node` at `address` from now on (it keeps its id and its data)."""
        return await self.change_members("set-address", node, address)

    async def members(self) -> Members:
        """The group's configuration, as its leader holds it."""
        loop = asyncio.get_running_loop()
        addr = await self._find_leader(loop.time() + self.retry_timeout)
        doc = (await self.node_status(addr))["groups"][self.group]
        cfg = doc.get("config")
        if cfg is None:  # a primary/backup group: its members follow its controller group's
            peers = dict(doc.get("peers", {}))
            return Members(list(doc.get("members") or sorted(peers)), [], peers)
        return Members(list(cfg["voters"]), list(cfg["learners"]), dict(cfg["addresses"]))

    async def change_members(self, action: str, node: str, address: str | None = None, *,
                             timeout: float | None = None) -> Members:
        """Send one change ("add", "promote", "remove", "set-address") to the leader, asking again while it
        cannot be made yet, until `timeout` (default retry_timeout)."""
        body = CHANGE_MEMBERS_REQUEST.encode(self.group, action, node, address)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (timeout or self.retry_timeout)
        uncertain = False  # an earlier try may have committed: its answer was lost, or its leader deposed
        delay = 0.05
        while True:
            addr = await self._find_leader(deadline)
            try:
                r = await self._call(addr, Op.CHANGE_MEMBERS, body, CHANGE_MEMBERS_RESPONSE,
                                     timeout=max(5.0, deadline - loop.time()))
                return Members(list(r.voters), list(r.learners), dict(r.addresses), r.index)
            except ResponseError as e:
                code = e.code
                if code == ResponseCode.UNEXPECTED_ARGUMENT and uncertain and await self._done(action, node, address):
                    return await self.members()  # an earlier try committed after all
                uncertain = uncertain or code == ResponseCode.TERM_CHANGED
                if code not in _WAIT or loop.time() + delay > deadline:
                    raise error_for(code, e.reason, e.leader) from None
                if code == ResponseCode.NOT_LEADER:
                    self._redirect(e.leader)
            except (ConnectionClosedError, RequestTimeoutError):
                uncertain = True
                self._leader_addr = None
                if loop.time() + delay > deadline:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)

    async def _done(self, action: str, node: str, address: str | None) -> bool:
        """Whether the configuration already is what `action` asks for."""
        try:
            m = await self.members()
        except Exception:
            return False
        if action == "add":
            return node in m.learners or node in m.voters
        if action == "promote":
            return node in m.voters
        if action == "remove":
            return node not in m.voters and node not in m.learners
        return m.addresses.get(node) == address
