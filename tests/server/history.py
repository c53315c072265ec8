"""A recorded history of appends and its checker, and the writers and the nemesis that make one: shared
by the real-process tests that fault leaders (Raft) and primaries (primary/backup)."""

from __future__ import annotations

import asyncio
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from quorumlog import lincheck
from quorumlog.client import AsyncClient
from quorumlog.errors import QuorumLogError
from quorumlog.server.cluster import LocalCluster

from .conftest import node_index, statuses


@dataclass(slots=True)
class Op:
    body: bytes
    invoked: float
    completed: float = float("inf")
    index: int | None = None  # acknowledged index
    error: str | None = None


@dataclass(slots=True)
class EndQuery:
    """A linearizable END answered: the committed index one node gave (failed queries are not kept: they
    changed nothing and told nothing)."""

    client: str
    invoked: float
    completed: float
    committed: int


def check_history(ops: list[Op], log: list[tuple[int, bytes]], begin: int = 0,
                  ends: list[EndQuery] | None = None) -> dict[str, int]:
    """Raise AssertionError on loss, duplicate, phantom or a real-time order violation, or (through the
    linearizability checker) on an END answer behind an append acknowledged before it was asked. `log`
    starts at `begin` (entries before it expired): what was acknowledged there is not looked for."""
    where: dict[bytes, int] = {}
    for index, body in log:
        assert body not in where, f"{body!r} written twice: at {where[body]} and {index}"
        where[body] = index
    sent = {op.body: op for op in ops}
    phantoms = [b for b in where if b not in sent]
    assert not phantoms, f"{len(phantoms)} entries no client sent, first {phantoms[:3]}"
    for op in ops:
        if op.index is not None and op.index >= begin:
            assert where.get(op.body) == op.index, \
                f"{op.body!r} acknowledged at {op.index}, log has it at {where.get(op.body)}"
    # Real-time order: an op present in the log comes after every op acknowledged before it was sent.
    done = sorted((op.completed, where[op.body]) for op in ops if op.index is not None and op.body in where)
    present = sorted((op.invoked, where[op.body], op.body) for op in ops if op.body in where)
    highest = -1
    k = 0
    for invoked, index, body in present:
        while k < len(done) and done[k][0] < invoked:
            highest = max(highest, done[k][1])
            k += 1
        assert index > highest, f"{body!r} (sent at {invoked:.3f}) is at {index}, before an entry at " \
                                f"{highest} acknowledged earlier"
    # And the whole history through the linearizability checker (quorumlog.lincheck): the log at the end is
    # one more read, every error an append that may or may not have happened.
    result = lincheck.check(lincheck.from_history_ops(ops, log, begin=begin, ends=ends or ()), timeout=60)
    assert result.ok, result.report
    return {"acked": sum(op.index is not None for op in ops), "failed": sum(op.error is not None for op in ops),
            "unacked_but_written": sum(op.index is None and op.body in where for op in ops),
            "expired": sum(op.index is not None and op.index < begin for op in ops)}


async def record_appends(c: AsyncClient, name: str, stop: float, ops: list[Op]) -> None:
    """Append `name-0`, `name-1`, ... one at a time until `stop` (loop time), recording each in `ops`."""
    n = 0
    loop = asyncio.get_running_loop()
    while loop.time() < stop:
        op = Op(f"{name}-{n}".encode(), time.monotonic())
        n += 1
        ops.append(op)
        try:
            op.index = (await c.append(op.body)).index
        except QuorumLogError as e:
            op.error = type(e).__name__
        op.completed = time.monotonic()


async def record_ends(c: AsyncClient, name: str, nodes: list[str], stop: float, ends: list[EndQuery],
                      rng: random.Random) -> None:
    """Until `stop`, ask a random node (of `nodes`: addresses) for the group's linearizable end, keeping
    every answer in `ends`."""
    loop = asyncio.get_running_loop()
    while loop.time() < stop:
        t = time.monotonic()
        try:
            info = await c.end(node=rng.choice(nodes))
        except QuorumLogError:
            pass
        else:
            ends.append(EndQuery(name, t, time.monotonic(), info.committed))
        await asyncio.sleep(rng.uniform(0.005, 0.05))


async def fault_leaders(c: AsyncClient, cluster: LocalCluster, stop: float, rng: random.Random,
                        is_leader: Callable[[dict[str, Any]], bool], every_s: tuple[float, float],
                        kill_s: tuple[float, float], pause_s: tuple[float, float], margin_s: float) -> list[str]:
    """Until `margin_s` before `stop`, every `every_s` seconds SIGKILL (restarting it `kill_s` later) or
    SIGSTOP (for `pause_s`) the node whose group status `is_leader`; returns what was done."""
    done = []
    loop = asyncio.get_running_loop()
    while loop.time() < stop - margin_s:
        await asyncio.sleep(rng.uniform(*every_s))
        st = await statuses(c, cluster)
        leaders = [n for n, s in st.items() if is_leader(s)]
        if len(leaders) != 1:
            continue
        i = node_index(cluster, leaders[0])
        if rng.random() < 0.5:
            cluster.kill(i, signal.SIGKILL)
            done.append(f"kill {leaders[0]}")
            await asyncio.sleep(rng.uniform(*kill_s))
            cluster.start(i)
        else:
            proc = cluster.nodes[i].proc
            assert proc is not None
            proc.send_signal(signal.SIGSTOP)
            done.append(f"pause {leaders[0]}")
            try:
                await asyncio.sleep(rng.uniform(*pause_s))
            finally:
                proc.send_signal(signal.SIGCONT)
    return done
