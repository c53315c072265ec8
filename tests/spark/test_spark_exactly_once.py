"""The sink writes every row exactly once through real failures: a Python worker killed in the middle of
a batch write, a streaming query's driver killed in the middle of a micro-batch and restarted from its
checkpoint, and attempts of one task run at once and again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark import TaskContext, cloudpickle
from pyspark.sql import SparkSession
from pyspark.sql.datasource import WriterCommitMessage
from pyspark.sql.types import StructType

from quorumlog.client import Client
from quorumlog.server.cluster import LocalCluster
from quorumlog.spark.options import OptionError, SinkOptions, parse_sink_options
from quorumlog.spark.source import QuorumLogDataSource
from quorumlog.spark.writer import QuorumLogArrowWriter

from . import stream_sink_job
from .conftest import wait_until
from .drivers import kill_session

# Spark's Python workers cannot import the test modules: what they run from them travels by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])
cloudpickle.register_pickle_by_value(stream_sink_job)


def _next(cluster: LocalCluster, group: str) -> int:
    with Client(cluster.endpoints, group) as c:
        return max(int(n["committed_index"]) for n in c.metadata().nodes.values() if n) + 1


def _written(spark: SparkSession, cluster: LocalCluster, start: dict[str, int]) -> list[tuple[str, bytes]]:
    """(group, body) of every entry from `start` on, sorted."""
    rows = spark.read.format("quorumlog").option("endpoints", cluster.endpoints).option("groups", ",".join(start)) \
        .option("startingOffsets", json.dumps(start)).load().collect()
    return sorted((r["group"], bytes(r["body"])) for r in rows)


def _first_time(marker: str) -> bool:
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


class _KillOnce(QuorumLogArrowWriter):
    """Kills its own Python worker in the first attempt of partition 0, once 300 rows went to the writer:
    with maxInFlight 1, every request it sent but the last is in the log by then."""

    def __init__(self, opts: SinkOptions, marker: str) -> None:
        super().__init__(opts)
        self.marker = marker

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return super().write(self._rows(iterator))

    def _rows(self, iterator: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        seen = 0
        for rb in iterator:
            yield rb
            seen += rb.num_rows
            if seen >= 300 and TaskContext.get().partitionId() == 0 and _first_time(self.marker):
                os.kill(os.getpid(), signal.SIGKILL)


class _KillingSource(QuorumLogDataSource):
    @classmethod
    def name(cls) -> str:
        return "quorumlog_kill_once"

    def writer(self, schema: StructType, overwrite: bool) -> _KillOnce:
        return _KillOnce(parse_sink_options(self.options), self.options["killMarker"])


def test_python_worker_killed_during_a_batch_write(spark: SparkSession, shared_cluster: LocalCluster,
                                                   tmp_path: Path) -> None:
    spark.dataSource.register(_KillingSource)
    start = {g: _next(shared_cluster, g) for g in ("g0", "g1")}
    marker = tmp_path / "killed"
    df = spark.range(0, 4000, 1, 4).selectExpr("if(id % 3 = 0, 'g1', 'g0') AS group",
                                               "cast(concat('k-', id) AS binary) AS body")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "100")  # the writer sees rows 100 at a time
    try:
        df.write.format("quorumlog_kill_once").option("endpoints", shared_cluster.endpoints) \
            .option("maxBatchEntries", "50").option("maxInFlight", "1").option("killMarker", str(marker)) \
            .mode("append").save()
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert marker.exists(), "no Python worker was killed"
    assert _written(spark, shared_cluster, start) == sorted(("g1" if i % 3 == 0 else "g0", b"k-%d" % i)
                                                            for i in range(4000))


def test_stream_driver_killed_mid_batch_and_restarted_from_checkpoint(
        spark: SparkSession, shared_cluster: LocalCluster, tmp_path: Path) -> None:
    src, ckpt, out = tmp_path / "in", tmp_path / "ckpt", tmp_path / "driver.log"
    src.mkdir()
    # Two files per micro-batch: batches 0 and 1 of 6000 rows each, about 3 s each at the job's pace, so that
    # the kill lands well inside batch 0 however fast the cluster takes what the job writes.
    files, per_file = 4, 3000
    for f in range(files):
        (src / f"part-{f}.json").write_text("".join(json.dumps({"body": f"s{f}-{i}"}) + "\n" for i in range(per_file)))
    start = _next(shared_cluster, "g0")
    with out.open("wb") as log:
        driver = subprocess.Popen([sys.executable, stream_sink_job.__file__, shared_cluster.endpoints, "g0", str(src),
                                   str(ckpt)], cwd=tmp_path, env={**os.environ, "SPARK_LOCAL_DIRS": str(tmp_path)},
                                  stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until(lambda: _next(shared_cluster, "g0") - start >= 300 or driver.poll() is not None, 120,
                   "micro-batch 0 to be partly written")
        assert driver.poll() is None, out.read_text(errors="replace")[-3000:]
    finally:
        kill_session(driver)  # the driver, its JVM and its Python workers, at once
    written = _next(shared_cluster, "g0") - start
    assert (ckpt / "offsets" / "0").exists() and not (ckpt / "commits" / "0").exists()
    assert 0 < written < 2 * per_file, "not killed in the middle of micro-batch 0"

    # Restarted from the checkpoint in this test's driver, whose Arrow batches are bigger: the rows are cut
    # into the same requests all the same.
    q = stream_sink_job.start(spark, shared_cluster.endpoints, "g0", str(src), str(ckpt))
    try:
        assert q.awaitTermination(120)
    finally:
        q.stop()
    assert q.exception() is None
    assert _written(spark, shared_cluster, {"g0": start}) == sorted(("g0", f"s{f}-{i}".encode())
                                                                    for f in range(files) for i in range(per_file))


def test_attempts_of_one_task_at_once_and_again(spark: SparkSession, shared_cluster: LocalCluster) -> None:
    start = _next(shared_cluster, "g1")
    # 200 requests: an attempt after them finds the first ones beyond the leader's window (SEQUENCE_TOO_OLD).
    writer = QuorumLogArrowWriter(parse_sink_options({"endpoints": shared_cluster.endpoints, "group": "g1",
                                                      "maxBatchEntries": "10", "maxInFlight": "8"}))
    bodies = [b"a-%d" % i for i in range(2000)]

    def attempts(_rows: Iterator[int]) -> Iterator[list[int | str]]:
        batches = [pa.RecordBatch.from_pydict({"body": bodies[i:i + 300]}) for i in range(0, len(bodies), 300)]
        with ThreadPoolExecutor(2) as pool:  # two attempts at once, as with speculation
            out: list[int | str] = list(pool.map(lambda _: writer.write(iter(batches)).entries, range(2)))
        out.append(writer.write(iter(batches)).entries)
        try:  # an attempt whose rows differ from the first ones' is refused
            writer.write(iter([*batches[:-1], batches[-1].slice(1)]))
        except RuntimeError as e:
            out.append(str(e))
        yield out

    got = spark.sparkContext.parallelize([0], 1).mapPartitions(attempts).collect()[0]
    assert got[:3] == [2000, 2000, 2000]
    assert "differ between attempts" in str(got[3:])
    assert _written(spark, shared_cluster, {"g1": start}) == sorted(("g1", b) for b in bodies)


def test_max_in_flight_stays_within_the_producer_window() -> None:
    with pytest.raises(OptionError, match="maxInFlight"):
        parse_sink_options({"endpoints": "127.0.0.1:1", "maxInFlight": "65"})
