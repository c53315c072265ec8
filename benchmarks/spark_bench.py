"""Spark data source figures: 1M committed entries of 1 KiB in a 3-node cluster (2 groups), then
`spark.read.format("quorumlog")...load().count()` and a groupBy, readFrom leader vs any, and the writer;
beside them the same `count()` of an in-process Arrow source (the same schema and partitions, rows made
in the executors, 4,096 a RecordBatch), and the ratio quorumlog / Arrow measured in the same run.

    .venv/bin/python benchmarks/spark_bench.py [--entries 1000000] [--body 1024] [--partition N] [--quick]

Each read is timed from the action's start to its result (best of --repeat runs after one warm-up run,
which starts Spark's Python workers). Nodes run with flush async to fill the log quickly; reads do not
depend on it. Partitions are the source's own unless --partition sets maxEntriesPerPartition.
--quick: 200,000 entries (unless --entries), only the readFrom=any count and the Arrow source.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from array import array
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from quorumlog.client import Client
from quorumlog.server.cluster import LocalCluster
from quorumlog.spark.arrow import SCHEMA, SCHEMA_DDL


class ArrowSource(DataSource):
    """The baseline: rows of the quorumlog schema made in the executor, no I/O. Option "ranges" is JSON
    [[group, start, end], ...] (one partition each), "body" the body size, "batch" rows per RecordBatch.
    Defined in the script, so cloudpickle ships the class by value to the Python workers."""

    @classmethod
    def name(cls) -> str:
        return "quorumlog_bench_arrow"

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema: Any) -> DataSourceReader:
        return ArrowReader(json.loads(self.options["ranges"]), int(self.options["body"]),
                           int(self.options["batch"]))


class ArrowReader(DataSourceReader):
    def __init__(self, ranges: list[list[Any]], body: int, batch: int) -> None:
        self.ranges, self.body, self.batch = ranges, body, batch

    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition(tuple(r)) for r in self.ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        group, start, end = partition.value
        payload = bytes(range(256)) * (self.body // 256) + bytes(self.body % 256)
        size = 48 + self.body
        for lo in range(start, end, self.batch):
            n = min(self.batch, end - lo)
            idx = pa.array(range(lo, lo + n), pa.int64())
            offsets = array("i", range(0, (n + 1) * self.body, self.body))
            bodies = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(payload * n)])
            yield pa.RecordBatch.from_arrays(
                [pa.repeat(pa.scalar(group, pa.string()), n), idx, pa.repeat(pa.scalar(1, pa.int64()), n),
                 pa.array(range(lo * size, (lo + n) * size, size), pa.int64()), bodies], schema=SCHEMA)


def fill(cluster: LocalCluster, groups: list[str], entries: int, body: int) -> float:
    """Append `entries` bodies of `body` bytes, spread evenly over the groups; returns seconds."""
    payload = os.urandom(body)

    def one(g: str, n: int) -> None:
        with Client(cluster.endpoints, g, retry_timeout=60.0, request_timeout=60.0) as c:
            inflight = []
            sent = 0
            while sent < n:
                k = min(1000, n - sent)
                inflight.append(c.append_batch_raw_async([payload] * k))
                sent += k
                if len(inflight) >= 4:
                    inflight.pop(0).result()
            for f in inflight:
                f.result()

    t = time.perf_counter()
    per = entries // len(groups)
    with ThreadPoolExecutor(len(groups)) as ex:
        list(ex.map(one, groups, [per + (entries - per * len(groups) if i == 0 else 0) for i in range(len(groups))]))
    return time.perf_counter() - t


def best(fn, repeat: int) -> tuple[float, object]:  # type: ignore[no-untyped-def]
    fn()  # warm-up
    times, result = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return min(times), result


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--entries", type=int, default=None, help="default 1,000,000 (200,000 with --quick)")
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--partition", type=int, default=0,
                    help="maxEntriesPerPartition (default: not set, the source cuts each group by its replicas)")
    ap.add_argument("--write-rows", type=int, default=200_000)
    ap.add_argument("--quick", action="store_true", help="only the readFrom=any count and the Arrow source")
    args = ap.parse_args()
    entries = args.entries or (200_000 if args.quick else 1_000_000)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from quorumlog.spark import register
    from quorumlog.spark.options import parse_source_options
    from quorumlog.spark.reader import QuorumLogBatchReader

    with tempfile.TemporaryDirectory(prefix="quorumlog-spark-bench-") as root:
        store = {"data_segment_bytes": 256 << 20, "index_segment_bytes": 32 * (1 << 20)}
        cluster = LocalCluster(Path(root), 3, 2, flush="async", store=store)
        cluster.start()
        spark = None
        try:
            groups = cluster.group_names
            secs = fill(cluster, groups, entries, args.body)
            mib = entries * args.body / 2**20
            print(f"filled {entries:,} entries x {args.body} B in {secs:.1f} s "
                  f"({entries / secs:,.0f} entries/s, {mib / secs:,.0f} MiB/s)", flush=True)
            spark = (SparkSession.builder.master("local[2]").config("spark.sql.shuffle.partitions", "2")
                     .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                     .config("spark.driver.memory", "2g").getOrCreate())
            spark.sparkContext.setLogLevel("ERROR")
            register(spark)
            spark.dataSource.register(ArrowSource)

            def options(read_from: str, crc: bool = True) -> dict[str, str]:
                o = {"endpoints": cluster.endpoints, "readFrom": read_from, "checkCrc": str(crc).lower()}
                if args.partition:
                    o["maxEntriesPerPartition"] = str(args.partition)
                return o

            def df(read_from: str, crc: bool = True):  # type: ignore[no-untyped-def]
                return spark.read.format("quorumlog").options(**options(read_from, crc)).load()

            # The baseline reads the same ranges as quorumlog's partitions for readFrom=any.
            parts = QuorumLogBatchReader(parse_source_options(options("any"))).partitions()
            ranges = [list(p.value) for p in parts]
            arrow_df = (spark.read.format(ArrowSource.name()).option("ranges", json.dumps(ranges))
                        .option("body", str(args.body)).option("batch", "4096").load())
            print(f"partitions: {len(ranges)} ({', '.join(f'{g}:{hi - lo:,}' for g, lo, hi in ranges)})", flush=True)

            def timed_count(name: str, fn) -> float:  # type: ignore[no-untyped-def]
                t, n = best(fn, args.repeat)
                assert n >= entries, n  # more only if a timed-out append was retried (at-least-once)
                print(f"count()        {name:29s} {t:6.2f} s  {n / t:>12,.0f} rows/s  {mib / t:6,.0f} MiB/s",
                      flush=True)
                return t

            t_arrow = timed_count("in-process Arrow source", lambda: arrow_df.count())
            for read_from in ("any",) if args.quick else ("leader", "any"):
                t = timed_count(f"readFrom={read_from}", lambda rf=read_from: df(rf).count())
                print(f"               quorumlog / Arrow, readFrom={read_from}: {t / t_arrow:.2f}x", flush=True)
            if args.quick:
                return 0
            timed_count("readFrom=any checkCrc=false", lambda: df("any", False).count())
            for read_from in ("leader", "any"):
                t, rows = best(lambda rf=read_from: df(rf).groupBy("group", "term").count().collect(), args.repeat)
                assert sum(r["count"] for r in rows) >= entries  # type: ignore[attr-defined]
                print(f"groupBy count  readFrom={read_from:6s} {t:6.2f} s  {entries / t:>12,.0f} rows/s",
                      flush=True)
            # The writer: rows generated in Spark, appended to g0 and g1.
            n = args.write_rows
            src = spark.range(n).selectExpr("if(id % 2 = 0, 'g0', 'g1') as group",
                                            f"cast(repeat('x', {args.body}) as binary) as body").cache()
            src.count()

            def write() -> int:
                src.write.format("quorumlog").option("endpoints", cluster.endpoints).mode("append").save()
                return n

            t, _ = best(write, args.repeat)
            print(f"write          {n:,} rows x {args.body} B  {t:6.2f} s  {n / t:>12,.0f} rows/s  "
                  f"{n * args.body / 2**20 / t:6,.0f} MiB/s", flush=True)
        finally:
            if spark is not None:
                spark.stop()
            cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
