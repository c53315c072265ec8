"""A linearizability checker for quorumlog's committed log.

    from quorumlog import lincheck
    history = [lincheck.append("c1", 0.0, 1.0, [b"a"], index=0),
               lincheck.append("c2", 0.5, None, [b"b"]),            # uncertain: a timeout
               lincheck.read("c3", 2.0, 3.0, 0, [b"a"], limit=10),  # cut: the end was 0
               lincheck.end("c1", 2.5, 4.0, 0)]
    result = lincheck.check(history)
    assert result.ok, result.report
    result.write_html("timeline.html")

The model: each group is one log, a sequence of bodies; an append writes its bodies at the end (with
`expected_end`, only when the end, the last index, -1 for empty, equals it); a read returns a range; an
end query returns the end. A history is linearizable when each operation can be given a point between its
call and its return where the model's outcome is the one observed; uncertain appends (a timeout, a lost
connection) may take effect at any point after their call, or never. Groups are checked separately.

Bodies need not be unique, but the search is fastest when they are: a read then shows which append wrote
what. search.py describes the algorithm (Wing & Gong, Lowe, porcupine) and its prunings.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .explain import replay
from .ops import APPEND, END, FAILED, MISMATCH, OK, READ, UNCERTAIN, Operation, append, end, from_history_ops, read
from .report import GroupResult, explain_group, page
from .search import GroupSearch

__all__ = ["APPEND", "END", "FAILED", "MISMATCH", "OK", "READ", "UNCERTAIN", "GroupResult", "Operation", "Result",
           "append", "check", "end", "from_history_ops", "read"]


@dataclass(slots=True)
class Result:
    """ok: every group is linearizable. Otherwise `group` names the first group that is not (or whose search
    timed out: verdict "unknown") and `report` shows where its search got stuck."""

    ok: bool
    verdict: str  # "ok" | "violation" | "unknown"
    group: str | None
    report: str
    groups: dict[str, GroupResult] = field(default_factory=dict)
    seconds: float = 0.0

    def write_html(self, path: str | Path, full: bool = False) -> None:
        """A self-contained HTML timeline: the failing group's window (`full`: its whole history), or
        every group when all passed."""
        shown = [self.groups[self.group]] if self.group is not None else list(self.groups.values())
        Path(path).write_text(page(shown, full), encoding="utf-8")


def check_group(group: str, numbered: dict[int, Operation], deadline: float = math.inf) -> GroupResult:
    """Check one group's operations (keyed by their number in the history)."""
    t0 = time.perf_counter()
    search = GroupSearch(list(numbered.values()), list(numbered))
    out = search.run(deadline)
    res = GroupResult(group, out.verdict, numbered, [search.num[s] for s in out.path], out.states,
                      time.perf_counter() - t0)
    if out.verdict != "ok":
        explain_group(res, search, replay(search, out.path), out.path)
    return res


def check(history: Iterable[Operation], timeout: float | None = None) -> Result:
    """Check a history, group by group; `timeout` (seconds) bounds the whole check (verdict "unknown")."""
    t0 = time.perf_counter()
    deadline = math.inf if timeout is None else time.monotonic() + timeout
    by_group: dict[str, dict[int, Operation]] = {}
    for n, op in enumerate(history):
        by_group.setdefault(op.group, {})[n] = op
    groups = {g: check_group(g, ops, deadline) for g, ops in by_group.items()}
    bad = next((g for g in groups.values() if g.verdict == "violation"), None) or \
        next((g for g in groups.values() if g.verdict != "ok"), None)
    seconds = time.perf_counter() - t0
    if bad is None:
        n = sum(len(g.ops) for g in groups.values())
        return Result(True, "ok", None, f"linearizable: {n} operations in {len(groups)} group(s)", groups, seconds)
    return Result(False, bad.verdict, bad.group, bad.report, groups, seconds)
