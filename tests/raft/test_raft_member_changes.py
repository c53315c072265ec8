"""Membership changes in the pure core, scripted: a learner added and promoted, a follower and a leader
removed, one change at a time, the current-term rule (and the 2015 scenario it prevents), truncation of an
uncommitted change, and a removed member that cannot disrupt the group."""

from __future__ import annotations

from dataclasses import replace

import pytest

from quorumlog.core.role import Role
from quorumlog.errors import ResponseCode
from quorumlog.raft.membership import Membership
from quorumlog.raft.messages import Message, VoteRequest, VoteResponse
from quorumlog.raft.node import RaftNode
from quorumlog.sim.script import SCRIPT_RAFT, Script

OK = int(ResponseCode.SUCCESS)
ELECTION_MS = SCRIPT_RAFT.election_timeout_ms + SCRIPT_RAFT.election_backoff_ms


def cut(*nodes: str):  # type: ignore[no-untyped-def]
    return lambda m: m.sender in nodes or m.target in nodes


def grown(spares: int = 1, **cfg: int) -> Script:
    """n0..n2 a group led by n0, with `spares` more nodes (n3...) started to join it."""
    ids = [f"n{i}" for i in range(3 + spares)]
    s = Script(ids, config=replace(SCRIPT_RAFT, **cfg), members=ids[:3])
    s.elect("n0")
    s.run(200)
    assert s.leader() == "n0"
    return s


def committed(s: Script, node: str) -> int:
    return s.stores[node].committed_index


def config(s: Script, node: str) -> Membership:
    return s.nodes[node].member.config


def test_a_learner_is_added_catches_up_is_promoted_and_then_counts() -> None:
    s = grown()
    for k in range(5):
        s.propose("n0", [f"e{k}".encode()])
    s.run(200)
    rid = s.change("n0", lambda m: m.with_learner("n3", "127.0.0.1:9003"))
    s.run(300)
    assert s.result("n0", rid).code == OK  # type: ignore[union-attr]
    assert config(s, "n3").learners == {"n3"} and config(s, "n3").address("n3") == "127.0.0.1:9003"
    assert s.stores["n3"].end_index == s.stores["n0"].end_index  # it received the whole log
    n3 = s.nodes["n3"]  # a learner its log names may campaign, one election timeout after a voter would
    assert n3.can_lead() and not n3.member.is_voter and n3.member.config.learners == {"n3"}
    # A learner counts for nothing: with n1 and n2 cut off, n0 and n3 commit nothing.
    before = committed(s, "n0")
    s.propose("n0", [b"not yet"])
    s.run(300, drop=cut("n1", "n2"))
    assert committed(s, "n0") == before
    s.run(300)  # (healed: n1 and n2 commit it)
    rid = s.change("n0", lambda m: m.promoted("n3"))
    s.run(300)
    assert s.result("n0", rid).code == OK  # type: ignore[union-attr]
    assert all(config(s, n).voters == {"n0", "n1", "n2", "n3"} for n in s.ids)
    # Four voters: n0 and n3 are no majority any more, n0, n1 and n3 are.
    before = committed(s, "n0")
    s.propose("n0", [b"needs three"])
    s.run(300, drop=cut("n1", "n2"))
    assert committed(s, "n0") == before
    s.run(300, drop=cut("n2"))
    assert committed(s, "n0") == before + 1


def test_one_change_at_a_time_and_the_current_term_rule() -> None:
    s = grown(spares=2)
    first = s.change("n0", lambda m: m.with_learner("n3"))
    second = s.change("n0", lambda m: m.with_learner("n4"))  # before the first committed
    c = s.result("n0", second)
    assert c is not None and c.code == ResponseCode.CHANGE_IN_PROGRESS and "one change at a time" in (c.reason or "")
    s.run(300)
    assert s.result("n0", first).code == OK  # type: ignore[union-attr]
    # A new leader may change nothing until an entry of its own term committed.
    s.transfer("n0", "n1")
    while s.leader() != "n1":
        assert s.deliver(), "the transfer stalled"
    rid = s.change("n1", lambda m: m.with_learner("n4"))  # its NOOP's pushes are still queued
    c = s.result("n1", rid)
    assert c is not None and c.code == ResponseCode.LEADER_NOT_READY and "its term" in (c.reason or "")
    s.settle()
    rid = s.change("n1", lambda m: m.with_learner("n4"))
    s.run(300)
    assert s.result("n1", rid).code == OK  # type: ignore[union-attr]
    assert all(config(s, n).learners == {"n3", "n4"} for n in s.ids)


def test_malformed_and_lagging_changes_are_refused_with_the_reason() -> None:
    s = grown(learner_promote_lag=2)
    rid = s.change("n0", lambda m: Membership.of(["n0", "n1", "n3"]))  # two voters swapped at once
    c = s.result("n0", rid)
    assert c is not None and c.code == ResponseCode.UNEXPECTED_ARGUMENT and "one voter at a time" in (c.reason or "")
    rid = s.change("n0", lambda m: m.promoted("n2"))
    c = s.result("n0", rid)
    assert c is not None and c.code == ResponseCode.UNEXPECTED_ARGUMENT and "voter already" in (c.reason or "")
    rid = s.change("n0", lambda m: m.with_learner("n3"))
    s.run(300, drop=cut("n3"))  # committed without it; it gets nothing
    assert s.result("n0", rid).code == OK  # type: ignore[union-attr]
    for k in range(6):
        s.propose("n0", [f"e{k}".encode()])
    s.run(200, drop=cut("n3"))
    rid = s.change("n0", lambda m: m.promoted("n3"))
    c = s.result("n0", rid)
    assert c is not None and c.code == ResponseCode.FALL_BEHIND_TOO_MUCH and "entries behind" in (c.reason or "")
    s.run(1000)  # it catches up: now it may be promoted
    rid = s.change("n0", lambda m: m.promoted("n3"))
    s.run(300)
    assert s.result("n0", rid).code == OK  # type: ignore[union-attr]


def test_removing_a_follower_shrinks_the_majority() -> None:
    s = grown()
    rid = s.change("n0", lambda m: m.without("n2"))
    s.run(300)
    assert s.result("n0", rid).code == OK  # type: ignore[union-attr]
    assert config(s, "n0").voters == {"n0", "n1"} and config(s, "n2").voters == {"n0", "n1"}
    assert not s.nodes["n2"].can_lead()
    before = committed(s, "n0")
    s.propose("n0", [b"two of two"])
    s.run(300, drop=cut("n1"))
    assert committed(s, "n0") == before  # n0 alone is no majority of two
    s.run(300)
    assert committed(s, "n0") == before + 1


def test_the_leader_removes_itself_commits_then_hands_over_and_never_campaigns() -> None:
    s = grown()
    s.propose("n0", [b"before"])
    s.run(200)
    rid = s.change("n0", lambda m: m.without("n0"))
    s.run(400)
    assert s.result("n0", rid).code == OK  # type: ignore[union-attr]
    new = s.leader()
    assert new in ("n1", "n2") and s.nodes["n0"].role == Role.FOLLOWER
    assert s.nodes["n0"].stats["removed_leader_step_downs"] == 1
    term = s.nodes[new].term  # type: ignore[index]
    campaigns = s.nodes["n0"].stats["campaigns"] + s.nodes["n0"].stats["pre_votes_started"]
    s.propose(new, [b"after"])  # type: ignore[arg-type]
    s.run(10 * ELECTION_MS)  # n0 hears from nobody now, and must not campaign
    assert s.nodes["n0"].stats["campaigns"] + s.nodes["n0"].stats["pre_votes_started"] == campaigns
    assert s.leader() == new and s.nodes[new].term == term  # type: ignore[index]


def test_a_removed_member_that_does_not_know_it_cannot_win_a_vote() -> None:
    s = grown()
    rid = s.change("n0", lambda m: m.without("n2"))
    s.run(300, drop=cut("n2"))  # n2 never hears of its removal
    assert s.result("n0", rid).code == OK  # type: ignore[union-attr]
    assert config(s, "n2").voters == {"n0", "n1", "n2"} and s.nodes["n2"].can_lead()
    # It campaigns, as its configuration allows; n1 holds the change that n2 lacks, so refuses it, in
    # the pre-vote and in a real vote alike, and the group keeps its leader and term.
    n2 = s.stores["n2"]
    term = s.nodes["n1"].term
    for pre in (True, False):
        ask: Message = VoteRequest("g0", "n2", "n1", term + 1, n2.end_index, n2.end_term, pre, False)
        ready = s.nodes["n1"].step(ask, s.clock["n1"] + 10 * ELECTION_MS)  # (long after any lease)
        assert not any(isinstance(r, VoteResponse) and r.granted for r in ready.messages)
    s.run(10 * ELECTION_MS, drop=lambda m: m.target == "n2" and m.sender == "n0")
    assert s.leader() == "n0" and config(s, "n0").voters == {"n0", "n1"}


def test_truncating_an_uncommitted_change_restores_the_previous_configuration() -> None:
    s = grown()
    rid = s.change("n0", lambda m: m.with_learner("n3"))
    assert config(s, "n0").learners == {"n3"}  # in force once appended
    s.queue.clear()  # nobody received it
    s.run(2 * ELECTION_MS, drop=cut("n0"))  # n1 or n2 leads a later term without it
    new = s.leader() if s.leader() != "n0" else None
    assert new in ("n1", "n2") or any(s.nodes[n].role == Role.LEADER for n in ("n1", "n2"))
    s.run(600)  # n0 returns: its uncommitted CONFIG entry is cut away
    assert s.result("n0", rid).code == ResponseCode.TERM_CHANGED  # type: ignore[union-attr]
    assert config(s, "n0") == Membership.of(["n0", "n1", "n2"]) and config(s, "n0").learners == frozenset()


@pytest.mark.parametrize("rule", [True, False], ids=["with the current-term rule", "planted bug: without it"])
def test_the_2015_single_server_change_bug(rule: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """raft-dev, 2015: {S1..S4}; S1 (term 1) appends "add S5" (here: the promotion of learner S5), which
    reaches only S5; S2 wins term 2 with S3 and S4 and appends "remove S1", committed by S2 and S3; S1 then
    wins term 3 with S4 and S5 (a majority of its five) and overwrites the committed removal. With the
    rule, S2 must first commit its NOOP, which needs S4 or S1 too: the removal is refused until then."""
    if not rule:
        def no_rule(node: RaftNode) -> tuple[ResponseCode | None, str | None]:
            key = node._config_key
            if node.leader is None:
                return ResponseCode.NOT_LEADER, None
            if key is not None and key[0] > node.store.committed_index:
                return ResponseCode.CHANGE_IN_PROGRESS, None
            return None, None
        monkeypatch.setattr(RaftNode, "_change_refusal", no_rule)
    ids = ["s1", "s2", "s3", "s4", "s5"]
    # Raft as the paper has it: no pre-vote, no leader lease (both would only make the scenario longer).
    s = Script(ids, config=replace(SCRIPT_RAFT, pre_vote=False, check_quorum=False), members=ids[:4])
    s.elect("s1")
    s.run(200)
    assert s.leader() == "s1"
    # s5 joins as a learner (committed by all); its promotion, "add s5" as a voter, reaches s5 only.
    rid = s.change("s1", lambda m: m.with_learner("s5"))
    s.run(300)
    assert s.result("s1", rid).code == OK  # type: ignore[union-attr]
    s.change("s1", lambda m: m.promoted("s5"))
    s.run(100, drop=lambda m: m.sender == "s1" and m.target != "s5")
    assert config(s, "s1").voters == config(s, "s5").voters == {"s1", "s2", "s3", "s4", "s5"}
    # s1 stops; s2 campaigns and wins with s3 and s4 (without the add, so they vote for it); after its
    # vote s4 hears nothing more from s2: s2's NOOP reaches s3 only, no majority of the four.
    s.restart("s1")
    s1_s5 = lambda m: bool({m.sender, m.target} & {"s1", "s5"})  # noqa: E731
    s.elect("s2", drop=lambda m: s1_s5(m) or (m.sender == "s2" and m.target == "s4"
                                              and not isinstance(m, VoteRequest)))
    assert s.nodes["s2"].role == Role.LEADER
    rid = s.change("s2", lambda m: m.without("s1"))
    s.run(300, drop=lambda m: s1_s5(m) or "s4" in (m.sender, m.target))
    removal = s.result("s2", rid)
    if rule:
        assert removal is not None and removal.code == ResponseCode.LEADER_NOT_READY
        return
    assert removal is not None and removal.code == OK
    committed_on_s2 = s.stores["s2"].committed_index
    assert committed_on_s2 >= 0
    # s1 returns, cut off from s2 and s3: it wins term 3 with s4 and s5 and overwrites what s2 committed.
    s.restart("s2")  # (s2 stops too, so that s1's campaign is not told of term 2 by it)
    cut_off = lambda m: bool({m.sender, m.target} & {"s2", "s3"})  # noqa: E731
    for _ in range(5):
        s.elect("s1", drop=cut_off)
        if s.nodes["s1"].role == Role.LEADER:
            break
    assert s.nodes["s1"].role == Role.LEADER and s.nodes["s1"].term >= 3
    s.run(300, drop=cut_off)  # s1 commits with s4 and s5
    # Two committed logs that differ: what s2 committed at index 2 (its removal of s1) is not s1's.
    both = min(s.stores["s1"].committed_index, committed_on_s2)
    differ = [i for i in range(both + 1) if s.stores["s1"].term_at(i) != s.stores["s2"].term_at(i)]
    assert differ, "the planted bug went unnoticed"


def test_a_member_removed_and_added_back_is_pushed_to_again() -> None:
    s = grown()
    s.change("n0", lambda m: m.with_learner("n3"))
    s.run(300)
    rid = s.change("n0", lambda m: m.without("n3"))
    while s.result("n0", rid) is None:  # committed by n0, n1, n2; n3 not yet sent that commit index
        assert s.deliver(drop=cut("n3")), "the removal stalled"
    s.change("n0", lambda m: m.with_learner("n3"))  # back before the leader dropped its dispatcher
    s.run(300)
    for k in range(4):
        s.propose("n0", [f"after {k}".encode()])
    s.run(1000)
    assert config(s, "n0").learners == {"n3"}
    assert s.stores["n3"].end_index == s.stores["n0"].end_index, "n3 was dropped from the pushes"
