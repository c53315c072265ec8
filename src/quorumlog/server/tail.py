"""TAIL subscriptions: push newly committed entries to a subscriber as one-way TAIL frames.

Each subscription is a task that reads from its next index up to the commit index in bounded chunks,
sends them, waits while its connection holds more unsent bytes than its output limit (a slow subscriber
slows only itself, and costs the node at most that limit), and then sleeps until the group's commit index
moves. A connection holds at most `max_tails_per_connection` subscriptions.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import msgpack

from ..errors import QuorumLogError, ResponseCode
from ..net.connection import Connection
from ..net.errors import ConnectionClosedError
from ..net.ops import Op
from .group import Group
from .reads import read_committed

log = logging.getLogger("quorumlog.server")

TAIL_CHUNK_ENTRIES = 4096
TAIL_CHUNK_BYTES = 1 << 20


class TooManyTailsError(QuorumLogError):
    """A TAIL on a connection that holds max_tails_per_connection subscriptions already."""

    code = ResponseCode.TOO_MANY_SUBSCRIPTIONS


class Tails:
    """The live subscriptions of one node, keyed by (connection, TAIL request id)."""

    def __init__(self, max_per_connection: int = 16) -> None:
        self._subs: dict[tuple[int, int], asyncio.Task[None]] = {}
        self._max_per_connection = max_per_connection

    def check(self, conn: Connection) -> None:
        """Raise TooManyTailsError when `conn` may not open another subscription."""
        cid = id(conn)
        if sum(1 for k in self._subs if k[0] == cid) >= self._max_per_connection:
            raise TooManyTailsError(f"this connection holds {self._max_per_connection} TAIL subscriptions "
                                    "(max_tails_per_connection): end one with UNTAIL, or open another connection")

    def start(self, conn: Connection, request_id: int, group: Group, start: int, include_control: bool) -> None:
        key = (id(conn), request_id)
        self.stop(conn, request_id)
        task = asyncio.get_running_loop().create_task(self._run(conn, request_id, group, start, include_control))
        self._subs[key] = task
        task.add_done_callback(lambda t: self._subs.pop(key, None) if self._subs.get(key) is t else None)

    def stop(self, conn: Connection, request_id: int) -> bool:
        task = self._subs.pop((id(conn), request_id), None)
        if task is None:
            return False
        task.cancel()
        return True

    def drop_connection(self, conn: Connection) -> None:
        for key in [k for k in self._subs if k[0] == id(conn)]:
            self._subs.pop(key).cancel()

    def __len__(self) -> int:
        return len(self._subs)

    async def close(self) -> None:
        tasks = list(self._subs.values())
        self._subs.clear()
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t

    @staticmethod
    async def _run(conn: Connection, request_id: int, group: Group, next_index: int, include_control: bool) -> None:
        packb = msgpack.packb
        try:
            while not conn.is_closing:
                changed = group.commit_changed
                data, nxt, committed = read_committed(group.store, next_index, TAIL_CHUNK_ENTRIES,
                                                      TAIL_CHUNK_BYTES, include_control)
                if nxt > next_index:
                    conn.send(Op.TAIL, packb((data, nxt, committed)), request_id)
                    group.stats.entries_out += nxt - next_index
                    group.stats.bytes_out += len(data)
                    next_index = nxt
                    await conn.drain()
                    await asyncio.sleep(0)  # the chunk leaves before the next is read; other work runs
                    continue
                await changed.wait()
        except (ConnectionClosedError, asyncio.CancelledError):
            return
        except QuorumLogError as e:
            log.warning("tail of group %s for %r ended: %s", group.name, conn, e)
            with contextlib.suppress(ConnectionClosedError):
                conn.close(f"tail ended: {e}", goodbye=e.code)
