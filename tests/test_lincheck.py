"""The linearizability checker (quorumlog.lincheck): linearizable histories pass, each kind of violation is
caught with a report naming the operations involved, random histories agree with a brute-force checker."""

from __future__ import annotations

import dataclasses
import math
import random
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quorumlog import lincheck as lc
from quorumlog.lincheck.gen import random_history, stale_end
from server.history import Op

A, R, E = lc.append, lc.read, lc.end


def test_a_sequential_history_passes() -> None:
    h = [A("c1", 0, 1, [b"a"], 0), A("c1", 2, 3, [b"b", b"c"], 1), R("c1", 4, 5, 0, [b"a", b"b", b"c"], limit=10),
         E("c1", 6, 7, 2), R("c1", 8, 9, 1, [b"b"]), E("c1", 10, 11, 2, committed=True)]
    r = lc.check(h)
    assert r.ok and r.verdict == "ok" and r.group is None
    assert r.groups[""].linearization == [0, 1, 2, 3, 4, 5]


@pytest.mark.parametrize("first", [0, 1])
def test_overlapping_appends_may_land_in_either_order(first: int) -> None:
    h = [A("c1", 0, 3, [b"a"], first), A("c2", 1, 2, [b"b"], 1 - first),
         R("c3", 4, 5, 0, [b"a", b"b"][:: 1 if first == 0 else -1], limit=3)]
    assert lc.check(h).ok


def test_uncertain_appends_that_happened_and_that_did_not() -> None:
    took = [A("c1", 0, None, [b"a"]), A("c2", 1, 2, [b"b"], 1), E("c3", 3, 4, 1)]
    assert lc.check(took).ok
    lost = [A("c1", 0, None, [b"a"]), A("c2", 1, 2, [b"b"], 0), E("c3", 3, 4, 0)]
    assert lc.check(lost).ok
    # It may land long after its client gave up: after a later end query saw the log without it.
    late = [A("c1", 0, None, [b"a"]), E("c2", 5, 6, -1), R("c2", 7, 8, 0, [b"a"], limit=2)]
    assert lc.check(late).ok
    # But not before its call.
    early = [R("c2", 0, 1, 0, [b"a"]), A("c1", 2, None, [b"a"])]
    assert not lc.check(early).ok


def test_conditional_appends() -> None:
    h = [A("c1", 0, 1, [b"a"], 0, expected_end=-1), A("c2", 2, 3, [b"x"], expected_end=-1, status=lc.MISMATCH),
         A("c2", 4, 5, [b"b"], 1, expected_end=0), E("c1", 6, 7, 1)]
    assert lc.check(h).ok
    # Concurrent writers expecting the same end: one wins, the other is refused, in either order.
    race = [A("c1", 0, 2, [b"a"], 0, expected_end=-1), A("c2", 1, 3, [b"b"], expected_end=-1, status=lc.MISMATCH)]
    assert lc.check(race).ok
    refused_wrongly = [A("c1", 0, 1, [b"a"], 0), A("c2", 2, 3, [b"b"], expected_end=0, status=lc.MISMATCH)]
    r = lc.check(refused_wrongly)
    assert not r.ok and "refused for expected_end 0, but the end is 0 here" in r.report
    # An uncertain conditional append does nothing where its condition fails.
    h = [A("c1", 0, 1, [b"a"], 0), A("c2", 2, None, [b"z"], expected_end=-1), E("c1", 3, 4, 0)]
    assert lc.check(h).ok
    assert not lc.check(h + [R("c1", 5, 6, 1, [b"z"])]).ok


def test_reads_and_end_queries() -> None:
    h = [A("c1", 0, 4, [b"a"], 0), R("c2", 1, 2, 0, [], limit=5), E("c3", 1, 3, 0), R("c2", 3, 6, 0, [b"a"], limit=5),
         R("c3", 5, 6, 7, [], limit=1)]  # a read past the end returns nothing
    assert lc.check(h).ok
    assert not lc.check([A("c1", 0, 1, [b"a"], 0), R("c1", 2, 3, 0, [b"b"])]).ok


def test_a_stale_end_is_caught() -> None:
    h = [A("c1", 0.0, 1.0, [b"a"], 0), A("c2", 1.5, 2.0, [b"b"], 1), E("c3", 3.0, 4.0, 0)]
    r = lc.check(h)
    assert not r.ok and r.verdict == "violation" and r.group == ""
    g = r.groups[""]
    assert g.blocker == 1 and g.linearization == [0]
    assert "#1 client c2" in r.report and "past the end 0 that #2 (end() -> 0) saw" in r.report


def test_a_read_missing_its_clients_acknowledged_append_is_caught() -> None:
    """A follower answering a read without waiting for the client's last write (ignoring min_index)."""
    h = [A("c1", 0, 1, [b"a"], 0), A("c1", 2, 3, [b"b"], 1), R("c1", 4, 5, 0, [b"a"], limit=10)]
    r = lc.check(h)
    assert not r.ok and r.groups[""].blocker == 1
    assert "past the end 0 that #2 (read(start=0, limit=10) -> [b'a'] (end)) saw" in r.report


def test_a_duplicated_append_is_caught() -> None:
    h = [A("c1", 0, 1, [b"a"], 0), A("c2", 0, 1, [b"b"], 1), R("c3", 2, 3, 0, [b"a", b"b", b"a"], limit=9)]
    r = lc.check(h)
    assert not r.ok
    assert "b'a' is also read at index 2, and no other unplaced append carries it" in r.report


def test_a_lost_acknowledged_append_is_caught() -> None:
    h = [A("c1", 0, 1, [b"a"], 0), A("c2", 0.5, 1.5, [b"b"], 1), A("c1", 2, 3, [b"c"], 2),
         R("c3", 4, 5, 0, [b"a", b"c"], limit=5)]
    r = lc.check(h)
    assert not r.ok and "where #3" in r.report and "returned b'c'" in r.report
    ended = [A("c1", 0, 1, [b"a"], 0), A("c2", 0.5, 1.5, [b"b"], 1), E("c3", 4, 5, 0)]
    assert not lc.check(ended).ok


def test_an_index_acknowledged_twice_is_caught() -> None:
    h = [A("c1", 0, 1, [b"a"], 0), A("c2", 2, 3, [b"b"], 0)]
    r = lc.check(h)
    assert not r.ok and r.groups[""].blocker == 0 and r.groups[""].related == [1]
    assert "would take the end to 0, past index 0, where #1 (append([b'b']) -> index 0) was acknowledged" in r.report
    # Overlapping: each is the reason the other cannot be placed.
    r = lc.check([A("c1", 0, 2, [b"a"], 0), A("c2", 1, 3, [b"b"], 0)])
    assert not r.ok and r.groups[""].related == [0, 1]


def test_groups_are_checked_separately() -> None:
    h = [A("c1", 0, 1, [b"a"], 0, group="x"), A("c1", 0, 1, [b"a"], 0, group="y"), E("c2", 2, 3, 0, group="x"),
         E("c2", 2, 3, -1, group="y")]
    r = lc.check(h)
    assert not r.ok and r.group == "y" and r.groups["x"].verdict == "ok"
    assert "group 'y'" in r.report


def test_a_timed_out_search_is_unknown() -> None:
    h = random_history(random.Random(5), 4000, 8)
    stale_end(h)
    r = lc.check(h, timeout=0)
    assert not r.ok and r.verdict == "unknown" and "UNKNOWN" in r.report


def test_bad_operations_are_refused() -> None:
    for make in (lambda: A("c", 2, 1, [b"a"], 0), lambda: A("c", 0, 1, [], 0),
                 lambda: A("c", 0, 1, [b"a"], status=lc.MISMATCH), lambda: A("c", 0, 1, [b"a"], 0, expected_end=-2),
                 lambda: R("c", 0, 1, 0, [b"a", b"b"], limit=1), lambda: E("c", 0, 1, -2)):
        with pytest.raises(ValueError):
            make()
    assert A("c", 0, 5, [b"a"]).ret == math.inf  # no index: uncertain


def test_html_timeline(tmp_path: Path) -> None:
    h = [A("c1", 0.0, 1.0, [b"a"], 0), A("c2", 1.5, 2.0, [b"<b>"], 1), E("c3", 3.0, 4.0, 0),
         A("c1", 1.2, None, [b"u"])]
    r = lc.check(h)
    r.write_html(tmp_path / "t.html")
    page = (tmp_path / "t.html").read_text()
    assert page.startswith("<!doctype html>") and "http" not in page
    assert page.count('<div class="row"') == 3 and 'class="op append blocker"' in page and "op end related" in page
    assert "b&#x27;&lt;b&gt;&#x27;" in page and "op append uncertain" in page
    lc.check(h[:2]).write_html(tmp_path / "ok.html")
    assert "linearizable" in (tmp_path / "ok.html").read_text()


def test_from_history_ops() -> None:
    """tests/server/history.py records: control entries (missing from the log) renumbered away."""
    a, b = Op(b"w0-0", 0.0, 1.0, 1), Op(b"w1-0", 2.0, 3.0, 3)
    t = Op(b"w0-1", 1.5, math.inf, None, "RequestTimeoutError")
    ops = lc.from_history_ops([a, b, t], [(1, b"w0-0"), (3, b"w1-0")])
    assert [op.index for op in ops[:2]] == [0, 1] and ops[2].status == lc.UNCERTAIN and ops[0].client == "w0"
    assert ops[-1].kind == lc.READ and ops[-1].cut
    assert lc.check(ops).ok
    assert lc.check(lc.from_history_ops([a, b, t], [(1, b"w0-0"), (2, b"w0-1"), (3, b"w1-0")])).ok
    # Lost, and written twice.
    assert not lc.check(lc.from_history_ops([a, b], [(1, b"w0-0")])).ok
    assert not lc.check(lc.from_history_ops([a, b], [(1, b"w0-0"), (3, b"w1-0"), (4, b"w1-0")])).ok
    # The case tests/server/test_server_exactly_once.py gives check_history: sent after `a` was
    # acknowledged, yet before it in the log.
    late = Op(b"c", 5.0, math.inf, None, "timeout")
    assert not lc.check(lc.from_history_ops([Op(b"a", 0.0, 1.0, 1), late], [(0, b"c"), (1, b"a")])).ok
    # A definite error is a failure: nothing happened.
    refused = Op(b"w2-0", 0.0, 1.0, None, "GroupNotFoundError")
    out = lc.from_history_ops([refused], [], definite_errors={"GroupNotFoundError"})
    assert out[0].status == lc.FAILED and lc.check(out).ok


# -- random histories ------------------------------------------------------------------------------------


def _naive_ok(history: list[lc.Operation]) -> bool:
    """Brute force: every order of the operations the model allows, the whole log as state."""
    ops = [op for op in history if op.status == lc.OK or (op.kind == lc.APPEND and op.status != lc.FAILED)]
    n = len(ops)
    seen: set[tuple[int, tuple[bytes, ...]]] = set()

    def step(op: lc.Operation, log: tuple[bytes, ...]) -> tuple[bytes, ...] | None:
        cond = op.expected_end is None or op.expected_end == len(log) - 1
        if op.kind == lc.APPEND:
            if op.status == lc.OK:
                return log + op.bodies if cond and op.index == len(log) else None
            if op.status == lc.MISMATCH:
                return None if cond else log
            return log + op.bodies if cond else log
        if op.kind == lc.READ:
            if log[op.start:op.start + len(op.bodies)] != op.bodies:
                return None
            if op.cut and (len(log) != op.start + len(op.bodies) if op.bodies else len(log) > op.start):
                return None
            return log
        return log if len(log) - 1 == op.index else None

    def dfs(placed: int, log: tuple[bytes, ...]) -> bool:
        if all(placed >> i & 1 or ops[i].status == lc.UNCERTAIN for i in range(n)):
            return True
        if (placed, log) in seen:
            return False
        seen.add((placed, log))
        for i in range(n):
            if placed >> i & 1 or any(not placed >> j & 1 and ops[j].ret < ops[i].call for j in range(n)):
                continue
            new = step(ops[i], log)
            if new is not None and dfs(placed | 1 << i, new):
                return True
        return False

    return dfs(0, ())


def _mutate(rng: random.Random, h: list[lc.Operation]) -> list[lc.Operation]:
    h = list(h)
    i = rng.randrange(len(h))
    op = h[i]
    if op.kind == lc.APPEND and op.status == lc.OK:
        assert op.index is not None
        h[i] = dataclasses.replace(op, index=max(0, op.index + rng.choice((-1, 1))))
    elif op.kind == lc.APPEND and op.status == lc.UNCERTAIN:
        h[i] = dataclasses.replace(op, status=lc.OK, index=rng.randint(0, 4), ret=op.call + rng.random())
    elif op.kind == lc.READ and op.bodies:
        bodies = list(op.bodies)
        bodies[rng.randrange(len(bodies))] = rng.choice([b for o in h for b in o.bodies])
        h[i] = dataclasses.replace(op, bodies=tuple(bodies))
    elif op.kind == lc.READ:
        h[i] = dataclasses.replace(op, start=op.start + 1)
    elif op.kind == lc.END:
        assert op.index is not None
        h[i] = dataclasses.replace(op, index=max(-1, op.index + rng.choice((-1, 1))))
    return h


@pytest.mark.parametrize(("cases", "size", "p_read", "p_unc"), [
    (1500, (1, 10), 0.2, 0.35),
    # Many uncertain appends, few reads: the log's unread stretches can be filled in several ways.
    (300, (8, 14), 0.08, 0.45),
])
def test_small_random_histories_agree_with_brute_force(cases: int, size: tuple[int, int], p_read: float,
                                                       p_unc: float) -> None:
    rng = random.Random(20260412 + cases)
    verdicts = {True: 0, False: 0}
    for _ in range(cases):
        h = random_history(rng, rng.randint(*size), rng.randint(1, 4), p_read=p_read, p_end=0.15, p_uncertain=p_unc,
                           p_conditional=0.2, p_failed=0.05, max_batch=3)
        if rng.random() < 0.6:
            h = _mutate(rng, h)
        want = _naive_ok(h)
        verdicts[want] += 1
        assert lc.check(h).ok == want, "\n".join(f"{op.client} {op.call} {op.ret} {op.describe()}" for op in h)
    assert min(verdicts.values()) > cases // 5


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32), st.integers(2, 300), st.integers(1, 6), st.sampled_from([0.0, 0.1, 0.4]))
def test_random_linearizable_histories_pass_and_mutants_fail(seed: int, n: int, clients: int, p_unc: float) -> None:
    rng = random.Random(seed)
    h = random_history(rng, n, clients, p_uncertain=p_unc, p_conditional=0.1, p_read=0.2, p_end=0.15)
    r = lc.check(h, timeout=10)
    assert r.ok, r.report
    acked = [i for i, op in enumerate(h) if op.kind == lc.APPEND and op.status == lc.OK]
    if len(acked) >= 2:
        # Two appends acknowledged at one index: never linearizable, whatever the timing.
        i, j = rng.sample(acked, 2)
        dup = list(h)
        dup[j] = dataclasses.replace(h[j], index=h[i].index, expected_end=None)
        assert not lc.check(dup, timeout=10).ok
    reads = [i for i, op in enumerate(h) if op.kind == lc.READ and op.bodies]
    if reads:
        # A body no append wrote.
        i = rng.choice(reads)
        bodies = list(h[i].bodies)
        bodies[rng.randrange(len(bodies))] = b"never written"
        forged = list(h)
        forged[i] = dataclasses.replace(h[i], bodies=tuple(bodies))
        assert not lc.check(forged, timeout=10).ok


def test_ten_thousand_operations_in_seconds() -> None:
    h = random_history(random.Random(11), 10_000, 8, p_read=0.1, p_end=0.1, p_uncertain=0.05)
    t0 = time.perf_counter()
    assert lc.check(h).ok
    planted = stale_end(h)
    r = lc.check(h, timeout=20)
    assert r.verdict == "violation" and f"#{planted} " in r.report
    assert time.perf_counter() - t0 < 10


def test_from_history_ops_with_linearizable_ends() -> None:
    """Recorded END answers (real indexes, control entries among them) join the history: an end below an
    append acknowledged before it was asked is stale; one that names an entry not yet appended is a phantom."""

    @dataclasses.dataclass
    class End:
        client: str
        invoked: float
        completed: float
        committed: int

    a, b = Op(b"w0-0", 0.0, 1.0, 1), Op(b"w1-0", 2.0, 3.0, 3)
    log = [(1, b"w0-0"), (3, b"w1-0")]
    good = [End("r", 1.5, 1.6, 2), End("r", 4.0, 4.1, 3), End("r", 0.1, 0.9, 0)]  # 2: a NOOP after w0-0
    ops = lc.from_history_ops([a, b], log, ends=good)
    assert [op.index for op in ops if op.kind == lc.END] == [0, 1, -1]
    assert lc.check(ops).ok
    assert not lc.check(lc.from_history_ops([a, b], log, ends=[End("r", 4.0, 4.1, 1)])).ok  # b is missing
    assert not lc.check(lc.from_history_ops([a, b], log, ends=[End("r", 0.1, 0.2, 3)])).ok  # b not yet asked
