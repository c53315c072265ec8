"""Quiet groups (raft/quiesce.py): an idle group stops heartbeating, anything wakes it, and a follower whose
leader's node falls silent (the driver's peer_down) elects a new leader as fast as without quiescence."""

from __future__ import annotations

from dataclasses import replace

from quorumlog.core.role import Role
from quorumlog.errors import CorruptEntryError, ResponseCode
from quorumlog.raft.messages import HeartbeatRequest, HeartbeatResponse, PushRequest, VoteRequest
from quorumlog.raft.quiesce import QUIET_END
from quorumlog.sim.nodes import FillableStore
from quorumlog.sim.script import SCRIPT_RAFT, Script

IDS = ["n0", "n1", "n2"]
TIMEOUT = SCRIPT_RAFT.election_timeout_ms


def quiet_group(seed: int = 3) -> Script:
    s = Script(IDS, seed=seed)
    s.elect("n0")
    s.propose("n0", [b"a", b"b"])
    s.settle()
    s.run(3 * TIMEOUT)
    assert all(s.nodes[i].quiesced for i in IDS), {i: s.nodes[i].stats for i in IDS}
    return s


def test_an_idle_group_goes_quiet_and_sends_nothing() -> None:
    s = quiet_group()
    assert all(s.stores[i].committed_index == s.stores["n0"].end_index == 2 for i in IDS)
    assert s.nodes["n0"].stats["quiesced"] == 1
    sent = len(s.transcript)
    s.run(20 * TIMEOUT)  # ten seconds of silence: no heartbeat, no election
    assert len(s.transcript) == sent
    assert s.leader() == "n0" and all(s.nodes[i].role == Role.FOLLOWER for i in ("n1", "n2"))


def test_a_group_with_a_member_not_heard_from_stays_awake() -> None:
    """A member that does not answer (down, cut off) keeps the leader heartbeating, so it learns of the
    leader the moment it is back."""
    s = Script(IDS, seed=3)
    s.elect("n0")
    s.run(4 * TIMEOUT, drop=lambda m: "n2" in (m.sender, m.target))
    assert not s.nodes["n0"].quiesced and s.nodes["n0"].stats["quiesced"] == 0


def test_a_proposal_wakes_the_group_and_commits() -> None:
    s = quiet_group()
    rid = s.propose("n0", [b"c"])
    assert not s.nodes["n0"].quiesced
    s.settle()
    r = s.result("n0", rid)
    assert r is not None and r.code == ResponseCode.SUCCESS
    assert not s.nodes["n1"].quiesced and not s.nodes["n2"].quiesced  # (the push woke them)
    s.run(3 * TIMEOUT)
    assert all(s.nodes[i].quiesced for i in IDS) and all(s.stores[i].committed_index == 3 for i in IDS)


def test_a_read_index_on_a_quiet_leader_wakes_it_for_a_round() -> None:
    s = quiet_group()
    start = len(s.transcript)
    (rid,) = s.read_index("n0")
    s.settle()
    r = s.result("n0", rid)
    assert r is not None and r.code == ResponseCode.SUCCESS and r.last_index == 2
    assert any(ln.startswith("HeartbeatRequest") for ln in s.transcript[start:])


def test_a_follower_whose_leader_node_falls_silent_elects_within_its_back_off() -> None:
    s = quiet_group()
    now = s.clock["n1"]
    s.apply("n1", s.nodes["n1"].peer_down("n0", now))
    assert not s.nodes["n1"].quiesced and s.nodes["n1"].stats["quiet_ended_leader_silent"] == 1
    deadline = s.nodes["n1"].elector.deadline
    assert deadline is not None and deadline - now <= SCRIPT_RAFT.election_backoff_ms  # the silence was the timeout
    s.apply("n2", s.nodes["n2"].peer_down("n0", s.clock["n2"]))
    s.run(SCRIPT_RAFT.election_backoff_ms + 200, drop=lambda m: "n0" in (m.sender, m.target))
    leader = s.leader()
    assert leader in ("n1", "n2") and s.nodes[leader].term == s.nodes["n0"].term + 1


def test_peer_down_of_another_node_leaves_a_quiet_follower_quiet() -> None:
    s = quiet_group()
    s.apply("n1", s.nodes["n1"].peer_down("n2", s.clock["n1"]))
    assert s.nodes["n1"].quiesced


def test_a_quiet_leader_that_loses_a_majority_steps_down() -> None:
    """peer_down wakes a quiet leader; check-quorum counts from then, so cut off it steps down."""
    s = quiet_group()
    for p in ("n1", "n2"):
        s.apply("n0", s.nodes["n0"].peer_down(p, s.clock["n0"]))
    assert not s.nodes["n0"].quiesced
    s.run(2 * TIMEOUT, drop=lambda m: "n0" in (m.sender, m.target))
    assert s.nodes["n0"].role == Role.FOLLOWER and s.nodes["n0"].stats["check_quorum_step_downs"] == 1


def test_a_quiet_follower_refuses_votes_as_one_in_its_leader_s_lease() -> None:
    s = quiet_group()
    n1 = s.nodes["n1"]
    vote = VoteRequest("g0", "n2", "n1", n1.term + 1, 2, n1.term, pre_vote=True, transfer=False)
    out = n1.step(vote, s.clock["n1"])
    (answer,) = out.messages
    assert not answer.granted and answer.code == ResponseCode.INCONSISTENT_LEADER  # type: ignore[union-attr]


def test_a_restarted_follower_wakes_the_quiet_leader_and_finds_it() -> None:
    """A member restarted after the flag never heard it: its timer runs out, its pre-vote reaches the quiet
    leader, which wakes and heartbeats; the other member, quiet, refuses the pre-vote. Nobody's term moves."""
    s = quiet_group()
    term = s.nodes["n0"].term
    s.restart("n2")
    s.run(TIMEOUT + SCRIPT_RAFT.election_backoff_ms + 200)
    assert s.nodes["n2"].stats["pre_votes_started"] >= 1
    assert s.leader() == "n0" and s.nodes["n0"].term == term and s.nodes["n2"].leader_id == "n0"
    assert s.nodes["n0"].stats["quiet_ended"] >= 1
    s.run(3 * TIMEOUT)
    assert all(s.nodes[i].quiesced for i in IDS)


def test_a_heartbeat_overtaken_by_the_flag_does_not_wake_a_quiet_follower() -> None:
    """Rounds only grow: a plain heartbeat older than the flagged one (reordered on the way) is stale."""
    s = quiet_group()
    n1 = s.nodes["n1"]
    commit = s.stores["n1"].committed_index
    old = HeartbeatRequest("g0", "n0", "n1", n1.term, commit, commit, round=1)
    s.apply("n1", n1.step(old, s.clock["n1"]))
    assert n1.quiesced and n1.stats["quiet_kept_stale_heartbeat"] == 1
    push = PushRequest("g0", "n0", "n1", n1.term, 4, commit, n1.term, commit)  # a COMMIT push: work again
    s.apply("n1", n1.step(push, s.clock["n1"]))
    assert not n1.quiesced


def test_a_follower_that_cannot_go_quiet_says_so_and_is_compared_again() -> None:
    """A follower whose commit index lags (it lost its leader for a moment, and with it the proof that its
    entries are the leader's) answers the flag INCONSISTENT_STATE; the leader wakes and compares its log
    again, which gives it the commit index, and the group goes quiet next time."""
    s = Script(IDS, seed=3)
    s.elect("n0")
    s.propose("n0", [b"a", b"b"])
    s.settle()
    n2 = s.nodes["n2"]
    n2.handler.reset()  # what a pre-vote round of its own leaves behind: nothing proven of the leader's log
    n2.store.set_committed(0)
    s.run(3 * TIMEOUT)
    assert s.nodes["n0"].stats["quiet_refused_compare"] >= 1 and n2.stats["quiet_refused"] >= 1
    assert s.stores["n2"].committed_index == 2
    s.run(3 * TIMEOUT)
    assert all(s.nodes[i].quiesced for i in IDS)


def test_quiesce_off_keeps_heartbeating() -> None:
    s = Script(IDS, config=replace(SCRIPT_RAFT, quiesce=False), seed=3)
    s.elect("n0")
    s.run(3 * TIMEOUT)
    assert not any(s.nodes[i].quiesced for i in IDS)
    sent = len(s.transcript)
    s.run(TIMEOUT)
    assert len(s.transcript) > sent


def test_a_leader_elected_on_a_full_disk_writes_its_noop_once_there_is_space() -> None:
    """Found by the simulator (seed 239 of 300 steps): the NOOP refused for a full disk was never written,
    so entries of earlier terms stayed uncommitted until a client wrote (and the group never went quiet)."""
    full = FillableStore()
    s = Script(IDS, stores={"n1": full}, seed=3)
    s.elect("n0")
    s.propose("n0", [b"a"])
    s.settle(drop=lambda m: m.target in ("n0", "n2"))  # n1 alone holds "a", and n0 never hears it did
    assert s.stores["n1"].end_index == 1 and s.stores["n1"].committed_index == 0
    full.full = True
    cut_off = lambda m: "n0" in (m.sender, m.target)  # noqa: E731
    s.run(3 * TIMEOUT, drop=cut_off)
    assert s.leader() == "n1" and s.nodes["n1"].stats["noop_disk_full"] >= 1  # (n2's log is shorter)
    assert s.stores["n1"].committed_index == 0
    full.full = False
    s.run(100, drop=cut_off)
    assert s.nodes["n1"].stats["noop_written_late"] == 1
    assert s.stores["n1"].committed_index == s.stores["n1"].end_index == 2


def test_a_quiet_leader_that_steps_down_tells_its_quiet_followers() -> None:
    """Found by the simulator (seed 501 of 300 steps): a quiet leader that found its log damaged stepped down
    while its node lived on, so its quiet followers refused every vote and nobody led. Now it sends QUIET_END
    (a heartbeat of its old term that asserts nothing else), and again each election timeout while no leader
    is known."""
    s = quiet_group()
    n0 = s.nodes["n0"]
    term = n0.term
    ready = n0.step(HeartbeatResponse("g0", "n1", "n0", term + 1, 200, 2, 0), s.clock["n0"])  # a later term
    ends = [m for m in ready.messages if isinstance(m, HeartbeatRequest) and m.quiet == QUIET_END]
    assert {m.target for m in ends} == {"n1", "n2"} and all(m.term == term for m in ends)
    s.apply("n0", ready)
    s.settle(drop=lambda m: m.target == "n2")  # n2 misses it
    assert not s.nodes["n1"].quiesced and s.nodes["n1"].stats["quiet_ended_leader_stepped_down"] == 1
    assert s.nodes["n2"].quiesced
    s.run(3 * TIMEOUT)  # (n2 hears n0 ask for votes: its leader leads no more)
    leader = s.leader()
    assert leader is not None and s.nodes[leader].term > term
    assert s.nodes["n2"].leader_id == leader and s.nodes["n2"].term == s.nodes[leader].term


def test_a_quiet_follower_asked_for_a_vote_by_its_own_leader_runs_its_timer_again() -> None:
    """Its leader's node restarted within the liveness timeout: never silent, but it leads no more."""
    s = quiet_group()
    s.restart("n0")
    s.run(3 * TIMEOUT)
    leader = s.leader()
    assert leader is not None
    assert sum(s.nodes[i].stats["quiet_ended_leader_stepped_down"] for i in ("n1", "n2")) >= 1
    assert all(s.nodes[i].leader_id == leader for i in IDS)


def test_a_quiet_follower_that_finds_damage_has_its_quiet_leader_repair_it() -> None:
    """Found by the real-process scrub test: a quiet follower's scrub found a rotten entry and cut its log, but
    its quiet leader never asked for the shorter end a heartbeat answer would have carried, so nothing was
    fetched again. It now tells its leader at once (INCONSISTENT_STATE, its end), which wakes and compares."""
    s = quiet_group()
    n1 = s.nodes["n1"]
    ready = n1.report_corruption(CorruptEntryError("rot", index=1), s.clock["n1"])
    assert any(isinstance(m, HeartbeatResponse) and m.code == ResponseCode.INCONSISTENT_STATE and m.end_index == 0
               for m in ready.messages)
    s.apply("n1", ready)
    assert n1.recovering and not n1.quiesced
    s.settle()
    assert not s.nodes["n0"].quiesced
    s.run(3 * TIMEOUT)
    assert not n1.recovering and s.stores["n1"].end_index == s.stores["n1"].committed_index == 2
    assert [s.stores["n1"].get(i).body for i in (1, 2)] == [b"a", b"b"]


def test_a_quiet_leader_restarted_in_recovery_frees_its_quiet_followers() -> None:
    """Found by the simulator (seed 460785): a quiet leader crashed and came back within an election timeout
    (no silence for peer_down) with a damaged log, so it could not campaign, and its quiet followers refused
    everyone else's votes. A node that voted for itself in its term now says QUIET_END until it knows a leader."""
    s = quiet_group()
    term = s.nodes["n0"].term
    s.stores["n0"].mark_damaged(2, "rot found at start")
    s.restart("n0")
    assert s.nodes["n0"].recovering
    s.run(4 * TIMEOUT)
    leader = s.leader()
    assert leader in ("n1", "n2") and s.nodes[leader].term > term
    assert sum(s.nodes[i].stats["quiet_ended_leader_stepped_down"] for i in ("n1", "n2")) >= 1
    s.run(4 * TIMEOUT)
    assert not s.nodes["n0"].recovering and s.stores["n0"].committed_index == s.stores[leader].committed_index
