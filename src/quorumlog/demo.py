"""`quorumlog demo`: a Spark Structured Streaming pipeline reading click events from a local 3-node
cluster while one group's leader is SIGKILLed (run_spark_demo); `quorumlog demo --store`: write a
store, tear its tail as a crash would, recover it and verify it (run_demo)."""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from typing import Any

from rich.console import Console

from .config import StoreConfig
from .entry import HEADER_SIZE
from .progress import Phases
from .store.file_store import FileStore, store_dir
from .store.verify import verify_store


def run_demo(entries: int = 200_000) -> int:
    cfg = StoreConfig(data_segment_bytes=64 << 20, index_segment_bytes=32 << 16)
    with tempfile.TemporaryDirectory(prefix="quorumlog-demo-") as root, Phases() as phases:
        console = phases.output()
        path = store_dir(root, "g0", "n0")
        store = FileStore(path, cfg)
        body = b'{"page": "/home", "user": 42}'.ljust(100, b" ")
        batch = [body] * 256
        phases.start(f"writing {entries:,} entries", total=entries)
        t0 = time.perf_counter()
        while store.end_index + 1 < entries:
            store.append(batch[: min(256, entries - store.end_index - 1)], term=1)
            store.flush()
            phases.update(store.end_index + 1)
        secs = time.perf_counter() - t0
        store.set_committed(store.end_index - 100)
        store.checkpoint()
        console.print(f"wrote {store.end_index + 1:,} entries of {len(body)} B in {secs:.2f} s "
                      f"({(store.end_index + 1) / secs:,.0f} entries/s, fdatasync per 256-entry batch)")
        # Simulate a crash in the middle of a write after the last checkpoint: the process dies without
        # closing, and that entry is torn half way through its body. (A torn entry the checkpoint calls
        # durable would be reported as damage instead: it may have been acknowledged.)
        store.append([body], term=1)
        last = store.get(store.end_index)
        store.abandon()
        seg = os.path.join(path, "data", f"{last.pos - last.pos % cfg.data_segment_bytes:020d}")
        with open(seg, "r+b") as f:
            f.seek(last.pos % cfg.data_segment_bytes + HEADER_SIZE + 10)
            f.write(b"\x00" * 50)
        console.print(f"tore entry {last.index} (the last one, beyond the committed index) as a crash would")
        phases.start("recovering the store")
        t0 = time.perf_counter()
        store = FileStore(path, cfg)
        console.print(f"recovered in {(time.perf_counter() - t0) * 1000:.1f} ms: end index {store.end_index}, "
                      f"committed {store.committed_index}")
        for note in store.notes:
            console.print(f"  recovery: {note}")
        store.close()
        phases.start("check-store: verifying every entry")
        report = verify_store(path, progress=lambda done, total: phases.update(done, total))
        phases.done()
        status = "[green]OK[/green]" if not report.errors else f"[red]{len(report.errors)} problems[/red]"
        console.print(f"check-store: {report.entries:,} entries, {report.data_bytes:,} bytes, "
                      f"digest {report.digest[:16]}…, {status}")
        return 0 if not report.errors and store.end_index == last.index - 1 else 1


# -- the Spark pipeline demo --------------------------------------------------------------------------

PAGES = ("/home", "/search", "/product", "/cart", "/checkout", "/help")


def _produce(endpoints: str, groups: list[str], rate: int, stop: Any, acked: Any) -> None:
    """The producer process: JSON click events at `rate` per second, spread over the groups, in batches
    every 20 ms; `acked` counts the entries the cluster acknowledged."""
    import json
    import random

    from .client import Client

    rng = random.Random(7)
    clients = [Client(endpoints, g, retry_timeout=30.0) for g in groups]
    per_tick = max(1, rate // 50)
    sent = 0
    t0 = time.monotonic()
    try:
        while not stop.is_set():
            c = clients[sent // per_tick % len(clients)]
            bodies = [json.dumps({"page": PAGES[min(int(rng.expovariate(0.6)), len(PAGES) - 1)],
                                  "user": rng.randrange(10_000), "ts": time.time()}).encode()
                      for _ in range(per_tick)]
            c.append_many(bodies)
            sent += len(bodies)
            with acked.get_lock():
                acked.value = sent
            # Steady rate: sleep until this batch's slot (the stop event ends the wait early).
            stop.wait(max(0.0, t0 + sent / rate - time.monotonic()))
    finally:
        for c in clients:
            c.close()


def run_spark_demo(seconds: float = 30.0, rate: int = 2000) -> int:
    """A 3-node cluster with 2 groups, a producer process, and a Spark Structured Streaming query
    keeping per-page counts; one group's leader is SIGKILLed midway."""
    import multiprocessing
    import os
    import signal
    import sys
    from pathlib import Path

    from .client import Client
    from .server.cluster import LocalCluster

    console = Console()
    try:
        from pyspark.sql import SparkSession
        from pyspark.sql import functions as F  # noqa: N812
    except ImportError:
        console.print("[red]the Spark demo needs the spark extra: pip install 'quorumlog[spark]'[/red]")
        return 2
    from .spark import register

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    t_start = time.monotonic()
    ctx = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="quorumlog-spark-demo-") as root, Phases() as phases:
        console = phases.output()
        store = {"data_segment_bytes": 64 << 20, "index_segment_bytes": 32 * ((64 << 20) // 200)}
        cluster = LocalCluster(Path(root) / "cluster", 3, 2, store=store)
        stop = ctx.Event()
        acked = ctx.Value("q", 0)
        producer = None
        spark = None
        query = None
        try:
            phases.start("starting a 3-node cluster")
            cluster.start()
            for g in cluster.group_names:
                with Client(cluster.endpoints, g, retry_timeout=30.0) as c:
                    c.append_many([b'{"page": "/warmup", "user": 0, "ts": 0}'])
            pids = ", ".join(f"{n.node_id} pid {n.proc.pid}" for n in cluster.nodes if n.proc)
            console.print(f"[bold]cluster[/bold]: 3 nodes ({pids}), groups g0 g1, data in {root}")
            console.print("starting Spark (local[2])…")
            phases.start("starting Spark (local[2])")
            spark = (SparkSession.builder.master("local[2]").appName("quorumlog-demo")
                     .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false")
                     .config("spark.ui.showConsoleProgress", "false").getOrCreate())
            spark.sparkContext.setLogLevel("ERROR")
            register(spark)
            producer = ctx.Process(target=_produce, args=(cluster.endpoints, cluster.group_names, rate, stop, acked),
                                   name="quorumlog-demo-producer")
            producer.start()
            console.print(f"producer: pid {producer.pid}, {rate} click events/s into g0 and g1")
            table = str(Path(root) / "page_counts")
            state = {"total": 0, "batches": 0}

            def on_batch(df: Any, batch_id: int) -> None:
                counts = df.orderBy(F.desc("count")).collect()
                spark_total = sum(r["count"] for r in counts if r["page"] != "/warmup")
                df.write.mode("overwrite").parquet(table)
                state["total"], state["batches"] = spark_total, batch_id + 1
                top = " ".join(f"{r['page']} {r['count']:,}" for r in counts[:3] if r["page"] != "/warmup")
                console.print(f"t={time.monotonic() - t_start:4.0f}s batch {batch_id:2d}: Spark counted "
                              f"{spark_total:,}, producer acked {acked.value:,} | {top}", soft_wrap=True)

            events = (spark.readStream.format("quorumlog").option("endpoints", cluster.endpoints)
                      .option("startingOffsets", "earliest").option("maxEntriesPerTrigger", "20000").load())
            pages = events.select(F.get_json_object(F.col("body").cast("string"), "$.page").alias("page"))
            query = (pages.groupBy("page").count().writeStream.outputMode("complete").foreachBatch(on_batch)
                     .option("checkpointLocation", str(Path(root) / "checkpoint"))
                     .trigger(processingTime="1 second").start())
            t_stream = time.monotonic()
            phases.start("waiting for the first micro-batch")
            while state["batches"] == 0 and query.isActive and time.monotonic() - t_stream < 180:
                query.awaitTermination(1)
            t_flowing = time.monotonic()
            console.print(f"the stream is flowing (first micro-batch after {t_flowing - t_stream:.0f}s)")
            phases.start("streaming until the leader of g0 is killed", total=seconds / 3)
            while time.monotonic() < t_flowing + seconds / 3 and query.isActive:
                query.awaitTermination(1)
                phases.update(time.monotonic() - t_flowing)
            with Client(cluster.endpoints, "g0", retry_timeout=30.0) as c:
                leader = c.metadata(with_nodes=False).leader
            victim = next(n for n in cluster.nodes if n.node_id == leader)
            console.print(f"[bold red]SIGKILL {victim.node_id}[/bold red] (leader of g0, pid "
                          f"{victim.proc.pid if victim.proc else '-'}) at t={time.monotonic() - t_start:.1f}s")
            t_kill = time.monotonic()
            phases.start("waiting for g0's new leader")
            cluster.kill(cluster.nodes.index(victim), signal.SIGKILL)
            survivors = ",".join(n.address for n in cluster.nodes if n is not victim)
            new_leader = None
            with Client(survivors, "g0", retry_timeout=30.0) as c:
                while new_leader is None and time.monotonic() - t_kill < 30:
                    try:
                        md = c.metadata(with_nodes=False)
                        if md.leader not in (None, victim.node_id):
                            new_leader = md.leader
                    except Exception:
                        pass
                    if new_leader is None:
                        time.sleep(0.02)
            failover = time.monotonic() - t_kill
            console.print(f"[bold]g0 has a new leader[/bold]: {new_leader} after {failover:.2f}s; "
                          "the producer and the stream go on")
            end_at = t_flowing + seconds
            phases.start("streaming on with two nodes", total=max(0.0, end_at - time.monotonic()))
            t_rest = time.monotonic()
            while time.monotonic() < end_at and query.isActive:
                query.awaitTermination(1)
                phases.update(time.monotonic() - t_rest)
            phases.start("stopping the producer")
            stop.set()
            producer.join(30)
            produced = acked.value
            console.print(f"producer stopped: {produced:,} events acknowledged; letting the stream catch up…")
            phases.start("letting the stream catch up")
            query.processAllAvailable()
            stream_secs = time.monotonic() - t_stream
            if query.exception() is not None:
                console.print(f"[red]the streaming query failed: {query.exception()}[/red]")
                return 1
            phases.start("reading the log back in one batch")
            in_log = (spark.read.format("quorumlog").option("endpoints", survivors).load()
                      .where("get_json_object(cast(body as string), '$.page') != '/warmup'").count())
            final = spark.read.parquet(table)
            row = final.where("page != '/warmup'").agg(F.sum("count")).first()
            counted = int(row[0] or 0) if row is not None else 0
            phases.done()
            final.where("page != '/warmup'").orderBy(F.desc("count")).show(truncate=False)
            ok = counted == in_log and counted >= produced
            console.print("[bold]summary[/bold]")
            console.print(f"  events acknowledged by the cluster  {produced:,}")
            console.print(f"  events in the log (batch read)      {in_log:,}"
                          + ("" if in_log == produced else "  (retried appends may add duplicates: at-least-once)"))
            console.print(f"  events counted by Spark             {counted:,}  "
                          + ("[green]matches the log[/green]" if counted == in_log else "[red]MISMATCH[/red]"))
            console.print(f"  failover of g0 after SIGKILL        {failover:.2f}s")
            console.print(f"  throughput into Spark               {counted / stream_secs:,.0f} events/s over "
                          f"{stream_secs:.0f}s, {state['batches']} micro-batches")
            console.print(f"  total run time                      {time.monotonic() - t_start:.0f}s")
            return 0 if ok else 1
        finally:
            phases.start("stopping Spark, the producer and the cluster")
            stop.set()
            # Spark may be half started, or its gateway gone (a SIGTERM mid-call): the cluster stops anyway.
            with contextlib.suppress(Exception):
                if query is not None:
                    query.stop()
            if producer is not None:
                producer.join(10)
                if producer.is_alive():
                    producer.kill()
                    producer.join(5)
            with contextlib.suppress(Exception):
                if spark is not None:
                    spark.stop()
            cluster.stop()
