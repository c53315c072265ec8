"""The linearizability search over one group's history: Wing & Gong's backtracking with Lowe's memoization,
structured as porcupine's checker (a linked list of call and return entries; an operation is placed by
lifting its two entries out), specialised to a log.

The model state is the log's length alone. What a read returned is checked when entries are appended: a
read returning index i is placed after i exists, so every read covering i is still unplaced when i is
written, and comparing each new body with those reads is the whole content check. Two search nodes with
the same placed set and length therefore have the same future, and (length, placed set) is the memo key
(but for the fungible appends below).

Prunings, each exact:
- a read-only operation (read, end, refused conditional append) that can be placed now is placed now
  without trying the alternatives: any linearization placing it later stays one with it moved here;
- an unplaced operation caps the length (an acknowledged index j: at most j until it is placed; an end
  e: at most e + 1); nothing may take the log past the smallest cap;
- a body some read saw at index i must still be carried by an unplaced append while i is unwritten;
- an uncertain append is placed only where it appends (where its condition holds): omitting it is as
  good as a no-op.

Uncertain appends with the same bodies and condition are interchangeable, and so are those no read ever
saw with the same size and condition: each such class is placed in call order. For a class no read saw,
only how many of it are placed matters, and that count is not part of the memo key, since the ways of
filling an unread stretch of the log (one append of 3, or 3 of 1) would multiply through the rest of a
failing search. A failed node is recorded with lower bounds on those counts instead: the counts at
which a class had no eligible member left where one would have fitted. A node with the same key and
counts at least those bounds has no move the failed node lacked, so it fails too.
"""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

from .ops import APPEND, MISMATCH, OK, UNCERTAIN, Operation

_APPEND, _MISMATCH, _RANGE, _UNCERTAIN = 0, 1, 2, 3
INF = math.inf
_BIG = 1 << 62  # "no cap"


@dataclass(slots=True)
class Outcome:
    verdict: str  # "ok" | "violation" | "unknown"
    path: list[int]  # search ids: the linearization, or the longest linearizable prefix found
    states: int


class GroupSearch:
    """Search state for one group. Search ids: certain operations 0..nc-1 by call time, then the
    uncertain appends by call time."""

    def __init__(self, ops: Sequence[Operation], numbers: Sequence[int] | None = None) -> None:
        certain: list[int] = []
        uncertain: list[int] = []
        for i, op in enumerate(ops):
            if op.kind == APPEND:
                if op.status in (OK, MISMATCH):
                    certain.append(i)
                elif op.status == UNCERTAIN:
                    uncertain.append(i)
                # failed: nothing happened, nothing to check
            elif op.status == OK:
                certain.append(i)
            # a read or end query without an answer constrains nothing
        certain.sort(key=lambda i: (ops[i].call, ops[i].ret))
        uncertain.sort(key=lambda i: ops[i].call)
        order = certain + uncertain
        self.op = [ops[i] for i in order]  # by search id
        self.num = [numbers[i] if numbers is not None else i for i in order]  # search id -> history number
        self.nc = nc = len(certain)
        n = len(order)
        self.kind = [0] * n
        self.lo = [0] * n  # _APPEND: the first index; _RANGE: the least length; _MISMATCH: the refused one
        self.hi = [0] * n  # _RANGE: the greatest length
        self.need = [-1] * n  # _UNCERTAIN: the length its condition asks (-1: none)
        self.bodies: list[tuple[bytes, ...]] = [()] * n
        self.call = [0.0] * n
        self.ret = [0.0] * n
        caps: list[tuple[int, int]] = []
        self.cover: dict[int, list[tuple[int, bytes]]] = {}  # index -> (read, body it returned there)
        self.seen_at: dict[bytes, list[int]] = {}  # body -> indexes reads returned it at
        for s, op in enumerate(self.op):
            self.call[s], self.ret[s] = op.call, op.ret
            if op.kind == APPEND:
                if op.status == OK:
                    self.kind[s] = _APPEND
                    self.bodies[s] = op.bodies
                    assert op.index is not None
                    consistent = op.expected_end is None or op.expected_end + 1 == op.index
                    self.lo[s] = op.index if consistent else -1  # -1: never placeable
                    caps.append((op.index, s))
                elif op.status == MISMATCH:
                    assert op.expected_end is not None
                    self.kind[s] = _MISMATCH
                    self.lo[s] = op.expected_end + 1
                else:
                    self.kind[s] = _UNCERTAIN
                    self.bodies[s] = op.bodies
                    self.need[s] = -1 if op.expected_end is None else op.expected_end + 1
            elif op.kind == "read":
                self.kind[s] = _RANGE
                got = len(op.bodies)
                if not op.cut:  # (an empty answer to an empty question says nothing)
                    self.lo[s], self.hi[s] = op.start + got if got else 0, _BIG
                elif got:
                    self.lo[s] = self.hi[s] = op.start + got
                else:  # an empty result: nothing at start, so the end is before it
                    self.lo[s], self.hi[s] = 0, op.start
                for j, b in enumerate(op.bodies):
                    self.cover.setdefault(op.start + j, []).append((s, b))
                    self.seen_at.setdefault(b, []).append(op.start + j)
            else:
                assert op.index is not None
                self.kind[s] = _RANGE
                self.lo[s] = self.hi[s] = op.index + 1
            if self.kind[s] == _RANGE and self.hi[s] < _BIG:
                caps.append((self.hi[s], s))
        caps.sort()
        self.cap_val = [c for c, _ in caps]
        self.cap_op = [s for _, s in caps]
        self.cap_pos = [_BIG] * n
        for p, s in enumerate(self.cap_op):
            self.cap_pos[s] = p
        self.supply: dict[bytes, int] = {}
        for s in range(n):
            for b in self.bodies[s]:
                self.supply[b] = self.supply.get(b, 0) + 1
        # Linked list of entries: 0 head, 1 tail, 2s+2 the call of s, 2s+3 its return (odd: stops a walk).
        ent = sorted([(self.call[s], 0, 2 * s + 2) for s in range(nc)] +
                     [(self.ret[s], 1, 2 * s + 3) for s in range(nc)])
        chain = [0] + [e for _, _, e in ent] + [1]
        self.nxt = [0] * (2 * nc + 2)
        self.prv = [0] * (2 * nc + 2)
        for x, y in zip(chain, chain[1:], strict=False):
            self.nxt[x], self.prv[y] = y, x
        # Classes of interchangeable uncertain appends, each placed in call order: the same bodies and
        # condition when a read saw one of the bodies (their placed members stay in the memo key), else the
        # same size and condition: these are "fungible".
        self.cls_of = [0] * n
        self.members: list[list[int]] = [[]]  # class 0 is the head of the list of classes
        by_key: dict[tuple[object, int], int] = {}
        for s in range(nc, n):
            seen = any(b in self.seen_at for b in self.bodies[s])
            key = (self.bodies[s] if seen else len(self.bodies[s]), self.need[s])
            c = by_key.setdefault(key, len(self.members))
            if c == len(self.members):
                self.members.append([])
            self.members[c].append(s)
            self.cls_of[s] = c
        self.seen_cls = [False] + [any(b in self.seen_at for b in self.bodies[m[0]]) for m in self.members[1:]]
        self.fungible = [False] + [not seen for seen in self.seen_cls[1:]]
        self.member_calls = [[self.call[s] for s in m] for m in self.members]
        nk = len(self.members)
        self.first_call = [-INF] + [self.call[m[0]] for m in self.members[1:]]
        order = sorted(range(1, nk), key=lambda c: self.first_call[c])
        self.cnext = [0] * nk
        self.cprev = [0] * nk
        for x, y in zip([0] + order, order + [0], strict=True):
            self.cnext[x], self.cprev[y] = y, x
        self.reset()

    def reset(self) -> None:
        n = len(self.op)
        self.length = 0
        self.lin = bytearray(n)
        self.placed_c = 0  # bitset of placed certain operations
        self.placed_u = 0  # bitset of placed uncertain ones that are not fungible
        self.remaining = self.nc
        self.cap_ptr = 0
        self.cptr = [0] * len(self.members)

    # -- the state --------------------------------------------------------------------------------------

    def ceilings(self) -> tuple[int, int, int]:
        """The smallest cap of an unplaced operation, that operation, and the next smallest cap."""
        vals, ops, lin = self.cap_val, self.cap_op, self.lin
        p, n = self.cap_ptr, len(vals)
        while p < n and lin[ops[p]]:
            p += 1
        self.cap_ptr = p
        if p == n:
            return _BIG, -1, _BIG
        q = p + 1
        while q < n and lin[ops[q]]:
            q += 1
        return vals[p], ops[p], vals[q] if q < n else _BIG

    def fits(self, bodies: tuple[bytes, ...], limit: int) -> bool:
        """Whether `bodies` may be appended now: the caps, what reads returned there, and bodies read later."""
        at = self.length
        new = at + len(bodies)
        if new > limit:
            return False
        lin, cover, seen_at, supply = self.lin, self.cover, self.seen_at, self.supply
        for j, b in enumerate(bodies):
            readers = cover.get(at + j)
            if readers:
                for r, rb in readers:
                    if rb != b and not lin[r]:
                        return False
            where = seen_at.get(b)
            if where is not None and supply[b] <= bodies.count(b):
                for i in where:
                    if i >= new:
                        return False
        return True

    def apply(self, s: int) -> None:
        self.lin[s] = 1
        if s < self.nc:
            self.placed_c |= 1 << s
            nxt, prv = self.nxt, self.prv
            for e in (2 * s + 2, 2 * s + 3):
                nxt[prv[e]] = nxt[e]
                prv[nxt[e]] = prv[e]
            self.remaining -= 1
        else:
            c = self.cls_of[s]
            self.cptr[c] += 1
            if not self.fungible[c]:  # a fungible class stays listed: an exhausted one is a fact to record
                self.placed_u |= 1 << (s - self.nc)
                if self.cptr[c] == len(self.members[c]):
                    self.cnext[self.cprev[c]] = self.cnext[c]
                    self.cprev[self.cnext[c]] = self.cprev[c]
        bodies = self.bodies[s]
        if bodies:
            self.length += len(bodies)
            for b in bodies:
                self.supply[b] -= 1

    def undo(self, s: int) -> None:
        self.lin[s] = 0
        if s < self.nc:
            self.placed_c &= ~(1 << s)
            nxt, prv = self.nxt, self.prv
            for e in (2 * s + 3, 2 * s + 2):
                nxt[prv[e]] = e
                prv[nxt[e]] = e
            self.remaining += 1
            if self.cap_pos[s] < self.cap_ptr:
                self.cap_ptr = self.cap_pos[s]
        else:
            c = self.cls_of[s]
            if not self.fungible[c]:
                self.placed_u &= ~(1 << (s - self.nc))
                if self.cptr[c] == len(self.members[c]):
                    self.cnext[self.cprev[c]] = c
                    self.cprev[self.cnext[c]] = c
            self.cptr[c] -= 1
        bodies = self.bodies[s]
        if bodies:
            self.length -= len(bodies)
            for b in bodies:
                self.supply[b] += 1

    def key_after(self, s: int) -> tuple[int, int, int, int]:
        """The memo key of the node `s` leads to: its length and placed set. The certain set is keyed as
        its count of leading placed operations and the rest, which stays a few bits wide."""
        pc, pu = self.placed_c, self.placed_u
        if s < self.nc:
            pc |= 1 << s
        elif not self.fungible[self.cls_of[s]]:
            pu |= 1 << (s - self.nc)
        x = pc + 1
        p = (x & -x).bit_length() - 1
        return self.length + len(self.bodies[s]), p, pc >> p, pu

    # -- one node -----------------------------------------------------------------------------------------

    def pending(self) -> tuple[list[int], int]:
        """The certain operations that may be placed next (called before the earliest unplaced return),
        and the operation of that return."""
        out = []
        nxt = self.nxt
        e = nxt[0]
        while not e & 1:
            out.append((e - 2) >> 1)
            e = nxt[e]
        return out, (e - 3) >> 1

    def eligible_uncertain(self, before: float) -> list[int]:
        """The first unplaced member of each class of uncertain appends called by `before`."""
        out = []
        c = self.cnext[0]
        while c and self.first_call[c] <= before:
            k = self.cptr[c]
            if k < len(self.members[c]) and self.member_calls[c][k] <= before:
                out.append(self.members[c][k])
            c = self.cnext[c]
        return out

    def expand(self) -> tuple[list[int], list[tuple[int, int]]]:
        """The operations to try from this node, in order: a placeable read-only operation alone, else the
        acknowledged appends that fit, then uncertain ones (those a read saw here first). Also the facts
        a node with other counts of fungible appends must share to have no more moves: (class, least count)
        for each class with no eligible member left that would fit here."""
        length = self.length
        kind, lo, hi = self.kind, self.lo, self.hi
        c1, s1, c2 = self.ceilings()
        muts = []
        nxt = self.nxt
        e = nxt[0]
        while not e & 1:
            s = (e - 2) >> 1
            k = kind[s]
            if k == _APPEND:
                if lo[s] == length and self.fits(self.bodies[s], c2 if s == s1 else c1):
                    muts.append(s)
            elif k == _RANGE:
                if lo[s] <= length <= hi[s]:
                    return [s], []
            elif length != lo[s]:  # a refused conditional append
                return [s], []
            e = nxt[e]
        before = self.ret[(e - 3) >> 1]
        ranked = []
        facts = []
        members, calls, cptr, need, fungible = self.members, self.member_calls, self.cptr, self.need, self.fungible
        c = self.cnext[0]
        while c and self.first_call[c] <= before:
            m = members[c]
            k = cptr[c]
            s = m[k] if k < len(m) else m[0]
            if (need[s] < 0 or need[s] == length) and self.fits(self.bodies[s], c1):
                if k < len(m) and calls[c][k] <= before:
                    first = self.bodies[s][0]
                    rank = 1 if fungible[c] else 0 if any(b == first for _, b in self.cover.get(length, ())) else 2
                    ranked.append((rank, calls[c][k], s))
                elif fungible[c]:  # a smaller count would offer a move
                    least = bisect.bisect_right(calls[c], before)
                    if least:
                        facts.append((c, least))
            c = self.cnext[c]
        if ranked:
            ranked.sort()
            muts.extend(s for _, _, s in ranked)
        return muts, facts

    # -- the search ---------------------------------------------------------------------------------------

    def run(self, deadline: float = INF) -> Outcome:
        self.reset()
        # Failed nodes: memo key -> lower bounds on fungible counts, as ((class, least count), ...).
        cache: dict[tuple[int, int, int, int], list[tuple[tuple[int, int], ...]]] = {}
        frames: list[list[int]] = []  # per node on the path: the moves to try
        pos: list[int] = []  # the next move to try
        bounds: list[dict[int, int]] = []  # what the node's failure needs so far
        keys: list[tuple[int, int, int, int]] = []  # the node's memo key
        path: list[int] = []  # the move into each node but the root
        cls_of, fungible, cptr = self.cls_of, self.fungible, self.cptr
        best, best_path = -1, list[int]()
        states = 0
        key = (0, 0, 0, 0)
        while True:
            if not self.remaining:
                return Outcome("ok", path, states)
            states += 1
            if not states & 1023 and time.monotonic() > deadline:
                return Outcome("unknown", best_path if best > self.nc - self.remaining else list(path), states)
            moves, facts = self.expand()
            frames.append(moves)
            pos.append(0)
            bounds.append(dict(facts))
            keys.append(key)
            while True:
                moves, i, need = frames[-1], pos[-1], bounds[-1]
                chosen = -1
                while i < len(moves):
                    s = moves[i]
                    i += 1
                    key = self.key_after(s)
                    moved = cls_of[s] if s >= self.nc and fungible[cls_of[s]] else 0
                    hit = _subsumed(cache.get(key), cptr, moved)
                    if hit is None:
                        chosen = s
                        break
                    _merge(need, hit, moved)
                pos[-1] = i
                if chosen >= 0:
                    self.apply(chosen)
                    path.append(chosen)
                    break
                done = self.nc - self.remaining
                if done > best:
                    best, best_path = done, list(path)
                failed = tuple(need.items())
                cache.setdefault(keys.pop(), []).append(failed)
                frames.pop()
                pos.pop()
                bounds.pop()
                if not path:
                    return Outcome("violation", best_path, states)
                s = path.pop()
                self.undo(s)
                _merge(bounds[-1], failed, cls_of[s] if s >= self.nc and fungible[cls_of[s]] else 0)


def _subsumed(failed: list[tuple[tuple[int, int], ...]] | None, counts: list[int],
              moved: int) -> tuple[tuple[int, int], ...] | None:
    """The recorded failure (if any) whose bounds the node reached by a move of class `moved` meets."""
    if failed:
        for bounds in failed:
            for c, least in bounds:
                if counts[c] + (c == moved) < least:
                    break
            else:
                return bounds
    return None


def _merge(into: dict[int, int], bounds: tuple[tuple[int, int], ...], moved: int) -> None:
    """Add a child's bounds to its parent's: the move into the child placed one of class `moved`."""
    for c, least in bounds:
        if c == moved:
            least -= 1
        if least > into.get(c, 0):
            into[c] = least
