"""A member's status document (NodeServer.status(), as STATUS returns it) read field by field with
its type checked: what is missing or of another type reads as unknown, never as an exception. The
document comes over the network, possibly from another version of quorumlog.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..events import KINDS

MAX_TEXT = 300  # events' text (a node cuts its own; a member's is cut again here)
MAX_EVENTS = 500  # of one member's document
MAX_BUCKETS = 64
MAX_MEMBERS = 64  # of one group's configuration

Hist = tuple[tuple[float, ...], tuple[int, ...]]  # (bucket bounds, counts: one more than bounds)


@dataclass
class GroupDoc:
    name: str
    node: str
    role: str | None = None
    term: int = 0
    leader: str | None = None
    replication: str = "raft"
    begin: int | None = None
    end: int = -1
    committed: int | None = None
    durable: int | None = None
    pending: int | None = None
    recovering: bool = False
    peer_lag: dict[str, int] = field(default_factory=dict)  # the leader's view of each follower
    entries_in: int = 0
    bytes_in: int = 0
    hists: dict[str, Hist] = field(default_factory=dict)  # fsync, commit
    # A Raft group's configuration as this member follows it (the last CONFIG entry in its log, in force
    # once appended; server/members.py): None when the document has none (primary/backup, another version).
    voters: tuple[str, ...] | None = None
    learners: tuple[str, ...] = ()
    change_pending: bool = False  # that CONFIG entry is not committed yet
    change_asked: int | None = None  # (a leader) the index of the change it was asked for and has not answered


@dataclass
class NodeDoc:
    node: str
    uptime_s: float = 0.0
    admin: str | None = None
    peers_connected: dict[str, bool] = field(default_factory=dict)
    hists: dict[str, Hist] = field(default_factory=dict)  # loop_lag
    groups: dict[str, GroupDoc] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)


def parse_status(member: str, status: Any) -> NodeDoc:
    """The fields the dashboard uses of `member`'s status document."""
    d = _map(status)
    doc = NodeDoc(_str(d.get("node")) or member, uptime_s=_num(d.get("uptime_s")) or 0.0,
                  admin=_str(d.get("admin")))
    doc.peers_connected = {k: v for k, v in _map(d.get("peers_connected")).items() if isinstance(v, bool)}
    lag = _hist(d.get("loop_lag_s"))
    if lag is not None:
        doc.hists["loop_lag"] = lag
    for name, g in _map(d.get("groups")).items():
        doc.groups[name] = _group(name, doc.node, _map(g))
    doc.events = [e for e in map(_event, _seq(d.get("events"))[-MAX_EVENTS:]) if e is not None]
    return doc


def _group(name: str, node: str, g: Mapping[str, Any]) -> GroupDoc:
    stats = _map(g.get("stats"))
    end = _int(g.get("end_index"))
    out = GroupDoc(name, node, role=_str(g.get("role")), term=_int(g.get("term")) or 0, leader=_str(g.get("leader")),
                   replication=_str(g.get("replication")) or "raft", begin=_int(g.get("begin_index")),
                   end=-1 if end is None else end, committed=_int(g.get("committed_index")),
                   durable=_int(g.get("durable_index")), pending=_int(g.get("pending_appends")),
                   recovering=g.get("recovering") is True, entries_in=_int(stats.get("entries_in")) or 0,
                   bytes_in=_int(stats.get("bytes_in")) or 0)
    out.peer_lag = {k: v for k, v in _map(g.get("peer_lag")).items() if type(v) is int and v >= 0}
    for key, stat in (("fsync", "fsync_latency_s"), ("commit", "commit_latency_s")):
        h = _hist(stats.get(stat))
        if h is not None:
            out.hists[key] = h
    config = _map(g.get("config"))
    voters, learners = _ids(config.get("voters")), _ids(config.get("learners"))
    if voters and learners is not None:  # (a configuration has a voter; a member is never both)
        out.voters, out.learners = voters, tuple(n for n in learners if n not in voters)
        out.change_pending = g.get("change_pending") is True
        asked = _int(g.get("change_asked"))
        out.change_asked = asked if asked is not None and asked >= 0 else None
    return out


def _event(e: Any) -> dict[str, Any] | None:
    m = _map(e)
    t, text = _num(m.get("t")), _str(m.get("text"))
    if t is None or text is None:
        return None
    kind = _str(m.get("kind"))
    return {"t": t, "kind": kind if kind in KINDS else "other", "group": _str(m.get("group")),
            "text": text if len(text) <= MAX_TEXT else text[:MAX_TEXT - 1] + "…",
            "count": max(1, _int(m.get("count")) or 1)}


def _hist(v: Any) -> Hist | None:
    m = _map(v)
    bounds, counts = _seq(m.get("bounds")), _seq(m.get("counts"))
    if not bounds or len(bounds) > MAX_BUCKETS or len(counts) != len(bounds) + 1:
        return None
    if not all(_num(b) is not None for b in bounds) or not all(type(c) is int and c >= 0 for c in counts):
        return None
    return tuple(float(b) for b in bounds), tuple(counts)


def _ids(v: Any) -> tuple[str, ...] | None:
    """Member ids, sorted and each once; None unless a list of non-empty strings."""
    if not isinstance(v, list | tuple) or not all(isinstance(n, str) and 0 < len(n) <= MAX_TEXT for n in v):
        return None
    return tuple(sorted(set(v)))[:MAX_MEMBERS]


def _map(v: Any) -> dict[str, Any]:
    return {k: x for k, x in v.items() if isinstance(k, str)} if isinstance(v, Mapping) else {}


def _seq(v: Any) -> list[Any]:
    return list(v) if isinstance(v, list | tuple) else []


def _str(v: Any) -> str | None:
    return v[:MAX_TEXT] if isinstance(v, str) else None


def _int(v: Any) -> int | None:
    return v if type(v) is int and -(1 << 63) <= v < 1 << 63 else None


def _num(v: Any) -> float | None:
    if type(v) is int or type(v) is float:
        f = float(v)
        return f if math.isfinite(f) else None
    return None
