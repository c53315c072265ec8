"""Pure offset maths of the data source: no I/O, no Spark.

An offset is a group's *next index to read*: a query that has read up to index 41 of g0 holds
{"g0": 42}. A range [start, end) of indexes is what one micro-batch (or a batch query) reads; NOOP and
CONFIG entries keep their indexes but are not returned, so a range may hold fewer rows than indexes.

Offset specs follow Spark's Kafka source: "earliest", "latest", or JSON {"g0": 42, "g1": -2} where -2
means earliest and -1 latest.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from .options import OptionError

EARLIEST = -2
LATEST = -1


def parse_offsets_spec(spec: str, option: str) -> int | dict[str, int]:
    """EARLIEST or LATEST for every group, or a per-group dict (values >= 0, or -2 / -1)."""
    s = spec.strip()
    if s.lower() == "earliest":
        return EARLIEST
    if s.lower() == "latest":
        return LATEST
    try:
        doc = json.loads(s)
    except ValueError:
        raise OptionError(option, f"expected earliest, latest or JSON such as {{\"g0\": 42}}, got {spec!r}") from None
    if not isinstance(doc, dict) or not doc:
        raise OptionError(option, f"expected a non-empty JSON object of group -> index, got {spec!r}")
    out: dict[str, int] = {}
    for g, v in doc.items():
        if type(v) is not int or v < EARLIEST:
            raise OptionError(option, f"group {g!r}: expected an index >= 0, -2 (earliest) or -1 (latest), got {v!r}")
        out[str(g)] = v
    return out


def resolve_offsets(spec: int | dict[str, int], groups: Sequence[str], bounds: Mapping[str, tuple[int, int]],
                    option: str, default: int) -> dict[str, int]:
    """Concrete next-indexes, keyed in `groups` order. bounds[g] = (earliest index held, latest next index).

    Groups a JSON spec leaves out take `default`; a JSON spec naming a group not read is an error.
    """
    if isinstance(spec, dict):
        unknown = [g for g in spec if g not in groups]
        if unknown:
            raise OptionError(option, f"names group(s) {', '.join(map(repr, unknown))} not among the groups read "
                                      f"({', '.join(groups)})")
    out: dict[str, int] = {}
    for g in groups:
        v = spec.get(g, default) if isinstance(spec, dict) else spec
        begin, latest = bounds[g]
        out[g] = begin if v == EARLIEST else latest if v == LATEST else v
    return out


def split_range(start: int, end: int, max_per_partition: int | None) -> list[tuple[int, int]]:
    """[start, end) cut into consecutive pieces of at most max_per_partition indexes (one piece if None)."""
    if end <= start:
        return []
    if max_per_partition is None or end - start <= max_per_partition:
        return [(start, end)]
    if max_per_partition < 1:
        raise ValueError("max_per_partition must be >= 1")
    return [(lo, min(lo + max_per_partition, end)) for lo in range(start, end, max_per_partition)]


def even_split(start: int, end: int, pieces: int) -> list[tuple[int, int]]:
    """[start, end) cut into `pieces` consecutive ranges whose sizes differ by at most one (fewer when
    there are fewer indexes)."""
    n = end - start
    k = max(1, min(pieces, n))
    if n <= 0:
        return []
    return [(start + n * i // k, start + n * (i + 1) // k) for i in range(k)]


def plan_partitions(ranges: Mapping[str, tuple[int, int]], max_per_partition: int | None = None,
                    min_partitions: int | None = None) -> list[tuple[str, int, int]]:
    """Input partitions (group, start, end) covering every range exactly once, in group then index order:
    pieces of at most max_per_partition indexes, and the largest piece halved until there are at least
    min_partitions (as far as single indexes allow)."""
    pieces: dict[str, list[tuple[int, int]]] = {g: split_range(lo, hi, max_per_partition) for g, (lo, hi) in
                                                ranges.items()}
    if min_partitions is not None:
        while sum(len(p) for p in pieces.values()) < min_partitions:
            best: tuple[int, str, int] | None = None  # (size, group, position)
            for g, ps in pieces.items():
                for i, (lo, hi) in enumerate(ps):
                    if hi - lo >= 2 and (best is None or hi - lo > best[0]):
                        best = (hi - lo, g, i)
            if best is None:
                break
            _size, g, i = best
            lo, hi = pieces[g][i]
            mid = lo + (hi - lo) // 2
            pieces[g][i:i + 1] = [(lo, mid), (mid, hi)]
    return [(g, lo, hi) for g, ps in pieces.items() for lo, hi in ps]


def rate_limit(start: Mapping[str, int], latest: Mapping[str, int], limit: int) -> dict[str, int]:
    """Ends admitting at most `limit` indexes in total, split across groups in proportion to what each has
    available (as Spark's Kafka maxOffsetsPerTrigger), keyed in `latest` order.

    The split is exact: the total admitted is min(limit, available); each group's share is within one
    index of limit * available_g / available (largest remainders round up), and never above what it has.
    """
    if limit < 0:
        raise ValueError("limit must be >= 0")
    avail = {g: max(0, latest[g] - start.get(g, latest[g])) for g in latest}
    total = sum(avail.values())
    if total <= limit:
        return {g: start.get(g, latest[g]) + avail[g] for g in latest}
    share = {g: limit * a // total for g, a in avail.items()}
    left = limit - sum(share.values())
    # Largest remainders first; ties broken by the fixed group order.
    order = sorted(latest, key=lambda g: -(limit * avail[g] % total))
    for g in order[:left]:
        share[g] += 1
    return {g: start.get(g, latest[g]) + share[g] for g in latest}


def available(start: Mapping[str, int], end: Mapping[str, int]) -> int:
    """How many indexes lie between two offsets (groups missing from start count from end: nothing)."""
    return sum(max(0, e - start.get(g, e)) for g, e in end.items())


def min_trigger_ready(avail: int, min_entries: int | None, now_ms: float, last_trigger_ms: float,
                      max_delay_ms: int) -> bool:
    """minEntriesPerTrigger: run a batch once enough is available, or once max_delay_ms has passed since
    the last batch with whatever there is (as Spark's Kafka minOffsetsPerTrigger / maxTriggerDelay)."""
    if avail <= 0:
        return False
    if min_entries is None or avail >= min_entries:
        return True
    return now_ms - last_trigger_ms >= max_delay_ms


def ordered(offsets: Mapping[str, int], groups: Sequence[str]) -> dict[str, int]:
    """The offset with keys in the fixed order Spark needs (it compares offsets as JSON strings)."""
    keys = list(groups) + sorted(g for g in offsets if g not in groups)
    return {g: int(offsets[g]) for g in keys if g in offsets}
