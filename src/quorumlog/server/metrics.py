"""The figures a node keeps on its hot path: a latency histogram (a fixed list of bucket bounds and
counts, cheap enough to observe once per batch) and each group's counters. /metrics exports them at scrape
time (exporter.py), the status document carries them (doc()); the hot path never calls the Prometheus
client library.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

# Seconds: 50 µs .. 10 s, roughly ×2 apart (latencies of interest run from one fsync to an election).
LATENCY_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                   0.5, 1.0, 2.5, 5.0, 10.0)


class Histogram:
    """Cumulative-bucket histogram (Prometheus semantics) with a running sum and count."""

    __slots__ = ("bounds", "counts", "total", "count")

    def __init__(self, bounds: Iterable[float] = LATENCY_BUCKETS) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.total = 0.0
        self.count = 0

    def observe(self, value: float, n: int = 1) -> None:
        """Record `value` `n` times (a batch whose entries all waited as long)."""
        self.counts[bisect.bisect_left(self.bounds, value)] += n
        self.total += value * n
        self.count += n

    def quantile(self, q: float) -> float:
        """An upper bound of the q-quantile (the bucket bound it falls in); 0 when empty."""
        if not self.count:
            return 0.0
        rank = q * self.count
        seen = 0
        for bound, c in zip(self.bounds, self.counts, strict=False):
            seen += c
            if seen >= rank:
                return bound
        return float("inf")

    def doc(self) -> dict[str, Any]:
        """In a status document: p50 and p99 since start (None: above the largest bound), and the buckets,
        from which a reader takes quantiles over a window of its own."""
        def q(x: float) -> float | None:
            v = self.quantile(x)
            return None if v == float("inf") else v

        return {"count": self.count, "sum": round(self.total, 6), "p50": q(0.5), "p99": q(0.99),
                "bounds": list(self.bounds), "counts": list(self.counts)}


@dataclass(slots=True)
class GroupStats:
    """What /metrics reports for a group besides the core's own counters."""

    append_latency: Histogram = field(default_factory=Histogram)  # request arrival -> answer, per request
    commit_latency: Histogram = field(default_factory=Histogram)  # proposal -> quorum ack, per proposal
    fsync_latency: Histogram = field(default_factory=Histogram)
    entries_in: int = 0  # appended by clients (leader) or received in pushes (follower)
    bytes_in: int = 0
    entries_out: int = 0  # served to readers and tail subscribers
    bytes_out: int = 0
    push_bytes_out: int = 0  # replicated to followers
    flushes: int = 0
    flushes_on_loop: int = 0  # of them, small ones run on the event loop (flush.py INLINE_FLUSH_BYTES)
    leader_changes: int = 0  # a leader other than the last one known became known (the first one counts)
    min_index_waits: int = 0  # READ/GET/TAIL requests that waited for the commit index to reach their min_index
    min_index_behind: int = 0  # of them, answered FALL_BEHIND_TOO_MUCH: not reached within the bound (waits.py)
    core_errors: Counter[tuple[str, str]] = field(default_factory=Counter)  # (call, exception type) -> count

    def doc(self) -> dict[str, Any]:
        """The counters and latencies in the status document (a dashboard takes rates from successive ones)."""
        return {"entries_in": self.entries_in, "bytes_in": self.bytes_in, "entries_out": self.entries_out,
                "bytes_out": self.bytes_out, "flushes": self.flushes, "min_index_waits": self.min_index_waits,
                "min_index_behind": self.min_index_behind,
                "append_latency_s": self.append_latency.doc(), "commit_latency_s": self.commit_latency.doc(),
                "fsync_latency_s": self.fsync_latency.doc()}
