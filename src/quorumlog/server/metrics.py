"""The latency histogram the node keeps on its hot path: a fixed list of bucket bounds and counts, cheap
enough to observe once per batch. /metrics exports it at scrape time (exporter.py); the hot path never
calls the Prometheus client library.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

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
