"""The stream reader: offsets are {group: next index}, always keyed in one fixed order (Spark compares
offsets as JSON strings, so a reordered but equal offset would look new).

- initialOffset: startingOffsets resolved against the cluster (earliest by default). On restart Spark
  resumes from its checkpoint instead.
- latestOffset(start, limit): each group's commit index + 1 (the highest any replica reports), cut by
  maxEntriesPerTrigger (split across groups in proportion to what each has waiting), held back while
  fewer than minEntriesPerTrigger are waiting (for at most maxTriggerDelay), and never past the target
  frozen by prepareForTriggerAvailableNow.
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
from .view import GroupView, cluster_view, read_groups


class QuorumLogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._groups: list[str] | None = None
        self._target: dict[str, int] | None = None  # availableNow: never read past this
        self._last_trigger_ms: float | None = None

    # -- helpers -------------------------------------------------------------------------------------
    def _view(self) -> tuple[dict[str, GroupView], list[str]]:
        view = cluster_view(self.opts)
        groups = read_groups(self.opts, view)
        if self._groups is None:
            self._groups = groups
        else:
            self._groups += [g for g in groups if g not in self._groups]
        return view, self._groups

    def _latest(self, view: dict[str, GroupView], groups: Sequence[str]) -> dict[str, int]:
        return {g: view[g].latest for g in groups if g in view}

    # -- Spark API -----------------------------------------------------------------------------------
    def initialOffset(self) -> dict:
        view, groups = self._view()
        spec = parse_offsets_spec(self.opts.starting_offsets, "startingOffsets")
        start = resolve_offsets(spec, groups, {g: view[g].bounds() for g in groups}, "startingOffsets", EARLIEST)
        return ordered(start, groups)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_entries_per_trigger is not None:
            return ReadMaxRows(self.opts.max_entries_per_trigger)
        if self.opts.min_entries_per_trigger is not None:
            return ReadMinRows(self.opts.min_entries_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        view, groups = self._view()
        self._target = ordered(self._latest(view, groups), groups)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        view, groups = self._view()
        start = {g: int(i) for g, i in start.items()}
        for g in groups:
            if g not in start:  # a group that appeared after the query started: from its earliest entry
                start[g] = view[g].earliest
        latest = self._latest(view, groups)
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
