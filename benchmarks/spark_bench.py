"""Spark data source figures: 1M committed entries of 1 KiB in a 3-node cluster (2 groups), then
`spark.read.format("quorumlog")...load().count()` and a groupBy, readFrom leader vs any, and the writer.

    .venv/bin/python benchmarks/spark_bench.py [--entries 1000000] [--body 1024]

Each read is timed from the action's start to its result (best of --repeat runs after one warm-up run,
which starts Spark's Python workers). Nodes run with flush async to fill the log quickly; reads do not
depend on it.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from quorumlog.client import Client
from quorumlog.server.cluster import LocalCluster


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
    ap.add_argument("--entries", type=int, default=1_000_000)
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--partition", type=int, default=125_000, help="maxEntriesPerPartition")
    ap.add_argument("--write-rows", type=int, default=200_000)
    args = ap.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from quorumlog.spark import register

    with tempfile.TemporaryDirectory(prefix="quorumlog-spark-bench-") as root:
        store = {"data_segment_bytes": 256 << 20, "index_segment_bytes": 32 * (1 << 20)}
        cluster = LocalCluster(Path(root), 3, 2, flush="async", store=store)
        cluster.start()
        spark = None
        try:
            groups = cluster.group_names
            secs = fill(cluster, groups, args.entries, args.body)
            mib = args.entries * args.body / 2**20
            print(f"filled {args.entries:,} entries x {args.body} B in {secs:.1f} s "
                  f"({args.entries / secs:,.0f} entries/s, {mib / secs:,.0f} MiB/s)", flush=True)
            spark = (SparkSession.builder.master("local[2]").config("spark.sql.shuffle.partitions", "2")
                     .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                     .config("spark.driver.memory", "2g").getOrCreate())
            spark.sparkContext.setLogLevel("ERROR")
            register(spark)

            def df(read_from: str, crc: bool = True):  # type: ignore[no-untyped-def]
                return (spark.read.format("quorumlog").option("endpoints", cluster.endpoints)
                        .option("readFrom", read_from).option("checkCrc", str(crc).lower())
                        .option("maxEntriesPerPartition", str(args.partition)).load())

            for read_from in ("leader", "any"):
                t, n = best(lambda rf=read_from: df(rf).count(), args.repeat)
                assert n >= args.entries, n  # more only if a timed-out append was retried (at-least-once)
                print(f"count()        readFrom={read_from:6s} {t:6.2f} s  {n / t:>12,.0f} rows/s  "
                      f"{mib / t:6,.0f} MiB/s", flush=True)
            t, n = best(lambda: df("any", False).count(), args.repeat)
            print(f"count()        readFrom=any    checkCrc=false {t:6.2f} s  {n / t:>12,.0f} rows/s", flush=True)
            for read_from in ("leader", "any"):
                t, rows = best(lambda rf=read_from: df(rf).groupBy("group", "term").count().collect(), args.repeat)
                assert sum(r["count"] for r in rows) >= args.entries
                print(f"groupBy count  readFrom={read_from:6s} {t:6.2f} s  {args.entries / t:>12,.0f} rows/s",
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
