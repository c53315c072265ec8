"""Scripted replication scenarios (Figure 7 is a golden file, testdata/figure7.txt): the Raft paper's
Figure 8, DLedger's EntryHandler paths
(fast-forward, fall-behind SUCCESS, queues), the durability gate and backpressure."""

from __future__ import annotations

from dataclasses import replace

from quorumlog.config import StoreConfig
from quorumlog.errors import ResponseCode
from quorumlog.raft.messages import Message, PushKind, PushRequest, PushResponse
from quorumlog.sim.nodes import FillableStore
from quorumlog.sim.script import SCRIPT_RAFT, Script, store_with_terms
from quorumlog.store.memory import MemoryStore


def test_raft_figure8_old_term_entry_is_not_committed_by_counting() -> None:
    cfg = replace(SCRIPT_RAFT, push_batch_entries=1)
    ids = ["s1", "s2", "s3", "s4", "s5"]
    logs = {"s1": [1, 2], "s2": [1, 2], "s3": [1], "s4": [1], "s5": [1, 3]}
    s = Script(ids, config=cfg, stores={i: store_with_terms(t, vote_term=3) for i, t in logs.items()})

    def noop_push(m: Message) -> bool:  # the new leader's NOOP (index 2, term 4) never arrives
        return isinstance(m, PushRequest) and m.kind == PushKind.APPEND and m.index == 2

    s.elect("s1", drop=noop_push)
    assert s.leader() == "s1" and s.nodes["s1"].term == 4
    # Index 1 (term 2) is now stored by every node, yet it must not commit by counting (Figure 8):
    # only an entry of the leader's own term does, carrying the earlier ones with it.
    assert all(s.stores[i].term_at(1) == 2 for i in ids) and s.stores["s1"].end_index == 2
    assert all(s.nodes[i].leader.peer_match(p) == 1 for i in ["s1"] for p in ids[1:])  # type: ignore[union-attr]
    assert s.stores["s1"].committed_index == -1
    # Once an entry of term 4 reaches a majority, everything up to it commits at once.
    s.run(cfg.max_push_timeout_ms + 20)  # the push timeout resends the NOOP
    assert s.stores["s1"].committed_index == 2
    assert all(s.terms(i) == [1, 2, 4] for i in ids)


def test_raft_figure8_the_entry_really_can_be_overwritten() -> None:
    """The counterfactual that makes the rule necessary: s5 is electable and replaces index 1."""
    cfg = replace(SCRIPT_RAFT, push_batch_entries=1)
    ids = ["s1", "s2", "s3", "s4", "s5"]
    logs = {"s1": [1, 2], "s2": [1, 2], "s3": [1, 2], "s4": [1], "s5": [1, 3]}
    s = Script(ids, config=cfg, stores={i: store_with_terms(t, vote_term=4) for i, t in logs.items()})

    def s1_gone(m: Message) -> bool:
        return "s1" in (m.sender, m.target)

    s.elect("s5", drop=s1_gone)
    assert s.leader() == "s5"
    assert all(s.terms(i)[:2] == [1, 3] for i in ["s2", "s3", "s4", "s5"])


def _three(config=SCRIPT_RAFT) -> Script:  # type: ignore[no-untyped-def]
    s = Script(["n0", "n1", "n2"], config=config)
    s.elect("n0")
    assert s.leader() == "n0"
    return s


def test_raft_fast_forward_after_a_lost_push() -> None:
    cfg = replace(SCRIPT_RAFT, push_batch_entries=2, max_push_timeout_ms=200)
    s = _three(cfg)
    first = s.stores["n0"].end_index + 1
    rid = s.propose("n0", [b"a", b"b", b"c", b"d", b"e", b"f"])

    def lost(m: Message) -> bool:
        return isinstance(m, PushRequest) and m.target == "n1" and m.kind == PushKind.APPEND and m.index == first

    s.deliver(drop=lost)
    assert s.stores["n1"].end_index == first - 1 and len(s.nodes["n1"].handler.appends) == 2
    s.settle()
    # Only the follower's clock moves: its wait for the missing index runs out first.
    s.tick("n1", cfg.max_push_timeout_ms)
    assert s.nodes["n1"].stats["fast_forward"] == 1
    s.settle()
    assert s.nodes["n0"].stats["push_fallback_to_compare"] == 1
    assert s.terms("n1") == s.terms("n0")
    result = s.result("n0", rid)
    assert result is not None and result.code == ResponseCode.SUCCESS


def test_raft_lost_ack_answered_by_fall_behind_success() -> None:
    s = _three()
    rid = s.propose("n0", [b"x", b"y"])

    def lose(m: Message) -> bool:  # n2 hears nothing; n1's append ack is lost
        return m.target == "n2" or (isinstance(m, PushResponse) and m.sender == "n1")

    s.settle(drop=lose)
    assert s.stores["n1"].end_index == s.stores["n0"].end_index
    assert s.result("n0", rid) is None  # no quorum ack yet
    s.run(SCRIPT_RAFT.max_push_timeout_ms + 20, drop=lambda m: m.target == "n2")  # resend from the watermark
    assert s.nodes["n1"].stats["push_already_held"] >= 1
    assert s.nodes["n0"].stats["push_resend_from_watermark"] >= 1
    result = s.result("n0", rid)
    assert result is not None and result.code == ResponseCode.SUCCESS


def test_raft_ack_of_a_shorter_push_from_the_same_index_keeps_the_longer_one_in_flight() -> None:
    """A resent push can start where an older, shorter one did (batches cut differently after new appends).
    The ack of the older one names the same first index: it ended the longer push too, so the leader held
    nothing in flight, had sent everything, and an idle group's follower stayed behind for good (the
    simulator, seed 430619: not converged after the heal)."""
    s = _three()
    leader = s.stores["n0"]
    first = leader.end_index + 1

    def to_n1(m: Message) -> bool:
        return isinstance(m, PushRequest) and m.target == "n1" and m.kind == PushKind.APPEND

    rid = s.propose("n0", [b"a", b"b", b"c", b"d"])  # one push of 4 to n1, lost
    s.settle(drop=to_n1)
    assert s.result("n0", rid) is not None and s.stores["n1"].end_index == first - 1
    older, n = leader.read_raw(first, 2, 1 << 20)  # the older, shorter push from the same index arrives
    term = s.nodes["n0"].term
    s.apply("n1", s.nodes["n1"].step(PushRequest("g0", "n0", "n1", term, PushKind.APPEND, first,
                                                 leader.term_at(first - 1), leader.committed_index, n,
                                                 leader.term_at(first + 1), older), s.clock["n1"]))
    s.settle()
    assert s.stores["n1"].end_index == first + 1
    s.run(2 * SCRIPT_RAFT.max_push_timeout_ms)  # nothing new is appended: only the leader's resend helps
    assert s.stores["n1"].end_index == leader.end_index and s.terms("n1") == s.terms("n0")


def test_raft_follower_acks_only_what_is_durable() -> None:
    s = _three()
    s.auto_flush = False
    s.propose("n0", [b"x"])
    s.deliver()  # the pushes reach the followers, which write but do not flush
    acks = [m for m in s.queue if isinstance(m, PushResponse) and m.code == ResponseCode.SUCCESS]
    assert acks == []
    assert s.stores["n1"].durable_index < s.stores["n1"].end_index
    s.flush("n1")
    acks = [m for m in s.queue if isinstance(m, PushResponse) and m.sender == "n1"]
    assert len(acks) == 1 and acks[0].acked == s.stores["n1"].end_index
    # The leader counts itself only up to its own durable index: n1's ack alone commits nothing new.
    before = s.stores["n0"].committed_index
    s.deliver(only=lambda m: isinstance(m, PushResponse))
    assert s.stores["n0"].committed_index == before
    s.flush("n0")
    assert s.stores["n0"].committed_index == s.stores["n0"].end_index


def test_raft_truncated_entries_are_never_acknowledged() -> None:
    s = _three()
    s.auto_flush = False
    s.propose("n0", [b"x"])
    s.deliver(only=lambda m: m.target == "n1")
    node = s.nodes["n1"]
    store = s.stores["n1"]
    idx = store.end_index
    assert node.handler.held and store.durable_index < idx
    # Before the flush, a leader of a newer term cuts that entry away.
    cut = PushRequest("g0", "n2", "n1", node.term + 1, PushKind.TRUNCATE, idx - 1, store.term_at(idx - 1), -1)
    s.apply("n1", node.step(cut, s.clock["n1"]))
    s.flush("n1")
    acks = [m for m in s.queue if isinstance(m, PushResponse) and m.sender == "n1" and m.code == 200]
    assert [(m.target, m.acked) for m in acks] == [("n2", idx - 1)]
    assert store.end_index == idx - 1


def test_raft_duplicate_truncate_does_not_drop_acknowledged_entries() -> None:
    logs = {"n0": [1, 1], "n1": [1, 1], "n2": [1, 1, 1, 1]}  # n2 holds two stale entries
    s = Script(["n0", "n1", "n2"], stores={i: store_with_terms(t, vote_term=1) for i, t in logs.items()})
    s.elect("n0")
    truncates = [line for line in s.transcript if "TRUNCATE" in line and "->n2" in line and "Request" in line]
    assert truncates, s.transcript
    s.propose("n0", [b"a", b"b"])
    s.settle()
    end = s.stores["n2"].end_index
    node = s.nodes["n2"]
    # The network delivers the old TRUNCATE again, after n2 stored and acknowledged newer entries.
    stale = PushRequest("g0", "n0", "n2", node.term, PushKind.TRUNCATE, 1, 1, -1)
    s.apply("n2", node.step(stale, s.clock["n2"]))
    assert s.stores["n2"].end_index == end
    assert node.stats["stale_truncate_ignored"] == 1


def test_raft_push_queues_are_bounded() -> None:
    s = _three()
    node = s.nodes["n1"]
    term = node.term
    limit = node.handler.control_limit
    commits = [PushRequest("g0", "n0", "n1", term, PushKind.COMMIT, 0, 0, 0) for _ in range(limit + 3)]
    ready = node.step_batch(commits, s.clock["n1"])
    codes = [m.code for m in ready.messages if isinstance(m, PushResponse)]
    assert codes.count(ResponseCode.PUSH_REQUEST_IS_FULL) == 3
    assert codes.count(ResponseCode.SUCCESS) == limit
    # A push that cannot be written yet (a gap before it), sent twice: the second is REPEATED_PUSH.
    end = s.stores["n1"].end_index
    far = PushRequest("g0", "n0", "n1", term, PushKind.APPEND, end + 5, 1, 0, 1, 1, b"\0" * 48)
    ready = node.step_batch([far, far], s.clock["n1"])
    codes = [m.code for m in ready.messages if isinstance(m, PushResponse)]
    assert codes == [ResponseCode.REPEATED_PUSH]


def test_raft_backpressure_at_max_pending_requests() -> None:
    cfg = replace(SCRIPT_RAFT, max_pending_requests=3)
    s = _three(cfg)

    def no_pushes(m: Message) -> bool:
        return isinstance(m, PushRequest)

    rids = [s.propose("n0", [b"%d" % i]) for i in range(4)]
    s.settle(drop=no_pushes)
    full = s.result("n0", rids[3])
    assert full is not None and full.code == ResponseCode.LEADER_PENDING_FULL
    assert all(s.result("n0", r) is None for r in rids[:3])
    s.run(cfg.max_push_timeout_ms + 20)
    assert [s.result("n0", r).code for r in rids[:3]] == [ResponseCode.SUCCESS] * 3  # type: ignore[union-attr]


def test_raft_wait_quorum_ack_timeout_and_term_changed() -> None:
    s = _three()
    blocked = s.propose("n0", [b"never"])
    s.run(SCRIPT_RAFT.max_wait_ack_ms // 2, drop=lambda m: isinstance(m, PushRequest))
    assert s.result("n0", blocked) is None
    # Let heartbeats through (the leader stays leader) but no pushes, until the wait runs out.
    s.run(SCRIPT_RAFT.max_wait_ack_ms, drop=lambda m: isinstance(m, PushRequest))
    timed_out = s.result("n0", blocked)
    assert timed_out is not None and timed_out.code == ResponseCode.WAIT_QUORUM_ACK_TIMEOUT
    # A wait still pending when leadership is lost ends with TERM_CHANGED.
    pending = s.propose("n0", [b"orphan"])
    s.run(1500, drop=lambda m: m.sender == "n0" or m.target == "n0")  # n0 is cut off
    changed = s.result("n0", pending)
    assert changed is not None and changed.code == ResponseCode.TERM_CHANGED
    assert s.nodes["n0"].stats["check_quorum_step_downs"] == 1
    new = s.leader()
    assert new in ("n1", "n2") and s.nodes[new].term > 1
    s.run(500)
    assert s.leader() == new and s.nodes["n0"].leader_id == new


def test_raft_append_request_checks() -> None:
    s = _three()
    cases = {
        ResponseCode.UNKNOWN_GROUP: ("n0", [b"x"], {"group": "other"}),
        ResponseCode.UNKNOWN_MEMBER: ("n0", [b"x"], {"target": "n1"}),
        ResponseCode.NOT_LEADER: ("n1", [b"x"], {}),
        ResponseCode.REQUEST_WITH_EMPTY_BODYS: ("n0", [], {}),
        ResponseCode.UNEXPECTED_ARGUMENT: ("n0", [b"x" * (5 << 20)], {}),
    }
    for code, (node, bodies, kw) in cases.items():
        rid = s.propose(node, bodies, **kw)
        result = s.result(node, rid)
        assert result is not None and result.code == code, (code, result)
        if code == ResponseCode.NOT_LEADER:
            assert result.leader_id == "n0"  # the redirect hint
    ok = s.propose("n0", [b"a", b"b", b"c"], group="g0", target="n0")
    s.settle()
    result = s.result("n0", ok)
    assert result is not None and result.code == ResponseCode.SUCCESS
    assert result.last_index - result.first_index == 2 and len(result.positions) == 3


def test_raft_single_node_group_commits_after_its_own_flush() -> None:
    s = Script(["solo"])
    s.auto_flush = False
    s.elect("solo")
    assert s.leader() == "solo"
    rid = s.propose("solo", [b"x"])
    assert s.result("solo", rid) is None
    s.flush("solo")
    result = s.result("solo", rid)
    assert result is not None and result.code == ResponseCode.SUCCESS and result.first_index == 1


def test_raft_single_node_group_with_async_flush_commits_at_its_write() -> None:
    """With flush=async a write is durable as far as the store will say at once, and no flush and no
    follower's ack follows it: a single-member group must commit in the propose itself (it timed out)."""
    s = Script(["solo"], stores={"solo": MemoryStore(StoreConfig(flush="async"))})
    s.auto_flush = False
    s.elect("solo")
    rid = s.propose("solo", [b"x", b"y"])
    result = s.result("solo", rid)
    assert result is not None and result.code == ResponseCode.SUCCESS
    assert (result.first_index, result.last_index) == (1, 2)
    assert s.stores["solo"].committed_index == 2


def test_raft_idle_leader_repairs_a_follower_that_lost_its_log() -> None:
    """A follower's data directory is wiped while no client writes: its heartbeat answers show an end
    below its watermark, and the leader re-sends everything without waiting for the next append."""
    s = _three()
    s.propose("n0", [b"%d" % i for i in range(20)])
    s.settle()
    end = s.stores["n0"].end_index
    assert s.nodes["n0"].peer_match("n1") == end
    s.stores["n1"] = MemoryStore()  # wiped
    s.restart("n1")
    s.run(5 * SCRIPT_RAFT.heartbeat_interval_ms)
    assert s.nodes["n0"].stats["follower_lost_entries"] >= 1
    assert s.stores["n1"].end_index == end and s.terms("n1") == s.terms("n0")
    assert s.nodes["n0"].peer_match("n1") == end


def test_followers_with_full_disks_make_the_leader_refuse_at_once_and_are_not_hammered() -> None:
    """One follower full: the other and the leader still commit. Both full: new appends are answered
    DISK_FULL at once (nothing can commit), where they waited out max_wait_ack_ms; a full follower gets
    the refused push again once a push timeout, not in a compare-and-push loop. Space back: all goes on."""
    cfg = replace(SCRIPT_RAFT, max_push_timeout_ms=200)
    stores = {i: FillableStore() for i in ("n0", "n1", "n2")}
    s = Script(["n0", "n1", "n2"], config=cfg, stores=stores)  # type: ignore[arg-type]
    s.elect("n0")
    leader = s.nodes["n0"]
    stores["n1"].full = True
    rid = s.propose("n0", [b"one full"])
    s.settle()
    assert s.result("n0", rid).code == ResponseCode.SUCCESS  # type: ignore[union-attr]
    assert leader.leader.dispatchers["n1"].disk_full  # type: ignore[union-attr]

    stores["n2"].full = True
    rid = s.propose("n0", [b"two full"])  # not known yet: written, pushed, refused by both
    s.settle()
    assert s.result("n0", rid) is None
    end = s.stores["n0"].end_index
    rid2 = s.propose("n0", [b"refused"])
    refused = s.result("n0", rid2)
    assert refused is not None and refused.code == ResponseCode.DISK_FULL and s.stores["n0"].end_index == end
    pushes = []
    s.run(1000, drop=lambda m: pushes.append(m) is not None)  # (records, drops nothing)
    appends = [m for m in pushes if isinstance(m, PushRequest) and m.kind == PushKind.APPEND and m.target == "n1"]
    assert 2 <= len(appends) <= 7, len(appends)  # one a push timeout (200 ms) over 1 s
    assert leader.stats["push_fallback_to_compare"] == 0

    stores["n1"].full = stores["n2"].full = False  # space returns: the resent push lands, all commits
    s.run(400)
    assert s.result("n0", rid).code == ResponseCode.SUCCESS  # type: ignore[union-attr]
    rid3 = s.propose("n0", [b"after"])
    s.settle()
    assert s.result("n0", rid3).code == ResponseCode.SUCCESS  # type: ignore[union-attr]
    assert s.terms("n1") == s.terms("n0") == s.terms("n2")


def test_a_leader_whose_disk_is_full_hands_leadership_to_a_follower_with_space() -> None:
    """The leader's own disk full, its followers' not: the refused append is answered LEADER_TRANSFERRING
    (nothing written; clients retry it at the new leader), and leadership goes to the follower that
    stored this term's entries. The new leader commits with the third node and marks the old one full.
    A leader with no follower that showed space (here: the new one, once every disk is full) stays and
    refuses DISK_FULL: full disks never pass leadership back and forth."""
    stores = {i: FillableStore() for i in ("n0", "n1", "n2")}
    s = Script(["n0", "n1", "n2"], config=SCRIPT_RAFT, stores=stores)  # type: ignore[arg-type]
    s.elect("n0")
    rid = s.propose("n0", [b"before"])
    s.settle()
    assert s.result("n0", rid).code == ResponseCode.SUCCESS  # type: ignore[union-attr]

    stores["n0"].full = True
    end = s.stores["n0"].end_index
    rid = s.propose("n0", [b"refused by n0's disk"])
    answer = s.result("n0", rid)
    assert answer is not None and answer.code == ResponseCode.LEADER_TRANSFERRING, answer
    assert "the disk of n0 is full" in (answer.reason or "") and s.stores["n0"].end_index == end
    s.settle()
    new = s.leader()
    assert new in ("n1", "n2") and s.nodes["n0"].stats["disk_full_hand_offs"] == 1
    rid = s.propose(new, [b"at the new leader"])  # type: ignore[arg-type]
    s.settle()
    assert s.result(new, rid).code == ResponseCode.SUCCESS  # type: ignore[arg-type, union-attr]
    assert s.nodes[new].leader.dispatchers["n0"].disk_full  # type: ignore[index, union-attr]
    assert s.terms("n1") == s.terms("n2")

    # Every disk full. The new leader hands off at most once more, to the follower that last showed
    # space (it cannot know that disk filled since); that one stored nothing of its own term, so it stays.
    for st in stores.values():
        st.full = True
    before = {i: s.nodes[i].stats["disk_full_hand_offs"] for i in s.nodes}
    rid = s.propose(new, [b"nowhere to go"])  # type: ignore[arg-type]
    s.settle()
    s.run(1000)
    last = s.leader()
    assert last is not None and sum(s.nodes[i].stats["disk_full_hand_offs"] - before[i] for i in s.nodes) <= 1
    rid = s.propose(last, [b"still nowhere"])
    s.settle()
    s.run(2000)
    assert s.leader() == last and s.nodes[last].stats["disk_full_hand_offs"] == 0
    answer = s.result(last, rid)
    assert answer is not None and answer.code == ResponseCode.DISK_FULL, answer


def test_a_follower_whose_disk_is_full_waits_so_a_member_with_space_is_elected() -> None:
    """Five nodes; n1's disk is full and it refused the last push, which reached n2 alone, so n1, n3
    and n4 hold equal logs and any of them could win. The leader vanishes: n1 waits one election
    timeout more before it campaigns (it still votes), so a member with space always leads next;
    a full leader could not even write its NOOP. Across seeds (the back-off is random)."""
    ids = ["n0", "n1", "n2", "n3", "n4"]
    for seed in range(12):
        stores = {i: FillableStore() for i in ids}
        s = Script(ids, stores=stores, seed=seed)  # type: ignore[arg-type]
        s.elect("n0")
        s.settle()
        stores["n1"].full = True
        s.propose("n0", [b"reaches n2 alone"])
        s.settle(drop=lambda m: isinstance(m, PushRequest) and m.target in ("n3", "n4"))
        assert s.nodes["n1"].handler.disk_full
        s.run(3000, drop=lambda m: "n0" in (m.sender, m.target))
        new = s.leader()
        assert new not in (None, "n0", "n1"), (seed, new)


def test_a_transfer_to_a_follower_whose_disk_is_full_is_refused() -> None:
    """A leadership transfer (an operator's, or to the preferred leader) to a follower that refused the
    last push for a full disk is refused with DISK_FULL, naming it: that leader could not write its NOOP."""
    stores = {i: FillableStore() for i in ("n0", "n1", "n2")}
    s = Script(["n0", "n1", "n2"], config=SCRIPT_RAFT, stores=stores)  # type: ignore[arg-type]
    s.elect("n0")
    stores["n1"].full = True
    s.propose("n0", [b"refused by n1"])
    s.settle()
    rid = s.transfer("n0", "n1")
    answer = s.result("n0", rid)
    assert answer is not None and answer.code == ResponseCode.DISK_FULL and answer.reason == "the disk of n1 is full"
    assert s.leader() == "n0" and not s.nodes["n0"].elector.transferring
    stores["n1"].full = False  # space again: the resent push lands, and the transfer goes through
    s.run(SCRIPT_RAFT.max_push_timeout_ms + 100)
    rid = s.transfer("n0", "n1")
    s.settle()
    s.run(200)
    assert s.leader() == "n1", s.result("n0", rid)
