"""ReadIndex (raft/reads.py), scripted: a leader answers a linearizable read point only after a majority
answered a heartbeat round sent after the request arrived, and only once its term has committed; a follower
asks its leader and answers once it applied that far; a deposed leader never answers."""

from __future__ import annotations

from dataclasses import replace

from quorumlog.core.ready import READ_INDEX
from quorumlog.errors import ResponseCode
from quorumlog.raft.messages import HeartbeatRequest, HeartbeatResponse, Message, PushRequest, ReadIndexRequest
from quorumlog.sim.script import SCRIPT_RAFT, Script

IDS = ["s1", "s2", "s3"]
OK = int(ResponseCode.SUCCESS)


def _cluster(check_quorum: bool = True) -> Script:
    """s1 leads and committed 0..2. Without check-quorum, a leader cut off keeps leading and voters keep no
    lease, so another can be elected beside it at once."""
    s = Script(IDS, config=replace(SCRIPT_RAFT, check_quorum=check_quorum))
    s.elect("s1")
    s.propose("s1", [b"a", b"b"])
    s.settle()
    assert s.stores["s1"].committed_index == 2  # (the NOOP, then a and b)
    return s


def test_the_leader_answers_after_a_round_a_majority_answered() -> None:
    s = _cluster()
    [rid] = s.read_index("s1")
    assert s.result("s1", rid) is None  # not before the round
    beats = [m for m in s.queue if isinstance(m, HeartbeatRequest)]
    assert sorted(m.target for m in beats) == ["s2", "s3"] and len({m.round for m in beats}) == 1
    s.deliver(only=lambda m: isinstance(m, HeartbeatRequest) and m.target == "s2")
    s.deliver(only=lambda m: isinstance(m, HeartbeatResponse))  # s2's answer: with s1, a majority
    c = s.result("s1", rid)
    assert c is not None and c.kind == READ_INDEX and c.code == OK and c.last_index == 2


def test_requests_arriving_together_share_one_round_and_later_ones_the_next() -> None:
    s = _cluster()
    first = s.read_index("s1", 5)
    assert sum(isinstance(m, HeartbeatRequest) for m in s.queue) == 2  # one round for five
    later = s.read_index("s1", 3)  # a round is in flight: they wait for the next
    assert sum(isinstance(m, HeartbeatRequest) for m in s.queue) == 2
    s.deliver()  # the first round's heartbeats
    s.deliver()  # their answers: the first five are answered, and the next round goes out
    assert all(s.result("s1", r) is not None for r in first) and all(s.result("s1", r) is None for r in later)
    assert sum(isinstance(m, HeartbeatRequest) for m in s.queue) == 2
    s.settle()
    assert all(s.result("s1", r).code == OK for r in later)  # type: ignore[union-attr]


def test_a_deposed_leader_that_does_not_know_it_never_answers() -> None:
    s = _cluster(check_quorum=False)
    cut = {"s1"}

    def partitioned(m: Message) -> bool:
        return (m.sender in cut) != (m.target in cut)

    # s2 takes over while s1, cut off, still thinks it leads; the new leader commits more.
    s.elect("s2", drop=partitioned)
    s.propose("s2", [b"c"])
    s.settle(drop=partitioned)
    assert s.leader() == "s2" and s.stores["s2"].committed_index > 2
    assert s.nodes["s1"].is_leader  # (it has not heard)
    [rid] = s.read_index("s1")
    s.settle(drop=partitioned)
    assert s.result("s1", rid) is None  # no majority answers its round
    s.run(SCRIPT_RAFT.max_wait_ack_ms + 100, drop=partitioned)
    c = s.result("s1", rid)
    assert c is not None and c.code == int(ResponseCode.TIMEOUT) and s.nodes["s1"].is_leader


def test_a_new_leader_answers_only_once_its_term_committed() -> None:
    s = _cluster(check_quorum=False)

    def no_push(m: Message) -> bool:
        return isinstance(m, PushRequest)

    s.elect("s2", drop=no_push)  # its NOOP never reaches anyone
    assert s.leader() == "s2" and s.stores["s2"].committed_index < s.stores["s2"].end_index
    [rid] = s.read_index("s2")
    s.settle(drop=no_push)  # the round is answered, but the term has not committed
    assert s.result("s2", rid) is None
    s.run(SCRIPT_RAFT.max_push_timeout_ms + 20)  # the NOOP is pushed again and commits
    c = s.result("s2", rid)
    assert c is not None and c.code == OK and c.last_index == s.stores["s2"].end_index


def test_a_follower_asks_its_leader_and_answers_once_it_applied_that_far() -> None:
    s = _cluster()
    s.propose("s1", [b"c"])  # committed on the leader before s3 hears of it
    to_s3 = [m for m in s.queue if m.target == "s3"]
    s.queue = [m for m in s.queue if m.target != "s3"]
    s.deliver()
    s.deliver()  # s2's ack: the leader commits 3
    assert s.stores["s1"].committed_index == 3 and s.stores["s3"].committed_index < 3
    s.queue = [m for m in s.queue if m.target != "s3"]  # (the commit, held back with the rest)
    [rid] = s.read_index("s3")
    assert [type(m) for m in s.queue if m.sender == "s3"] == [ReadIndexRequest]
    s.deliver(only=lambda m: isinstance(m, ReadIndexRequest))
    s.deliver(only=lambda m: isinstance(m, HeartbeatRequest) and m.target == "s2")
    s.deliver(only=lambda m: isinstance(m, HeartbeatResponse))  # confirmed: the answer (index 3) leaves
    assert s.result("s3", rid) is None  # s3 has not committed 3 yet
    s.queue.extend(to_s3)
    s.settle()  # s3 now holds entry 3, and learns it committed with the next heartbeat
    s.run(SCRIPT_RAFT.heartbeat_interval_ms + 10)
    c = s.result("s3", rid)
    assert c is not None and c.code == OK and c.last_index >= 3 and s.stores["s3"].committed_index >= 3


def test_a_leader_change_fails_the_waiting_requests() -> None:
    s = _cluster()
    [rid] = s.read_index("s1")
    s.queue.clear()  # the round is lost
    s.transfer("s1", "s2")
    s.settle()
    c = s.result("s1", rid)
    assert c is not None and c.code == int(ResponseCode.NOT_LEADER)  # (as its term changed: no leader known yet)
    assert s.leader() == "s2"


def test_a_group_of_one_answers_at_once() -> None:
    s = Script(["s1"])
    s.elect("s1")
    [rid] = s.read_index("s1")
    c = s.result("s1", rid)
    assert c is not None and c.code == OK and c.last_index == s.stores["s1"].committed_index == 0
