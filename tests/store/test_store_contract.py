"""The LogStore contract, one suite run against MemoryStore and FileStore.

Every test that changes the log also reopens the store (FileStore: close + open the same directory)
and checks that the state and the entries are the same afterwards.
"""

from __future__ import annotations

from typing import Any

import pytest
from store_helpers import MAX_BODY, SEG, StoreFactory, body, fill, log_of, reopen_same, small_config, state_of

from quorumlog.entry import (
    BLANK_SIZE,
    HEADER_SIZE,
    MAGIC_CONFIG,
    MAGIC_NOOP,
    MAGIC_NORMAL,
    check_entry,
    decode_entries,
    entry_at,
)
from quorumlog.errors import CorruptEntryError, IndexOutOfRangeError, InvalidArgumentError, StoreError
from quorumlog.store import MemoryStore, place


# -- empty log -----------------------------------------------------------------------------------
def test_fresh_store(factory: StoreFactory) -> None:
    s = factory.open()
    assert state_of(s) == (0, -1, 0, -1, 0)
    assert s.durable_index == -1 and s.damage is None
    assert s.term_at(-1) == 0
    assert s.read(0, 10, 1000) == [] and s.read_raw(0, 10, 1000) == (b"", 0)
    with pytest.raises(IndexOutOfRangeError):
        s.get(0)
    with pytest.raises(IndexOutOfRangeError):
        s.term_at(0)
    assert s.load_vote() == (0, None)
    s.truncate_after(-1)  # nothing to drop
    s.set_committed(5)  # clamped to end_index
    assert s.committed_index == -1
    s = reopen_same(factory)


# -- leader append -------------------------------------------------------------------------------
def test_append_assigns_indexes_positions_and_terms(factory: StoreFactory) -> None:
    s = factory.open()
    a = s.append([b"one", b"", b"three"], 2)
    assert (a.first_index, a.last_index, a.term) == (0, 2, 2)
    assert a.positions == [0, HEADER_SIZE + 3, 2 * HEADER_SIZE + 3]
    assert s.write_pos == 3 * HEADER_SIZE + 8
    b = s.append([b"x"], 5, MAGIC_NOOP)
    assert (b.first_index, b.positions) == (3, [3 * HEADER_SIZE + 8])
    assert (s.begin_index, s.end_index, s.end_term) == (0, 3, 5)
    assert [s.term_at(i) for i in range(4)] == [2, 2, 2, 5]
    e = s.get(1)
    assert (e.index, e.term, e.pos, e.body, e.magic) == (1, 2, HEADER_SIZE + 3, b"", MAGIC_NORMAL)
    assert s.get(3).magic == MAGIC_NOOP and s.get(3).is_control
    with pytest.raises(IndexOutOfRangeError):
        s.get(4)
    with pytest.raises(IndexOutOfRangeError):
        s.get(-1)
    s = reopen_same(factory)
    assert s.get(0).body == b"one"


def test_empty_batch_appends_nothing(factory: StoreFactory) -> None:
    s = factory.open()
    s.append([b"a"], 1)
    a = s.append([], 1)
    assert a.first_index == 1 and a.positions == [] and s.end_index == 0


def test_term_below_end_term_is_refused(factory: StoreFactory) -> None:
    s = factory.open()
    s.append([b"a"], 3)
    with pytest.raises(InvalidArgumentError):
        s.append([b"b"], 2)
    assert s.end_index == 0 and s.end_term == 3
    s.append([b"c"], 3)  # equal term is fine
    reopen_same(factory)


def test_body_sizes_zero_max_and_over_max(factory: StoreFactory) -> None:
    s = factory.open()
    s.append([b"", bytes(MAX_BODY), b"\xab" * MAX_BODY], 1)
    with pytest.raises(InvalidArgumentError, match="exceeds the maximum"):
        s.append([b"ok", bytes(MAX_BODY + 1)], 1)
    assert s.end_index == 2  # nothing of the refused batch was written
    s = reopen_same(factory)
    assert [len(s.get(i).body) for i in range(3)] == [0, MAX_BODY, MAX_BODY]
    assert s.get(2).body == b"\xab" * MAX_BODY


def test_default_max_body_is_four_mib_and_over_is_refused(tmp_path: Any) -> None:
    from quorumlog.config import MAX_BODY_BYTES
    from quorumlog.store.file_store import FileStore

    assert MAX_BODY_BYTES == 4 * 1024 * 1024
    cfg = small_config(data_segment_bytes=8 * 1024 * 1024, max_body_bytes=MAX_BODY_BYTES)
    for s in (MemoryStore(cfg), FileStore(tmp_path / "big", cfg)):
        s.append([b"\x5a" * MAX_BODY_BYTES, b""], 1)
        with pytest.raises(InvalidArgumentError):
            s.append([bytes(MAX_BODY_BYTES + 1)], 1)
        assert s.get(0).body == b"\x5a" * MAX_BODY_BYTES and s.end_index == 1
        s.close()


# -- reads ---------------------------------------------------------------------------------------
def test_read_bounds(factory: StoreFactory) -> None:
    s = factory.open()
    fill(s, 30, size=10)
    assert [e.index for e in s.read(5, 4, 1 << 20)] == [5, 6, 7, 8]
    assert [e.index for e in s.read(28, 10, 1 << 20)] == [28, 29]
    assert s.read(30, 10, 1 << 20) == []
    assert s.read(5, 0, 1 << 20) == []
    # at least one entry even when max_bytes is 0 or smaller than the first body
    assert [e.index for e in s.read(5, 10, 0)] == [5]
    assert [e.index for e in s.read(5, 10, 1)] == [5]
    with pytest.raises(IndexOutOfRangeError):
        s.read(-1, 10, 100)


def test_read_max_bytes_counts_bodies(factory: StoreFactory) -> None:
    """"about max_bytes of bodies": reading stops once the bodies reach max_bytes, not earlier."""
    s = factory.open()
    fill(s, 30, size=10)
    got = s.read(0, 100, 100)
    total = sum(len(e.body) for e in got)
    assert total >= 100 and total - len(got[-1].body) < 100, [len(e.body) for e in got]


def test_read_raw_bounds_and_bytes(factory: StoreFactory) -> None:
    s = factory.open()
    fill(s, 30, size=10)
    raw, n = s.read_raw(3, 5, 1 << 20)
    assert n == 5 and len(raw) == 5 * (HEADER_SIZE + 10)
    es = decode_entries(raw, MAX_BODY)
    assert [(e.index, e.pos, e.body) for e in es] == [(e.index, e.pos, e.body) for e in s.read(3, 5, 1 << 20)]
    raw, n = s.read_raw(3, 100, 1)  # at least one
    assert n == 1 and len(raw) == HEADER_SIZE + 10
    raw, n = s.read_raw(3, 100, 2 * (HEADER_SIZE + 10))
    assert n == 2
    assert s.read_raw(30, 5, 100) == (b"", 0)


def test_read_raw_spans_segments_without_blanks(factory: StoreFactory) -> None:
    s = factory.open()
    fill(s, 12, size=MAX_BODY - 100, batch=5)  # several segment rolls
    assert s.write_pos > 2 * SEG
    raw, n = s.read_raw(0, 100, 1 << 30)
    assert n == 12
    es = decode_entries(raw, MAX_BODY, 0)  # contiguous entries, chain intact, no blank inside
    assert [e.index for e in es] == list(range(12))
    assert [e.pos for e in es] == [e.pos for e in s.read(0, 100, 1 << 30)]


def test_read_raw_parts_are_read_raw_without_the_control_entries(factory: StoreFactory) -> None:
    """The parts join to read_raw's bytes; without `control`, NOOP/CONFIG entries are left out of them but
    still counted, so the count says where the next read starts."""
    s = factory.open()
    s.append([b""], 1, MAGIC_NOOP)
    fill(s, 6, size=MAX_BODY - 100, batch=3)  # a segment roll among them
    s.append([b"cfg"], 1, MAGIC_CONFIG)
    s.append([b"a", b"b"], 1)
    s.append([b""], 2, MAGIC_NOOP)
    last = s.end_index
    raw, n = s.read_raw(0, 100, 1 << 30)
    parts, m = s.read_raw_parts(0, 100, 1 << 30)
    assert (b"".join(parts), m) == (raw, n) and n == last + 1
    parts, m = s.read_raw_parts(0, 100, 1 << 30, control=False)
    assert m == n
    joined, off, got = b"".join(parts), 0, []
    while off < len(joined):  # entry by entry, as a client checks them (no chain across a gap)
        h = check_entry(joined, off, None, MAX_BODY)
        got.append(entry_at(joined, off, h))
        off += h[1]
    assert got == s.read(0, 100, 1 << 30, include_control=False)
    assert s.read_raw_parts(last, 5, 1, control=False) == ([], 1)  # only a NOOP: nothing, one index walked
    assert s.read_raw_parts(last + 1, 5, 1, control=False) == ([], 0)
    for start in range(last + 1):  # max_bytes counts whole entries, control ones too, at least one
        parts, m = s.read_raw_parts(start, 3, 1, control=False)
        assert m == 1 and b"".join(parts) == (b"" if s.get(start).is_control else s.read_raw(start, 1, 1)[0])


def test_end_pos_is_where_each_entry_ends_across_segment_rolls(factory: StoreFactory) -> None:
    s = factory.open()
    assert s.end_pos(-1) == 0
    fill(s, 12, size=MAX_BODY - 100, batch=5)  # several segment rolls
    es = s.read(0, 100, 1 << 30)
    sizes = [len(r) for r in (s.read_raw(i, 1, 0)[0] for i in range(12))]
    assert [s.end_pos(e.index) for e in es] == [e.pos + n for e, n in zip(es, sizes, strict=True)]
    assert s.end_pos(11) == s.write_pos
    with pytest.raises(IndexOutOfRangeError):
        s.end_pos(12)
    with pytest.raises(IndexOutOfRangeError):
        s.end_pos(-2)


def test_include_control_skips_noop_and_config(factory: StoreFactory) -> None:
    s = factory.open()
    s.append([b""], 1, MAGIC_NOOP)
    s.append([b"a", b"b"], 1)
    s.append([b"cfg"], 1, MAGIC_CONFIG)
    s.append([b"c"], 2, MAGIC_NOOP)
    s.append([b"d"], 2)
    assert [e.index for e in s.read(0, 100, 1 << 20)] == [0, 1, 2, 3, 4, 5]
    normal = s.read(0, 100, 1 << 20, include_control=False)
    assert [(e.index, e.body) for e in normal] == [(1, b"a"), (2, b"b"), (5, b"d")]
    assert all(not e.is_control for e in normal)
    reopen_same(factory)


def test_include_control_false_returns_at_least_one_entry(factory: StoreFactory) -> None:
    """"at least one entry when start is in range": a read that starts at a NOOP still returns the
    next client entry (and so does every store the same)."""
    s = factory.open()
    s.append([b""], 1, MAGIC_NOOP)
    s.append([b"a", b"b"], 1)
    got = s.read(0, 1, 0, include_control=False)
    assert [(e.index, e.body) for e in got] == [(1, b"a")]
    got = s.read(0, 2, 1 << 20, include_control=False)
    assert [e.index for e in got] == [1, 2]


# -- commit --------------------------------------------------------------------------------------
def test_set_committed_raises_clamps_and_never_decreases(factory: StoreFactory) -> None:
    s = factory.open()
    fill(s, 10)
    s.set_committed(3)
    assert s.committed_index == 3
    s.set_committed(2)
    assert s.committed_index == 3
    s.set_committed(100)
    assert s.committed_index == 9
    s.flush()
    s = reopen_same(factory)
    assert s.committed_index == 9


# -- follower append -----------------------------------------------------------------------------
def leader_with(n: int, seed_terms: tuple[int, ...] = (1,), size: int | None = None) -> MemoryStore:
    leader = MemoryStore(small_config())
    per = max(1, n // len(seed_terms))
    for t in seed_terms:
        fill(leader, per, term=t, size=size)
    return leader


def test_follower_append_of_leader_bytes(factory: StoreFactory) -> None:
    leader = leader_with(60, (1, 2, 4), size=1500)
    assert leader.write_pos > SEG  # crosses a segment end
    s = factory.open()
    start = 0
    while start <= leader.end_index:
        raw, n = leader.read_raw(start, 7, 3000)
        assert s.append_encoded(raw) == start + n - 1
        start += n
    assert log_of(s) == log_of(leader) and s.write_pos == leader.write_pos and s.end_term == leader.end_term
    raw_all, _ = s.read_raw(0, 1000, 1 << 30)
    assert raw_all == leader.read_raw(0, 1000, 1 << 30)[0]
    s = reopen_same(factory)
    # leader append continues the follower's chain and positions
    a = s.append([b"next"], 4)
    b = leader.append([b"next"], 4)
    assert a.positions == b.positions and s.read_raw(a.first_index, 1, 100) == leader.read_raw(b.first_index, 1, 100)


def test_follower_append_empty_is_a_no_op(factory: StoreFactory) -> None:
    s = factory.open()
    assert s.append_encoded(b"") == -1
    fill(s, 3)
    assert s.append_encoded(b"") == 2


def _rejected(s: Any, data: bytes | bytearray) -> None:
    before_state, before_log = state_of(s), log_of(s)
    with pytest.raises(CorruptEntryError):
        s.append_encoded(data)
    assert state_of(s) == before_state and log_of(s) == before_log


def test_follower_append_rejections_write_nothing(factory: StoreFactory) -> None:
    leader = leader_with(20, (1, 3))
    s = factory.open()
    raw, n = leader.read_raw(0, 5, 1 << 20)
    s.append_encoded(raw)
    # gap in the index: entries 6.. when 5 is next
    _rejected(s, leader.read_raw(6, 3, 1 << 20)[0])
    # repeat of held entries
    _rejected(s, leader.read_raw(3, 3, 1 << 20)[0])
    nxt, _ = leader.read_raw(5, 4, 1 << 20)
    # a flipped bit anywhere in the batch (sampled: every 13th bit), including in the last entry
    for bit in range(0, len(nxt) * 8, 13):
        bad = bytearray(nxt)
        bad[bit // 8] ^= 1 << (bit % 8)
        _rejected(s, bad)
    # a torn batch (last entry cut short)
    _rejected(s, nxt[:-1])
    # wrong position: entry 5 with its index and chain right but placed one byte further
    from quorumlog.entry import encode_entry

    chain4 = int.from_bytes(s.read_raw(4, 1, 100)[0][36:40], "big")
    e5, _ = encode_entry(MAGIC_NORMAL, 5, 3, s.write_pos + 1, b"p", chain4)
    _rejected(s, e5)
    e5, _ = encode_entry(MAGIC_NORMAL, 5, 3, s.write_pos, b"p", chain4)
    _rejected(s, e5[:HEADER_SIZE] + b"q")  # body CRC
    e5b, _ = encode_entry(MAGIC_NORMAL, 5, 3, s.write_pos, b"p", chain4 ^ 1)
    _rejected(s, e5b)  # chain seeded with the wrong predecessor
    # a bad chain: entries of a different log with the same indexes and positions
    twin = MemoryStore(small_config())
    twin.append([body(i) for i in range(4)], 1)
    twin.append([body(4)], 2)  # entry 4 differs in its term (the chain covers headers, not bodies)
    twin.append([body(i) for i in range(5, 9)], 2)
    assert twin.get(5).pos == leader.get(5).pos
    _rejected(s, twin.read_raw(5, 2, 1 << 20)[0])
    # the good batch still goes in after all the rejections
    assert s.append_encoded(nxt) == 8
    # decreasing term inside a batch
    chain = int.from_bytes(s.read_raw(8, 1, 100)[0][36:40], "big")
    e9, c9 = encode_entry(MAGIC_NORMAL, 9, 5, s.write_pos, b"t5", chain)
    e10, _ = encode_entry(MAGIC_NORMAL, 10, 4, s.write_pos + len(e9), b"t4", c9)
    _rejected(s, e9 + e10)
    # and a term below the log's end term
    e9low, _ = encode_entry(MAGIC_NORMAL, 9, s.end_term - 1, s.write_pos, b"low", chain)
    _rejected(s, e9low)
    assert s.append_encoded(e9) == 9
    reopen_same(factory)


# -- truncate ------------------------------------------------------------------------------------
def test_truncate_within_a_segment_then_append(factory: StoreFactory) -> None:
    s = factory.open()
    fill(s, 10, term=1)
    wp5 = s.get(5).pos + HEADER_SIZE + len(s.get(5).body)
    s.truncate_after(5)
    assert (s.end_index, s.end_term, s.write_pos) == (5, 1, wp5)
    with pytest.raises(IndexOutOfRangeError):
        s.get(6)
    s = reopen_same(factory)
    a = s.append([b"new"], 2)
    assert a.first_index == 6 and a.positions == [wp5]
    assert s.get(6).body == b"new" and s.term_at(6) == 2
    reopen_same(factory)


def test_truncate_across_segments(factory: StoreFactory) -> None:
    s = factory.open()
    fill(s, 40, term=1, size=MAX_BODY // 2, batch=9)
    assert s.write_pos > 3 * SEG
    before = log_of(s)
    s.truncate_after(3)  # back into the first segment
    assert s.end_index == 3 and log_of(s) == before[:4]
    assert s.write_pos == before[3][2] + HEADER_SIZE + len(before[3][4])
    s = reopen_same(factory)
    fill(s, 10, term=2, size=MAX_BODY // 2)
    assert [e.index for e in s.read(0, 100, 1 << 30)] == list(range(14))
    assert s.term_at(4) == 2
    reopen_same(factory)


def test_truncate_to_just_before_a_roll(factory: StoreFactory) -> None:
    s = factory.open()
    fill(s, 12, term=1, size=MAX_BODY - 1000, batch=1)
    # find the first entry that starts a new segment
    k = next(i for i in range(1, 12) if s.get(i).pos % SEG == 0 and s.get(i).pos > 0)
    s.truncate_after(k - 1)
    assert s.end_index == k - 1
    s = reopen_same(factory)
    a = s.append([b"small"], 1)
    prev = s.get(k - 1)
    assert a.positions == [prev.pos + HEADER_SIZE + len(prev.body)]  # no roll for a small entry
    reopen_same(factory)


def test_truncate_refuses_committed_entries(factory: StoreFactory) -> None:
    s = factory.open()
    fill(s, 10)
    s.set_committed(6)
    with pytest.raises(StoreError):
        s.truncate_after(5)
    assert s.end_index == 9
    s.truncate_after(6)
    assert s.end_index == 6 and s.committed_index == 6
    s.truncate_after(20)  # beyond the end: nothing happens
    assert s.end_index == 6


def test_truncate_to_begin_minus_one(factory: StoreFactory) -> None:
    s = factory.open()
    fill(s, 10, term=3)
    s.truncate_after(-1)
    assert state_of(s) == (0, -1, 0, -1, 0)
    assert s.read(0, 10, 100) == []
    s = reopen_same(factory)
    a = s.append([b"again"], 1)  # a lower term than before is fine on an empty log
    assert (a.first_index, a.positions) == (0, [0])
    reopen_same(factory)


def test_truncate_below_begin_is_refused(factory: StoreFactory) -> None:
    s = factory.open()
    fill(s, 3)
    with pytest.raises((IndexOutOfRangeError, StoreError)):
        s.truncate_after(-2)
    assert s.end_index == 2


# -- segment rolls -------------------------------------------------------------------------------
def _fill_to(s: Any, left: int) -> None:
    """Append entries until exactly `left` bytes remain in the first segment."""
    big = MAX_BODY + HEADER_SIZE
    while SEG - s.write_pos - left > 2 * big:
        s.append([bytes(MAX_BODY)], 1)
    room = SEG - s.write_pos - left
    r1 = room // 2
    s.append([bytes(r1 - HEADER_SIZE), bytes(room - r1 - HEADER_SIZE)], 1)
    assert SEG - s.write_pos == left


@pytest.mark.parametrize("batched", [False, True])
def test_roll_when_entry_and_blank_exactly_fill(factory: StoreFactory, batched: bool) -> None:
    s = factory.open()
    _fill_to(s, 500)
    n = 500 - BLANK_SIZE - HEADER_SIZE  # entry + 8 exactly fill the segment: no roll
    if batched:
        a = s.append([bytes(n), b"after"], 1)
        assert a.positions == [SEG - 500, SEG]
    else:
        a = s.append([bytes(n)], 1)
        assert a.positions == [SEG - 500] and s.write_pos == SEG - BLANK_SIZE
        b = s.append([b"after"], 1)  # any entry now rolls, leaving an 8-byte blank
        assert b.positions == [SEG]
    assert place(SEG - 500, n + HEADER_SIZE, SEG) == SEG - 500
    s = reopen_same(factory)
    assert s.get(s.end_index).body == b"after" and s.get(s.end_index).pos == SEG


@pytest.mark.parametrize("batched", [False, True])
def test_roll_when_one_byte_more(factory: StoreFactory, batched: bool) -> None:
    s = factory.open()
    _fill_to(s, 500)
    n = 500 - BLANK_SIZE - HEADER_SIZE + 1
    if batched:
        a = s.append([b"x", bytes(n - 49)], 1)  # the second no longer fits after the first
        assert a.positions == [SEG - 500, SEG]
    else:
        a = s.append([bytes(n)], 1)
        assert a.positions == [SEG]
    s = reopen_same(factory)
    assert s.get(s.end_index).pos == SEG
    # the follower places the same entries the same way
    f = MemoryStore(small_config())
    f.append_encoded(s.read_raw(0, 1000, 1 << 30)[0])
    assert log_of(f) == log_of(s)


def test_follower_append_across_a_roll(factory: StoreFactory) -> None:
    leader = MemoryStore(small_config())
    _fill_to(leader, 300)
    leader.append([bytes(200), bytes(300), b"z"], 1)
    s = factory.open()
    s.append_encoded(leader.read_raw(0, 1000, 1 << 30)[0])
    assert log_of(s) == log_of(leader)
    reopen_same(factory)


# -- flush, durable index, vote ------------------------------------------------------------------
def test_flush_and_durable_index(factory: StoreFactory) -> None:
    s = factory.open()
    fill(s, 5)
    assert s.durable_index == -1
    assert s.flush() == 4 and s.durable_index == 4
    fill(s, 2)
    assert s.durable_index == 4
    s.truncate_after(2)
    assert s.durable_index == 2
    assert s.flush() == 2


def test_vote_persists(factory: StoreFactory) -> None:
    s = factory.open()
    s.save_vote(3, "n1")
    assert s.load_vote() == (3, "n1")
    s = factory.reopen()
    assert s.load_vote() == (3, "n1")
    s.save_vote(4, None)
    s = factory.reopen()
    assert s.load_vote() == (4, None)


def test_close_is_idempotent(factory: StoreFactory) -> None:
    s = factory.open()
    fill(s, 3)
    s.close()
    s.close()


def test_recovering_flag_persists_beside_term_and_vote(factory: StoreFactory) -> None:
    s = factory.open()
    assert not s.recovering
    s.save_vote(3, "n1")
    s.set_recovering(True)
    s = factory.reopen()
    assert s.recovering and s.load_vote() == (3, "n1")
    s.save_vote(4, None)  # a new term keeps the flag
    s = factory.reopen()
    assert s.recovering and s.load_vote() == (4, None)
    s.set_recovering(False)
    s = factory.reopen()
    assert not s.recovering and s.load_vote() == (4, None)
