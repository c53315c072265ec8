"""The batch reader, and the partition planning it shares with the stream reader."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator, Mapping, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from .fetch import RangeTask, data_loss, read_range
from .offsets import EARLIEST, LATEST, even_split, parse_offsets_spec, plan_partitions, resolve_offsets
from .options import OptionError, SourceOptions
from .view import GroupView, Replica, cluster_ends


class QuorumLogPartition(InputPartition):
    """Indexes [start, end) of one group, and the nodes to read them from (preferred first)."""

    def __init__(self, group: str, start: int, end: int, nodes: tuple[str, ...]) -> None:
        super().__init__((group, start, end))
        self.task = RangeTask(group, start, end, nodes)

    def __repr__(self) -> str:
        t = self.task
        return f"QuorumLogPartition({t.group}, {t.start}..{t.end - 1}, {t.nodes[0] if t.nodes else '-'})"


# Without maxEntriesPerPartition or minPartitions, a group's range is cut into one piece per replica that
# serves it (readFrom=any or followers; the leader alone otherwise) per core, in pieces of at least this
# many indexes.
MIN_DEFAULT_PIECE = 50_000


def _serving(view: GroupView, end: int, read_from: str) -> list[Replica]:
    """The replicas a range ending before `end` is read from first: the leader ("leader", when there is
    one), the followers that have committed the whole range ("followers"; as "any" when none has), or
    every replica that has ("any"; the most advanced one if none)."""
    if read_from == "leader" and view.leader is not None:
        return [view.leader]
    ready = [r for r in view.replicas if r.committed + 1 >= end]
    if read_from == "followers":
        ready = [r for r in ready if not r.leader] or ready
    return ready or sorted(view.replicas, key=lambda r: (-r.committed, r.node_id))[:1]


def default_pieces(view: GroupView | None, start: int, end: int, read_from: str, cores: int) -> int:
    """How many partitions a group's range [start, end) gets when the options do not say."""
    readers = len(_serving(view, end, read_from)) if view is not None and view.replicas else 1
    return max(1, min(readers * cores, -(-(end - start) // MIN_DEFAULT_PIECE)))


def replica_order(view: GroupView, end: int, read_from: str, load: dict[str, int], prev: str | None) -> tuple[str, ...]:
    """Nodes to read a range ending before `end` from: first the leader ("leader"), or ("followers",
    "any") of the replicas `_serving` names the one with the least `load` (indexes given to it so far)
    that is not `prev` (the node of the partition before, which Spark runs beside this one); every other
    replica follows as a fallback (the most advanced first; "followers": the leader last)."""
    by_commit = sorted(view.replicas, key=lambda r: (-r.committed, r.node_id))
    serving = _serving(view, end, read_from)
    first = min([r for r in serving if r.address != prev] or serving, key=lambda r: load.get(r.address, 0))
    rest = [r for r in by_commit if r is not first]
    if read_from == "followers":
        rest.sort(key=lambda r: r.leader)  # the other followers take over first
    return tuple(r.address for r in [first, *rest])


def make_partitions(opts: SourceOptions, view: Mapping[str, GroupView], start: Mapping[str, int],
                    end: Mapping[str, int], *, by_replicas: bool = False) -> list[QuorumLogPartition]:
    """Partitions covering start..end of every group; a start below what any replica still holds is data
    loss (fails, or is skipped with a warning). `by_replicas` (batch queries): without partitioning
    options, each group is cut by default_pieces. Streams keep one partition per group then, so that a
    micro-batch run again after a restart is cut the same way whatever the replicas (its writes stay
    exactly-once)."""
    ranges: dict[str, tuple[int, int]] = {}
    for g, hi in end.items():
        lo = start.get(g, hi)
        if hi <= lo:
            continue
        v = view.get(g)
        if v is not None and lo < v.earliest:
            data_loss(opts, g, lo, v.earliest)
            lo = v.earliest
        if hi > lo:
            ranges[g] = (lo, hi)
    if by_replicas and opts.max_entries_per_partition is None and opts.min_partitions is None:
        cores = os.cpu_count() or 1  # the planner's; in local mode the executors' too
        pieces = [[(g, a, b) for a, b in even_split(lo, hi, default_pieces(view.get(g), lo, hi, opts.read_from, cores))]
                  for g, (lo, hi) in ranges.items()]
        # Groups take turns, so that partitions running side by side read different groups (and leaders).
        plan = [p for turn in itertools.zip_longest(*pieces) for p in turn if p is not None]
    else:
        plan = plan_partitions(ranges, opts.max_entries_per_partition, opts.min_partitions)
    out = []
    load: dict[str, int] = {}
    prev = None
    for g, lo, hi in plan:
        v = view.get(g)
        nodes = replica_order(v, hi, opts.read_from, load, prev) if v is not None else ()
        if nodes:
            load[nodes[0]] = load.get(nodes[0], 0) + hi - lo
            prev = nodes[0]
        out.append(QuorumLogPartition(g, lo, hi, nodes))
    return out


def batch_range(opts: SourceOptions, view: Mapping[str, GroupView], groups: Sequence[str],
                latest: Mapping[str, int]) -> tuple[dict[str, int], dict[str, int]]:
    """startingOffsets / endingOffsets of a batch query, resolved against the cluster: earliest is the
    first index a replica holds (STATUS), latest each group's linearizable end (`latest`, view.cluster_ends:
    every entry acknowledged before the query planned is read)."""
    bounds = {g: (view[g].earliest, latest[g]) for g in groups}
    s_spec = parse_offsets_spec(opts.starting_offsets, "startingOffsets")
    e_spec = parse_offsets_spec(opts.ending_offsets, "endingOffsets")
    if s_spec == LATEST or (isinstance(s_spec, dict) and LATEST in s_spec.values()):
        raise OptionError("startingOffsets", "latest (-1) is not allowed in a batch query")
    if e_spec == EARLIEST or (isinstance(e_spec, dict) and EARLIEST in e_spec.values()):
        raise OptionError("endingOffsets", "earliest (-2) is not allowed in a batch query")
    start = resolve_offsets(s_spec, groups, bounds, "startingOffsets", EARLIEST)
    end = resolve_offsets(e_spec, groups, bounds, "endingOffsets", LATEST)
    # An end beyond the commit index reads what is committed (a batch query does not wait).
    end = {g: min(end[g], bounds[g][1]) for g in groups}
    return start, end


class QuorumLogBatchReader(DataSourceReader):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        view, groups, latest = cluster_ends(self.opts)
        start, end = batch_range(self.opts, view, groups, latest)
        return make_partitions(self.opts, view, start, end, by_replicas=True)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, QuorumLogPartition):
            return iter(())  # Spark's stand-in when there is nothing to read
        return read_range(self.opts, partition.task)
