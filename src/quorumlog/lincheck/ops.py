"""The operations of a history: appends, reads and end queries, with their outcomes, and a converter from
the real-process tests' append records (tests/server/history.py)."""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

APPEND, READ, END = "append", "read", "end"
OK, FAILED, MISMATCH, UNCERTAIN = "ok", "failed", "mismatch", "uncertain"
_KINDS = (APPEND, READ, END, "committed")


@dataclass(frozen=True, slots=True)
class Operation:
    """One call and its outcome. `ret` is math.inf for an uncertain outcome (it may take effect at any
    time after `call`, or never).

    - append: `bodies` written at `index`.. (status ok); `expected_end` makes it conditional; status
      failed (nothing happened), mismatch (conditional, refused: the end differed) or uncertain.
    - read: `bodies` are the entries at `start`..; `limit` is how many were asked (None: as many as
      returned). Fewer than `limit` means the read reached the end: the log's end was then exactly the
      last index returned (for an empty result: at most start - 1).
    - end / committed: `index` is the log's end (-1 when empty).
    """

    kind: str
    client: Hashable
    call: float
    ret: float
    status: str = OK
    bodies: tuple[bytes, ...] = ()
    index: int | None = None
    expected_end: int | None = None
    start: int = 0
    limit: int | None = None
    group: str = ""
    label: str = ""  # shown in reports, e.g. the real index of a renumbered append

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ValueError(f"unknown operation kind {self.kind!r}")
        if self.status not in (OK, FAILED, MISMATCH, UNCERTAIN):
            raise ValueError(f"unknown status {self.status!r}")
        if not self.call <= self.ret:
            raise ValueError(f"returns ({self.ret}) before its call ({self.call})")
        if self.status == UNCERTAIN and self.ret != math.inf:
            object.__setattr__(self, "ret", math.inf)
        if self.kind == APPEND:
            if self.expected_end is not None and self.expected_end < -1:
                raise ValueError(f"expected_end must be an index or -1 (empty), not {self.expected_end}")
            if not self.bodies:
                raise ValueError("an append writes at least one body")
            if self.status == OK and (self.index is None or self.index < 0):
                raise ValueError("an acknowledged append needs its first index")
            if self.status == MISMATCH and self.expected_end is None:
                raise ValueError("only a conditional append (expected_end) is refused for a mismatch")
        elif self.kind == READ:
            if self.start < 0 or (self.limit is not None and self.limit < len(self.bodies)):
                raise ValueError(f"bad read: start {self.start}, {len(self.bodies)} entries, limit {self.limit}")
        elif self.status == OK and (self.index is None or self.index < -1):
            raise ValueError("an end query needs the end it returned (-1: empty)")

    @property
    def cut(self) -> bool:
        """A read that returned fewer entries than asked: it saw the end."""
        return self.kind == READ and self.limit is not None and len(self.bodies) < self.limit

    def describe(self) -> str:
        if self.kind == APPEND:
            cond = f", expected_end={self.expected_end}" if self.expected_end is not None else ""
            head = f"append({_bodies(self.bodies)}{cond})"
            out = {OK: f"-> index {self.index}", FAILED: "-> failed", MISMATCH: "-> mismatch",
                   UNCERTAIN: "-> uncertain"}[self.status]
        elif self.kind == READ:
            lim = "" if self.limit is None else f", limit={self.limit}"
            head = f"read(start={self.start}{lim})"
            out = f"-> {_bodies(self.bodies)}{' (end)' if self.cut else ''}" if self.status == OK else \
                f"-> {self.status}"
        else:
            head = f"{self.kind}()"
            out = f"-> {self.index}" if self.status == OK else f"-> {self.status}"
        label = f" [{self.label}]" if self.label else ""
        return f"{head} {out}{label}"


def _bodies(bodies: Sequence[bytes], most: int = 3) -> str:
    shown = ", ".join(repr(b if len(b) <= 24 else b[:21] + b"...") for b in bodies[:most])
    more = f", ... ({len(bodies)} in all)" if len(bodies) > most else ""
    return f"[{shown}{more}]"


def _ret(ret: float | None) -> float:
    return math.inf if ret is None else ret


def append(client: Hashable, call: float, ret: float | None, bodies: Iterable[bytes], index: int | None = None, *,
           expected_end: int | None = None, status: str | None = None, group: str = "",
           label: str = "") -> Operation:
    """An append; status defaults to ok when `index` is given, else uncertain."""
    st = status if status is not None else (OK if index is not None else UNCERTAIN)
    return Operation(APPEND, client, call, _ret(ret), st, tuple(bodies), index, expected_end, group=group, label=label)


def read(client: Hashable, call: float, ret: float, start: int, bodies: Iterable[bytes], *, limit: int | None = None,
         group: str = "", label: str = "") -> Operation:
    """A read of `limit` entries from `start` that returned `bodies`."""
    return Operation(READ, client, call, ret, OK, tuple(bodies), start=start, limit=limit, group=group, label=label)


def end(client: Hashable, call: float, ret: float, value: int, *, committed: bool = False, group: str = "",
        label: str = "") -> Operation:
    """An end (or committed-index) query that returned `value`."""
    return Operation("committed" if committed else END, client, call, ret, OK, index=value, group=group, label=label)


class HistoryEnd(Protocol):
    """A recorded linearizable END query: the committed index it answered (a real log index)."""

    client: Hashable
    invoked: float
    completed: float
    committed: int


class HistoryOp(Protocol):
    """tests/server/history.py's Op: one append, acknowledged at `index` or failed with `error`."""

    body: bytes
    invoked: float
    completed: float
    index: int | None
    error: str | None


def _client_of(op: HistoryOp) -> Hashable:
    # record_appends names bodies "<writer>-<n>".
    return op.body.rsplit(b"-", 1)[0].decode(errors="replace")


def from_history_ops(ops: Iterable[HistoryOp], log: Sequence[tuple[int, bytes]] | None = None, *, begin: int = 0,
                     definite_errors: Iterable[str] = (), client_of: Callable[[HistoryOp], Hashable] = _client_of,
                     group: str = "", ends: Iterable[HistoryEnd] = ()) -> list[Operation]:
    """Operations from recorded appends, plus (with `log`, the committed client entries read at the end)
    one final read of the whole log after every call returned, and the linearizable ends answered (`ends`,
    only with `log`: an end's real index becomes the position of the last client entry at or below it).

    An error is uncertain (the append may have been written) unless its name is in `definite_errors`.
    With `log`, indexes are renumbered to positions among the log's client entries, since the real log
    also holds control entries (NOOPs, configurations) the model does not; an acknowledged index the
    log does not hold becomes one past its end (a violation); appends acknowledged before `begin` (expired
    entries) are left out, as what came before `begin` cannot be read."""
    definite = set(definite_errors)
    ops = list(ops)
    positions: list[int] = []
    if log is not None:
        log = sorted((i, b) for i, b in log if i >= begin)
        positions = [i for i, _ in log]
    out = []
    for op in ops:
        who = client_of(op)
        if op.index is not None:
            if log is None:
                out.append(append(who, op.invoked, op.completed, [op.body], op.index, group=group))
                continue
            if op.index < begin:
                continue
            k = bisect.bisect_left(positions, op.index)
            at = k if k < len(positions) and positions[k] == op.index else len(positions)
            out.append(append(who, op.invoked, op.completed, [op.body], at, group=group,
                              label=f"acknowledged at {op.index}"))
        elif op.error is not None and op.error in definite and op.completed != math.inf:
            out.append(append(who, op.invoked, op.completed, [op.body], status=FAILED, group=group, label=op.error))
        else:
            out.append(append(who, op.invoked, None, [op.body], group=group, label=op.error or ""))
    if log is not None:
        for e in ends:
            out.append(end(e.client, e.invoked, e.completed, bisect.bisect_right(positions, e.committed) - 1,
                           group=group, label=f"committed index {e.committed}"))
        finite = [t for op in ops for t in (op.invoked, op.completed) if t != math.inf]
        at_t = (max(finite) if finite else 0.0) + 1.0
        out.append(read("final read", at_t, at_t, 0, [b for _, b in log], limit=len(log) + 1, group=group,
                        label=f"the log from index {begin}"))
    return out
