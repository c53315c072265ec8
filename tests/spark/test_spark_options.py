"""Bad options give one clear error naming the option, through Spark."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from quorumlog.server.cluster import LocalCluster


@pytest.mark.parametrize(("name", "value"), [
    ("maxEntriesPerPartition", "lots"), ("readFrom", "follower"), ("startingOffsets", "tomorrow"),
    ("failOnDataLoss", "perhaps"), ("groups", "nosuchgroup"), ("endingOffsets", "earliest"),
])
def test_bad_read_option(spark: SparkSession, shared_cluster: LocalCluster, name: str, value: str) -> None:
    with pytest.raises(Exception, match=f"quorumlog option '{name}'"):
        spark.read.format("quorumlog").option("endpoints", shared_cluster.endpoints).option(name, value) \
            .load().collect()


def test_bad_stream_and_write_options(spark: SparkSession, shared_cluster: LocalCluster) -> None:
    with pytest.raises(Exception, match="quorumlog option 'endpoints': is required"):
        spark.read.format("quorumlog").load().collect()
    with pytest.raises(Exception, match="quorumlog option 'maxEntriesPerTrigger'"):
        q = spark.readStream.format("quorumlog").option("endpoints", shared_cluster.endpoints) \
            .option("maxEntriesPerTrigger", "-5").load().writeStream.format("memory").queryName("bad_opts") \
            .start()
        try:
            q.awaitTermination(60)
        finally:
            q.stop()
    with pytest.raises(Exception, match="quorumlog option 'group'"):
        spark.createDataFrame([(b"x",)], "body binary").write.format("quorumlog") \
            .option("endpoints", shared_cluster.endpoints).mode("append").save()
