"""Epochs in the log: every entry's term is the epoch of the primary that wrote it, so a log's epoch
list (RocketMQ 5's epoch file) is read from the log itself, never kept beside it, and cannot disagree
with it.

Within one epoch a single primary wrote one sequence of entries, so two logs that both hold entry k of
epoch e hold the same entries up to k (and the chain CRC proves it byte for byte). The point where a
backup's log and its primary's agree is therefore the end of the highest epoch both hold, cut to the
shorter of the two: everything the backup holds past it was written by a primary the new one
superseded, and never reached every in-sync backup.
"""

from __future__ import annotations

from ..store.base import LogStore


def epoch_list(store: LogStore) -> list[tuple[int, int]]:
    """(epoch, last index of that epoch) for every epoch in the log, oldest first: a binary search per
    epoch over the index, so O(epochs × log n) reads."""
    out: list[tuple[int, int]] = []
    lo, end = store.begin_index, store.end_index
    term_at = store.term_at
    while lo <= end:
        epoch = term_at(lo)
        a, b = lo, end
        while a < b:
            mid = (a + b + 1) // 2
            if term_at(mid) <= epoch:
                a = mid
            else:
                b = mid - 1
        out.append((epoch, a))
        lo = a + 1
    return out


def agreed_end(primary: list[tuple[int, int]], backup: list[tuple[int, int]]) -> int | None:
    """The last index at which a backup's log (its epoch list) agrees with the primary's; None when they
    share no epoch (the backup then starts again at the primary's first entry)."""
    last_of = dict(primary)
    for epoch, last in reversed(backup):
        mine = last_of.get(epoch)
        if mine is not None:
            return min(last, mine)
    return None


def promotion_epoch(highest_seen: int, members: list[str], target: str) -> int:
    """The epoch an operator's promotion of `target` starts: above every epoch seen, and congruent to the
    target's place among the sorted members, so two promotions made at once (each computing from what it
    could reach) never start the same epoch with two primaries."""
    ordered = sorted(members)
    n = len(ordered)
    return (highest_seen // n + 1) * n + ordered.index(target)


def hand_back_to(taken: bool, holder: str, isr_seen: bool) -> str:
    """Whom to elect when the recorded primary lost its store and no other in-sync member is left, from the
    controller's record of its epoch ("": nobody; an operator decides what may be lost).

    `holder` holds every entry acknowledged before the epoch (record.py). An epoch whose takeover was never
    recorded acknowledged nothing. In an epoch in which nobody has been in sync since its takeover, what was
    acknowledged was held by the lost store alone (ASYNC, or min_in_sync = 0), gone whatever is chosen.
    Otherwise a backup since gone may have acknowledged entries that no live member holds."""
    return "" if taken and isr_seen else holder
