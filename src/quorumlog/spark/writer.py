"""Batch and streaming writers: each task appends its rows' `body` column (binary or string) to the
group in its `group` column, or to the `group` option, in APPEND_BATCH requests of at most
maxBatchEntries rows and maxBatchBytes bytes, maxInFlight requests in flight per task.

Exactly-once: a task writes each group as an idempotent producer whose id is a hash of (write identity,
batch id, partition id, group). A stream's identity is its query id, which Spark keeps in the checkpoint,
and the batch id is the micro-batch's; a batch write draws a random identity once per job (batch id 0).
Rows are cut into requests by count and size alone, so every attempt of a partition (a retry, a
speculative copy, the re-run of a micro-batch after a restart from the checkpoint) sends the same
requests under the same sequence numbers, and the leader writes each request once: it answers a
repeat with the original entries, or with SEQUENCE_TOO_OLD when the request is too far back to
answer that way, which still means written.

That holds while every attempt of a partition sees the same rows in the same order (a replayable source,
a deterministic plan), and while the leader remembers the producer (the group's producer_idle_ms, a day).
Within a task and group, entries are in row order; tasks interleave.
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, StringType, StructType

from ..client import Client
from ..errors import ResponseCode, SequenceError
from .options import OptionError, SinkOptions

log = logging.getLogger("quorumlog.spark")


@dataclass
class AppendedMessage(WriterCommitMessage):
    """What one task wrote, per group: (entries, lowest index, highest index). Entries count those an
    earlier attempt wrote too; the indexes are of the requests whose place was answered (-1: none)."""

    groups: dict[str, tuple[int, int, int]] = field(default_factory=dict)

    @property
    def entries(self) -> int:
        return sum(n for n, _f, _l in self.groups.values())


def producer_id(identity: str, batch_id: int, partition_id: int, group: str) -> int:
    """The producer id of one task's writes to one group: 63 bits of a hash, the same for every attempt."""
    key = json.dumps([identity, batch_id, partition_id, group]).encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") & ((1 << 63) - 1) or 1


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
    """One task attempt: per group a producer and the request being filled, a bounded pipeline of
    requests, and the tally."""

    def __init__(self, opts: SinkOptions, identity: str, batch_id: int, partition_id: int) -> None:
        self.opts = opts
        self.key = (identity, batch_id, partition_id)
        self.clients: dict[str, Client] = {}
        # Requests are filled across Arrow record batches, so their cut depends on the rows alone.
        self.filling: dict[str, tuple[list[bytes], int]] = {}
        self.inflight: deque[tuple[str, int, Future[tuple[int, int]]]] = deque()
        self.msg = AppendedMessage()

    def _client(self, group: str) -> Client:
        c = self.clients.get(group)
        if c is None:
            c = self.clients[group] = Client(self.opts.endpoints, group, **self.opts.auth.client_kwargs(),
                                             request_timeout=self.opts.request_timeout,
                                             retry_timeout=self.opts.retry_timeout,
                                             producer_id=producer_id(*self.key, group))
        return c

    def _settle_one(self) -> None:
        group, n, fut = self.inflight.popleft()
        try:
            first, count = fut.result()
        except SequenceError as e:
            if e.code != ResponseCode.SEQUENCE_TOO_OLD:
                raise
            first = -1  # an earlier attempt wrote it, too long ago for the leader to say where
        else:
            if count != n:
                raise RuntimeError(
                    f"group {group}: an earlier attempt of this task wrote this request with {count} entries, "
                    f"this one has {n}: the partition's rows differ between attempts (nondeterministic input)")
        total, lo, hi = self.msg.groups.get(group, (0, -1, -1))
        if first >= 0:
            lo, hi = (first if lo < 0 else min(lo, first)), max(hi, first + n - 1)
        self.msg.groups[group] = (total + n, lo, hi)

    def _send(self, group: str, bodies: list[bytes]) -> None:
        while len(self.inflight) >= self.opts.max_in_flight:
            self._settle_one()
        self.inflight.append((group, len(bodies), self._client(group).append_batch_raw_async(bodies)))

    def _add(self, group: str, body: pa.Array) -> None:
        values = body.to_pylist()
        if pa.types.is_string(body.type):
            values = [v if v is None else v.encode() for v in values]
        batch, size = self.filling.get(group, ([], 0))
        for v in values:
            if v is None:
                raise OptionError("body", "null bodies cannot be appended")
            if batch and (len(batch) >= self.opts.max_batch_entries or size + len(v) > self.opts.max_batch_bytes):
                self._send(group, batch)
                batch, size = [], 0
            batch.append(v)
            size += len(v)
        self.filling[group] = (batch, size)

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
                        self._add(g, pc.filter(body, pc.equal(gcol, g)))
                else:
                    assert self.opts.group is not None
                    self._add(self.opts.group, body)
            for group, (batch, _size) in self.filling.items():
                if batch:
                    self._send(group, batch)
            while self.inflight:
                self._settle_one()
            return self.msg
        finally:
            for c in self.clients.values():
                c.close()


def _task() -> TaskContext:
    ctx = TaskContext.get()
    if ctx is None:
        raise RuntimeError("the quorumlog sink writes from Spark tasks only")
    return ctx


def _summary(messages: Sequence[WriterCommitMessage | None]) -> str:
    per_group: dict[str, int] = {}
    done = [m for m in messages if isinstance(m, AppendedMessage)]
    for m in done:
        for g, (n, _lo, _hi) in m.groups.items():
            per_group[g] = per_group.get(g, 0) + n
    groups = ", ".join(f"{g}: {n}" for g, n in sorted(per_group.items())) or "none"
    return f"{sum(per_group.values())} entries from {len(done)} of {len(messages)} tasks (per group {groups})"


class QuorumLogArrowWriter(DataSourceArrowWriter):
    """A batch write. Its identity is drawn here, once per job: the writer is pickled to every task and
    to commit, so all attempts of the job's tasks share it. Running the job again is a new write."""

    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts
        self.identity = f"write:{uuid.uuid4()}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return _Appender(self.opts, self.identity, 0, _task().partitionId()).write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing to publish: a task's entries are committed in the log, once, when it returns."""
        log.info("quorumlog write %s: %s", self.identity, _summary(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """The entries written stay (the log cannot take them back); running the job again writes its
        rows again, those included, since a new job has a new identity."""
        log.warning("quorumlog write %s failed; %s stay in the log", self.identity, _summary(messages))


class QuorumLogStreamArrowWriter(DataSourceStreamArrowWriter):
    """A micro-batch write, identified by the query id and batch id that Spark sets on every task (both
    kept in the checkpoint, so a batch re-run after a restart has the same identity)."""

    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        ctx = _task()
        query_id = ctx.getLocalProperty("sql.streaming.queryId")
        batch_id = ctx.getLocalProperty("streaming.sql.batchId")
        if query_id is None or batch_id is None:
            raise RuntimeError("a quorumlog stream write needs the query id and batch id of a streaming query")
        return _Appender(self.opts, f"query:{query_id}", int(batch_id), ctx.partitionId()).write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to publish: a task's entries are committed in the log, once, when it returns."""
        log.info("quorumlog stream batch %d: %s", batchId, _summary(messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """The entries written stay; when the query is restarted from its checkpoint, the batch's re-run
        has the same identity, and the leader does not write them again."""
        log.warning("quorumlog stream batch %d failed; %s stay in the log", batchId, _summary(messages))
