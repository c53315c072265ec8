"""Leadership changes from a client (AsyncClient's methods, a mixin): a Raft group's leadership handed to
another member, and a primary/backup group's primary promoted, refused without --force when the target
lacks what another reachable member holds (ha/epochs.py, checks.promotion_refusal)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from ..errors import PromoteError, ResponseCode, error_for
from ..ha.epochs import promotion_epoch
from ..net.errors import ResponseError
from ..net.ops import Op
from ..net.schemas import (
    LEADERSHIP_TRANSFER_REQUEST,
    LEADERSHIP_TRANSFER_RESPONSE,
    PROMOTE_REQUEST,
    PROMOTE_RESPONSE,
)
from .checks import promotion_refusal

if TYPE_CHECKING:
    from ..net.bodies import Schema


class LeadershipChanges:
    """AsyncClient's leadership methods (see the module docstring)."""

    if TYPE_CHECKING:
        group: str
        endpoints: list[str]
        retry_timeout: float
        request_timeout: float
        _leader_addr: str | None

        async def _find_leader(self, deadline: float) -> str: ...
        async def _call(self, addr: str, op: Op, body: bytes, schema: Schema, timeout: float | None = None) -> Any: ...
        def _redirect(self, leader: str | None) -> None: ...
        async def _group_doc(self, addr: str) -> dict[str, Any] | None: ...

    async def transfer_leader(self, target: str) -> str | None:
        """Hand leadership to node `target`; returns the new leader once it took over."""
        body = LEADERSHIP_TRANSFER_REQUEST.encode(self.group, target)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.retry_timeout
        while True:
            addr = await self._find_leader(deadline)
            try:
                r = await self._call(addr, Op.LEADERSHIP_TRANSFER, body, LEADERSHIP_TRANSFER_RESPONSE)
            except ResponseError as e:
                if e.code == ResponseCode.NOT_LEADER and loop.time() < deadline:
                    self._redirect(e.leader)
                    await asyncio.sleep(0.05)
                    continue
                raise error_for(e.code, e.reason, e.leader) from None
            self._leader_addr = None
            return r.leader or target

    async def promote(self, target: str, *, force: bool = False) -> tuple[str, int]:
        """Make backup `target` the primary of this primary/backup group; returns (primary, epoch).

        Asks every endpoint for its status first (the target again last, so that it is read after the
        others). Without --force it refuses a target behind another reachable member, naming it: behind a
        backup's log (by last epoch, then last index), or behind what a live primary acknowledged (its
        committed entries; all it holds if it is unconfirmed, as after a restart). Under ASYNC, or SYNC
        with min_in_sync = 0, the primary acknowledges entries no backup holds, and promoting a backup that
        lacks them cuts them from the group. The most up-to-date backup holds every entry a SYNC producer
        was told of, as long as one in-sync backup is reachable. The new epoch is above the highest any
        reachable member has seen, and unique to the target (ha/epochs.py); a group with a controller
        picks its own."""
        docs: dict[str, dict[str, Any]] = {}
        where: dict[str, str] = {}
        for addr, doc in zip(self.endpoints, await asyncio.gather(*(self._group_doc(a) for a in self.endpoints)),
                             strict=True):
            if doc is not None:
                docs[doc["node"]] = doc
                where[doc["node"]] = addr
        if not docs:
            raise PromoteError(f"group {self.group}: no endpoint answered", ResponseCode.NETWORK_ERROR)
        mine = docs.get(target)
        if mine is None:
            raise PromoteError(f"group {self.group}: node {target} did not answer (or is not a member)",
                               ResponseCode.NETWORK_ERROR)
        if mine.get("replication") != "primary-backup":
            raise PromoteError(f"group {self.group} is a Raft group: use transfer-leader",
                               ResponseCode.UNSUPPORTED)
        epoch = promotion_epoch(max(int(d.get("epoch", 0)) for d in docs.values()), list(mine["peers"]), target)

        if not force:
            # Read after the others: a SYNC primary's commit that another status showed is then held by an
            # in-sync target, however fast the group writes. Unanswered, the earlier (shorter) view stands.
            again = await self._group_doc(where[target])
            if again is not None and again.get("node") == target:
                mine = again
            behind = promotion_refusal(target, mine, docs)
            if behind is not None:
                raise PromoteError(f"group {self.group}: {behind}", ResponseCode.EXPIRED_TERM)
        addr = mine["peers"][target]
        try:
            body = PROMOTE_REQUEST.encode(self.group, target, epoch, force)
            r = await self._call(addr, Op.PROMOTE, body, PROMOTE_RESPONSE, timeout=max(self.request_timeout, 10.0))
        except ResponseError as e:
            raise error_for(e.code, e.reason, e.leader) from None
        self._leader_addr = None
        return r.primary or target, int(r.epoch)

