"""The LogStore contract, continued: where the log begins (begin_term, expiry, reset), damage found while
running, and the identity; one suite run against MemoryStore and FileStore.

Every test that changes the log reopens the store and checks that nothing changed."""

from __future__ import annotations

import time
from typing import Any

import pytest
from store_helpers import SEG, StoreFactory, body, bounds_of, fill, log_of, reopen_same, small_config, state_of

from quorumlog.errors import IndexOutOfRangeError, InvalidArgumentError, StoreError
from quorumlog.store import MemoryStore

HOUR = 3600.0
SIZE = 4000  # 16 entries to a 64 KiB segment


def later() -> float:
    """A time at which every segment written so far is old."""
    return time.time() + 1000 * HOUR


def chain_of(s: Any, index: int) -> int:
    return int.from_bytes(s.read_raw(index, 1, 1)[0][36:40], "big")


def committed_log(s: Any, n: int = 80) -> list:
    """n entries over several segments, terms rising every 20; all committed and flushed."""
    for k in range(0, n, 10):
        s.append([body(i, SIZE) for i in range(k, k + 10)], 1 + k // 20)
    s.set_committed(s.end_index)
    s.flush()
    return log_of(s)


def leader_of(log: list) -> MemoryStore:
    leader = MemoryStore(small_config())
    for e in log:
        leader.append([e[4]], e[1], e[3])
    return leader


def assert_below_begin_refused(s: Any) -> None:
    b = s.begin_index
    for read in (lambda: s.get(b - 1), lambda: s.read(b - 1, 10, 1 << 20), lambda: s.read_raw(b - 1, 10, 1 << 20),
                 lambda: s.read_raw(0, 1, 1), lambda: s.term_at(b - 2)):
        with pytest.raises(IndexOutOfRangeError):
            read()


# -- begin_term and expiry -----------------------------------------------------------------------
def test_fresh_log_begins_at_zero(factory: StoreFactory) -> None:
    s = factory.open()
    assert bounds_of(s) == (0, 0, 0, 0) and s.term_at(-1) == 0 and s.end_term == 0
    s = reopen_same(factory)
    assert bounds_of(s) == (0, 0, 0, 0)


def test_expire_moves_the_begin_to_a_segment_start(factory: StoreFactory) -> None:
    s = factory.open()
    log = committed_log(s)
    chains = [chain_of(s, i) for i in range(len(log))]
    removed = s.expire(s.end_index, later())
    b = s.begin_index
    assert removed == b > 20 and log[b][2] % SEG == 0 and log[b - 1][2] // SEG < log[b][2] // SEG
    assert bounds_of(s) == (b, log[b][2], chains[b - 1], log[b - 1][1])
    assert s.term_at(b - 1) == log[b - 1][1] > 1  # the term of an expired entry, kept
    assert log_of(s) == log[b:] and s.end_index == len(log) - 1
    assert_below_begin_refused(s)
    s = reopen_same(factory)
    assert bounds_of(s) == (b, log[b][2], chains[b - 1], log[b - 1][1])
    # the segment being written is never removed
    s.expire(s.end_index, later())
    assert s.begin_pos // SEG == s.write_pos // SEG and s.end_index == len(log) - 1


def test_empty_log_after_expiry_ends_at_the_begin_term(factory: StoreFactory) -> None:
    s = factory.open()
    for k in range(0, 80, 10):
        s.append([body(i, SIZE) for i in range(k, k + 10)], 1 + k // 20)
    log = log_of(s)
    first_of_third = next(e[0] for e in log if e[2] >= 2 * SEG)
    # The new first entry must itself be committed: its position fixes the log's begin position.
    s.set_committed(first_of_third - 1)
    s.flush()
    assert s.expire(s.end_index, later()) < first_of_third
    s.set_committed(first_of_third)
    assert s.begin_index + s.expire(s.end_index, later()) == first_of_third
    b = s.begin_index
    assert s.term_at(b - 1) == log[b - 1][1]
    s = reopen_same(factory)
    assert s.term_at(b - 1) == log[b - 1][1] and s.begin_pos == log[b][2]
    with pytest.raises(IndexOutOfRangeError):
        s.read_raw(b - 1, 1, 1)
    reopen_same(factory)


def test_expire_takes_only_committed_safe_and_durable_entries(factory: StoreFactory) -> None:
    s = factory.open()
    for k in range(0, 80, 10):
        s.append([body(i, SIZE) for i in range(k, k + 10)], 1)
    assert s.expire(100, later()) == 0  # nothing committed
    s.set_committed(79)
    assert s.expire(100, later()) == 0  # nothing durable
    s.flush()
    removed = s.expire(20, later())  # safe_index bounds it
    assert 0 < removed <= 21
    assert s.expire(20, later()) == 0
    s.set_committed(79)
    assert s.expire(79, later()) > 0
    reopen_same(factory)


def test_young_segments_stay(factory: StoreFactory) -> None:
    s = factory.open()
    committed_log(s)
    assert s.expire(s.end_index, time.time()) == 0
    assert s.expire(s.end_index, time.time() + 71 * HOUR) == 0  # file_reserved_hours is 72
    assert s.expire(s.end_index, time.time() + 73 * HOUR) > 0


def test_expired_entries_are_never_served(factory: StoreFactory) -> None:
    """The leader's recent batches must not serve what expiry removed."""
    s = factory.open()
    s.append([body(i, SIZE) for i in range(40)], 1)  # one batch over three segments
    raw_all, n = s.read_raw(0, 100, 1 << 30)
    s.set_committed(39)
    s.flush()
    b = s.begin_index + s.expire(39, later())
    assert b > 0
    assert_below_begin_refused(s)
    raw, k = s.read_raw(b, 100, 1 << 30)
    assert k == n - b and raw == raw_all[b * (48 + SIZE):]


def test_memory_store_segments_age_from_its_clock() -> None:
    """Without a clock every memory segment counts as written at time 0."""
    s = MemoryStore(small_config())
    committed_log(s)
    reserved = small_config().file_reserved_hours * HOUR
    assert s.expire(s.end_index, reserved - 1) == 0
    assert s.expire(s.end_index, reserved) > 0
    now = [5000.0]
    s = MemoryStore(small_config(), clock=lambda: now[0])
    committed_log(s)
    assert s.expire(s.end_index, 5000.0 + reserved - 1) == 0
    assert s.expire(s.end_index, 5000.0 + reserved) > 0


# -- reset ---------------------------------------------------------------------------------------
def expired_leader(n: int = 80) -> MemoryStore:
    leader = MemoryStore(small_config())
    committed_log(leader, n)
    leader.expire(leader.end_index, later())
    assert leader.begin_index > 0
    return leader


def test_reset_starts_an_empty_log_at_the_leaders_begin(factory: StoreFactory) -> None:
    leader = expired_leader()
    b, p, c, t = bounds_of(leader)
    s = factory.open()
    s.append([b"mine", b"diverging"], 9)  # uncommitted entries of another term: discarded
    s.reset(b, p, c, t)
    assert state_of(s) == (b, b - 1, t, b - 1, p) and s.durable_index == b - 1 and s.damage is None
    assert bounds_of(s) == (b, p, c, t) and s.term_at(b - 1) == t
    assert s.read(b, 10, 1 << 20) == [] and s.read_raw(b, 10, 1 << 20) == (b"", 0)
    assert_below_begin_refused(s)
    s = reopen_same(factory)
    assert bounds_of(s) == (b, p, c, t)
    raw, n = leader.read_raw(b, 1000, 1 << 30)
    assert s.append_encoded(raw) == leader.end_index
    assert s.read_raw(b, 1000, 1 << 30) == (raw, n) and log_of(s) == log_of(leader)
    s = reopen_same(factory)
    # as leader it continues the same log, byte for byte
    a, a2 = s.append([b"next"], 7), leader.append([b"next"], 7)
    assert a == a2 and s.read_raw(a.first_index, 1, 1) == leader.read_raw(a.first_index, 1, 1)


def test_reset_refuses_to_drop_committed_entries(factory: StoreFactory) -> None:
    s = factory.open()
    fill(s, 10)
    s.set_committed(5)
    before = (state_of(s), log_of(s))
    with pytest.raises(StoreError, match="committed"):
        s.reset(5, 0, 0, 1)
    assert (state_of(s), log_of(s)) == before
    with pytest.raises(StoreError, match="cannot start a log"):
        s.reset(8, -1, 0, 1)
    with pytest.raises(StoreError, match="cannot start a log"):
        s.reset(8, 0, 1 << 32, 1)
    with pytest.raises(StoreError, match="cannot start a log"):  # not even an empty entry fits there
        s.reset(8, 2 * SEG - 50, 0, 1)
    assert (state_of(s), log_of(s)) == before
    s.reset(6, 12345, 77, 2)  # committed 5 < 6: allowed
    assert state_of(s) == (6, 5, 2, 5, 12345)
    reopen_same(factory)


def test_reset_clears_damage(factory: StoreFactory) -> None:
    leader = expired_leader()
    s = factory.open()
    fill(s, 10)
    s.set_committed(5)
    s.flush()
    s.mark_damaged(3, "read failed")
    assert s.damage is not None
    s.reset(*bounds_of(leader))
    assert s.damage is None and s.committed_index == leader.begin_index - 1
    s = reopen_same(factory)  # a plain open: nothing is owed any more
    assert s.damage is None


# -- damage found while running ------------------------------------------------------------------
def test_mark_damaged_cuts_below_the_committed_index_and_heals(factory: StoreFactory) -> None:
    s = factory.open()
    fill(s, 20, size=100)
    leader = leader_of(log_of(s))
    s.set_committed(15)
    s.flush()
    s.mark_damaged(10, "body CRC mismatch")
    d = s.damage
    assert d is not None and (d.first_bad_index, d.committed_index, d.reason) == (10, 19, "body CRC mismatch")
    assert (s.end_index, s.committed_index, s.durable_index) == (9, 9, 9)
    assert log_of(s) == log_of(leader)[:10]
    s = reopen_same(factory, repair=True)
    d = s.damage
    assert d is not None and (d.first_bad_index, d.committed_index) == (10, 19)  # persisted
    s.append_encoded(leader.read_raw(10, 5, 1 << 20)[0])
    assert s.damage is not None  # 15..19 still owed
    s.append_encoded(leader.read_raw(15, 5, 1 << 20)[0])
    assert s.damage is None and s.committed_index == 15 and log_of(s) == log_of(leader)
    reopen_same(factory)


def test_mark_damaged_at_or_below_the_begin_empties_the_log(factory: StoreFactory) -> None:
    s = factory.open()
    log = committed_log(s)
    s.expire(s.end_index, later())
    b = s.begin_index
    s.mark_damaged(b, "bad")
    assert state_of(s) == (b, b - 1, log[b - 1][1], b - 1, s.begin_pos)
    d = s.damage
    assert d is not None and (d.first_bad_index, d.committed_index) == (b, len(log) - 1)
    s = reopen_same(factory, repair=True)
    s.append_encoded(leader_of(log).read_raw(b, 1000, 1 << 30)[0])
    assert s.damage is None and log_of(s) == log[b:] and s.committed_index == len(log) - 1
    with pytest.raises(IndexOutOfRangeError):
        s.mark_damaged(len(log), "past the end")


# -- identity ------------------------------------------------------------------------------------
def test_identity_is_recorded(factory: StoreFactory) -> None:
    s = factory.open()
    assert s.identity is None
    with pytest.raises(InvalidArgumentError):
        s.set_identity("a=b")
    s.set_identity("g0:1234")
    s = factory.reopen()
    assert s.identity == "g0:1234"
    if isinstance(s, MemoryStore):
        s.crash()
        assert s.identity == "g0:1234"
