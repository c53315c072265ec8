"""Batch and streaming writers: each task appends its rows' `body` column (binary or string) to the
group in its `group` column, or to the `group` option, with append_many in bounded batches (at most
maxBatchEntries rows and maxBatchBytes bytes per request, maxInFlight requests in flight per task).

Delivery is at-least-once, like Spark's Kafka sink: a task that fails after some of its appends
committed is retried by Spark and appends them again, and a client retry after an uncertain answer may
append an entry twice. Within one task and group, entries are appended in row order while no request
fails; after a failure and retry, order is kept per request, not across requests in flight.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, StringType, StructType

from ..client import Client
from .options import OptionError, SinkOptions


@dataclass
class AppendedMessage(WriterCommitMessage):
    """What one task appended: per group, (entries, first index seen, last index seen)."""

    groups: dict[str, tuple[int, int, int]] = field(default_factory=dict)

    @property
    def entries(self) -> int:
        return sum(n for n, _f, _l in self.groups.values())


def check_sink_schema(schema: StructType, opts: SinkOptions) -> None:
    names = {f.name.lower(): f for f in schema.fields}
    body = names.get("body")
    if body is None or not isinstance(body.dataType, BinaryType | StringType):
        raise OptionError("body", "the DataFrame written needs a `body` column of type binary or string")
    grp = names.get("group")
    if grp is not None and not isinstance(grp.dataType, StringType):
        raise OptionError("group", "a `group` column must be a string")
    if grp is None and opts.group is None:
        raise OptionError("group", "is required when the DataFrame has no `group` column")


class _Appender:
    """One client per group, a bounded pipeline of APPEND_BATCH requests, and the tally."""

    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts
        self.clients: dict[str, Client] = {}
        self.inflight: deque[tuple[str, Future[tuple[int, int]]]] = deque()
        self.msg = AppendedMessage()

    def _client(self, group: str) -> Client:
        c = self.clients.get(group)
        if c is None:
            c = self.clients[group] = Client(self.opts.endpoints, group, cluster=self.opts.cluster,
                                             secret=self.opts.secret, request_timeout=self.opts.request_timeout,
                                             retry_timeout=self.opts.retry_timeout)
        return c

    def _settle_one(self) -> None:
        group, fut = self.inflight.popleft()
        first, n = fut.result()
        count, lo, hi = self.msg.groups.get(group, (0, first, first + n - 1))
        self.msg.groups[group] = (count + n, min(lo, first), max(hi, first + n - 1))

    def send(self, group: str, bodies: list[bytes]) -> None:
        while len(self.inflight) >= self.opts.max_in_flight:
            self._settle_one()
        self.inflight.append((group, self._client(group).append_batch_raw_async(bodies)))

    def append_column(self, group: str, body: pa.Array) -> None:
        values = body.to_pylist()
        if pa.types.is_string(body.type):
            values = [v.encode() for v in values]
        batch: list[bytes] = []
        size = 0
        for v in values:
            if v is None:
                raise OptionError("body", "null bodies cannot be appended")
            if batch and (len(batch) >= self.opts.max_batch_entries or size + len(v) > self.opts.max_batch_bytes):
                self.send(group, batch)
                batch, size = [], 0
            batch.append(v)
            size += len(v)
        if batch:
            self.send(group, batch)

    def write(self, batches: Iterator[pa.RecordBatch]) -> AppendedMessage:
        try:
            for rb in batches:
                if rb.num_rows == 0:
                    continue
                names = [n.lower() for n in rb.schema.names]
                body = rb.column(names.index("body"))
                if "group" in names:
                    gcol = rb.column(names.index("group"))
                    if gcol.null_count:
                        if self.opts.group is None:
                            raise OptionError("group", "rows with a null `group` need the `group` option")
                        gcol = pc.fill_null(gcol, self.opts.group)
                    for g in pc.unique(gcol).to_pylist():
                        self.append_column(g, pc.filter(body, pc.equal(gcol, g)))
                else:
                    assert self.opts.group is not None
                    self.append_column(self.opts.group, body)
            while self.inflight:
                self._settle_one()
            return self.msg
        finally:
            for c in self.clients.values():
                c.close()


class QuorumLogArrowWriter(DataSourceArrowWriter):
    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return _Appender(self.opts).write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Every entry is committed in the log when its task returns: nothing left to do."""

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Entries already appended stay (at-least-once): the log cannot take them back."""


class QuorumLogStreamArrowWriter(DataSourceStreamArrowWriter):
    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return _Appender(self.opts).write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to do: each task's entries are committed when it returns."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Entries already appended stay (at-least-once)."""
