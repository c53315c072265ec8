"""READ, GET and TAIL at a `min_index` (issue 32, "read-your-writes and monotonic reads").

A client sends the highest index it appended, read or learned committed; a node that has committed that far
serves the request at once, as it always did. One that has not yet (a follower a few pushes behind its
leader) waits for its commit index to reach it, at most MIN_INDEX_WAIT_S, then serves the request exactly as
the synchronous path would; past the bound it answers FALL_BEHIND_TOO_MUCH naming the leader, so the client
asks a node that has. It never answers with less than the client already saw.

The wait is the awaitable the handler returns (net/connection.py): the connection runs it as a task it keeps
(and cancels when it closes), answers what it returns, and answers a QuorumLogError it raises with its code,
as for the synchronous path. The group's `commit_changed` event wakes it at each commit, and at shutdown
(Group.close sets it once more): a closing group answers NETWORK_ERROR, and the client asks another node.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import ResponseCode
from ..net.connection import HandlerResult

if TYPE_CHECKING:
    from ..net.connection import Connection
    from ..net.frames import Frame
    from .group import Group

# How long a request waits for the node's commit index to reach its min_index. A follower in a healthy group
# trails its leader by a heartbeat or a push (milliseconds); one that takes longer is cut off, paused or far
# behind, and the client does better elsewhere. It is well below the clients' request timeout (5 s by
# default), so the client gets the FALL_BEHIND_TOO_MUCH answer and its leader hint, and asks another node,
# rather than timing out on this one.
MIN_INDEX_WAIT_S = 1.0


def behind(g: Group, min_index: int) -> bool:
    """Must a request at `min_index` wait for `g`'s commit index?"""
    return min_index > g.store.committed_index


async def serve_at(conn: Connection, f: Frame, g: Group, min_index: int,
                   serve: Callable[[], HandlerResult]) -> HandlerResult:
    """`serve()` (the synchronous path's answer, or what it raises) once `g`'s commit index reached
    `min_index`; FALL_BEHIND_TOO_MUCH with the leader hint after MIN_INDEX_WAIT_S; NETWORK_ERROR when the group
    closes meanwhile (both answered here: None returned)."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    deadline = started + MIN_INDEX_WAIT_S
    g.stats.min_index_waits += 1
    while behind(g, min_index) and not g.closed:
        changed = g.commit_changed  # (replaced at each change: taken before the time is read)
        left = deadline - loop.time()
        if left <= 0:
            break
        try:
            async with asyncio.timeout(left):
                await changed.wait()
        except TimeoutError:
            break
    if g.closed:
        conn.respond_error(f, ResponseCode.NETWORK_ERROR, f"node {g.node_id} is shutting down (group {g.name}): "
                           "read from another node")
        return None
    committed = g.store.committed_index
    if committed < min_index:
        g.stats.min_index_behind += 1
        leader = g.leader_id
        hint = leader if leader != g.node_id else None
        waited = round((loop.time() - started) * 1000)
        where = f"read from the leader {hint}" if hint is not None else "read from another node"
        conn.respond_error(f, ResponseCode.FALL_BEHIND_TOO_MUCH,
                           f"node {g.node_id} has committed up to {committed} of group {g.name}, below the "
                           f"min_index {min_index} asked (waited {waited} ms): {where}", hint)
        return None
    return serve()
