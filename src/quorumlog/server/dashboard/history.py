"""Successive samples of what the nodes report, and what only a series tells: rates of counters,
latency quantiles over a recent window (a histogram's difference between two samples), sparklines.

Each series is timed by the reporting node's own uptime, not by when its answer arrived: network
jitter does not distort a rate, and a restarted node (its uptime went back) starts a new series
instead of showing a negative rate.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..metrics import Histogram

SPARK_POINTS = 60  # sparkline length: about a minute at one sample a second
WINDOW_S = 10.0  # latency quantiles cover about this much of the recent past


@dataclass(slots=True)
class Sample:
    t: float  # the node's uptime, seconds
    counters: dict[str, int]
    hists: dict[str, tuple[tuple[float, ...], tuple[int, ...]]]  # name -> (bounds, bucket counts)


@dataclass
class Series:
    """One node's (or one replica's) samples, newest last."""

    samples: deque[Sample] = field(default_factory=lambda: deque(maxlen=SPARK_POINTS + 1))
    rates: dict[str, deque[float | None]] = field(default_factory=dict)
    flagged: int = 0  # successive samples a condition held (a replica lagging), kept by the caller

    def add(self, t: float, counters: Mapping[str, int],
            hists: Mapping[str, tuple[Sequence[float], Sequence[int]]] | None = None) -> bool:
        """Append a sample; False when it is not newer than the last (the same status seen twice)."""
        last = self.samples[-1] if self.samples else None
        if last is not None and t <= last.t:
            if t > last.t - 1e-9:
                return False
            self.samples.clear()  # the node restarted: its counters started over
            self.rates.clear()
            last = None
        s = Sample(t, dict(counters), {k: (tuple(b), tuple(c)) for k, (b, c) in (hists or {}).items()})
        self.samples.append(s)
        for name, value in s.counters.items():
            rate: float | None = None
            if last is not None and name in last.counters and value >= last.counters[name]:
                rate = (value - last.counters[name]) / (t - last.t)
            self.rates.setdefault(name, deque(maxlen=SPARK_POINTS)).append(rate)
        return True

    def rate(self, name: str) -> float | None:
        """The counter's rate per second between the last two samples (None before there are two)."""
        r = self.rates.get(name)
        return r[-1] if r else None

    def spark(self, name: str) -> list[float | None]:
        return list(self.rates.get(name, ()))

    def quantiles(self, name: str, window_s: float = WINDOW_S) -> dict[str, float | None] | None:
        """p50 and p99 of the histogram `name` over the samples of the last `window_s` seconds (bucket
        upper bounds; None above the largest). None when nothing was observed in the window."""
        if len(self.samples) < 2:
            return None
        newest = self.samples[-1]
        oldest = next((s for s in self.samples if s.t >= newest.t - window_s - 1e-6 and s is not newest),
                      self.samples[-2])
        now, then = newest.hists.get(name), oldest.hists.get(name)
        if now is None or then is None or now[0] != then[0] or len(now[1]) != len(then[1]):
            return None
        return window_quantiles(now[0], [a - b for a, b in zip(now[1], then[1], strict=True)])


def window_quantiles(bounds: Sequence[float], counts: Sequence[int]) -> dict[str, float | None] | None:
    """p50 and p99 of bucket counts (len(bounds) + 1 of them, the last above every bound)."""
    if len(counts) != len(bounds) + 1 or any(c < 0 for c in counts) or not sum(counts):
        return None
    h = Histogram(bounds)
    h.counts = list(counts)
    h.count = sum(counts)
    return {"p50": _finite(h.quantile(0.5)), "p99": _finite(h.quantile(0.99))}


def _finite(v: float) -> float | None:
    return v if math.isfinite(v) else None


class History:
    """Every series the dashboard keeps: per node (loop lag), per replica (rates, latencies), and per
    group (its leader's rates, for the group's sparklines)."""

    def __init__(self) -> None:
        self.nodes: dict[str, Series] = {}
        self.replicas: dict[tuple[str, str], Series] = {}
        self.groups: dict[str, dict[str, deque[float | None]]] = {}

    def node(self, node_id: str) -> Series:
        return self.nodes.setdefault(node_id, Series())

    def replica(self, node_id: str, group: str) -> Series:
        return self.replicas.setdefault((node_id, group), Series())

    def group_point(self, group: str, values: Mapping[str, float | None]) -> dict[str, list[float | None]]:
        """Add one point to each of the group's sparklines; returns them."""
        lines = self.groups.setdefault(group, {})
        for name, v in values.items():
            lines.setdefault(name, deque(maxlen=SPARK_POINTS)).append(v)
        return {name: list(points) for name, points in lines.items()}
