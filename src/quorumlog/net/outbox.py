"""Outbox: the connections with frames queued in one loop turn, each written once."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .connection import Connection


class Outbox:
    """The connections with frames queued in this loop turn, each written once by `flush()`.

    Whoever produced the frames flushes at the end of its work (a node, after stepping its groups on a
    frame or a finished fsync), so they leave in the same turn; otherwise one callback writes them at
    the next turn. Connections that share an Outbox share that callback."""

    __slots__ = ("_loop", "_conns", "_scheduled")

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._conns: list[Connection] = []
        self._scheduled = False

    def add(self, conn: Connection) -> None:
        self._conns.append(conn)
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self.flush)

    def flush(self) -> None:
        self._scheduled = False
        conns, self._conns = self._conns, []
        for c in conns:
            c.flush()
