"""Why a search got stuck: the state at the end of the longest linearizable prefix, and for each operation
that could come next, the reason it cannot."""

from __future__ import annotations

from dataclasses import dataclass

from .search import _APPEND, _BIG, _MISMATCH, _RANGE, GroupSearch


@dataclass(slots=True)
class Stuck:
    log: list[bytes]  # the log after the prefix
    writer: list[int]  # search id of the append that wrote each entry
    blocker: int  # search id of the earliest-returning unplaced certain operation
    reasons: dict[int, str]  # search id -> why it cannot be placed next
    related: set[int]  # search ids the reasons name


def replay(search: GroupSearch, path: list[int]) -> Stuck:
    """Replay `path` on `search` (left in the state it reaches) and explain the next step."""
    search.reset()
    log: list[bytes] = []
    writer: list[int] = []
    for s in path:
        search.apply(s)
        log.extend(search.bodies[s])
        writer.extend([s] * len(search.bodies[s]))
    stuck = Stuck(log, writer, -1, {}, set())
    if not search.remaining:
        return stuck
    pending, stuck.blocker = search.pending()
    for s in pending + search.eligible_uncertain(search.ret[stuck.blocker]):
        why, names = _why(search, s, log, writer)
        stuck.reasons[s] = why
        stuck.related.update(names)
    return stuck


def _who(search: GroupSearch, s: int) -> str:
    return f"#{search.num[s]} ({search.op[s].describe()})"


_DEEPER = "can be placed here, but then nothing that must follow can", ()


def _why(search: GroupSearch, s: int, log: list[bytes], writer: list[int]) -> tuple[str, tuple[int, ...]]:
    """Why `s` cannot be placed next, and the operations that reason names."""
    n = search.length
    k = search.kind[s]
    op = search.op[s]
    if k == _RANGE:
        lo, hi = search.lo[s], search.hi[s]
        if lo <= n <= hi:
            return _DEEPER
        want = f"at least {lo - 1}" if hi == _BIG else f"at most {hi - 1}" if lo == 0 else f"{lo - 1}"
        return f"needs the end to be {want}, but it is {n - 1} here", ()
    if k == _MISMATCH:
        if n != search.lo[s]:
            return _DEEPER
        return f"was refused for expected_end {op.expected_end}, but the end is {n - 1} here", ()
    bodies = search.bodies[s]
    if k == _APPEND:
        assert op.index is not None
        if search.lo[s] < 0:
            return f"acknowledged at {op.index}, but its expected_end {op.expected_end} asks for index " \
                   f"{(op.expected_end or 0) + 1}", ()
        if op.index < n:
            w = writer[op.index]
            return f"acknowledged at index {op.index}, which already holds {log[op.index]!r} written by " \
                   f"{_who(search, w)}", (w,)
        if op.index > n:
            return f"acknowledged at index {op.index}, but the next index here is {n}", ()
    elif search.need[s] >= 0 and search.need[s] != n:
        return f"its condition expected_end={search.need[s] - 1} does not hold (the end is {n - 1}): it would " \
               f"do nothing", ()
    new = n + len(bodies)
    for p, capped in zip(search.cap_val, search.cap_op, strict=True):
        if capped != s and not search.lin[capped]:
            if new > p:
                past = f"index {p}, where {_who(search, capped)} was acknowledged" if search.kind[capped] == _APPEND \
                    else f"the end {p - 1} that {_who(search, capped)} saw"
                return f"would take the end to {new - 1}, past {past} (it is placed later, and the end never " \
                       f"goes back)", (capped,)
            break
    for j, b in enumerate(bodies):
        for r, rb in search.cover.get(n + j, ()):
            if rb != b and not search.lin[r]:
                return f"would put {b!r} at index {n + j}, where {_who(search, r)} returned {rb!r}", (r,)
        if search.supply[b] <= bodies.count(b):
            later = [i for i in search.seen_at.get(b, ()) if i >= new]
            if later:
                readers = tuple(r for r, rb in search.cover.get(later[0], ()) if rb == b)
                return f"{b!r} is also read at index {later[0]}, and no other unplaced append carries it", readers
    return _DEEPER
