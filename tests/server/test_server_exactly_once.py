"""Exactly once on real processes: concurrent idempotent clients while leaders are killed and cut off.

Every append is recorded (invoke time, completion time, outcome). Afterwards the committed log is read
and checked: nothing acknowledged is lost or misplaced, nothing is written twice, nothing appears that no
client sent, and the log order respects real time (an append acknowledged before another was sent comes
first). A cut-off leader is a paused process (SIGSTOP): it keeps its sockets and comes back believing it
leads, which is the case the real-time order check is about.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from quorumlog.client import AsyncClient
from quorumlog.errors import SequenceError
from quorumlog.net.ops import Op as WireOp

from .conftest import committed_entries, metric_value, node_index, scrape, wait_leader
from .history import Op, check_history, fault_leaders, record_appends

CLIENTS = 4
TASKS_PER_CLIENT = 3
RUN_S = 14.0


def test_history_checker_catches_each_kind_of_violation() -> None:
    a, b = Op(b"a", 0.0, 1.0, 0), Op(b"b", 2.0, 3.0, 1)
    assert check_history([a, b], [(0, b"a"), (1, b"b")])["acked"] == 2
    for log, what in (([(0, b"a")], "acknowledged at 1"),
                      ([(0, b"a"), (1, b"b"), (2, b"b")], "written twice"),
                      ([(0, b"a"), (1, b"b"), (2, b"z")], "no client sent")):
        with pytest.raises(AssertionError, match=what):
            check_history([a, b], log)
    late = Op(b"c", 5.0, float("inf"), None, "timeout")  # sent after a was acknowledged, yet before it
    with pytest.raises(AssertionError, match="before an entry"):
        check_history([Op(b"a", 0.0, 1.0, 1), late], [(0, b"c"), (1, b"a")])


@pytest.mark.slow
def test_idempotent_clients_write_everything_exactly_once_through_leader_faults(cluster_factory: Any) -> None:
    cluster = cluster_factory()
    ops: list[Op] = []
    rng = random.Random(20261123)

    async def main() -> None:
        async with AsyncClient(cluster.endpoints) as admin:
            await wait_leader(admin, cluster)
            clients = [AsyncClient(cluster.endpoints, retry_timeout=20) for _ in range(CLIENTS)]
            try:
                stop = asyncio.get_running_loop().time() + RUN_S
                tasks = [record_appends(c, f"c{k}t{t}", stop, ops) for k, c in enumerate(clients)
                         for t in range(TASKS_PER_CLIENT)]
                nemesis = fault_leaders(admin, cluster, stop, rng, lambda s: s["role"] == "leader", every_s=(2.0, 3.5),
                                        kill_s=(0.3, 1.0), pause_s=(1.0, 2.0), margin_s=3)
                results = await asyncio.gather(nemesis, *tasks)
            finally:
                for c in clients:
                    await c.close()
            faults = results[0]
            assert faults, "the nemesis never found a leader to fault"
            for i in range(len(cluster.nodes)):
                cluster.start(i)  # every node back
            leader = await wait_leader(admin, cluster, timeout=30)
            addr = cluster.nodes[node_index(cluster, leader)].address
            # Everything sent has an outcome by now; the leader's NOOP commits whatever it holds.
            await asyncio.sleep(1.0)
            log = [(i, b) for i, b in await committed_entries(addr) if b]
            summary = check_history(ops, log)
            assert summary["acked"] > 200, (summary, faults)
            print(f"history: {len(ops)} appends, {summary}, faults: {faults}")

    asyncio.run(main())


def test_conditional_append_duplicates_and_their_counters_over_the_wire(cluster_factory: Any) -> None:
    """A conditional append names the actual last entry when it does not match; a retried sequence is
    answered with its original entries; status and /metrics count producers, duplicates and refusals."""
    from quorumlog.client import Client
    from quorumlog.errors import ExpectedEndMismatchError
    from quorumlog.net.schemas import APPEND_PRODUCER_REQUEST, APPEND_RESPONSE

    cluster = cluster_factory(nodes=1)
    with Client(cluster.endpoints, retry_timeout=20) as c:
        first = c.append(b"first", expected_end=-1)
        with pytest.raises(ExpectedEndMismatchError) as refused:
            c.append(b"stale", expected_end=-1)
        assert refused.value.actual_end == first.index
        # The code named once, then where and why (the reason repeated the code's name).
        assert str(refused.value).startswith("EXPECTED_END_MISMATCH: the group's last entry is ")
        assert str(refused.value).count("EXPECTED_END_MISMATCH") == 1
        second = c.append_many([b"second", b"third"], expected_end=first.index)
        assert [r.index for r in second] == [first.index + 1, first.index + 2]

    async def raw() -> None:
        async with AsyncClient(cluster.endpoints) as ac:
            body = APPEND_PRODUCER_REQUEST.encode("g0", b"once", 42, 0, -2)
            a = await ac._leader_call(WireOp.APPEND, body, APPEND_RESPONSE, uncertain_ok=True)
            b = await ac._leader_call(WireOp.APPEND, body, APPEND_RESPONSE, uncertain_ok=True)  # a retry
            assert (a.index, a.term, a.pos) == (b.index, b.term, b.pos)
            gap = APPEND_PRODUCER_REQUEST.encode("g0", b"gap", 42, 5, -2)
            with pytest.raises(SequenceError, match="OUT_OF_ORDER_SEQUENCE"):
                await ac._leader_call(WireOp.APPEND, gap, APPEND_RESPONSE, uncertain_ok=True)
            st = await ac.node_status(cluster.nodes[0].address)
            assert st["groups"]["g0"]["producers"] >= 2

    asyncio.run(raw())
    with Client(cluster.endpoints) as c:
        bodies = [e.body for e in c.read(0, 100)]
    assert bodies.count(b"once") == 1 and b"stale" not in bodies and b"gap" not in bodies
    fams = scrape(cluster.nodes[0].admin_url)
    assert metric_value(fams, "quorumlog_deduplicated_appends_total", group="g0", node="n0") == 1
    assert metric_value(fams, "quorumlog_rejected_sequences_total", group="g0", node="n0",
                        reason="out_of_order_sequence") == 1
