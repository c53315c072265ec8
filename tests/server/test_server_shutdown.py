"""SIGTERM of a leader under load: every append gets an honest answer, so clients that never retry an
uncertain append (retry_uncertain=False) write no entry twice and lose none that was acknowledged."""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pytest

from quorumlog.client import AsyncClient
from quorumlog.errors import AppendUncertainError, QuorumLogError
from quorumlog.server.cluster import LocalCluster

from .conftest import await_until, committed_entries, node_index, statuses, wait_leader

CLIENTS = 4
IN_FLIGHT = 16  # appends each client keeps outstanding
ROUNDS = 4  # leaders stopped one after another (each restarted before the next)


@dataclass
class Outcomes:
    acked: dict[bytes, tuple[int, int]] = field(default_factory=dict)  # body -> (index, term)
    uncertain: set[bytes] = field(default_factory=set)  # may or may not be in the log (at most once)
    failed: dict[bytes, str] = field(default_factory=dict)  # a definite "not appended"
    stop: bool = False

    def acked_in_term_above(self, term: int) -> int:
        return sum(1 for _i, t in self.acked.values() if t > term)


async def _producer(client: AsyncClient, name: str, out: Outcomes) -> None:
    """Append unique bodies, IN_FLIGHT at a time, as fast as the cluster answers, until told to stop."""

    async def lane(lane_no: int) -> None:
        seq = 0
        while not out.stop:
            body = f"{name}-{lane_no}-{seq}".encode()
            seq += 1
            try:
                r = await client.append(body)
            except AppendUncertainError:
                out.uncertain.add(body)
            except QuorumLogError as e:
                out.failed[body] = str(e)
            else:
                out.acked[body] = (r.index, r.term)

    await asyncio.gather(*(lane(i) for i in range(IN_FLIGHT)))


@pytest.mark.smoke
def test_sigterm_of_a_loaded_leader_writes_nothing_twice(cluster_factory: Any) -> None:
    cluster: LocalCluster = cluster_factory()
    out = Outcomes()

    async def main() -> None:
        probe = AsyncClient(cluster.endpoints)
        clients = [AsyncClient(cluster.endpoints, retry_uncertain=False) for _ in range(CLIENTS)]
        producers = [asyncio.create_task(_producer(c, f"c{i}", out)) for i, c in enumerate(clients)]
        crashed: list[Any] = []
        try:
            # Each SIGTERM races the clients' answers against the closing of their connections in its own
            # way; several rounds make a wrong answer show up in (nearly) every run.
            for round_no in range(ROUNDS):
                leader = await wait_leader(probe, cluster)
                term = (await statuses(probe, cluster))[leader]["term"]

                async def loaded(term: int = term) -> bool:
                    return out.acked_in_term_above(term - 1) >= 1000

                async def next_leader_serves(term: int = term) -> bool:
                    return out.acked_in_term_above(term) >= 500

                await await_until(loaded, 120, f"round {round_no}: 1000 appends in term {term}")
                i = node_index(cluster, leader)
                status = await asyncio.to_thread(cluster.kill, i, signal.SIGTERM, 30)
                assert status == 0, f"leader {leader} did not exit cleanly on SIGTERM: {status}"
                await await_until(next_leader_serves, 120, f"round {round_no}: appends after term {term}")
                cluster.start(i)
                await await_until(partial(_follows, probe, cluster, leader), 60, f"{leader} to follow again")
        finally:
            out.stop = True
            crashed = await asyncio.wait_for(asyncio.gather(*producers, return_exceptions=True), 60)
            for c in clients:
                await c.close()
        assert not [e for e in crashed if e is not None], f"a producer failed: {crashed}"
        final = await wait_leader(probe, cluster)
        await probe.close()
        log = await committed_entries(cluster.nodes[node_index(cluster, final)].address)

        counts = Counter(body for _i, body in log)
        twice = [b for b, n in counts.items() if n > 1]
        assert not twice, f"{len(twice)} bodies appear more than once in the log, e.g. {twice[:5]}"
        where = {body: index for index, body in log}
        lost = [b for b, (index, _t) in out.acked.items() if where.get(b) != index]
        assert not lost, f"{len(lost)} acknowledged appends missing or elsewhere, e.g. {lost[:5]}"
        unexpected = [b for b in out.failed if b in where]
        assert not unexpected, f"appends answered as failed are in the log: {unexpected[:5]}"
        strangers = set(where) - set(out.acked) - out.uncertain
        assert not strangers, f"entries no client sent or was told of: {sorted(strangers)[:5]}"

    asyncio.run(main())


async def _follows(probe: AsyncClient, cluster: LocalCluster, node_id: str) -> bool:
    st = (await statuses(probe, cluster)).get(node_id)
    return st is not None and st["role"] == "follower" and st["leader"] is not None
