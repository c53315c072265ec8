"""Table tests for the pure quorum and log-search maths."""

from __future__ import annotations

import pytest

from quorumlog.raft.quorum import (
    first_index_of_term,
    last_index_with_term_at_most,
    next_compare_index,
    quorum_index,
)


@pytest.mark.parametrize(("marks", "majority", "want"), [
    ([5, 3, 1], 2, 3),
    ([1, 3, 5], 2, 3),
    ([-1, -1, 7], 2, -1),
    ([4, 4, 4], 2, 4),
    ([9, 2, 7, 7, 1], 3, 7),
    ([9, 2, 7, 1, 1], 3, 2),
    ([0], 1, 0),
    ([3, 8], 2, 3),
    ([5, 3, 1], 1, 5),
    ([5, 3, 1], 3, 1),
])
def test_raft_quorum_index(marks: list[int], majority: int, want: int) -> None:
    assert quorum_index(marks, majority) == want


def test_raft_quorum_index_rejects_bad_majority() -> None:
    with pytest.raises(ValueError):
        quorum_index([1, 2, 3], 4)


LOG = [1, 1, 1, 4, 4, 5, 5, 6, 6, 6]  # Raft paper Figure 7's leader, indexes from 0


def term_at(i: int) -> int:
    return 0 if i == -1 else LOG[i]


@pytest.mark.parametrize(("term", "want"), [(1, 0), (4, 3), (5, 5), (6, 7), (2, 3), (7, 10), (0, 0)])
def test_raft_first_index_of_term(term: int, want: int) -> None:
    assert first_index_of_term(term_at, 0, len(LOG) - 1, term) == want


@pytest.mark.parametrize(("term", "hi", "want"), [(1, 9, 2), (3, 9, 2), (4, 9, 4), (6, 9, 9), (6, 6, 6),
                                                  (0, 9, -1), (5, 4, 4)])
def test_raft_last_index_with_term_at_most(term: int, hi: int, want: int) -> None:
    assert last_index_with_term_at_most(term_at, 0, hi, term) == want


@pytest.mark.parametrize(("compared", "conflict_index", "conflict_term", "want"), [
    # Figure 7 (f): follower holds term 3 on 6..10; our last entry of term <= 3 is 2: skip there.
    (9, 6, 3, 2),
    # (e): follower holds term 4 on 3..6, compared at 6 (ours: term 5): index 4 has term 4 too: match there.
    (6, 3, 4, 4),
    # (c)/(d), compared at our NOOP (index 10, term 8): the follower's term-6 run from 7 contains our
    # index 9 of term 6, a match; its term-7 run from 10 does not, so compare just below it.
    (10, 7, 6, 9),
    (10, 10, 7, 9),
    # Nothing of ours has a term <= the follower's: compare the empty prefix.
    (9, 0, 0, -1),
])
def test_raft_next_compare_index_skips_a_term_per_round_trip(compared: int, conflict_index: int,
                                                              conflict_term: int, want: int) -> None:
    assert next_compare_index(term_at, -1, compared, conflict_index, conflict_term) == want
