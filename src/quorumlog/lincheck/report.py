"""A group's verdict as text (the failing window) and as a self-contained HTML timeline."""

from __future__ import annotations

import html
import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

from .explain import Stuck
from .ops import APPEND, READ, UNCERTAIN, Operation
from .search import GroupSearch

_SHOW_PLACED = 8
_SHOW_LOG = 6
_SHOW_CONCURRENT = 24
_SHOW_UNCERTAIN = 4


@dataclass(slots=True)
class GroupResult:
    """One group's verdict. Operation numbers (#n) are positions in the history given to check()."""

    group: str
    verdict: str  # "ok" | "violation" | "unknown" (timed out)
    ops: dict[int, Operation]
    linearization: list[int]  # the linearization, or the longest linearizable prefix found
    states: int
    seconds: float
    report: str = ""
    blocker: int | None = None  # the operation that could not be placed
    reasons: dict[int, str] = field(default_factory=dict)  # operation -> why it could not be placed next
    related: list[int] = field(default_factory=list)  # the operations those reasons name
    window: list[int] = field(default_factory=list)  # the operations of the failing window


def _t(x: float) -> str:
    return "inf" if x == math.inf else f"{x:.6f}".rstrip("0").rstrip(".")


def _line(n: int, op: Operation) -> str:
    return f"#{n} client {op.client} [{_t(op.call)}, {_t(op.ret)}] {op.describe()}"


def explain_group(res: GroupResult, search: GroupSearch, stuck: Stuck, path: list[int]) -> None:
    """Fill res.report, blocker, reasons and window from the stuck state after `path` (search ids)."""
    gid = search.num
    ops = res.ops
    placed = {gid[s]: k for k, s in enumerate(path)}
    n_unc = len(gid) - search.nc
    used_unc = sum(1 for s in path if s >= search.nc)
    what = "NOT linearizable" if res.verdict == "violation" else "UNKNOWN (the search timed out)"
    out = [f"group {res.group!r}: {what} ({res.states} states searched in {res.seconds:.2f} s)",
           f"The longest linearizable prefix found places {len(path) - used_unc} of {search.nc} operations with "
           f"an outcome, and {used_unc} of {n_unc} uncertain appends; the log's end there is {len(stuck.log) - 1}."]
    if path:
        out.append("Last operations placed (oldest first):")
        out += [f"  {_line(gid[s], ops[gid[s]])}" for s in path[-_SHOW_PLACED:]]
    if stuck.log:
        first = max(0, len(stuck.log) - _SHOW_LOG)
        out.append("Log tail: " + ", ".join(f"{i}: {stuck.log[i]!r} (#{gid[stuck.writer[i]]})"
                                            for i in range(first, len(stuck.log))))
    if stuck.blocker >= 0:
        b = gid[stuck.blocker]
        res.blocker = b
        res.reasons = {gid[s]: why for s, why in stuck.reasons.items()}
        res.related = sorted(gid[s] for s in stuck.related)
        out.append(f"Stuck: {_line(b, ops[b])}")
        out.append(f"  must be placed before anything called after {_t(ops[b].ret)}, and neither it nor any "
                   f"operation that may come first can be placed:")
        sure = [n for n in res.reasons if ops[n].ret != math.inf]
        maybe = [n for n in res.reasons if ops[n].ret == math.inf]
        out += [f"  {_line(n, ops[n])}\n      {res.reasons[n]}" for n in sure + maybe[:_SHOW_UNCERTAIN]]
        if len(maybe) > _SHOW_UNCERTAIN:
            out.append(f"  ... and {len(maybe) - _SHOW_UNCERTAIN} more uncertain appends that could come next")
        lo = min(ops[n].call for n in sure)
        hi = ops[b].ret
        # Uncertain appends called earlier overlap everything after: only those called in the window count.
        window = {n for n, op in ops.items() if lo <= op.call <= hi or (op.call < lo <= op.ret != math.inf)}
        last = {gid[s] for s in path[-_SHOW_PLACED:]}
        named = set(sure) | set(maybe[:_SHOW_UNCERTAIN]) | set(res.related) | last
        res.window = sorted(window | named, key=lambda n: (ops[n].call, n))
        others = [n for n in res.window if n not in res.reasons and n not in last]
        if others:
            out.append(f"Other operations overlapping [{_t(lo)}, {_t(hi)}], or named above:")
            for n in others[:_SHOW_CONCURRENT]:
                state = f"placed at position {placed[n] + 1}" if n in placed else "not placed"
                if ops[n].kind == APPEND and ops[n].status == "failed":
                    state = "failed: nothing to place"
                out.append(f"  {_line(n, ops[n])}   ({state})")
            if len(others) > _SHOW_CONCURRENT:
                out.append(f"  ... {len(others) - _SHOW_CONCURRENT} more")
    res.report = "\n".join(out)


_CSS = """body{font:13px sans-serif;margin:16px}pre{background:#f6f6f6;padding:8px;white-space:pre-wrap}
.tl{position:relative;border-top:1px solid #ccc;overflow-x:auto}.row{position:relative;height:26px;
border-bottom:1px solid #eee}.name{position:sticky;left:0;z-index:2;background:#fff;width:90px;font-size:11px;
line-height:26px;overflow:hidden}.op{position:absolute;top:4px;height:18px;font-size:10px;line-height:18px;
overflow:hidden;white-space:nowrap;border:1px solid #555;border-radius:3px;box-sizing:border-box;padding:0 2px}
.op:hover{outline:2px solid #000;z-index:3}.append{background:#8ab4f8}.read{background:#a8dab5}
.end{background:#fdd663}.uncertain{border-style:dashed;opacity:.6}.failed{background:#ddd}
.placed{border-color:#1e8e3e}.related{outline:2px solid #a142f4}.cand{border:2px solid #e37400}
.blocker{background:#ea4335;color:#fff;font-weight:bold}
.legend span{display:inline-block;padding:0 6px;margin-right:6px;border:1px solid #555}"""


def _bar(n: int, op: Operation, lo: float, hi: float, scale: float, res: GroupResult, order: dict[int, int]) -> str:
    start = max(op.call, lo)  # an uncertain append called long before the window starts at its edge
    end = hi if op.ret == math.inf else op.ret
    left = (start - lo) * scale + 90
    width = max(3.0, (end - start) * scale)
    cls = ["op", {APPEND: "append", READ: "read"}.get(op.kind, "end")]
    if op.status == UNCERTAIN:
        cls.append("uncertain")
    elif op.status == "failed":
        cls.append("failed")
    if n == res.blocker:
        cls.append("blocker")
    elif n in res.reasons:
        cls.append("cand")
    elif n in res.related:
        cls.append("related")
    elif n in order:
        cls.append("placed")
    tip = _line(n, op)
    if n in order:
        tip += f"\nplaced {order[n] + 1}th"
    if n in res.reasons:
        tip += f"\nnot placeable next: {res.reasons[n]}"
    text = f"{'<< ' if op.call < lo else ''}#{n} {op.kind[0].upper()}{'' if op.index is None else op.index}"
    return (f'<div class="{" ".join(cls)}" style="left:{left:.1f}px;width:{width:.1f}px" '
            f'title="{html.escape(tip)}">{html.escape(text)}</div>')


def group_html(res: GroupResult, full: bool) -> str:
    """One group's timeline: a row per client, a bar per operation; the failing window unless `full`."""
    shown = res.window if res.window and not full else sorted(res.ops, key=lambda n: res.ops[n].call)
    if not shown:
        return f"<h2>group {html.escape(res.group)!s}: empty</h2>"
    ops = [res.ops[n] for n in shown]
    finite = [op for op in ops if op.ret != math.inf] or ops
    lo = min(op.call for op in finite)
    hi = max([op.ret for op in finite if op.ret != math.inf] + [op.call for op in ops])
    hi += (hi - lo) * 0.05 or 1.0
    width = min(60000.0, max(1000.0, 9.0 * len(shown)))
    scale = width / (hi - lo)
    order = {n: k for k, n in enumerate(res.linearization)}
    rows: dict[Hashable, list[str]] = {}
    for n, op in zip(shown, ops, strict=True):
        rows.setdefault(op.client, []).append(_bar(n, op, lo, hi, scale, res, order))
    body = "".join(f'<div class="row" style="width:{width + 100:.0f}px"><div class="name">{html.escape(str(c))}'
                   f'</div>{"".join(bars)}</div>' for c, bars in sorted(rows.items(), key=lambda kv: str(kv[0])))
    title = f"group {res.group!r}: {res.verdict}"
    what = "the failing window" if shown is res.window else f"{len(shown)} operations"
    return (f"<h2>{html.escape(title)} ({what})</h2><pre>{html.escape(res.report or 'linearizable')}</pre>"
            f'<div class="tl">{body}</div>')


def page(groups: Sequence[GroupResult], full: bool) -> str:
    legend = ('<p class="legend"><span class="append">append</span><span class="read">read</span>'
              '<span class="end">end</span><span class="append uncertain">uncertain</span>'
              '<span class="blocker">could not be placed</span><span class="cand">could come next</span>'
              '<span class="related">named in the reasons</span>'
              ' hover a bar for its operation and outcome</p>')
    parts = "".join(group_html(g, full) for g in groups)
    return (f'<!doctype html><html><head><meta charset="utf-8"><title>quorumlog lincheck</title>'
            f"<style>{_CSS}</style></head><body><h1>Linearizability check</h1>{legend}{parts}</body></html>")
