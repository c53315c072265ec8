"""The batch reader, and the partition planning it shares with the stream reader."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from .fetch import RangeTask, data_loss, read_range
from .offsets import EARLIEST, LATEST, parse_offsets_spec, plan_partitions, resolve_offsets
from .options import OptionError, SourceOptions
from .view import GroupView, cluster_view, read_groups


class QuorumLogPartition(InputPartition):
    """Indexes [start, end) of one group, and the nodes to read them from (preferred first)."""

    def __init__(self, group: str, start: int, end: int, nodes: tuple[str, ...]) -> None:
        super().__init__((group, start, end))
        self.task = RangeTask(group, start, end, nodes)

    def __repr__(self) -> str:
        t = self.task
        return f"QuorumLogPartition({t.group}, {t.start}..{t.end - 1}, {t.nodes[0] if t.nodes else '-'})"


def replica_order(view: GroupView, end: int, read_from: str, turn: int) -> tuple[str, ...]:
    """Nodes to read a range ending before `end` from: the leader first ("leader"), or the replicas that
    have committed the whole range taking turns ("any"); every other replica follows as a fallback."""
    by_commit = sorted(view.replicas, key=lambda r: (-r.committed, r.node_id))
    leader = view.leader
    if read_from == "leader" and leader is not None:
        first = [leader]
    else:
        ready = [r for r in view.replicas if r.committed + 1 >= end] or by_commit[:1]
        first = [ready[turn % len(ready)]]
    rest = [r for r in by_commit if r not in first]
    return tuple(r.address for r in first + rest)


def make_partitions(opts: SourceOptions, view: Mapping[str, GroupView], start: Mapping[str, int],
                    end: Mapping[str, int]) -> list[QuorumLogPartition]:
    """Partitions covering start..end of every group; a start below what any replica still holds is data
    loss (fails, or is skipped with a warning)."""
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
    out = []
    for turn, (g, lo, hi) in enumerate(plan_partitions(ranges, opts.max_entries_per_partition, opts.min_partitions)):
        v = view.get(g)
        nodes = replica_order(v, hi, opts.read_from, turn) if v is not None else ()
        out.append(QuorumLogPartition(g, lo, hi, nodes))
    return out


def batch_range(opts: SourceOptions, view: Mapping[str, GroupView],
                groups: Sequence[str]) -> tuple[dict[str, int], dict[str, int]]:
    """startingOffsets / endingOffsets of a batch query, resolved against the cluster."""
    bounds = {g: view[g].bounds() for g in groups}
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
        view = cluster_view(self.opts)
        groups = read_groups(self.opts, view)
        start, end = batch_range(self.opts, view, groups)
        return make_partitions(self.opts, view, start, end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, QuorumLogPartition):
            return iter(())  # Spark's stand-in when there is nothing to read
        return read_range(self.opts, partition.task)
