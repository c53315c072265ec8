"""The stream reader: offsets are {group: next index}, always keyed in one fixed order (Spark compares
offsets as JSON strings, so a reordered but equal offset would look new).

- initialOffset: startingOffsets resolved against the cluster (earliest by default). On restart Spark
  resumes from its checkpoint instead.
- latestOffset(start, limit): each group's linearizable end (committed index + 1 of an END, view.py:
  never below an entry acknowledged before the call; a primary/backup group without a controller falls
  back to the highest commit index its replicas report through STATUS), cut by maxEntriesPerTrigger (split
  across groups in proportion to what each has waiting), held back while fewer than minEntriesPerTrigger
  are waiting (for at most maxTriggerDelay), and never past the target frozen by
  prepareForTriggerAvailableNow. One STATUS per node and one END per group per trigger.
- reportLatestOffset(): the true ends latestOffset just saw (every group, not cut by any limit or target).
  Spark calls it right after latestOffset(start, limit), in the same runner process, and shows it as the
  source's `latestOffset` in the query's progress (next to `endOffset`, what the batch reads up to).
- A group that appears after the query started is read from its earliest entry, as Kafka does with new
  partitions.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from .fetch import read_range
from .offsets import EARLIEST, min_trigger_ready, ordered, parse_offsets_spec, rate_limit, resolve_offsets
from .options import SourceOptions
from .reader import QuorumLogPartition, make_partitions
from .view import GroupView, cluster_ends, cluster_view


class QuorumLogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._groups: list[str] | None = None
        self._target: dict[str, int] | None = None  # availableNow: never read past this
        self._last_trigger_ms: float | None = None
        self._reported: dict[str, int] | None = None  # the true ends the last latestOffset saw

    # -- helpers -------------------------------------------------------------------------------------
    def _view(self) -> tuple[dict[str, GroupView], list[str], dict[str, int]]:
        """The STATUS view, every group read so far (in a fixed order), and each reported group's latest
        offset: its linearizable end (view.cluster_ends)."""
        view, groups, latest = cluster_ends(self.opts)
        if self._groups is None:
            self._groups = groups
        else:
            self._groups += [g for g in groups if g not in self._groups]
        return view, self._groups, ordered(latest, self._groups)

    # -- Spark API -----------------------------------------------------------------------------------
    def initialOffset(self) -> dict:
        view, groups, latest = self._view()
        groups = [g for g in groups if g in latest]
        spec = parse_offsets_spec(self.opts.starting_offsets, "startingOffsets")
        bounds = {g: (view[g].earliest, latest[g]) for g in groups}
        start = resolve_offsets(spec, groups, bounds, "startingOffsets", EARLIEST)
        return ordered(start, groups)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_entries_per_trigger is not None:
            return ReadMaxRows(self.opts.max_entries_per_trigger)
        if self.opts.min_entries_per_trigger is not None:
            return ReadMinRows(self.opts.min_entries_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        *_, latest = self._view()
        self._target = latest  # everything acknowledged before the query started

    def reportLatestOffset(self) -> dict | None:
        """The true end of every group (its linearizable end), as the last latestOffset saw it: Spark
        shows it as the source's latestOffset in the progress, beside endOffset (what the batch reads)."""
        if self._reported is None:  # (Spark calls latestOffset first; asked on its own, ask the cluster)
            *_, self._reported = self._view()
        return self._reported

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        view, groups, latest = self._view()
        self._reported = latest
        start = {g: int(i) for g, i in start.items()}
        for g in groups:
            if g not in start and g in view:  # a group that appeared after the query started: from its earliest
                start[g] = view[g].earliest
        if self._target is not None:
            latest = {g: min(i, self._target.get(g, i)) for g, i in latest.items()}
        latest = {g: max(i, start[g]) for g, i in latest.items()}  # never backwards
        for g in start:
            latest.setdefault(g, start[g])  # a group no node reports right now stays where it is
        keys = list(groups) + [g for g in start if g not in groups]
        latest = ordered(latest, keys)
        if isinstance(limit, ReadAllAvailable):
            return latest
        avail = sum(latest[g] - start[g] for g in latest)
        now_ms = time.monotonic() * 1000
        if self._last_trigger_ms is None:
            self._last_trigger_ms = now_ms
        min_rows = limit.min_rows if isinstance(limit, ReadMinRows) else self.opts.min_entries_per_trigger
        if self._target is None and not min_trigger_ready(avail, min_rows, now_ms, self._last_trigger_ms,
                                                          self.opts.max_trigger_delay_ms):
            return ordered(start, keys)
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else self.opts.max_entries_per_trigger
        end = rate_limit(start, latest, max_rows) if max_rows is not None else latest
        if end != start:
            self._last_trigger_ms = now_ms
        return ordered(end, keys)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        view = cluster_view(self.opts)
        return make_partitions(self.opts, view, {g: int(i) for g, i in start.items()},
                               {g: int(i) for g, i in end.items()})

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, QuorumLogPartition):
            return iter(())
        return read_range(self.opts, partition.task)

    def commit(self, end: dict) -> None:
        """Nothing to do: progress lives in Spark's checkpoint, and entries are expired by retention."""
