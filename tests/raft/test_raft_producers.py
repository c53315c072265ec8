"""The idempotent producer and conditional appends in the core: scripted clusters, and the table alone."""

from __future__ import annotations

from quorumlog.core.producers import DUPLICATE, GAP, NEW, TOO_OLD, UNKNOWN, ProducerTable
from quorumlog.errors import ResponseCode
from quorumlog.sim.script import Script

OK = int(ResponseCode.SUCCESS)
P = 42


def _client_entries(s: Script, node: str) -> list[bytes]:
    store = s.stores[node]
    return [e.body for e in store.read(store.begin_index, 1 << 20, 1 << 30, include_control=False)]


def _elected(ids: tuple[str, ...] = ("n0", "n1", "n2")) -> Script:
    s = Script(list(ids))
    s.elect("n0")
    return s


def test_a_retry_is_answered_with_the_original_entries_and_writes_nothing() -> None:
    s = _elected()
    first = s.result("n0", s.propose("n0", [b"a", b"b"], producer=P, seq=0))
    s.settle()
    first = s.result("n0", first.request_id if first else 1)
    assert first is not None and first.code == OK
    again = s.result("n0", s.propose("n0", [b"a", b"b"], producer=P, seq=0))
    assert again is not None and again.code == OK
    assert (again.first_index, again.last_index, again.term, list(again.positions)) == \
        (first.first_index, first.last_index, first.term, list(first.positions))
    assert _client_entries(s, "n0") == [b"a", b"b"]
    assert s.nodes["n0"].stats["append_duplicates"] == 1


def test_a_retry_of_a_pending_request_is_answered_when_the_original_commits() -> None:
    s = _elected()
    rid1 = s.propose("n0", [b"x"], producer=P, seq=0)
    rid2 = s.propose("n0", [b"x"], producer=P, seq=0)  # the client timed out and sent it again
    assert s.result("n0", rid2) is None  # not committed yet: the duplicate waits
    s.settle()
    a, b = s.result("n0", rid1), s.result("n0", rid2)
    assert a is not None and b is not None and a.code == b.code == OK
    assert (a.first_index, list(a.positions)) == (b.first_index, list(b.positions))
    assert _client_entries(s, "n0") == [b"x"]


def test_a_retry_after_a_leader_change_is_recognised_by_the_new_leader() -> None:
    s = _elected()
    rid = s.propose("n0", [b"once"], producer=P, seq=0)
    s.settle()
    original = s.result("n0", rid)
    assert original is not None and original.code == OK
    s.transfer("n0", "n1")
    s.settle()
    assert s.leader() == "n1"
    retry = s.result("n1", s.propose("n1", [b"once"], producer=P, seq=0))
    assert retry is not None and retry.code == OK and retry.first_index == original.first_index
    nxt = s.result("n1", s.propose("n1", [b"next"], producer=P, seq=1))
    s.settle()
    nxt = s.result("n1", s.completions["n1"][-1].request_id)
    assert nxt is not None and nxt.code == OK
    assert _client_entries(s, "n1") == [b"once", b"next"]


def test_every_node_restarted_still_recognises_the_retry() -> None:
    s = _elected()
    rid = s.propose("n0", [b"kept"], producer=P, seq=0)
    s.settle()
    original = s.result("n0", rid)
    assert original is not None and original.code == OK
    for node in s.ids:
        s.restart(node)  # the table is rebuilt from the log each store holds
    s.elect("n2")
    assert s.leader() == "n2"
    retry = s.result("n2", s.propose("n2", [b"kept"], producer=P, seq=0))
    assert retry is not None and retry.code == OK and retry.first_index == original.first_index
    assert _client_entries(s, "n2") == [b"kept"]


def test_gaps_unknown_producers_and_old_sequences_are_refused_and_write_nothing() -> None:
    s = _elected()
    codes = {}
    for name, kw in {"gap": {"seq": 2}, "unknown": {"producer": 9, "seq": 5}}.items():
        c = s.result("n0", s.propose("n0", [b"no"], **{"producer": P, **kw}))  # type: ignore[arg-type]
        assert c is not None
        codes[name] = ResponseCode(c.code)
    assert codes["unknown"] == ResponseCode.UNKNOWN_PRODUCER
    # P is unknown as well until its sequence 0 arrives.
    assert codes["gap"] == ResponseCode.UNKNOWN_PRODUCER
    s.propose("n0", [b"p0"], producer=P, seq=0)
    c = s.result("n0", s.propose("n0", [b"p2"], producer=P, seq=2))
    assert c is not None and c.code == ResponseCode.OUT_OF_ORDER_SEQUENCE
    s.settle()
    assert _client_entries(s, "n0") == [b"p0"]


def test_a_truncated_request_is_forgotten_and_written_once_by_the_next_leader() -> None:
    s = _elected()
    s.settle()
    # n0 writes P's request but no follower receives it; then n1 leads without it.
    s.propose("n0", [b"lost"], producer=P, seq=0)
    s.queue.clear()
    cut_off = lambda m: "n0" in (m.sender, m.target)  # noqa: E731
    s.run(1500, drop=cut_off)  # n1 or n2 takes over without the entry
    leader = s.leader()
    assert leader in ("n1", "n2") and s.nodes["n0"].producers.judge(P, 0)[0] == DUPLICATE
    retry = s.propose(leader, [b"lost"], producer=P, seq=0)
    s.run(1500, drop=cut_off)
    c = s.result(leader, retry)
    assert c is not None and c.code == OK
    s.run(2000)  # n0 returns, is truncated, and follows
    for node in s.ids:
        assert _client_entries(s, node) == [b"lost"], node
    assert s.nodes["n0"].producers.judge(P, 0)[0] == DUPLICATE  # n0's table followed the truncation


def test_conditional_append_checks_the_last_client_entry_not_the_noop() -> None:
    s = _elected()
    a = s.result("n0", s.propose("n0", [b"first"], expected_end=-1))  # only the NOOP is in the log
    s.settle()
    a = s.completions["n0"][-1]
    assert a.code == OK
    bad = s.result("n0", s.propose("n0", [b"stale"], expected_end=-1))
    assert bad is not None and bad.code == ResponseCode.EXPECTED_END_MISMATCH and bad.detail == a.first_index
    s.transfer("n0", "n1")  # a new leader's NOOP does not move the client end
    s.settle()
    good = s.propose("n1", [b"second"], expected_end=a.first_index)
    s.settle()
    c = s.result("n1", good)
    assert c is not None and c.code == OK
    assert _client_entries(s, "n1") == [b"first", b"second"]


def test_table_window_idle_expiry_and_truncation() -> None:
    t = ProducerTable(window=4, idle_ms=1000)
    assert t.judge(1, 0)[0] == NEW and t.judge(1, 1)[0] == UNKNOWN
    for seq in range(6):
        t.record(1, seq, 10 + seq, 1, wall_ms=100)
    assert t.judge(1, 6)[0] == NEW
    assert t.judge(1, 5) == (DUPLICATE, 15, 1) and t.judge(1, 2) == (DUPLICATE, 12, 1)
    assert t.judge(1, 1)[0] == TOO_OLD and t.judge(1, 8)[0] == GAP
    t.truncate_after(13)  # requests 4 and 5 began at 14 and 15
    assert t.judge(1, 4)[0] == NEW and t.judge(1, 3) == (DUPLICATE, 13, 1)
    # Only uncommitted requests are cut, and a client has at most `window` of them: a producer whose
    # every request is cut is forgotten.
    t.record(5, 0, 30, 2, wall_ms=100)
    t.record(5, 1, 32, 1, wall_ms=100)
    t.truncate_after(29)
    assert t.judge(5, 0)[0] == NEW and t.judge(5, 1)[0] == UNKNOWN
    t.record(2, 0, 20, 1, wall_ms=5000)
    t.record(3, 0, 21, 1, wall_ms=100)
    assert t.sweep() >= 1 and t.judge(3, 1)[0] == UNKNOWN and t.judge(2, 1)[0] == NEW
