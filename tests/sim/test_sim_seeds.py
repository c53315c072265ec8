"""Seeded whole-cluster simulations: over 1,000 seeds with every fault, and proof that the checker
catches real bugs when one is planted."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from quorumlog.core.driver import Driver
from quorumlog.entry import MAGIC_NORMAL
from quorumlog.errors import DiskFullError
from quorumlog.raft import handler, pusher
from quorumlog.raft.member import MemberState
from quorumlog.raft.node import RaftNode
from quorumlog.sim.checker import Checker, InvariantViolation
from quorumlog.sim.cluster import ALL_FAULTS, SINGLE_NODE_FAULTS, SimConfig
from quorumlog.sim.nodes import FillableStore
from quorumlog.sim.runner import first_failure, main, run_seed
from quorumlog.store.memory import MemoryStore

SHORT = SimConfig(steps=300)


def _run_range(seeds: range, cfg: SimConfig) -> tuple[int, int]:
    acked = elections = 0
    for seed in seeds:
        r = run_seed(seed, cfg)
        assert r.ok, f"seed {seed} failed at step {r.step}: {r.error}\n{r.trace}"
        acked += r.stats["acked_entries"]
        elections += r.stats["elections"]
    return acked, elections


@pytest.mark.sweep
def test_sim_three_nodes_every_fault_700_seeds() -> None:
    acked, elections = _run_range(range(0, 700), SHORT)
    # The runs did real work, not just survive. (Each run now starts with a probe round, and wipes and
    # expiry cost replicas their logs, so 3-second runs acknowledge ~95k entries in all, not ~110k.)
    assert acked > 80_000 and elections > 700


@pytest.mark.sweep
def test_sim_five_nodes_every_fault_250_seeds() -> None:
    acked, elections = _run_range(range(10_000, 10_250), replace(SHORT, nodes=5))
    assert acked > 20_000 and elections > 250


def test_sim_no_faults_has_one_leader_and_steady_progress() -> None:
    for seed in range(20_000, 20_050):
        r = run_seed(seed, replace(SHORT, faults=()))
        assert r.ok, r.error
        assert r.stats["elections"] == 1
        assert r.stats["append_WAIT_QUORUM_ACK_TIMEOUT"] == 0 and r.stats["append_TERM_CHANGED"] == 0
        assert r.stats["acked_entries"] > 100


@pytest.mark.sweep
def test_sim_flush_async_seeds() -> None:
    """Stores durable at write (flush=async): commits follow acks and proposals, never a flush. One node
    commits in its own propose; without that, its appends waited for ever (the checker says "uncommitted
    entries after a quiet period")."""
    acked, _ = _run_range(range(50_000, 50_150), replace(SHORT, flush="async"))
    assert acked > 15_000
    for flush in ("async", "sync"):
        acked, _ = _run_range(range(51_000, 51_050), replace(SHORT, nodes=1, flush=flush, faults=SINGLE_NODE_FAULTS))
        assert acked > 5_000


def test_sim_a_single_node_refuses_faults_that_need_peers() -> None:
    with pytest.raises(ValueError, match="a single node takes only the faults"):
        run_seed(1, replace(SHORT, nodes=1))


def test_sim_file_store_seeds() -> None:
    faults = tuple(f for f in ALL_FAULTS if f != "corrupt")  # corruption is injected into MemoryStores only
    _run_range(range(30_000, 30_015), replace(SHORT, file_store=True, faults=faults))


def test_sim_a_seed_replays_exactly() -> None:
    a = run_seed(77, SHORT)
    b = run_seed(77, SHORT)
    assert a.ok and b.ok and a.stats == b.stats


# Seeds that once failed, replayed in full (those found before membership changes, without them, so that
# they replay the same runs). 6073: a repair found through a heartbeat answer raised the watermark by a
# compare with no append to follow, and older-term entries stayed uncommitted. 410458: a node ended its
# recovery before the re-fetched entries were durable. 430619: an older, shorter push's ack ended a longer
# one from the same index, and an idle follower stayed behind. With membership changes: 42, a member
# removed and added back before the leader stopped pushing to it was then dropped from the pushes for
# good; 270 (five nodes), a leader that lost leadership while removing itself held the longest log and
# could not campaign, and the rest, one of them recovering, had no majority; 20996, a learner whose promotion
# a later leader cut away held the longest log, so every voter's candidate was refused while one voter
# recovered: a learner named by its log now campaigns (an election timeout after the voters may), counts
# only the voters' votes, commits and hands over; 59935, a node whose log rotted took a heartbeat sent before
# its last acknowledgement reached the leader as its recovery target, so it recovered short of a committed
# entry that its own acknowledgement had made so. Quiet groups (raft/quiesce.py): 239 (300 steps), a leader
# elected on a full disk never wrote its NOOP; 501 and 30003 (300 steps), a quiet leader stepped down on rot
# and its quiet followers refused every vote; 460197, a follower in recovery told its leader (quiet refused),
# which compared it at its watermark of -1 and sent RESETs the follower refused, for ever; 460785, a quiet
# leader restarted within an election timeout with a damaged log, and its quiet followers waited on it.
CLASSIC = tuple(f for f in ALL_FAULTS if f != "members")
REGRESSIONS = [(6073, SimConfig(steps=2000, faults=CLASSIC)), (410458, SimConfig(steps=5000, faults=CLASSIC)),
               (430619, SimConfig(steps=5000, faults=CLASSIC)), (42, SimConfig(steps=1000)),
               (270, SimConfig(steps=1000, nodes=5)), (20996, SimConfig(steps=1000)), (59935, SimConfig(steps=1000)),
               (239, SHORT), (501, SHORT), (30003, SHORT), (460197, SimConfig(steps=1000)),
               (460785, SimConfig(steps=1000))]


@pytest.mark.parametrize(("seed", "cfg"), REGRESSIONS)
def test_sim_regression_seeds(seed: int, cfg: SimConfig) -> None:
    r = run_seed(seed, cfg)
    assert r.ok, f"seed {seed} failed at step {r.step}: {r.error}\n{r.trace}"


@pytest.mark.slow
def test_sim_long_runs() -> None:
    _run_range(range(40_000, 40_030), replace(SHORT, steps=3000))
    _run_range(range(41_000, 41_010), replace(SHORT, steps=3000, nodes=5))




def test_sim_catches_commit_by_counting_a_minority(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pusher, "quorum_index", lambda marks, majority: max(marks))
    error = first_failure(run_seed, SHORT, range(50))
    assert error, "a leader committing on its own ack must be caught"


def test_sim_catches_acks_before_durability(monkeypatch: pytest.MonkeyPatch) -> None:
    def eager_ack(self, req, acked, end, out):  # type: ignore[no-untyped-def]
        m = self.member
        out.messages.append(handler.PushResponse(m.group, m.node_id, req.sender, m.term, req.kind,
                                                 handler.SUCCESS, req.index, acked, end, 0))

    monkeypatch.setattr(handler.EntryHandler, "_ack", eager_ack)
    error = first_failure(run_seed, SHORT, range(300))
    assert error, "acknowledging unflushed entries must lose acknowledged appends in some crash"


def plant_messages_before_the_vote_is_durable(monkeypatch: pytest.MonkeyPatch) -> None:
    begin = Driver._begin_persist

    def eager(self: Driver) -> None:  # the bug: messages leave while the term and vote are being written
        begin(self)
        self.held = None

    monkeypatch.setattr(Driver, "_begin_persist", eager)


def test_sim_catches_messages_sent_before_the_vote_is_durable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stores defer the term and vote (as the server's), written after a simulated disk latency that a
    crash can cut short; the driver holds messages until then. Without the hold a node that voted, or spoke
    in a new term, restarts without knowing it: the checker compares what it said with what it kept."""
    plant_messages_before_the_vote_is_durable(monkeypatch)
    assert "before its term was durable" in first_failure(run_seed, SimConfig(steps=1000), range(80))


def test_sim_full_disks_refuse_appends_and_the_cluster_goes_on() -> None:
    """The "full" fault: a node's disk refuses writes for a while. Appends are refused DISK_FULL (never
    written: the checker holds each refused body out of the committed log), and everything resolves."""
    full = refused = 0
    for seed in range(40):
        r = run_seed(seed, SimConfig(steps=2000))
        assert r.ok, f"seed {seed} failed at step {r.step}: {r.error}\n{r.trace}"
        full += r.stats["disks_full"]
        refused += r.stats["append_DISK_FULL"]
    assert full > 50 and refused > 50


def test_sim_rot_found_while_running_is_cut_and_fetched_again() -> None:
    """The "rot" fault: a read (or the scrub) meets a damaged committed entry of a running node, which cuts
    its log there (a leader steps down) and fetches it again, neither voting nor leading meanwhile."""
    rots = 0
    for seed in range(30):
        r = run_seed(seed, SimConfig(steps=2000))
        assert r.ok, f"seed {seed} failed at step {r.step}: {r.error}\n{r.trace}"
        rots += r.stats["rots"]
    assert rots > 20


def test_sim_catches_rot_cut_without_recovery(monkeypatch: pytest.MonkeyPatch) -> None:
    def cut_and_forget(self: RaftNode, error: Any, now: int) -> Any:
        out, before = self._begin()
        self.store.mark_damaged(error.index, str(error))
        self.store.clear_damage()  # as if nothing had been lost: it votes and leads at once
        return self._finish(out, before)

    monkeypatch.setattr(RaftNode, "report_corruption", cut_and_forget)
    cfg = SimConfig(steps=3000, faults=("drop", "delay", "partition", "crash", "pause", "rot"))
    assert "acknowledged entry" in first_failure(run_seed, cfg, range(200))


def test_sim_catches_a_refusal_that_wrote(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plant a bug: a full disk writes the entries and still reports DISK_FULL ("nothing written")."""
    def append(self, bodies, term, magic=MAGIC_NORMAL, metas=None):  # type: ignore[no-untyped-def]
        appended = MemoryStore.append(self, bodies, term, magic, metas)
        if self.full:
            raise DiskFullError("full, but written")
        return appended

    monkeypatch.setattr(FillableStore, "append", append)
    error = first_failure(run_seed, SimConfig(steps=2000), range(60))
    assert error and "refused as written nowhere" in error, error


def _votes_while(monkeypatch: pytest.MonkeyPatch, allowed: Callable[[RaftNode], bool]) -> None:
    """Plant a bug: nodes vote and lead whenever `allowed` says so, and the member state's own refusal to
    record a vote while recovering is bypassed (so only the checker can notice)."""
    monkeypatch.setattr(RaftNode, "can_vote", allowed)
    monkeypatch.setattr(RaftNode, "can_lead", allowed)
    original = MemberState.set_term

    def set_term(self: MemberState, term: int, voted_for: str | None) -> None:
        recovering, self.recovering = self.recovering, False
        try:
            original(self, term, voted_for)
        finally:
            self.recovering = recovering

    monkeypatch.setattr(MemberState, "set_term", set_term)


def test_sim_catches_a_recovering_node_that_votes(monkeypatch: pytest.MonkeyPatch) -> None:
    _votes_while(monkeypatch, lambda node: node.joiner is None)
    error = first_failure(run_seed, SHORT, range(100))
    assert error, "a node that lost acknowledged entries and votes must lose some in a run"


def test_sim_catches_a_wiped_node_that_votes_before_probing(monkeypatch: pytest.MonkeyPatch) -> None:
    _votes_while(monkeypatch, lambda node: node.recover_floor is None)
    error = first_failure(run_seed, SHORT, range(300))
    assert error, "a wiped node that votes at once must break safety in some run"


def test_sim_runner_main_reports_and_replays(monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--seeds", "0:3", "--steps", "200", "-q"]) == 0
    assert "3 seeds x 200 steps" in capsys.readouterr().out
    monkeypatch.setattr(pusher, "quorum_index", lambda marks, majority: max(marks))
    assert main(["--seeds", "0:50", "--steps", "300", "-q", "--max-failures", "1", "--trace", "20"]) == 1
    err = capsys.readouterr().err
    assert "FAIL seed" in err and "--- replay: quorumlog simulate --seeds " in err


def test_sim_catches_a_restart_that_claims_more_commit_than_it_had(monkeypatch: pytest.MonkeyPatch) -> None:
    """The restart check's bound (the commit a node had, or its checkpoint's after a cut at damage) still
    catches a store that restores a commit index nobody gave it."""
    crash = MemoryStore.crash

    def crash_and_claim(self: MemoryStore) -> None:
        crash(self)
        self._committed = self.end_index  # the whole durable log taken as committed

    monkeypatch.setattr(MemoryStore, "crash", crash_and_claim)
    error = first_failure(run_seed, SHORT, range(50))
    assert error and "above the" in error, error


def test_the_checker_lets_a_log_cut_at_damage_restart_with_its_checkpoints_commit() -> None:
    """Seeds 180766 and 180091 of the primary/backup simulator once played this out (`--seeds 180000:181000
    --steps 3000 --faults all`; since primaries record their takeover, no seed found does): a primary cut its
    log at damage, fetched it back to a commit below its checkpoint's, and crashed. Its restart took the
    checkpoint's commit: entries the group had committed, held again. A cut keeps its checkpoint; a wiped
    store does not, and one that claims a commit after a wipe is caught."""
    store = MemoryStore()
    running: dict[str, MemoryStore | None] = {"n0": store}
    checker = Checker(["n0"], lambda node: running[node])
    bodies = [b"e%d" % i for i in range(6)]
    store.append(bodies, 1)
    store.flush()
    store.set_committed(5)
    checker.check()
    store.checkpoint()
    checker.on_checkpoint("n0", store)  # it names commit 5
    store.discard_after(1)  # the cut (HaNode._cut_at): entries 2..5 go, and the commit with them
    checker.on_cut("n0", store)
    checker.check()
    store.append(bodies[2:4], 1)  # fetched back up to 3, committed there, then the crash
    store.flush()
    store.set_committed(3)
    checker.check()
    running["n0"] = None
    store.append(bodies[4:], 1)
    store.flush()
    store.crash()
    assert store.committed_index == 5  # the checkpoint's commit, above the 3 it had
    running["n0"] = store
    checker.on_restart("n0", store)
    checker.check()
    wiped = Checker(["n0"], lambda node: running[node])
    wiped.on_wipe("n0")  # as the simulator once reported the cut: a wipe has no checkpoint left
    with pytest.raises(InvariantViolation, match="above the -1 it had before"):
        wiped.on_restart("n0", store)
