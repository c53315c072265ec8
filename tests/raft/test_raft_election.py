"""Scripted election scenarios: votes, dueling candidates, pre-vote and check-quorum, leadership
transfer with each refusal, the preferred leader, protocol-aware recovery and bad input."""

from __future__ import annotations

import random
from dataclasses import replace

from quorumlog.config import RaftConfig
from quorumlog.core.driver import Driver
from quorumlog.core.role import Role
from quorumlog.errors import ResponseCode
from quorumlog.raft.member import members_digest
from quorumlog.raft.messages import (
    HeartbeatRequest,
    Message,
    PushKind,
    PushRequest,
    PushResponse,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from quorumlog.raft.node import RaftNode
from quorumlog.sim.script import SCRIPT_RAFT, Script, store_with_terms
from quorumlog.store.memory import MemoryStore


def leaders_by_term(s: Script) -> dict[int, set[str]]:
    out: dict[int, set[str]] = {}
    for line in s.transcript:
        parts = line.split()
        if len(parts) >= 3 and parts[1] == "LEADER":
            out.setdefault(int(parts[2][1:]), set()).add(parts[0])
    return out


def test_raft_vote_is_durable_before_it_is_answered() -> None:
    store = MemoryStore()
    store.set_identity(members_digest("g0", ["n0", "n1", "n2"]))  # a member of a bootstrapped group
    node = RaftNode("n1", "g0", ["n0", "n1", "n2"], store, SCRIPT_RAFT, random.Random(1))
    ready = node.step(VoteRequest("g0", "n0", "n1", 5, -1, 0), 0)
    assert store.load_vote() == (5, "n0")
    [resp] = ready.messages
    assert isinstance(resp, VoteResponse) and resp.granted and resp.term == 5
    # A second candidate of the same term is refused; so is a less up-to-date log in a later term.
    again = node.step(VoteRequest("g0", "n2", "n1", 5, -1, 0), 0).messages[0]
    assert isinstance(again, VoteResponse) and not again.granted
    store.append([b"x"], 5)
    stale_log = node.step(VoteRequest("g0", "n2", "n1", 6, -1, 0), 0).messages[0]
    assert isinstance(stale_log, VoteResponse) and not stale_log.granted and store.load_vote() == (6, None)


def test_the_driver_holds_every_message_until_the_vote_is_durable() -> None:
    """A store that defers the term and vote (the server's): the vote response, and whatever the node sends
    after it, leave only once persist_stable() returned; a crash before loses the vote and said nothing."""
    store = MemoryStore(defer_stable=True)
    store.set_identity(members_digest("g0", ["n0", "n1", "n2"]))
    node = RaftNode("n1", "g0", ["n0", "n1", "n2"], store, SCRIPT_RAFT, random.Random(1))
    sent: list[Message] = []
    persists: list[int] = []
    driver = Driver(node, sent.append, lambda c: None, start_persist=lambda: persists.append(1))
    driver.apply(node.step(VoteRequest("g0", "n0", "n1", 5, -1, 0), 0), 0)
    assert store.stable_unsaved and persists == [1] and sent == []
    driver.apply(node.step(VoteRequest("g0", "n2", "n1", 5, -1, 0), 0), 0)  # (refused: held behind the vote)
    assert sent == [] and persists == [1]
    store.persist_stable()
    driver.persisted()
    assert [(type(m), m.target, m.granted) for m in sent] == [(VoteResponse, "n0", True), (VoteResponse, "n2", False)]
    driver.apply(node.step(VoteRequest("g0", "n2", "n1", 6, -1, 0), 0), 0)  # a new term: held again
    assert len(sent) == 2 and persists == [1, 1]
    store.crash()
    assert store.load_vote() == (5, "n0")


def test_raft_new_leader_appends_a_noop_of_its_term() -> None:
    s = Script(["n0", "n1", "n2"])
    s.elect("n0")
    entry = s.stores["n0"].get(0)
    assert entry.magic == 2 and entry.body == b"" and entry.term == s.nodes["n0"].term == 1
    assert s.stores["n0"].committed_index == 0
    s.tick("n0", 10)  # idle followers learn the commit index at the leader's next tick
    s.settle()
    assert all(s.stores[i].committed_index == 0 for i in s.ids)


def test_raft_commit_reaches_idle_followers_once_per_tick() -> None:
    """Appends one at a time cost each follower one push and one answer per entry; the commit index
    follows with the next push or, when idle, one COMMIT push at the leader's tick."""
    s = Script(["n0", "n1", "n2"])
    s.elect("n0")
    start = len(s.transcript)
    for k in range(5):
        s.propose("n0", [b"e%d" % k])
        s.settle()
    lines = s.transcript[start:]
    assert not [ln for ln in lines if "COMMIT" in ln]
    assert len([ln for ln in lines if ln.startswith("PushRequest") and "APPEND" in ln]) == 10
    assert s.stores["n0"].committed_index == 5 and s.stores["n1"].committed_index == 4  # from the last push
    s.tick("n0", 10)
    commits = [ln for ln in s.transcript[start:] if ln.startswith("PushRequest") and "COMMIT" in ln]
    assert len(commits) == 2
    s.settle()
    assert all(s.stores[i].committed_index == 5 for i in s.ids)


def test_raft_dueling_candidates_resolve_to_one_leader() -> None:
    cfg = replace(SCRIPT_RAFT, pre_vote=False)
    s = Script(["n0", "n1", "n2", "n3"], config=cfg, seed=3)
    for n in ("n0", "n1"):  # both time out at once
        s.tick(n)
        deadline = s.nodes[n].elector.deadline
        assert deadline is not None
        s.tick(n, deadline - s.clock[n])
    assert s.nodes["n0"].role == s.nodes["n1"].role == Role.CANDIDATE
    # n2 hears n0 first, n3 hears n1 first: two votes each, three needed.
    s.deliver(only=lambda m: (m.sender, m.target) in (("n0", "n2"), ("n1", "n3")))
    s.settle()
    assert s.leader() is None
    assert s.nodes["n0"].term == s.nodes["n1"].term == 1
    s.run(3000)
    leader = s.leader()
    assert leader is not None and s.nodes[leader].term >= 2
    assert all(s.nodes[i].leader_id == leader for i in s.ids)
    assert all(len(v) == 1 for v in leaders_by_term(s).values())


def _isolate(node: str):  # type: ignore[no-untyped-def]
    return lambda m: node in (m.sender, m.target)


def test_raft_partitioned_node_rejoins_without_disturbing_the_leader() -> None:
    s = Script(["n0", "n1", "n2"], seed=5)
    s.elect("n0")
    s.run(300)
    term = s.nodes["n0"].term
    s.run(3000, drop=_isolate("n2"))
    assert s.nodes["n2"].stats["pre_votes_started"] >= 3
    assert s.nodes["n2"].term == term  # pre-votes never raise the term
    s.run(500)
    assert s.leader() == "n0" and s.nodes["n0"].term == term
    assert s.nodes["n2"].role == Role.FOLLOWER and s.nodes["n2"].leader_id == "n0"


def test_raft_without_pre_vote_a_rejoining_node_deposes_the_leader() -> None:
    """The counterpart of the test above: the same partition, pre-vote off, does disturb the group."""
    s = Script(["n0", "n1", "n2"], config=replace(SCRIPT_RAFT, pre_vote=False), seed=5)
    s.elect("n0")
    s.run(300)
    term = s.nodes["n0"].term
    s.run(3000, drop=_isolate("n2"))
    assert s.nodes["n2"].term > term + 2
    s.run(1500)
    leader = s.leader()
    assert leader is not None and s.nodes[leader].term > term


def test_raft_check_quorum_makes_an_isolated_leader_step_down() -> None:
    s = Script(["n0", "n1", "n2"], seed=2)
    s.elect("n0")
    rid = s.propose("n0", [b"x"])
    s.run(SCRIPT_RAFT.election_timeout_ms * 2, drop=_isolate("n0"))
    assert s.nodes["n0"].role == Role.FOLLOWER
    assert s.nodes["n0"].stats["check_quorum_step_downs"] == 1
    result = s.result("n0", rid)
    assert result is not None and result.code == ResponseCode.TERM_CHANGED


def _caught_up_three(config: RaftConfig = SCRIPT_RAFT) -> Script:
    s = Script(["n0", "n1", "n2"], config=config, seed=7)
    s.elect("n0")
    s.propose("n0", [b"a", b"b"])
    s.settle()
    return s


def test_raft_leadership_transfer_succeeds() -> None:
    s = _caught_up_three()
    term = s.nodes["n0"].term
    rid = s.transfer("n0", "n1")
    s.settle()
    result = s.result("n0", rid)
    assert result is not None and result.code == ResponseCode.SUCCESS and result.kind == "transfer"
    assert result.leader_id == "n1"  # the answer names the new leader, not the old one
    assert s.leader() == "n1" and s.nodes["n1"].term == term + 1
    assert [m for m in s.transcript if m.startswith("TimeoutNow n0->n1")]


def test_raft_leadership_transfer_refusals() -> None:
    s = _caught_up_three()
    cases = [("n0", "nx", ResponseCode.UNKNOWN_MEMBER), ("n1", "n2", ResponseCode.NOT_LEADER)]
    for node, target, code in cases:
        result = s.result(node, s.transfer(node, target))
        assert result is not None and result.code == code


def test_raft_leadership_transfer_in_progress_then_failed() -> None:
    s = _caught_up_three()

    def no_timeout_now(m: Message) -> bool:
        return isinstance(m, TimeoutNow)

    first = s.transfer("n0", "n1")
    s.settle(drop=no_timeout_now)
    second = s.result("n0", s.transfer("n0", "n2"))
    assert second is not None and second.code == ResponseCode.LEADER_TRANSFERRING
    append = s.result("n0", s.propose("n0", [b"held"]))
    assert append is not None and append.code == ResponseCode.LEADER_TRANSFERRING
    s.run(SCRIPT_RAFT.transfer_timeout_ms + 50, drop=no_timeout_now)
    failed = s.result("n0", first)
    assert failed is not None and failed.code == ResponseCode.TAKE_LEADERSHIP_FAILED
    assert s.leader() == "n0"
    rid = s.propose("n0", [b"after"])
    s.settle()
    ok = s.result("n0", rid)
    assert ok is not None and ok.code == ResponseCode.SUCCESS


def test_raft_leadership_transfer_refused_when_target_falls_behind() -> None:
    cfg = replace(SCRIPT_RAFT, max_transfer_lag=5)
    s = _caught_up_three(cfg)

    def n2_deaf(m: Message) -> bool:
        return isinstance(m, PushRequest) and m.target == "n2"

    s.propose("n0", [b"%d" % i for i in range(10)])
    s.settle(drop=n2_deaf)
    result = s.result("n0", s.transfer("n0", "n2"))
    assert result is not None and result.code == ResponseCode.FALL_BEHIND_TOO_MUCH
    rid = s.transfer("n0", "n1")  # a caught-up target is accepted
    s.settle(drop=n2_deaf)
    ok = s.result("n0", rid)
    assert ok is not None and ok.code == ResponseCode.SUCCESS and s.leader() == "n1"


def test_raft_preferred_leader_is_handed_leadership() -> None:
    s = Script(["n0", "n1", "n2"], config=replace(SCRIPT_RAFT, preferred_leader="n2"), seed=4)
    s.elect("n0")
    assert s.leader() == "n0"
    s.run(2000)
    assert s.leader() == "n2"
    assert s.nodes["n0"].stats["preferred_leader_transfers"] == 1
    s.run(2000)
    assert s.leader() == "n2"  # and it stays there


def _n2_loses_committed_entries(seed: int) -> tuple[Script, MemoryStore, int]:
    """A 3-node group with 8 committed entries; n2 crashes and its recovery finds its last 3 committed
    entries corrupt and cuts them. Returns the script, n2's store and its committed index before."""
    s = Script(["n0", "n1", "n2"], seed=seed)
    s.elect("n0")
    s.propose("n0", [b"%d" % i for i in range(8)])
    s.settle()
    s.run(100)
    store = s.stores["n2"]
    assert isinstance(store, MemoryStore)
    store.checkpoint()
    committed = store.committed_index
    store.crash()
    store.lose_from(committed - 3)
    return s, store, committed


def test_raft_damaged_node_neither_votes_nor_campaigns_until_refetched() -> None:
    s, store, committed = _n2_loses_committed_entries(seed=9)
    assert store.damage is not None
    node = s.restart("n2")
    assert node.recovering
    vote = node.step(VoteRequest("g0", "n1", "n2", node.term + 1, 100, node.term + 1), s.clock["n2"]).messages
    assert isinstance(vote[0], VoteResponse) and not vote[0].granted
    assert vote[0].code == ResponseCode.ILLEGAL_MEMBER_STATE
    s.run(1500, drop=_isolate("n0"))  # alone with n1 and no leader: n2 must not campaign
    assert node.stats["campaign_blocked_damaged"] >= 1 and node.stats["campaigns"] == 0
    s.run(2000)
    assert not node.recovering and node.stats["recovered_from_damage"] == 1
    leader = s.leader()
    assert leader is not None and s.terms("n2") == s.terms(leader)


def test_raft_damaged_node_recovers_only_once_the_refetched_entries_are_durable() -> None:
    """n2 fetched its lost committed entries again, but its flush has not run: a crash now loses them once
    more. Until they are durable it stays recovering (no vote), and the flag it persists carries that
    through a crash. Ending recovery before the flush let a restarted n2 vote for a leader lacking them
    (the simulator's rot fault, seed 410458)."""
    s, store, committed = _n2_loses_committed_entries(seed=9)
    node = s.restart("n2")
    s.auto_flush = False
    for _ in range(300):  # every node flushes but n2
        s.run(10)
        for i in s.owed - {"n2"}:
            s.flush(i)
    assert store.end_index >= committed and store.committed_index >= committed
    assert store.durable_index < committed
    assert node.recovering and not node.can_vote() and store.recovering
    store.checkpoint()
    store.crash()  # the unflushed entries are gone again; the debt is not
    node = s.restart("n2")
    assert node.recovering and not node.can_vote()
    s.auto_flush = True
    s.run(2000)
    assert not node.recovering and node.can_vote() and store.damage is None and store.durable_index >= committed


def test_raft_bad_input_is_answered_not_raised() -> None:
    s = _caught_up_three()
    node = s.nodes["n1"]
    term = node.term
    now = s.clock["n1"]
    garbage: list[Message] = [
        PushRequest("other", "n0", "n1", term, PushKind.APPEND, 0, 0, 0, 1, 1, b"x"),
        PushRequest("g0", "n1", "n1", term, PushKind.COMPARE, 0, 0, 0),  # from itself
        PushRequest("g0", "n0", "n2", term, PushKind.COMPARE, 0, 0, 0),
        PushRequest("g0", "n0", "n1", term - 1, PushKind.COMPARE, 0, 0, 0),
        PushRequest("g0", "n0", "n1", term, PushKind.COMPARE, 10**12, 3, 0),
        PushRequest("g0", "n0", "n1", term, PushKind.COMPARE, -7, 3, 0),
        PushRequest("g0", "n0", "n1", term, PushKind.TRUNCATE, 10**9, 3, 0),
        PushRequest("g0", "n0", "n1", term, PushKind.TRUNCATE, -5, 0, 0),
        PushRequest("g0", "n0", "n1", term, 99, 0, 0, 0),
        PushRequest("g0", "n0", "n1", term, PushKind.APPEND, s.stores["n1"].end_index + 1, 1, 0, 1, 1,
                    b"\xff" * 60),
        PushRequest("g0", "n0", "n1", term, PushKind.APPEND, -3, 1, 0, 1, 1, b"z"),
        HeartbeatRequest("g0", "n0", "n1", term, 10**15, 10**15),
        PushResponse("g0", "n0", "n1", term, PushKind.APPEND, 200, 5, 10**9, 10**9),
        VoteResponse("g0", "n2", "n1", term + 50, True, False, 200),
    ]
    ready = node.step_batch(garbage, now)
    codes = [m.code for m in ready.messages if isinstance(m, PushResponse)]
    assert ResponseCode.UNKNOWN_GROUP in codes and ResponseCode.UNKNOWN_MEMBER in codes
    assert ResponseCode.EXPIRED_TERM in codes and ResponseCode.INCONSISTENT_INDEX in codes
    assert ResponseCode.UNEXPECTED_ARGUMENT in codes and ResponseCode.INCONSISTENT_STATE in codes
    assert node.stats["rejected_misrouted"] == 3
    # The log and its commit index are untouched by the nonsense (the heartbeat's commit is clamped).
    assert s.terms("n1") == s.terms("n0")
    assert s.stores["n1"].committed_index <= s.stores["n1"].end_index
    s.settle()
    s.run(500)
    assert s.leader() == "n0"


def test_raft_restart_keeps_term_vote_and_log() -> None:
    stores = {i: store_with_terms([1, 1], vote_term=1) for i in ("n0", "n1", "n2")}
    s = Script(["n0", "n1", "n2"], stores=stores, seed=11)
    s.elect("n1")
    term = s.nodes["n1"].term
    for i in s.ids:
        s.restart(i)
        assert s.nodes[i].term == term
    assert s.stores["n0"].load_vote() == (term, "n1")
    s.run(2000)
    leader = s.leader()
    assert leader is not None and s.nodes[leader].term > term
    assert s.terms(leader)[:3] == [1, 1, term]


def test_raft_recovery_survives_a_restart_midway() -> None:
    s, store, committed = _n2_loses_committed_entries(seed=12)
    s.restart("n2")
    # The lost range comes back (the store's Damage report clears), then the node crashes again
    # before it has committed up to its leader's end.
    raw, _ = s.stores["n0"].read_raw(committed - 3, 4, 1 << 20)
    store.append_encoded(raw)
    store.flush()
    assert store.damage is None
    node = s.restart("n2")
    assert node.recovering and not node.can_vote()
    s.run(1000)
    assert not node.recovering and node.can_vote()
    assert not store.recovering  # persisted: a restart now would not recover again


def test_raft_candidate_asks_again_members_that_did_not_grant() -> None:
    """A vote request lost (a member not yet up or connected) is sent again every heartbeat interval,
    to the members that have not granted, so the round is won without waiting for the next one."""
    s = Script(["n0", "n1", "n2"])
    s.tick("n0")
    s.tick("n0", s.nodes["n0"].elector.deadline - s.clock["n0"])  # type: ignore[operator]
    first = [m for m in s.queue if type(m) is VoteRequest]
    assert {m.target for m in first} == {"n1", "n2"} and all(m.pre_vote for m in first)
    s.deliver(drop=lambda m: m.target == "n2")  # n2 never hears it; n1 grants
    s.deliver(drop=lambda m: True)  # and n1's grant is lost too
    s.tick("n0", SCRIPT_RAFT.heartbeat_interval_ms - 1)
    assert not s.queue  # not before the interval
    s.tick("n0", 1)
    again = [m for m in s.queue if type(m) is VoteRequest]
    assert {m.target for m in again} == {"n1", "n2"} and all(m.pre_vote and m.term == 1 for m in again)
    s.settle()
    assert s.leader() == "n0" and s.nodes["n0"].term == 1


def test_raft_pristine_group_elects_its_first_member_without_a_timeout() -> None:
    s = Script(["n2", "n1", "n0"], bootstrapped=False)
    s.tick_all(0)  # probes
    s.settle()  # answers: every member bootstraps; n0, the lowest id, campaigns at its next tick
    for i in ("n1", "n2"):
        s.tick(i)
        assert s.nodes[i].role == Role.FOLLOWER
    s.tick("n0")
    s.settle()
    assert s.leader() == "n0" and s.clock["n0"] == 0
    # With a preferred leader, that member opens the election instead.
    s = Script(["n0", "n1", "n2"], config=replace(SCRIPT_RAFT, preferred_leader="n2"), bootstrapped=False)
    s.tick_all(0)
    s.settle()
    s.tick_all(0)
    s.settle()
    assert s.leader() == "n2" and s.clock["n2"] == 0
