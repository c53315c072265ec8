"""Reading one input partition, [start, end) of one group, as Arrow record batches (runs in executors).

Each partition opens its own client. READs are pipelined: while one answer is turned into a record
batch, the next one or two are in flight (their start guessed from the entry count asked for; a short
answer drops the guesses). The partition's nodes are tried in order: another one takes over when a
node fails, or when its commit index has not reached the range yet (after a leader dies, the survivors
learn the last commits from the new leader). Committed entries never change, so whichever node
answers, the rows are the same.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

import pyarrow as pa

from ..client import Client
from ..errors import IndexExpiredError, QuorumLogError, RequestError, ResponseCode
from ..net.errors import ConnectionClosedError, RequestTimeoutError
from .arrow import entries_batch
from .options import SourceOptions

log = logging.getLogger("quorumlog.spark")

TARGET_READ_BYTES = 4 << 20  # aimed-for size of one READ answer
MAX_READ_BYTES = 12 << 20  # hard cap (frames are limited to 16 MiB)
PIPELINE_DEPTH = 2


class DataLossError(QuorumLogError):
    """Entries a query needs have expired from every replica (failOnDataLoss=true)."""

    code = ResponseCode.INDEX_LESS_THAN_LOCAL_BEGIN


@dataclass(frozen=True, slots=True)
class RangeTask:
    group: str
    start: int  # first index (inclusive)
    end: int  # last index + 1
    nodes: tuple[str, ...]  # addresses, preferred first


def _retryable(e: BaseException) -> bool:
    return isinstance(e, ConnectionClosedError | RequestTimeoutError | OSError) or (
        isinstance(e, RequestError) and e.code in (ResponseCode.NETWORK_ERROR, ResponseCode.TIMEOUT,
                                                   ResponseCode.LEADER_NOT_READY, ResponseCode.UNKNOWN_GROUP))


def data_loss(opts: SourceOptions, group: str, start: int, begin: int) -> None:
    """Entries start..begin-1 are gone: fail (failOnDataLoss) or warn."""
    msg = (f"group {group}: entries {start}..{begin - 1} have expired from every replica (the earliest "
           f"index held is {begin})")
    if opts.fail_on_data_loss:
        raise DataLossError(msg + "; set failOnDataLoss=false to skip them with a warning")
    log.warning("%s; skipped (failOnDataLoss=false)", msg)


def read_range(opts: SourceOptions, task: RangeTask) -> Iterator[pa.RecordBatch]:
    """The normal entries of task.group with indexes in [task.start, task.end), in index order."""
    if task.end <= task.start:
        return
    client = Client(opts.endpoints, task.group, **opts.auth.client_kwargs(),
                    request_timeout=opts.request_timeout)
    try:
        yield from _read(client, opts, task)
    finally:
        client.close()


def _read(client: Client, opts: SourceOptions, task: RangeTask) -> Iterator[pa.RecordBatch]:
    nodes: Sequence[str] = task.nodes or tuple(client.aio.endpoints)
    node_i = 0
    expired_on: dict[str, int] = {}  # node -> the index it refused as expired
    nxt = task.start
    count = 4096  # entries asked per READ; adapted to the entry size
    pending: deque[tuple[int, int, Future[tuple[memoryview, int, int]]]] = deque()
    ahead = nxt
    stall_deadline = time.monotonic() + opts.read_timeout
    last_error: BaseException | None = None
    backoff = 0.005

    def switch_node() -> None:
        nonlocal node_i, ahead
        node_i = (node_i + 1) % len(nodes)
        pending.clear()
        ahead = nxt

    while nxt < task.end:
        node = nodes[node_i]
        while len(pending) < PIPELINE_DEPTH and ahead < task.end:
            n = min(count, task.end - ahead)
            # read_view: the answer's entries stay in the frame they came in (no copy before Arrow).
            pending.append((ahead, n, client.read_view_async(ahead, n, MAX_READ_BYTES, node)))
            ahead += n
        frm, n, fut = pending.popleft()
        try:
            data, after, _committed = fut.result()
        except IndexExpiredError as e:
            expired_on[node] = nxt
            last_error = e
            if all(expired_on.get(a) == nxt for a in nodes):
                begin = _earliest(client, nodes)
                if begin is None or begin <= nxt:
                    raise
                data_loss(opts, task.group, nxt, begin)
                nxt = min(begin, task.end)
                expired_on.clear()
            switch_node()
            continue
        except Exception as e:
            if not _retryable(e):
                raise
            last_error = e
            if time.monotonic() > stall_deadline:
                raise QuorumLogError(f"group {task.group}: no replica served index {nxt} within "
                                     f"{opts.read_timeout}s (last error: {e})", ResponseCode.NETWORK_ERROR) from e
            switch_node()
            time.sleep(backoff)
            backoff = min(backoff * 2, 0.2)
            continue
        if after <= nxt:
            # This node has not committed index nxt yet: ask the next one, bounded by readTimeout.
            if time.monotonic() > stall_deadline:
                raise QuorumLogError(f"group {task.group}: index {nxt} was not served as committed by any of "
                                     f"{', '.join(nodes)} within {opts.read_timeout}s (last error: {last_error})",
                                     ResponseCode.TIMEOUT)
            switch_node()
            time.sleep(backoff)
            backoff = min(backoff * 2, 0.2)
            continue
        if after != frm + n:
            pending.clear()  # a short answer: the guessed next starts are wrong
            ahead = after
        if data:
            per_entry = max(1, len(data) // max(1, after - frm))
            count = max(64, min(65536, TARGET_READ_BYTES // per_entry))
            batch = entries_batch(task.group, data, opts.check_crc)
            nxt = after
            stall_deadline = time.monotonic() + opts.read_timeout
            backoff = 0.005
            if batch.num_rows:
                yield batch
        else:
            nxt = after  # only control entries in this stretch
            stall_deadline = time.monotonic() + opts.read_timeout


def _earliest(client: Client, nodes: Sequence[str]) -> int | None:
    """The smallest first index any of the nodes holds, or None when none answers."""
    begins = []
    for addr in nodes:
        try:
            doc = client.node_status(addr)
        except Exception:
            continue
        g = doc.get("groups", {}).get(client.aio.group)
        if g is not None:
            begins.append(int(g["begin_index"]))
    return min(begins) if begins else None
