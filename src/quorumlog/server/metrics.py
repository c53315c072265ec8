"""Process metrics: counters, gauges and latency histograms, rendered in Prometheus text format.

Kept deliberately small (no client library dependency): a histogram is a fixed list of bucket bounds and
counts, cheap enough to observe on the hot path once per batch.
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


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
    return "{" + inner + "}"


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class Exposition:
    """Builds one /metrics page: each metric family's HELP and TYPE once, then its samples."""

    def __init__(self) -> None:
        self._families: dict[str, tuple[str, str, list[str]]] = {}

    def _family(self, name: str, kind: str, help_text: str) -> list[str]:
        fam = self._families.get(name)
        if fam is None:
            fam = self._families[name] = (kind, help_text, [])
        return fam[2]

    def sample(self, name: str, kind: str, help_text: str, value: float, **labels: str) -> None:
        self._family(name, kind, help_text).append(f"{name}{_labels(labels)} {_num(value)}")

    def histogram(self, name: str, help_text: str, h: Histogram, **labels: str) -> None:
        lines = self._family(name, "histogram", help_text)
        cumulative = 0
        for bound, c in zip(h.bounds, h.counts, strict=False):
            cumulative += c
            lines.append(f"{name}_bucket{_labels({**labels, 'le': _num(bound)})} {cumulative}")
        lines.append(f"{name}_bucket{_labels({**labels, 'le': '+Inf'})} {h.count}")
        lines.append(f"{name}_sum{_labels(labels)} {_num(h.total)}")
        lines.append(f"{name}_count{_labels(labels)} {h.count}")

    def render(self) -> str:
        out = []
        for name, (kind, help_text, lines) in self._families.items():
            out.append(f"# HELP {name} {help_text}")
            out.append(f"# TYPE {name} {kind}")
            out.extend(lines)
        return "\n".join(out) + "\n"


def _num(v: float) -> str:
    if isinstance(v, int) or float(v).is_integer():
        return str(int(v))
    return repr(float(v))
