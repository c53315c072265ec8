"""Membership changes under every fault in the simulator ("members": spares join as learners, are promoted,
voters and learners leave, the leader too, addresses move), and planted bugs it must catch."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from quorumlog.core.ready import Ready
from quorumlog.raft import pusher
from quorumlog.raft.elector import Elector
from quorumlog.raft.roles import Outcome
from quorumlog.sim.cluster import ALL_FAULTS, SimConfig
from quorumlog.sim.runner import first_failure, run_seed

MEMBERS = SimConfig(steps=1000, faults=ALL_FAULTS)


def test_sim_changes_members_under_every_fault() -> None:
    changes = kinds = 0
    for seed in range(40):
        r = run_seed(seed, MEMBERS)
        assert r.ok, f"seed {seed} failed at step {r.step}: {r.error}\n{r.trace}"
        changes += r.stats["config_SUCCESS"]
        kinds += r.stats["config_CHANGE_IN_PROGRESS"] + r.stats["config_LEADER_NOT_READY"]
    assert changes > 100, f"only {changes} changes committed in 40 runs"


def test_sim_catches_a_leader_that_counts_learners(monkeypatch: pytest.MonkeyPatch) -> None:
    """Planted: the leader counts every member's acknowledgement towards a commit, learners too."""
    def advance_commit(self: pusher.Leader, out: Ready) -> None:
        store = self.store
        marks = [min(store.durable_index, store.end_index), *(d.progress.match for d in self.peers)]
        idx = pusher.quorum_index(marks, self.member.majority)
        if idx > self.commit and store.term_at(idx) == self.term:
            self.commit = idx
            store.set_committed(idx)
            self.producers.forget_spans(idx)
            self.appends.on_commit(idx, out)

    monkeypatch.setattr(pusher.Leader, "advance_commit", advance_commit)
    error = first_failure(run_seed, MEMBERS, range(200))
    assert error and "Error" not in error, error  # a violated invariant, not a crash


def test_sim_catches_a_candidate_that_counts_learners_votes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Planted: a candidate asks every member for a vote, learners too, and counts every vote granted."""
    count, ask = Elector._count_votes, Elector._request_votes

    def as_if_all_voted(self: Elector, call: Callable[[], Outcome | None]) -> Outcome | None:
        m = self.member
        saved = m.voters, m.voter_others
        m.voters, m.voter_others = frozenset(m.members), list(m.others)
        try:
            return call()
        finally:
            m.voters, m.voter_others = saved

    monkeypatch.setattr(Elector, "_count_votes", lambda self: as_if_all_voted(self, lambda: count(self)))
    monkeypatch.setattr(Elector, "_request_votes", lambda self, *a, **k: as_if_all_voted(
        self, lambda: ask(self, *a, **k)))
    error = first_failure(run_seed, MEMBERS, range(300))
    assert error and "Error" not in error, error  # a violated invariant, not a crash
