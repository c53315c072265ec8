"""Pure quorum and log-search maths, tested with tables."""

from __future__ import annotations

from collections.abc import Callable, Sequence


def quorum_index(watermarks: Sequence[int], majority: int) -> int:
    """The largest index that at least `majority` of the watermarks reach (-1 when none)."""
    if majority <= 0 or majority > len(watermarks):
        raise ValueError(f"majority {majority} out of range for {len(watermarks)} members")
    if len(watermarks) == 3:  # the common case, without building a sorted list
        a, b, c = watermarks
        return max(min(a, b), min(b, c), min(a, c)) if majority == 2 else (
            max(a, b, c) if majority == 1 else min(a, b, c))
    return sorted(watermarks, reverse=True)[majority - 1]


def first_index_of_term(term_at: Callable[[int], int], lo: int, hi: int, term: int) -> int:
    """Smallest i in [lo, hi] with term_at(i) >= term, given terms never decrease along the log.

    With term_at(hi) == term this is the first index of that term within [lo, hi]. Returns hi + 1 when
    no index qualifies.
    """
    while lo <= hi:
        mid = (lo + hi) // 2
        if term_at(mid) >= term:
            hi = mid - 1
        else:
            lo = mid + 1
    return lo


def last_index_with_term_at_most(term_at: Callable[[int], int], lo: int, hi: int, term: int) -> int:
    """Largest i in [lo, hi] with term_at(i) <= term (terms never decrease); lo - 1 when none."""
    while lo <= hi:
        mid = (lo + hi) // 2
        if term_at(mid) <= term:
            lo = mid + 1
        else:
            hi = mid - 1
    return hi


def next_compare_index(term_at: Callable[[int], int], floor: int, compared: int,
                       conflict_index: int, conflict_term: int) -> int:
    """Where the leader compares next after a term conflict at `compared`.

    The follower holds `conflict_term` on [conflict_index, compared]; the leader's entry at `compared`
    has another term. The leader's last entry of a term <= conflict_term below `compared` is the best
    candidate: if it has exactly conflict_term and lies in the follower's run, it matches (same index and
    term); otherwise nothing in the follower's run can match and the search skips below the run. Each
    round trip so skips at least one whole term on one side. `floor` is the lowest index the leader can
    name (-1 for a log starting at 0).
    """
    j = last_index_with_term_at_most(term_at, floor + 1, compared - 1, conflict_term)
    if j >= conflict_index and j > floor and term_at(j) == conflict_term:
        return j
    return max(floor, min(j, conflict_index - 1))
