"""Linearizable read points in the Raft simulator (raft/reads.py): every history asks leaders and followers
for the committed end, and the simulator checks each answer against what was committed before the request;
planted bugs show that check catches stale answers."""

from __future__ import annotations

from typing import Any

import pytest

from quorumlog.raft import reads
from quorumlog.sim.cluster import SimConfig
from quorumlog.sim.runner import first_failure, run_seed

RUNS = SimConfig(steps=1000)


def test_sim_reads_are_asked_and_checked_in_every_history() -> None:
    checked = failed = 0
    for seed in range(30):
        r = run_seed(seed, RUNS)
        assert r.ok, f"seed {seed} failed at step {r.step}: {r.error}\n{r.trace}"
        assert r.stats["end_reads_checked"] > 0, seed
        checked += r.stats["end_reads_checked"]
        failed += r.stats["end_NOT_LEADER"] + r.stats["end_TIMEOUT"]
    assert checked > 500 and failed > 0  # (refusals happen: leaders change while reads wait)


def test_sim_catches_a_leader_that_answers_without_a_round(monkeypatch: pytest.MonkeyPatch) -> None:
    """The read index of a leader that does not ask a majority first: a deposed leader (the "deposed" fault
    runs some seeds without check-quorum) answers its own, stale, commit."""

    def at_once(self: reads.ReadIndex, out: Any) -> None:
        while self.leader_ready and self.waiting:
            self._finish(self.waiting.popleft(), reads.SUCCESS, self.store.committed_index, out)

    monkeypatch.setattr(reads.ReadIndex, "confirm", at_once)
    error = first_failure(run_seed, RUNS, range(200))
    assert "answered a linearizable end" in error, error


def test_sim_catches_a_follower_that_answers_its_own_commit(monkeypatch: pytest.MonkeyPatch) -> None:
    original = reads.ReadIndex._admit

    def local(self: reads.ReadIndex, batch: Any, now: int, out: Any) -> bool:
        if self.member.role == reads.Role.FOLLOWER:
            self._finish(batch, reads.SUCCESS, self.store.committed_index, out)
            return False
        return original(self, batch, now, out)

    monkeypatch.setattr(reads.ReadIndex, "_admit", local)
    error = first_failure(run_seed, RUNS, range(200))
    assert "answered a linearizable end" in error, error
